//! What can happen, one variant per event: the vocabulary the lifecycle,
//! observe mode and `check` describe their work in, and that the ledger
//! applies. Plain data in domain words, a leaf beside `model`: no metric,
//! HTTP or FFI types, and nothing of the crate but `model`.

use crate::model::{
    AgentId, DirRefusal, Failure, GroupFailure, GroupLabels, GroupState, Hooked, Kind, NotifDirection, PeerOp, Phase,
    Reason, Region, RuntimeFacts, Transfer, Transport, TransportScope, XferOp,
};
use std::time::{Duration, Instant};

/// Who owns a group's name and decides its state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Source {
    /// A group of the lifecycle's plan: its state is the state machine's.
    Planned,
    /// A group of calls the serving process makes itself: its state follows
    /// those calls.
    Observed,
}

/// A group as the ledger knows it: handed out when the group is declared
/// (`Applied::group` of its [`Event::GroupDeclared`]), then carried by every
/// event and in-flight mark about it, so nothing finds a group by its name
/// after its declaration.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct GroupId(pub u32);

impl GroupId {
    /// Its row in the ledger's group table (ids are handed out in order).
    pub const fn index(self) -> usize {
        self.0 as usize
    }
}

/// A group nixl-agent will report on: from a plan at start, or on first use
/// (or as an expected group) in observe mode.
#[derive(Debug, Clone)]
pub struct GroupDecl {
    pub group: String,
    pub kind: Kind,
    /// The labels, when known at declaration: a planned group's come from
    /// its spec; an observed group's from its first call (`None` until then,
    /// for a group readiness expects before any call).
    pub labels: Option<GroupLabels>,
    pub backends: Vec<String>,
    /// Whether readiness waits for this group.
    pub required: bool,
    pub validate: bool,
    /// Descriptors and bytes the plan asks for (0 for observed groups).
    pub planned: (usize, u64),
    pub source: Source,
}

/// What a group holds registered with NIXL.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Holding {
    pub descriptors: usize,
    pub bytes: u64,
}

/// What an attempt leaves registered.
#[derive(Debug, Clone, Copy)]
pub enum Leaves {
    /// The lifecycle owns its handles and says what its group holds now.
    Group(Holding),
    /// One observed call: when it succeeded, the ledger holds its regions
    /// on its agent, keyed by the first one, until they are deregistered or
    /// the agent goes away.
    Call { first: Option<Region> },
}

/// One registration attempt (a whole group, or one observed call).
#[derive(Debug)]
pub struct Attempt<'a> {
    /// The group it is recorded against (`None`: a group the recording never
    /// declared, as `check`'s: only its span and log line).
    pub group: Option<GroupId>,
    pub agent: AgentId,
    pub labels: &'a GroupLabels,
    pub attempt: u32,
    /// Descriptors and bytes submitted.
    pub descriptors: usize,
    pub bytes: u64,
    /// Time spent in validation and NIXL; `None` when the attempt failed
    /// before reaching NIXL (backend creation, allocation).
    pub elapsed: Option<Duration>,
    pub outcome: Result<(), &'a GroupFailure>,
    pub leaves: Leaves,
    /// The region the failure blames, when known (for the span event).
    pub blamed: Option<Region>,
}

/// A group's state in the lifecycle machine.
#[derive(Debug, Clone, Copy)]
pub struct GroupProgress {
    pub group: GroupId,
    pub state: GroupState,
    pub attempts: u32,
    pub consecutive_failures: u32,
}

/// Which NIXL call overran its deadline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallKind {
    Preflight,
    Register,
    Deregister,
    Drain,
}

impl CallKind {
    pub const fn as_str(self) -> &'static str {
        match self {
            CallKind::Preflight => "preflight",
            CallKind::Register => "register",
            CallKind::Deregister => "deregister",
            CallKind::Drain => "drain",
        }
    }
}

/// Which NIXL call in flight an event is about: the slot of the thread
/// that made it and when it started there (never two calls alike).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CallKey {
    pub slot: u64,
    pub started: u64,
}

/// How the program learned a posted transfer ended.
#[derive(Debug, Clone, Copy)]
pub enum XferEnd<'a> {
    Done,
    Failed(&'a Failure),
    /// Released or collected while still in flight.
    Released,
}

