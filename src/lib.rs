//! nixl-agent: performs NIXL memory registration for a serving process and
//! makes every attempt observable (Prometheus metrics, health probes, status).
//!
//! The library is the product; `src/main.rs` is a thin shell over [`agent`].
//! See ARCHITECTURE.md for the map and the invariants.
#![deny(unsafe_code)]

pub mod agent;
pub mod backoff;
pub mod check;
pub mod cli;
pub mod config;
pub mod diagnose;
pub mod http;
pub mod lifecycle;
pub mod model;
pub mod nixl;
pub mod observe;
pub mod plan;
pub mod record;
pub mod signals;
pub mod status;
pub mod telemetry;
pub mod units;
pub mod validate;

pub use agent::{Lifecycle, LifecycleHandle, Prepared, ShutdownError, StartError};
pub use config::Config;
pub use model::{MemType, Reason};
pub use nixl::{load_nixl, Descriptor};
pub use observe::{Expected, ObserveSettings, Observer};
pub use plan::{GroupSpec, Kind, Plan, Region, RegionSource};
