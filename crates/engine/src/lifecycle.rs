//! The registration lifecycle: plan → validate → register → ready → drain.
//!
//! [`machine`] is the pure state machine; [`group`] registers one group all
//! or nothing; [`driver`] runs both on a dedicated thread against a
//! [`Registrar`] — the small safe trait that `registrar::NixlRegistrar` implements for real
//! NIXL, and that unit tests implement to exercise the logic.

pub mod driver;
pub mod group;
pub mod machine;
pub mod registrar;
pub mod registration;

pub use crate::model::{Failure, RuntimeFacts};
use crate::plan::{GroupSpec, Region};
use crate::record::{Capture, NoCapture};
use crate::validate::MemoryProbe;
use std::time::Duration;

/// The operations the lifecycle needs from NIXL (and the memory allocator).
/// Implemented by `crate::lifecycle::registrar::NixlRegistrar`; nothing here knows about FFI.
pub trait Registrar {
    /// What one registration call holds in NIXL: a list of regions (one
    /// call for a whole group where the path can), or one region. Dropping
    /// it must deregister what it still holds.
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
    /// Registers `regions` with the group's backends, in one NIXL call
    /// where the path can. `Err` leaves none of `regions` registered, and
    /// says which region failed when the registrar can tell ([`At`]);
    /// [`group::register_all`] finds it otherwise.
    fn register(&mut self, spec: &GroupSpec, regions: &[Region]) -> Result<Self::Handle, ListFailure>;
    /// Deregisters what `handle` holds, in one call where it can. `Err`
    /// hands back exactly what NIXL may still hold ([`Unreleased`]).
    fn deregister(&mut self, handle: Self::Handle) -> Result<(), Unreleased<Self::Handle>>;
    /// What NIXL/UCX print during an attempt is collected through this.
    fn capture(&self) -> &dyn Capture {
        &NoCapture
    }
}

/// Which part of a registration call a failure is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum At {
    /// One of the call's regions, not known which (a list NIXL refused).
    List,
    /// This index of the call's regions.
    Region(usize),
    /// None of them: the agent, a backend, the options.
    Whole,
}

/// A registration call that failed, having left nothing of it registered.
#[derive(Debug, Clone)]
pub struct ListFailure {
    pub failure: Failure,
    pub at: At,
}

impl ListFailure {
    pub fn new(failure: Failure, at: At) -> ListFailure {
        ListFailure { failure, at }
    }
}

/// A deregistration that failed. `held` is what NIXL may still hold, as
/// handles that can be released again (dropping one tries again): never
/// what the call did release. `regions` and `bytes` are its extent.
/// `split` is true when `held` is one handle per region of a list that
/// failed whole (NIXL removed none of it), each worth one more try on its
/// own to find which regions NIXL refuses.
#[derive(Debug)]
pub struct Unreleased<H> {
    pub failure: Failure,
    pub regions: usize,
    /// The bytes of those regions.
    pub bytes: u64,
    pub held: Vec<H>,
    pub split: bool,
}
