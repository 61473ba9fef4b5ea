//! The registration lifecycle: plan → validate → register → ready → drain.
//!
//! [`machine`] is the pure state machine; [`group`] registers one group all
//! or nothing; [`driver`] runs both on a dedicated thread against a
//! [`Registrar`] — the small safe trait that `crate::nixl` implements for real
//! NIXL, and that unit tests implement to exercise the logic.

pub mod driver;
pub mod group;
pub mod machine;
pub mod registration;
pub mod watchdog;

pub use crate::model::{Failure, GroupFailure, RuntimeFacts};
use crate::plan::{GroupSpec, Region};
use crate::record::{Capture, NoCapture};
use crate::validate::MemoryProbe;
use std::time::Duration;

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
    /// Registers a whole group, all or nothing. The default registers region
    /// by region (so a failure names its region) and rolls back; a path that
    /// can register a list in one call overrides it.
    fn register_group(&mut self, spec: &GroupSpec, regions: &[Region]) -> Result<Vec<Self::Handle>, GroupFailure>
    where
        Self: Sized,
    {
        group::register_all(self, spec, regions)
    }
    /// Deregisters one region.
    fn deregister_region(&mut self, handle: Self::Handle) -> Result<(), Failure>;
    /// What NIXL/UCX print during an attempt is collected through this.
    fn capture(&self) -> &dyn Capture {
        &NoCapture
    }
}
