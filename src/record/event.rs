//! What can happen, one variant per event. Plain data in domain words: no
//! metric, HTTP or FFI types, so every subscriber can read it.

use crate::model::{Failure, GroupFailure, GroupLabels, GroupState, Hooked, Phase, Region, RuntimeFacts};
use std::time::Duration;

/// A group nixl-agent will report on: from a plan at start, or on first use
/// in observe mode.
#[derive(Debug, Clone)]
pub struct GroupDecl {
    pub labels: GroupLabels,
    pub backends: Vec<String>,
    pub device: u32,
    /// Whether readiness waits for this group.
    pub required: bool,
    pub validate: bool,
    /// Descriptors and bytes the plan asks for (0 for observed groups).
    pub planned: (usize, u64),
    /// Observed groups take their state from the calls recorded on them;
    /// planned groups from the lifecycle state machine.
    pub observed: bool,
}

/// What a group holds registered with NIXL after an event.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Holding {
    pub descriptors: usize,
    pub bytes: u64,
}

/// One registration attempt (a whole group, or one observed call).
#[derive(Debug)]
pub struct Attempt<'a> {
    pub labels: &'a GroupLabels,
    pub attempt: u32,
    /// Descriptors and bytes submitted.
    pub descriptors: usize,
    pub bytes: u64,
    /// Time spent in validation and NIXL; `None` when the attempt failed
    /// before reaching NIXL (backend creation, allocation).
    pub elapsed: Option<Duration>,
    pub outcome: Result<(), &'a GroupFailure>,
    /// What the group holds once the attempt is over.
    pub holding: Holding,
    /// The region the failure blames, when known (for the span event).
    pub blamed: Option<Region>,
}

/// A group's state in the lifecycle machine.
#[derive(Debug, Clone, Copy)]
pub struct GroupProgress<'a> {
    pub group: &'a str,
    pub state: GroupState,
    pub attempts: u32,
    pub consecutive_failures: u32,
}

/// Everything the recorder's subscribers hear about.
#[derive(Debug)]
pub enum Event<'a> {
    GroupDeclared(&'a GroupDecl),
    MemlockObserved {
        soft_limit: Option<u64>,
        exempt: bool,
    },
    NixlLoaded(&'a RuntimeFacts),
    NixlUnavailable(&'a Failure),
    BackendCreated {
        backend: &'a str,
        elapsed: Duration,
    },
    BackendFailed {
        backend: &'a str,
        failure: &'a Failure,
    },
    Attempted(&'a Attempt<'a>),
    RetryScheduled {
        labels: &'a GroupLabels,
        attempt: u32,
        after: Duration,
    },
    Deregistered {
        labels: &'a GroupLabels,
        descriptors: usize,
        failed: usize,
        failure: Option<&'a Failure>,
        elapsed: Duration,
        holding: Holding,
    },
    /// The lifecycle machine moved: its phase and every planned group.
    Progress {
        phase: Phase,
        groups: &'a [GroupProgress<'a>],
    },
    ReadinessChanged {
        ready: bool,
        /// Set the first time readiness is reached.
        time_to_ready: Option<Duration>,
    },
    /// A NIXL call of the lifecycle outlived `nixl_call_timeout`.
    Stuck {
        operation: &'a str,
        /// The group whose call it is, if any.
        labels: Option<&'a GroupLabels>,
        elapsed: Duration,
    },
    /// That call returned at last.
    Unstuck {
        operation: &'a str,
        elapsed: Duration,
    },
    /// NIXL accepted an observed call whose regions validation rejects
    /// (the seed's corrupted pointers that NIXL registers silently).
    AcceptedInvalid {
        labels: &'a GroupLabels,
        reason: crate::model::Reason,
        message: &'a str,
    },
    /// nixl-agent's own wrapping of a foreign call failed; the call itself
    /// went ahead untouched. `first` is set for the first failure of this
    /// operation (logged; later ones are only counted).
    InstrumentationFailed {
        operation: Hooked,
        message: &'a str,
        first: bool,
    },
    /// The lifecycle thread panicked: nothing registers or drains any more.
    LifecycleDied,
    DrainStarted,
    DrainFinished {
        deregistered: usize,
        failed: usize,
        /// Descriptors NIXL still holds for nixl-agent after the drain.
        still_registered: usize,
        elapsed: Duration,
    },
}

impl crate::status::ReadyChange {
    /// The event that records this change.
    pub fn event(&self) -> Event<'static> {
        Event::ReadinessChanged {
            ready: self.ready,
            time_to_ready: self.time_to_ready,
        }
    }
}
