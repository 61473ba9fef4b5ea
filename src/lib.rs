//! nixl-agent: performs NIXL memory registration for a serving process, or
//! observes the process doing it, and makes every attempt observable
//! (Prometheus metrics, OpenTelemetry traces, health probes, status).
//!
//! The library is the product; the binary (`src/main.rs`), the Rust
//! embedding API and the Python extension are front-ends over one recording
//! path, whose state one ledger owns. See ARCHITECTURE.md for the map and
//! the invariants.
//!
//! # Public API
//!
//! This list is the whole public API; `tests/public_api.rs` holds it equal
//! to what this file exports, and checks that no public signature names a
//! type of axum, prometheus or tokio other than [`Router`].
//!
//! - lifecycle: [`Lifecycle`], [`Prepared`], [`LifecycleHandle`], [`StartError`], [`ShutdownError`], [`UnknownGroup`], [`DrainReport`]
//! - observe mode: [`Observer`], [`ObservedAgent`], [`ObservedRegistration`], [`ObservedXfer`], [`ObserveSettings`], [`Expected`], [`Call`], [`CallMark`], [`Outcome`], [`Pending`], [`GroupConflict`], [`Transfer`], [`XferPoll`]
//! - domain words: [`AgentId`], [`Kind`], [`MemType`], [`Reason`], [`Region`], [`Hooked`], [`Failure`], [`Rejection`], [`Descriptor`], [`XferOp`], [`PeerOp`], [`NotifDirection`], [`Ended`], [`How`]
//! - configuration: [`config`], [`Config`], [`Plan`], [`GroupSpec`], [`RegionSource`]
//! - recorded state: [`status`], [`Metrics`], [`Format`], [`names`], [`endpoints`], [`Publisher`]
//! - NIXL and output: [`load_nixl`], [`cuda_driver_present`], [`Loaded`], [`LoadError`], [`StderrTap`], [`Capture`], [`TracingGuard`], [`Router`]
//! - front-ends: [`cli`] and [`launch`] (feature `cli`: the binary's; `launch` is `nixl-agent instrument`); the Python extension and the interposer are crates of their own (python/native, crates/interpose)
//! - environment: [`env`] (the variables a process of a pod reads, for deployments and their tests)
#![deny(unsafe_code)]

// ---- Public modules ----------------------------------------------------
/// Configuration: the TOML schema, its defaults and environment overrides.
pub use nixl_agent_core::config;
/// The environment variables that place a process in a pod (its directory,
/// the variable naming its rank, how long an ended rank is served), as
/// deployments set them.
pub mod env {
    pub use nixl_agent_pod::{ENV_DIR as ENV_POD_DIR, ENV_RANK_ENV, ENV_RETENTION, LOCAL_RANK};
}
/// The snapshot's shape: what every projection reads, and the /v1/status
/// document that carries it (`status::document`, docs/status.schema.json).
pub use nixl_agent_ledger::status;
/// Every metric name and closed label value.
pub mod names {
    pub use crate::telemetry::names::*;
}
/// The HTTP surface's contract: every endpoint, and the dashboard and rules
/// built into this build.
pub mod endpoints {
    pub use crate::http::{
        ALERT_RULES_PATH, ALERT_RULES_YAML, DASHBOARD_JSON, DASHBOARD_PATH, ENDPOINTS, LIVEZ_RANKS_PATH, POD_ENDPOINTS,
    };
}
/// The binary's front-end (flags, sub-commands, signals, logs).
#[cfg(feature = "cli")]
pub mod cli;

pub use agent::{Lifecycle, LifecycleHandle, Prepared, ShutdownError, StartError, UnknownGroup};
/// The router type `LifecycleHandle::router` and `Observer::router` return
/// (axum 0.8's), re-exported so embedders mount it without naming axum.
pub use axum::Router;
pub use config::Config;
pub use lifecycle::driver::DrainReport;
pub use model::{AgentId, Ended, Failure, Hooked, How, Kind, MemType, NotifDirection, PeerOp, Reason, Region, XferOp};
pub use nixl::{cuda_driver_present, load_nixl, Descriptor, LoadError, Loaded, StderrTap};
pub use observe::{Call, CallMark, Expected, GroupConflict, ObserveSettings, Observer, Outcome, Pending};
pub use observe::{ObservedAgent, ObservedRegistration, ObservedXfer};
pub use observe::{Transfer, XferPoll};
pub use plan::{GroupSpec, Plan, RegionSource};
pub use pod::publish::Publisher;

pub use record::Capture;
pub use telemetry::exposition::Format;
pub use telemetry::traces::TracingGuard;
pub use telemetry::Metrics;
pub use validate::Rejection;

// ---- Internals (crate-private) -----------------------------------------
mod agent;
#[cfg(feature = "cli")]
mod check;
/// `nixl-agent instrument -- COMMAND`: the interposer preloaded into a command.
#[cfg(feature = "cli")]
pub mod launch;
#[cfg(feature = "cli")]
mod rules;
#[cfg(feature = "cli")]
mod signals;

// The layers below (crates of this workspace, ARCHITECTURE.md), under the
// names this crate's modules use.
use nixl_agent_admin::http;
#[cfg(feature = "cli")]
use nixl_agent_core::{diagnose, units};
use nixl_agent_core::{event, model, plan, validate};
use nixl_agent_engine::{canary, datapath, lifecycle, observe};
use nixl_agent_ledger::{record, telemetry};
use nixl_agent_pod as pod;
use nixl_agent_sys as nixl;
