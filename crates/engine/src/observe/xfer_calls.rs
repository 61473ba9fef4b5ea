//! Observe mode on the data path: the transfers, peers and notifications
//! the program makes on its own NIXL agents, described as events for the
//! ledger — the same recording path as its registrations. The front-ends
//! (the Python wrappers, `ObservedAgent`) make the calls; this module says
//! what happened, and runs the transfer watchdog that finds stalls.
//!
//! A poll that says "in progress" records nothing: the front-ends return
//! before reaching this module. A request's `handle` here is an identity
//! the front-end handed out when the program created it (a serial), never
//! NIXL's pointer alone: NIXL makes a request at a released one's address.
//! (Invariants: ARCHITECTURE.md.)

use super::{Inner, Observer};
use crate::event::{Event, XferEnd};
use crate::model::{AgentId, Failure, NotifDirection, PeerOp, Transfer, XferOp};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

/// Default time in flight after which a transfer counts as stalled.
pub const DEFAULT_STALL_AFTER: Duration = Duration::from_secs(30);

/// Default wait a peer is given, from NIXL's first refusal to create a
/// request to it because its metadata has not arrived, before the same
/// refusal counts as a failed transfer (`NIXL_AGENT_PEER_WAIT`).
pub const DEFAULT_PEER_WAIT: Duration = Duration::from_secs(60);

/// Most (agent, peer) pairs waited for at once: a program refused for more
/// peers than this has its oldest waits forgotten (they start again).
const PEERS_WAITED_FOR: usize = 4096;

/// Since when each (agent, peer) has been refused for metadata that has
/// not arrived: the state behind `XferOutcome::PeerPending`.
#[derive(Default)]
pub(super) struct PeerWait {
    since: std::sync::Mutex<std::collections::HashMap<(AgentId, Box<str>), Instant>>,
    /// Set while `since` holds anything: a request created while no peer
    /// is waited for (the data path's common case) takes no lock.
    any: std::sync::atomic::AtomicBool,
}

impl PeerWait {
    /// A creation refused at `now` because `peer`'s metadata is not there:
    /// true while less than `wait` has passed since the first refusal since
    /// the peer last took a request (never, with a wait of zero).
    fn refused(&self, agent: AgentId, peer: &str, now: Instant, wait: Duration) -> bool {
        let mut m = self.since.lock().unwrap_or_else(|e| e.into_inner());
        let key = (agent, Box::<str>::from(peer));
        if m.len() >= PEERS_WAITED_FOR && !m.contains_key(&key) {
            let oldest = m.iter().min_by_key(|(_, t)| **t).map(|(k, _)| k.clone());
            if let Some(k) = oldest {
                m.remove(&k);
            }
        }
        let since = *m.entry(key).or_insert(now);
        self.any.store(true, Ordering::Release);
        now.saturating_duration_since(since) < wait
    }

    /// `peer` took a request: its next refusal starts a new wait.
    fn arrived(&self, agent: AgentId, peer: &str) {
        if !self.any.load(Ordering::Acquire) {
            return;
        }
        let mut m = self.since.lock().unwrap_or_else(|e| e.into_inner());
        m.remove(&(agent, peer.into()));
        self.any.store(!m.is_empty(), Ordering::Release);
    }
}

/// What a post or a status poll returned.
#[derive(Debug)]
pub enum XferPoll {
    /// `PROC`: still in flight.
    InProgress,
    /// `DONE`.
    Done,
    /// An error (raised, or the status `ERR`), classified.
    Failed(Failure),
}

impl Observer {
    /// A transfer request was created (`initialize_xfer`,
    /// `make_prepped_xfer`, `create_xfer_req`).
    pub fn transfer_created(&self, t: &Transfer<'_>) {
        self.0.peer_wait.arrived(t.agent, t.peer);
        self.0.rec.emit(&Event::XferCreated(t));
    }

    /// Creating a transfer request to `peer` failed: a transfer that ended in
    /// error before it was posted, unless NIXL refused only because the
    /// peer's metadata has not arrived yet (`NIXL_ERR_NOT_FOUND`) and the
    /// peer is still within its wait: then it is `peer_pending`, NIXL's
    /// documented retry (ARCHITECTURE.md).
    pub fn transfer_create_failed(&self, agent: AgentId, op: XferOp, peer: &str, failure: &Failure) {
        let pending = failure.reason == crate::model::Reason::NixlNotFound
            && self
                .0
                .peer_wait
                .refused(agent, peer, Instant::now(), self.0.settings.peer_wait);
        self.0
            .rec
            .emit(&Event::XferCreateFailed(crate::event::XferCreateFailed {
                agent,
                op,
                peer,
                failure,
                prepared: None,
                pending,
            }));
    }

