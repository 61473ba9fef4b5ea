//! nixl-agent's faces toward the network, apart from the state they carry
//! (as linkerd2-proxy's admin crate): the read-only HTTP surface over the
//! ledger (`http`: the router, its handlers and the accept loop with its
//! limits) and the OTLP exporter that takes the ledger's spans out of the
//! process (`otlp`). Nothing here records or keeps state; handlers only
//! read it (ARCHITECTURE.md).

pub mod http;
pub mod otlp;

// The layers below, under the names this crate's modules use.
pub(crate) use nixl_agent_core::config;
pub(crate) use nixl_agent_ledger::{ledger, status, telemetry};
