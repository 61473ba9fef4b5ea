//! What can happen: the vocabulary the lifecycle, observe mode and `check`
//! describe their work in, and that the ledger applies. Plain data in
//! domain words: no metric, HTTP or FFI types.
//!
//! Each event is defined in its family's file together with the log line
//! it writes (vector's internal events): [`groups`] (declarations,
//! attempts, retries, deregistrations, the drain), [`calls`] (NIXL agents
//! and calls: in flight, past their deadline, deregistered), [`runtime`]
//! (the NIXL runtime, its backends, the canary, the pod directory) and
//! [`xfer`] (the data path). Adding an event is a variant here, its type
//! and line in its family's file, and its arm in the ledger's `apply`.

pub mod calls;
pub mod groups;
pub mod runtime;
pub mod xfer;

pub use calls::{
    AgentReleased, AgentSeen, CallDeregistered, CallKey, CallKind, CallsInFlight, InstrumentationFailed, NixlCalled,
    Stuck, Unstuck,
};
pub use groups::{
    AcceptedInvalid, Attempt, Deregistered, DrainFinished, GroupDecl, GroupId, GroupProgress, Holding, Leaves,
    Progress, RetryScheduled, Source,
};
pub use runtime::{
    BackendCreated, BackendFailed, CanaryStarted, Interposed, MemlockObserved, PodDirectory, ProbeRound,
};
pub use xfer::{
    Notified, Peer, XferCreateFailed, XferEnd, XferEnded, XferPosted, XferReleased, XferTick, XferTransport,
};

use crate::model::{Failure, RuntimeFacts, Transfer};

/// The target of every event's log line: one name for operators to filter
/// on (`NIXL_AGENT_LOG=nixl_agent::events=debug`), whichever crate writes it.
pub const LOG_TARGET: &str = "nixl_agent::events";

/// The target of the lines a serving process's default filter shows (the
/// Python instrumentation logs only these, at warn, unless told otherwise).
pub const INSTRUMENT_LOG_TARGET: &str = "nixl_agent::instrument";

/// What the ledger said of an event as it applied it, for its log line.
#[derive(Debug, Default, Clone, Copy)]
pub struct Said {
    /// A declaration refused: its name belongs to a group of another source.
    pub refused: bool,
    /// A deregistration of something the ledger never saw registered.
    pub unmatched: bool,
}

/// A subscriber told each event that may end a process's story (a
/// registration attempt, a transfer that failed or ended) synchronously,
/// after the ledger applied it, on the thread that recorded it
/// (`Recorder::subscribe`): the termination message, the pod rank's file.
/// It must never call back into the recording's writes.
pub trait Sink: Send + Sync {
    fn on(&self, e: &Event<'_>);
    /// Gone for good (its publisher ended): dropped at the next subscribe.
    fn gone(&self) -> bool {
        false
    }
}

/// Everything the ledger and its projections hear about.
#[derive(Debug)]
pub enum Event<'a> {
    // groups.rs
    GroupDeclared(&'a GroupDecl),
    Attempted(&'a Attempt<'a>),
    RetryScheduled(RetryScheduled<'a>),
    Deregistered(Deregistered<'a>),
    Progress(Progress<'a>),
    AcceptedInvalid(AcceptedInvalid<'a>),
    /// Readiness waits for a first successful registration (observe mode
    /// with no expected group: a process that registered nothing cannot
    /// serve a transfer).
    AwaitRegistration,
    DrainStarted,
    DrainFinished(DrainFinished),
    // calls.rs
    AgentSeen(AgentSeen<'a>),
    AgentReleased(AgentReleased),
    CallDeregistered(CallDeregistered<'a>),
    Stuck(Stuck<'a>),
    Unstuck(Unstuck),
    CallsInFlight(CallsInFlight<'a>),
    /// A NIXL call with no record of its own, counted.
    NixlCalled(NixlCalled),
    InstrumentationFailed(InstrumentationFailed<'a>),
    /// The lifecycle thread panicked: nothing registers or drains any more.
    LifecycleDied,
    // runtime.rs
    /// NIXL is up on an agent (the lifecycle's own or the caller's).
    NixlLoaded(&'a RuntimeFacts),
    NixlUnavailable(&'a Failure),
    BackendCreated(BackendCreated<'a>),
    BackendFailed(BackendFailed<'a>),
    MemlockObserved(MemlockObserved),
    CanaryStarted(CanaryStarted),
    /// The node canary's loopback round ended.
    ProbeTransfer(&'a ProbeRound),
    PodDirectory(PodDirectory<'a>),
    /// The interposer's verdict on this process's NIXL build.
    Interposed(Interposed<'a>),
    // xfer.rs
    /// A transfer request was created; `handle` names it from now on.
    XferCreated(&'a Transfer<'a>),
    XferCreateFailed(XferCreateFailed<'a>),
    XferPosted(XferPosted<'a>),
    XferEnded(XferEnded<'a>),
    XferReleased(XferReleased),
    XferTick(XferTick),
    Peer(Peer<'a>),
    Notified(Notified<'a>),
    XferTransport(XferTransport<'a>),
}

impl Event<'_> {
    /// Writes this event's log line, if it has one (a success on the data
    /// path never has), inside the span current when it is emitted.
    pub fn log(&self, said: &Said) {
        match self {
            Event::GroupDeclared(e) => e.log(said),
            Event::Attempted(e) => e.log(),
            Event::RetryScheduled(e) => e.log(),
            Event::Deregistered(e) => e.log(),
            Event::AcceptedInvalid(e) => e.log(),
            Event::DrainStarted => groups::drain_started(),
            Event::DrainFinished(e) => e.log(),
            Event::Progress(_) | Event::AwaitRegistration => {}
            Event::AgentSeen(e) => e.log(),
            Event::AgentReleased(e) => e.log(),
            Event::CallDeregistered(e) => e.log(said),
            Event::Stuck(e) => e.log(),
            Event::Unstuck(e) => e.log(),
            Event::InstrumentationFailed(e) => e.log(),
            Event::NixlCalled(e) => e.log(),
            Event::LifecycleDied => calls::lifecycle_died(),
            Event::CallsInFlight(_) => {}
            Event::NixlLoaded(f) => runtime::nixl_loaded(f),
            Event::NixlUnavailable(f) => runtime::nixl_unavailable(f),
            Event::BackendCreated(e) => e.log(),
            Event::BackendFailed(e) => e.log(),
            Event::MemlockObserved(e) => e.log(),
            Event::CanaryStarted(e) => e.log(),
            Event::ProbeTransfer(r) => r.log(),
            Event::PodDirectory(e) => e.log(),
            Event::Interposed(e) => e.log(),
            Event::Peer(e) => e.log(),
            Event::Notified(e) => e.log(),
            Event::XferTransport(e) => e.log(),
            // Transfers: their failures and stalls are logged from what the
            // ledger traced (`telemetry::events::transfer`).
            Event::XferCreated(_)
            | Event::XferCreateFailed(_)
            | Event::XferPosted(_)
            | Event::XferEnded(_)
            | Event::XferReleased(_)
            | Event::XferTick(_) => {}
        }
    }
}