    /// Creating a transfer request from a remote descriptor list prepared
    /// at `prepared` (`make_prepped_xfer`) failed: a peer removed or loaded
    /// again since makes the list stale (`peer_invalidated`).
    pub fn prepped_transfer_create_failed(
        &self,
        agent: AgentId,
        op: XferOp,
        peer: &str,
        failure: &Failure,
        prepared: Instant,
    ) {
        self.0
            .rec
            .emit(&Event::XferCreateFailed(crate::event::XferCreateFailed {
                agent,
                op,
                peer,
                failure,
                prepared: Some(prepared),
                pending: false,
            }));
    }

    /// `transfer()` / `post_xfer_req` on `handle`, begun at `posted`,
    /// returned `poll`.
    /// A posting that failed or is traced is recorded at once; the others
    /// (the data path's common case) are deferred by the ledger to its
    /// next read or write, off its lock on the caller's thread.
    pub fn transfer_posted(&self, handle: u64, posted: Instant, poll: &XferPoll) {
        let end = (!matches!(poll, XferPoll::InProgress)).then(Instant::now);
        let nanos = |t: Instant| self.0.rec.nanos(t).unwrap_or(0);
        self.record_post(handle, nanos(posted), end.map(nanos), poll);
    }

    /// The same for a post marked in flight on this thread
    /// ([`Observer::call_started_here`]): the mark ends here, and its
    /// clock is the posting's.
    pub fn transfer_posted_here(&self, handle: u64, mark: super::LocalCallMark, poll: &XferPoll) {
        let clock = &self.0.post_clock;
        let took = clock.span(mark.ticks, clock.now());
        let start = mark.nanos();
        drop(mark);
        let (posted, end) = match poll {
            // Its poll is timed on the monotonic clock: placed on it.
            XferPoll::InProgress => (clock.monotonic().saturating_sub(took), None),
            _ => (start, Some(start + took)),
        };
        self.record_post(handle, posted, end, poll);
    }

    /// A posting at `posted` that ended at `end` (unless in progress), in
    /// nanoseconds since the recording's start.
    fn record_post(&self, handle: u64, posted: u64, end: Option<u64>, poll: &XferPoll) {
        let sampled = crate::telemetry::traces::sample_transfer();
        let quiet = !sampled && !matches!(poll, XferPoll::Failed(_));
        if !(quiet && self.0.rec.posted_quietly(handle, posted, end)) {
            let base = self.0.rec.started();
            let at = |n: u64| base + Duration::from_nanos(n);
            let end_at = at(end.unwrap_or(posted));
            let ended = match poll {
                XferPoll::InProgress => None,
                XferPoll::Done => Some((end_at, XferEnd::Done)),
                XferPoll::Failed(f) => Some((end_at, XferEnd::Failed(f))),
            };
            self.0.rec.emit(&Event::XferPosted(crate::event::XferPosted {
                handle,
                at: at(posted),
                ended,
                sampled,
            }));
        }
        if matches!(poll, XferPoll::InProgress) {
            self.watch_transfers();
        }
    }

    /// A status poll of `handle` (`check_xfer_state`, `get_xfer_status`)
    /// that did not say "in progress". `measured`: NIXL's own duration of
    /// the transfer, when its telemetry is on. Only the first such poll of a
    /// posting counts.
    pub fn transfer_status(&self, handle: u64, poll: &XferPoll, measured: Option<Duration>) {
        let end = match poll {
            XferPoll::InProgress => return,
            XferPoll::Done => XferEnd::Done,
            XferPoll::Failed(f) => XferEnd::Failed(f),
        };
        self.0.rec.emit(&Event::XferEnded(crate::event::XferEnded {
            handle,
            at: Instant::now(),
            end,
            measured,
            sampled: crate::telemetry::traces::sample_transfer(),
        }));
    }

    /// The request `handle` was released (or collected): a transfer still in
    /// flight ends as released in flight.
    pub fn transfer_released(&self, handle: u64) {
        self.0.rec.emit(&Event::XferReleased(crate::event::XferReleased {
            handle,
            at: Instant::now(),
        }));
    }

