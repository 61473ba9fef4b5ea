//! What does nixl-agent's work: the registration lifecycle on a NIXL agent
//! (`lifecycle`: the state machine, its driver thread, a group's attempt,
//! the real NIXL behind the `Registrar` seam), observe mode around the
//! caller's own NIXL calls (`observe`), the data-path round `check` and the
//! canary share (`datapath`), and the node canary's thread (`canary`). The
//! front-ends (crate `nixl-agent`: the binary, the embedding API, `check`;
//! the Python extension) assemble these. See ARCHITECTURE.md.

pub mod canary;
pub mod datapath;
pub mod lifecycle;
pub mod nixl_config;
pub mod observe;

#[cfg(test)]
mod properties;

// The layers below, under the names this crate's modules use.
pub(crate) use nixl_agent_admin::http;
#[cfg(test)]
pub(crate) use nixl_agent_core::units;
pub(crate) use nixl_agent_core::{backoff, config, diagnose, event, model, plan, validate};
pub(crate) use nixl_agent_ledger::{ledger, record, status, telemetry};
pub(crate) use nixl_agent_pod as pod;
pub(crate) use nixl_agent_sys as nixl;
