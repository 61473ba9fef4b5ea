//! nixl-agent: performs NIXL memory registration for a serving process, or
//! observes the process doing it, and makes every attempt observable
//! (Prometheus metrics, OpenTelemetry traces, health probes, status).
//!
//! The library is the product; the binary (`src/main.rs`) is a thin shell.
//! Three entry points share one recording path ([`record`]):
//! - [`Lifecycle`] on nixl-agent's own NIXL agent (the binary),
//! - [`Lifecycle`] on the serving process's NIXL agent ([`Prepared::on_agent`]),
//! - [`Observer`], around registration calls the process makes itself.
//!
//! See ARCHITECTURE.md for the map and the invariants.
#![deny(unsafe_code)]

// ---- The embedding API -------------------------------------------------
pub mod config;
mod event;
pub mod instrument;
mod ledger;
pub mod model;
pub mod observe;
pub mod plan;
pub mod pod;
pub mod rules;
pub mod status;
pub mod telemetry;

pub use agent::{Lifecycle, LifecycleHandle, Prepared, ShutdownError, StartError};
pub use config::Config;
pub use lifecycle::driver::DrainReport;
pub use model::{AgentId, Hooked, Kind, MemType, Reason, Region};
pub use nixl::{load_nixl, Descriptor, LoadError, Loaded, ObservedAgent};
pub use observe::{Call, Expected, GroupConflict, ObserveSettings, Observer, Outcome, Pending};
pub use plan::{GroupSpec, Plan, RegionSource};
pub use record::Capture;
pub use validate::Rejection;

// ---- Internals ---------------------------------------------------------
// Public only for this crate's binary, tests and benchmark; no stability
// promise, not part of the documented API.
#[doc(hidden)]
pub mod agent;
#[doc(hidden)]
pub mod backoff;
#[doc(hidden)]
#[cfg(feature = "cli")]
pub mod check;
#[doc(hidden)]
#[cfg(feature = "cli")]
pub mod cli;
#[doc(hidden)]
pub mod diagnose;
#[doc(hidden)]
pub mod http;
#[doc(hidden)]
pub mod lifecycle;
#[doc(hidden)]
pub mod nixl;
#[doc(hidden)]
pub mod record;
#[doc(hidden)]
#[cfg(feature = "cli")]
pub mod signals;
#[doc(hidden)]
pub mod units;
#[doc(hidden)]
pub mod validate;
