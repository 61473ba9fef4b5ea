//! nixl-agent's recorded state and its projections: the ledger (`ledger`),
//! the one owner of what was recorded; the fan-out every front-end records
//! through (`record`: the recorder, attempts, the watchdog); the snapshot's
//! shape and the `/v1/status` document (`status`); metrics, traces and log
//! lines (`telemetry`). What serves them (the HTTP server, the OTLP
//! exporter) is `nixl-agent-admin`'s, a layer above. See ARCHITECTURE.md.

pub mod ledger;
pub mod record;
pub mod status;
pub mod telemetry;

// The layer below, under the names this crate's modules use.
pub(crate) use nixl_agent_core::{config, diagnose, event, model, units};