    /// A call about the remote agent `peer` (its name; for `Add`, what NIXL
    /// returned, empty when it failed).
    pub fn peer(&self, agent: AgentId, op: PeerOp, peer: &str, failure: Option<&Failure>) {
        self.0.rec.emit(&Event::Peer(crate::event::Peer {
            agent,
            op,
            peer,
            failure,
        }));
    }

    /// Notifications sent or received (`messages`), or a failed call.
    pub fn notified(&self, agent: AgentId, direction: NotifDirection, messages: u64, failure: Option<&Failure>) {
        self.0.rec.emit(&Event::Notified(crate::event::Notified {
            agent,
            direction,
            messages,
            failure,
            peer: "",
            heartbeats: 0,
        }));
    }

    /// Notifications sent to or received from the remote agent `peer`:
    /// `messages`, of which `heartbeats` are the framework's heartbeats
    /// (vLLM's `HB:` prefix).
    pub fn notified_peer(&self, agent: AgentId, direction: NotifDirection, peer: &str, messages: u64, heartbeats: u64) {
        self.0.rec.emit(&Event::Notified(crate::event::Notified {
            agent,
            direction,
            messages,
            failure: None,
            peer,
            heartbeats,
        }));
    }

    /// Starts the transfer watchdog with the first transfer in flight.
    fn watch_transfers(&self) {
        if self.0.xfer_watch.load(Ordering::Relaxed) || self.0.xfer_watch.swap(true, Ordering::AcqRel) {
            return;
        }
        let weak = Arc::downgrade(&self.0);
        let stall_after = self.0.settings.transfer_stall_after;
        let spawned = std::thread::Builder::new()
            .name("nixl-xfer-watch".into())
            .spawn(move || watchdog(weak, stall_after));
        if spawned.is_err() {
            self.0.xfer_watch.store(false, Ordering::Release);
        }
    }
}

/// How often the watchdog looks: often enough that a stall is counted
/// within a second of its threshold, and the oldest-in-flight gauge is at
/// most that old.
fn period(stall_after: Duration) -> Duration {
    (stall_after / 4).clamp(Duration::from_millis(50), Duration::from_secs(1))
}

/// Looks at the transfers in flight until the observer is gone; writes
/// nothing while none is in flight.
fn watchdog(observer: Weak<Inner>, stall_after: Duration) {
    let every = period(stall_after);
    loop {
        std::thread::sleep(every);
        let Some(inner) = observer.upgrade() else { return };
        if inner.rec.ledger().transfers_in_flight() > 0 {
            inner.rec.emit(&Event::XferTick(crate::event::XferTick {
                at: Instant::now(),
                stall_after,
            }));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_watchdog_looks_at_least_every_second_and_at_most_twenty_times_a_second() {
        assert_eq!(period(DEFAULT_STALL_AFTER), Duration::from_secs(1));
        assert_eq!(period(Duration::from_millis(400)), Duration::from_millis(100));
        assert_eq!(period(Duration::from_millis(1)), Duration::from_millis(50));
    }

    #[test]
    fn a_peer_is_waited_for_from_its_first_refusal_until_it_takes_a_request() {
        let w = PeerWait::default();
        let (a, b) = (AgentId(1), AgentId(2));
        let t0 = Instant::now();
        let wait = Duration::from_secs(60);
        assert!(w.refused(a, "p", t0, wait));
        assert!(w.refused(a, "p", t0 + Duration::from_secs(59), wait), "within the wait");
        assert!(
            !w.refused(a, "p", t0 + Duration::from_secs(60), wait),
            "past it: a failure"
        );
        assert!(
            w.refused(b, "p", t0 + Duration::from_secs(61), wait),
            "another agent's own wait"
        );
        w.arrived(a, "p");
        assert!(
            w.refused(a, "p", t0 + Duration::from_secs(120), wait),
            "a new wait once it arrived"
        );
        // A wait of zero: every refusal is the failure.
        assert!(!w.refused(a, "q", t0, Duration::ZERO));
        // With nobody waited for, a created request takes no lock.
        let idle = PeerWait::default();
        assert!(!idle.any.load(Ordering::Relaxed));
        idle.refused(a, "p", t0, wait);
        assert!(idle.any.load(Ordering::Relaxed));
        idle.arrived(a, "p");
        assert!(!idle.any.load(Ordering::Relaxed), "the last wait ended");
        // Bounded: the oldest waits are forgotten, never grown without end.
        for i in 0..(PEERS_WAITED_FOR + 10) {
            w.refused(a, &format!("peer-{i}"), t0, wait);
        }
        assert!(w.since.lock().unwrap().len() <= PEERS_WAITED_FOR);
    }
}
