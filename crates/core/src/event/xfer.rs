//! The events of the data path: transfer requests created, posted, ended
//! and released, the transfer watchdog's tick, calls about peers,
//! notifications and the transports UCX picked. A transfer's failure or
//! stall is logged from what the ledger traced of it
//! (`telemetry::events::transfer`), never from these events: only the
//! calls about peers, notifications and transports have lines here.

use super::LOG_TARGET;
use crate::model::{AgentId, Failure, NotifDirection, PeerOp, Transport, TransportScope, XferOp};
use std::time::{Duration, Instant};

/// How the program learned a posted transfer ended.
#[derive(Debug, Clone, Copy)]
pub enum XferEnd<'a> {
    Done,
    Failed(&'a Failure),
    /// Released or collected while still in flight.
    Released,
}

/// Creating a transfer request failed (an unknown peer, descriptors NIXL
/// refuses): a transfer that ended in error before it was posted.
#[derive(Debug)]
pub struct XferCreateFailed<'a> {
    pub agent: AgentId,
    pub op: XferOp,
    pub peer: &'a str,
    pub failure: &'a Failure,
    /// When the remote prepared list it was made from was prepared
    /// (`make_prepped_xfer`): a peer reloaded since makes it stale.
    pub prepared: Option<Instant>,
    /// NIXL refused only because the peer's metadata has not arrived yet,
    /// within the wait it is given (`XferOutcome::PeerPending`): a
    /// documented retry, which no subscriber treats as a failure.
    pub pending: bool,
}

/// The request `handle` was posted (`transfer()`) at `at`.
#[derive(Debug)]
pub struct XferPosted<'a> {
    pub handle: u64,
    pub at: Instant,
    /// It also ended within the call: when, and how.
    pub ended: Option<(Instant, XferEnd<'a>)>,
    /// Trace it even if it succeeds (the sampler's choice).
    pub sampled: bool,
}

/// The posted request `handle` ended: its first status that was not
/// "in progress", a failed post, or its release in flight.
#[derive(Debug)]
pub struct XferEnded<'a> {
    pub handle: u64,
    pub at: Instant,
    pub end: XferEnd<'a>,
    /// NIXL's own measure of the transfer (its telemetry), when on.
    pub measured: Option<Duration>,
    pub sampled: bool,
}

/// The request `handle` was released: it cannot be posted again.
#[derive(Debug)]
pub struct XferReleased {
    pub handle: u64,
    pub at: Instant,
}

/// The transfer watchdog's look at the clock: transfers in flight longer
/// than `stall_after` are stalled (counted once each).
#[derive(Debug)]
pub struct XferTick {
    pub at: Instant,
    pub stall_after: Duration,
}

/// A call about a peer (`add_remote_agent`, `remove_remote_agent`, ...).
#[derive(Debug)]
pub struct Peer<'a> {
    pub agent: AgentId,
    pub op: PeerOp,
    /// The peer's name; for `Add`, what NIXL returned (empty on failure).
    pub peer: &'a str,
    pub failure: Option<&'a Failure>,
}

impl Peer<'_> {
    pub(super) fn log(&self) {
        match self.failure {
            Some(f) => tracing::warn!(
                target: LOG_TARGET,
                agent = self.agent.0,
                event = self.op.as_str(),
                peer = self.peer,
                reason = f.reason.as_str(),
                error = %f.message,
                "NIXL call about a remote agent failed"
            ),
            None => {
                tracing::debug!(target: LOG_TARGET, agent = self.agent.0, event = self.op.as_str(), peer = self.peer, "remote agent")
            }
        }
    }
}

/// Notifications sent or received (`messages` of them), or a failed call.
#[derive(Debug)]
pub struct Notified<'a> {
    pub agent: AgentId,
    pub direction: NotifDirection,
    pub messages: u64,
    pub failure: Option<&'a Failure>,
    /// The peer they went to or came from ("" when not known).
    pub peer: &'a str,
    /// Of the messages, the framework's heartbeats (vLLM's `HB:`).
    pub heartbeats: u64,
}

impl Notified<'_> {
    pub(super) fn log(&self) {
        if let Some(f) = self.failure {
            tracing::warn!(
                target: LOG_TARGET,
                agent = self.agent.0,
                direction = self.direction.as_str(),
                reason = f.reason.as_str(),
                error = %f.message,
                "NIXL notification call failed"
            )
        }
    }
}

/// Which transports UCX picked for `op` transfers between `agent` and
/// `peer` (its protocol report); `None`: looked, could not tell.
#[derive(Debug)]
pub struct XferTransport<'a> {
    pub agent: AgentId,
    pub peer: &'a str,
    pub op: XferOp,
    pub transport: Option<(TransportScope, &'a [Transport])>,
}

impl XferTransport<'_> {
    pub(super) fn log(&self) {
        if let Some((scope, transports)) = self.transport {
            let words: Vec<&str> = transports.iter().map(|t| t.as_str()).collect();
            tracing::info!(
                target: LOG_TARGET,
                agent = self.agent.0,
                peer = self.peer,
                op = self.op.as_str(),
                scope = scope.as_str(),
                transports = %words.join(","),
                "the transports UCX picked for this peer's transfers"
            )
        }
    }
}
