//! The registration lifecycle: plan → validate → register → ready → drain.
//!
//! [`machine`] is the pure state machine; [`group`] registers one group all
//! or nothing; [`driver`] runs both on a dedicated thread against a
//! [`Registrar`] — the small safe trait that `crate::nixl` implements for real
//! NIXL, and that unit tests implement to exercise the logic.

pub mod driver;
pub mod group;
pub mod machine;

use crate::plan::{GroupSpec, Region};
use crate::telemetry::names::Reason;
use crate::validate::MemoryProbe;
use std::time::Duration;

/// A failed step: a closed reason for labels, a message for people.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    pub reason: Reason,
    pub message: String,
}

impl Failure {
    pub fn new(reason: Reason, message: impl Into<String>) -> Failure {
        Failure {
            reason,
            message: message.into(),
        }
    }
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.reason, self.message)
    }
}

/// What preflight learned about the NIXL runtime.
#[derive(Debug, Clone, Default)]
pub struct RuntimeFacts {
    pub plugins: Vec<String>,
}

/// The operations the lifecycle needs from NIXL (and the memory allocator).
/// Implemented by `crate::nixl::NixlRegistrar`; nothing here knows about FFI.
pub trait Registrar {
    /// One registered region; dropping it must deregister it too.
    type Handle;
    /// Keeps memory the registrar allocated for a group alive.
    type Backing;

    /// Creates the NIXL agent; `Err` leaves the agent serving, never ready.
    fn preflight(&mut self) -> Result<RuntimeFacts, Failure>;
    /// Creates the backend unless it exists. `Ok(Some(t))` when it was just
    /// created (in `t`), `Ok(None)` when it already existed.
    fn ensure_backend(&mut self, name: &str) -> Result<Option<Duration>, Failure>;
    /// Allocates `count` regions of `size` bytes for a group.
    fn allocate(
        &mut self,
        spec: &GroupSpec,
        count: usize,
        size: usize,
    ) -> Result<(Vec<Region>, Self::Backing), Failure>;
    /// Facts for validation.
    fn probe(&self) -> &dyn MemoryProbe;
    /// Registers one region with the group's backends.
    fn register_region(&mut self, spec: &GroupSpec, region: &Region) -> Result<Self::Handle, Failure>;
    /// Deregisters one region.
    fn deregister_region(&mut self, handle: Self::Handle) -> Result<(), Failure>;
    /// Starts collecting what the runtime prints (NIXL/UCX stderr).
    fn capture_begin(&mut self) {}
    /// Stops collecting; returns the lines printed since `capture_begin`.
    fn capture_end(&mut self) -> Vec<String> {
        Vec::new()
    }
}