/// One loopback round of the node canary.
#[derive(Debug, Clone)]
pub struct ProbeRound {
    /// The failure that ended it, `None` when every transfer completed
    /// and its bytes compared equal.
    pub failure: Option<Failure>,
    /// Bandwidth of the large transfer, [read, write] (`XferOp::index`).
    pub bytes_per_second: [f64; 2],
    pub elapsed: Duration,
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
    GroupDeclared(&'a GroupDecl),
    /// The node canary's loopback round ended.
    ProbeTransfer(&'a ProbeRound),
    /// The node canary's round thread started: a round is due every
    /// `interval` from now on (its freshness is judged against it).
    CanaryStarted {
        interval: Duration,
    },
    MemlockObserved {
        soft_limit: Option<u64>,
        exempt: bool,
    },
    /// NIXL is up on an agent (the lifecycle's own or the caller's).
    NixlLoaded(&'a RuntimeFacts),
    NixlUnavailable(&'a Failure),
    /// A NIXL agent the recording follows from now on.
    AgentSeen {
        agent: AgentId,
        name: &'a str,
        owned: bool,
    },
    /// That agent is gone (collected, dropped): NIXL released what it held,
    /// and so does the ledger.
    AgentReleased {
        agent: AgentId,
    },
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
        group: Option<GroupId>,
        labels: &'a GroupLabels,
        attempt: u32,
        after: Duration,
    },
    /// A planned group's deregistration (the lifecycle says what is left).
    Deregistered {
        group: Option<GroupId>,
        labels: &'a GroupLabels,
        descriptors: usize,
        failed: usize,
        failure: Option<&'a Failure>,
        elapsed: Duration,
        holding: Holding,
    },
    /// An observed deregistration of what one call registered
    /// (`descriptors` regions from `first`) on `agent`: the ledger finds
    /// the registration on that agent; one it never saw is left alone.
    CallDeregistered {
        agent: AgentId,
        first: Region,
        descriptors: usize,
        failure: Option<&'a Failure>,
        elapsed: Duration,
    },
    /// The lifecycle machine moved: its phase and every planned group.
    Progress {
        phase: Phase,
        groups: &'a [GroupProgress],
    },
    /// A NIXL call outlived `nixl_call_timeout`. Not a failure: the call
    /// is counted once, when it ends, with the reason it ends with.
    Stuck {
        /// The call: its episode ends only with its own `Unstuck`.
        call: CallKey,
        operation: CallKind,
        /// The group whose call it is, if any, and its name (for the log).
        group: Option<(GroupId, &'a str)>,
        elapsed: Duration,
    },
    /// That call returned at last.
    Unstuck {
        call: CallKey,
        operation: CallKind,
        elapsed: Duration,
    },
    /// NIXL calls in flight (the lifecycle's and observed ones), as the
    /// recording's watchdog last saw them: the oldest per operation (empty:
    /// none in flight).
    CallsInFlight {
        oldest: &'a [(CallKind, Duration)],
    },
    /// NIXL accepted an observed call whose regions validation rejects
    /// (the seed's corrupted pointers that NIXL registers silently).
    AcceptedInvalid {
        group: GroupId,
        labels: &'a GroupLabels,
        reason: Reason,
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
    /// The pod directory this process publishes to as `rank`, or one it was
    /// given and will not write (`refused`, with what was seen): it runs
    /// alone, and is not ready while that lasts.
    PodDirectory {
        dir: &'a str,
        rank: Option<u32>,
        refused: Option<(DirRefusal, &'a str)>,
    },
    /// Readiness waits for a first successful registration (observe mode
    /// with no expected group: a process that registered nothing cannot
    /// serve a transfer).
    AwaitRegistration,
    /// A transfer request was created; `handle` names it from now on.
    XferCreated(&'a Transfer<'a>),
    /// Creating a transfer request failed (an unknown peer, descriptors NIXL
    /// refuses): a transfer that ended in error before it was posted.
    XferCreateFailed {
        agent: AgentId,
        op: XferOp,
        peer: &'a str,
        failure: &'a Failure,
        /// When the remote prepared list it was made from was prepared
        /// (`make_prepped_xfer`): a peer reloaded since makes it stale.
        prepared: Option<Instant>,
    },
    /// The request `handle` was posted (`transfer()`) at `at`.
    XferPosted {
        handle: u64,
        at: Instant,
        /// It also ended within the call: when, and how.
        ended: Option<(Instant, XferEnd<'a>)>,
        /// Trace it even if it succeeds (the sampler's choice).
        sampled: bool,
    },
    /// The posted request `handle` ended: its first status that was not
    /// "in progress", a failed post, or its release in flight.
    XferEnded {
        handle: u64,
        at: Instant,
        end: XferEnd<'a>,
        /// NIXL's own measure of the transfer (its telemetry), when on.
        measured: Option<Duration>,
        sampled: bool,
    },
    /// The request `handle` was released: it cannot be posted again.
    XferReleased {
        handle: u64,
        at: Instant,
    },
    /// The transfer watchdog's look at the clock: transfers in flight longer
    /// than `stall_after` are stalled (counted once each).
    XferTick {
        at: Instant,
        stall_after: Duration,
    },
    /// A call about a peer (`add_remote_agent`, `remove_remote_agent`, ...).
    Peer {
        agent: AgentId,
        op: PeerOp,
        /// The peer's name; for `Add`, what NIXL returned (empty on failure).
        peer: &'a str,
        failure: Option<&'a Failure>,
    },
    /// Notifications sent or received (`messages` of them), or a failed call.
    Notified {
        agent: AgentId,
        direction: NotifDirection,
        messages: u64,
        failure: Option<&'a Failure>,
        /// The peer they went to or came from ("" when not known).
        peer: &'a str,
        /// Of the messages, the framework's heartbeats (vLLM's `HB:`).
        heartbeats: u64,
    },
    /// Which transports UCX picked for `op` transfers between `agent` and
    /// `peer` (its protocol report); `None`: looked, could not tell.
    XferTransport {
        agent: AgentId,
        peer: &'a str,
        op: XferOp,
        transport: Option<(TransportScope, &'a [Transport])>,
    },
    DrainStarted,
    DrainFinished {
        deregistered: usize,
        failed: usize,
        /// Descriptors NIXL still holds for nixl-agent after the drain.
        still_registered: usize,
        elapsed: Duration,
    },
}
