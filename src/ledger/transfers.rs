//! The data path's recorded state: transfer requests and the transfers in
//! flight, how each ended, peers and notifications. Applied under the
//! ledger's lock like every other event; the metric families of the data
//! path and /v1/status `transfers` are both read from here.
//!
//! Architecture Invariant: a transfer is counted once, when it ends (done,
//! error, released in flight), and a stall once, when the watchdog's tick
//! first finds it past `stall_after`. Peers are keyed by (local agent,
//! remote name) and never become a label; the tables are bounded.

use super::counts::{unix_now, Histogram};
use crate::event::XferEnd;
use crate::model::{AgentId, Failure, MemType, NotifDirection, PeerOp, Reason, Transfer, XferOp, XferOutcome};
use crate::status::{TransferStatus, XferFailure, XferOpStatus};
use peers::peer_entry;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Failed transfers kept in /v1/status.
pub const RECENT_FAILURES_KEPT: usize = 8;
/// Peers kept in /v1/status (the most recently seen).
pub const PEERS_KEPT: usize = 16;
/// Transfer requests remembered between creation and release; a program
/// that never releases its handles cannot grow the ledger past this.
pub const REQUESTS_KEPT: usize = 1 << 16;
/// Remote agents remembered per local NIXL agent.
pub const REMOTE_AGENTS_KEPT: usize = 4096;

/// NIXL's handles are addresses (Rust's, a counter): spread by one
/// multiplication, not SipHash — the post and poll path hashes them.
#[derive(Default, Clone, Copy)]
struct HandleHasher(u64);

impl std::hash::Hasher for HandleHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = (self.0 ^ u64::from(*b)).wrapping_mul(0x100_0000_01b3);
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = (n ^ (n >> 29)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

type ByHandle<V> = HashMap<u64, V, std::hash::BuildHasherDefault<HandleHasher>>;

struct Request {
    agent: AgentId,
    op: XferOp,
    descriptors: usize,
    bytes: u64,
    backend: Option<Box<str>>,
    peer: Arc<str>,
    mem: (Option<MemType>, Option<MemType>),
}

struct Flight {
    posted: Instant,
    stalled: bool,
}

/// One operation's counts.
#[derive(Debug, Clone, Default)]
pub struct OpCounts {
    /// Indexed by [`XferOutcome::index`].
    pub outcomes: [u64; 3],
    pub stalled: u64,
    pub bytes: u64,
    pub duration: Histogram,
    pub in_flight: usize,
    pub stalled_in_flight: usize,
    pub oldest_seconds: f64,
}

/// What the data path's metric families show.
#[derive(Debug, Clone, Default)]
pub struct TransferCounts {
    /// Indexed by [`XferOp::index`].
    pub ops: [OpCounts; 2],
    pub failures: Vec<(XferOp, Reason, u64)>,
    /// `[event][0 ok, 1 error]`, events in [`PeerOp::ALL`] order.
    pub peer_events: [[u64; 2]; 5],
    pub peer_failures: Vec<(PeerOp, Reason, u64)>,
    pub peers_lost: u64,
    /// `[direction][0 ok, 1 error]`, directions in [`NotifDirection::ALL`] order.
    pub notifications: [[u64; 2]; 2],
    pub remote_agents: usize,
}

/// A transfer that ended (or stalled) and is to be traced: what the span says.
#[derive(Debug, Clone)]
pub struct TracedXfer {
    pub op: XferOp,
    pub descriptors: usize,
    pub bytes: u64,
    pub backend: Option<String>,
    pub peer: String,
    pub posted: Option<Instant>,
    pub ended: Instant,
    /// `None`: still in flight (a stall).
    pub outcome: Option<XferOutcome>,
    pub reason: Option<Reason>,
    pub message: Option<String>,
    pub stalled: bool,
    pub stage: &'static str,
    /// The memory types of the local and remote descriptors.
    pub mem: (Option<MemType>, Option<MemType>),
}

/// The data path's state.
#[derive(Default)]
pub struct Transfers {
    requests: ByHandle<Request>,
    flights: ByHandle<Flight>,
    remote: HashMap<AgentId, Vec<Arc<str>>>,
    pub counts: TransferCounts,
    /// What the last event ended or stalled that is to be traced (taken by
    /// the recorder after the write).
    pub traced: Vec<TracedXfer>,
    pub duration_bounds: &'static [f64],
    /// The recording follows a caller's NIXL agent (or saw a data-path
    /// event): its data-path families are exported.
    pub observing: bool,
}

fn outcome_index(ok: bool) -> usize {
    usize::from(!ok)
}

fn peer_index(op: PeerOp) -> usize {
    PeerOp::ALL.iter().position(|p| *p == op).unwrap_or(0)
}

fn notif_index(d: NotifDirection) -> usize {
    NotifDirection::ALL.iter().position(|x| *x == d).unwrap_or(0)
}

fn count(list: &mut Vec<(XferOp, Reason, u64)>, op: XferOp, reason: Reason) {
    match list.iter_mut().find(|(o, r, _)| *o == op && *r == reason) {
        Some(e) => e.2 += 1,
        None => list.push((op, reason, 1)),
    }
}

impl Transfers {
    pub fn new(duration_bounds: &'static [f64]) -> Transfers {
        Transfers {
            duration_bounds,
            ..Transfers::default()
        }
    }

    pub fn created(&mut self, r: &Transfer<'_>) {
        self.observing = true;
        if self.requests.len() >= REQUESTS_KEPT && !self.requests.contains_key(&r.handle) {
            // Handles never released: forget those not in flight.
            let flights = &self.flights;
            self.requests.retain(|h, _| flights.contains_key(h));
            if self.requests.len() >= REQUESTS_KEPT {
                return;
            }
        }
        let peer = self.intern(r.agent, r.peer);
        self.requests.insert(
            r.handle,
            Request {
                agent: r.agent,
                op: r.op,
                descriptors: r.descriptors,
                bytes: r.bytes,
                backend: r.backend.map(Into::into),
                peer,
                mem: (r.local, r.remote),
            },
        );
    }

    /// The peer's name, shared with the remote-agent table when it is there.
    fn intern(&self, agent: AgentId, peer: &str) -> Arc<str> {
        self.remote
            .get(&agent)
            .and_then(|l| l.iter().find(|p| &***p == peer).cloned())
            .unwrap_or_else(|| peer.into())
    }

    pub fn create_failed(
        &mut self,
        s: &mut TransferStatus,
        agent: AgentId,
        op: XferOp,
        peer: &str,
        failure: &Failure,
        at: Instant,
    ) {
        self.observing = true;
        self.counts.ops[op.index()].outcomes[XferOutcome::Error.index()] += 1;
        self.failed(s, agent, op, peer, failure, "create");
        self.traced.push(TracedXfer {
            op,
            descriptors: 0,
            bytes: 0,
            backend: None,
            peer: peer.to_string(),
            posted: None,
            ended: at,
            outcome: Some(XferOutcome::Error),
            reason: Some(failure.reason),
            message: Some(failure.message.clone()),
            stalled: false,
            stage: "create",
            mem: (None, None),
        });
    }

    /// A failure's counts, its line in /v1/status and its peer.
    fn failed(
        &mut self,
        s: &mut TransferStatus,
        agent: AgentId,
        op: XferOp,
        peer: &str,
        f: &Failure,
        stage: &'static str,
    ) {
        count(&mut self.counts.failures, op, f.reason);
        let unix = unix_now();
        s.recent_failures.push(XferFailure {
            op,
            reason: f.reason,
            error: f.message.clone(),
            peer: peer.to_string(),
            agent,
            stage,
            unix_seconds: unix,
        });
        if s.recent_failures.len() > RECENT_FAILURES_KEPT {
            s.recent_failures.remove(0);
        }
        let lost = f.reason == Reason::PeerLost;
        if lost {
            self.counts.peers_lost += 1;
        }
        let p = peer_entry(s, agent, peer);
        p.last_event = if lost { "lost" } else { "transfer" };
        p.ok = false;
        p.reason = Some(f.reason);
        p.error = Some(f.message.clone());
        p.unix_seconds = unix;
        p.lost |= lost;
    }

    /// `handle` posted at `at`; `ended`: it also ended within the call.
    pub fn posted(
        &mut self,
        s: &mut TransferStatus,
        handle: u64,
        at: Instant,
        ended: Option<(Instant, XferEnd<'_>)>,
        sampled: bool,
    ) -> bool {
        let Some(op) = self.requests.get(&handle).map(|r| r.op) else {
            return false;
        };
        if self
            .flights
            .insert(
                handle,
                Flight {
                    posted: at,
                    stalled: false,
                },
            )
            .is_none()
        {
            self.counts.ops[op.index()].in_flight += 1;
        }
        if let Some((end_at, end)) = ended {
            self.ended(s, handle, end_at, end, None, sampled, "post");
        }
        true
    }

    /// The flight of `handle` ended; `false` when it was not in flight (a
    /// second DONE poll, a request created before the recording).
    #[allow(clippy::too_many_arguments)]
    pub fn ended(
        &mut self,
        s: &mut TransferStatus,
        handle: u64,
        at: Instant,
        end: XferEnd<'_>,
        measured: Option<Duration>,
        sampled: bool,
        stage: &'static str,
    ) -> bool {
        // A flight always has its request (only requests not in flight are
        // ever forgotten); looked up first so a flight is never taken
        // without its counts.
        let Some(r) = self.requests.get(&handle) else {
            return false;
        };
        let Some(flight) = self.flights.remove(&handle) else {
            return false;
        };
        let (op, agent, peer) = (r.op, r.agent, r.peer.clone());
        let c = &mut self.counts.ops[op.index()];
        c.in_flight = c.in_flight.saturating_sub(1);
        if flight.stalled {
            c.stalled_in_flight = c.stalled_in_flight.saturating_sub(1);
        }
        if c.in_flight == 0 {
            c.oldest_seconds = 0.0;
        }
        let elapsed = measured.unwrap_or_else(|| at.saturating_duration_since(flight.posted));
        let (outcome, failure) = match end {
            XferEnd::Done => (XferOutcome::Done, None),
            XferEnd::Failed(f) => (XferOutcome::Error, Some(f)),
            XferEnd::Released => (XferOutcome::ReleasedInFlight, None),
        };
        c.outcomes[outcome.index()] += 1;
        if outcome == XferOutcome::Done {
            c.bytes = c.bytes.saturating_add(r.bytes);
            c.duration.observe(self.duration_bounds, elapsed.as_secs_f64());
        }
        let traced = outcome != XferOutcome::Done || sampled || flight.stalled;
        if traced {
            self.traced.push(TracedXfer {
                op,
                descriptors: r.descriptors,
                bytes: r.bytes,
                backend: r.backend.as_deref().map(str::to_string),
                peer: peer.to_string(),
                posted: Some(flight.posted),
                ended: at,
                outcome: Some(outcome),
                reason: failure.map(|f| f.reason),
                message: failure.map(|f| f.message.clone()),
                stalled: flight.stalled,
                stage,
                mem: r.mem,
            });
        }
        if let Some(f) = failure {
            self.failed(s, agent, op, &peer, f, stage);
        }
        true
    }

    /// `handle` released: a flight still open ends as released in flight.
    pub fn released(&mut self, s: &mut TransferStatus, handle: u64, at: Instant) {
        self.ended(s, handle, at, XferEnd::Released, None, false, "release");
        self.requests.remove(&handle);
    }

    /// The watchdog's tick: stalls counted once, ages refreshed.
    pub fn tick(&mut self, at: Instant, stall_after: Duration) {
        let mut oldest = [Duration::ZERO; 2];
        for (handle, f) in self.flights.iter_mut() {
            let Some(r) = self.requests.get(handle) else { continue };
            let age = at.saturating_duration_since(f.posted);
            let i = r.op.index();
            oldest[i] = oldest[i].max(age);
            if !f.stalled && age > stall_after {
                f.stalled = true;
                let c = &mut self.counts.ops[i];
                c.stalled += 1;
                c.stalled_in_flight += 1;
                self.traced.push(TracedXfer {
                    op: r.op,
                    descriptors: r.descriptors,
                    bytes: r.bytes,
                    backend: r.backend.as_deref().map(str::to_string),
                    peer: r.peer.to_string(),
                    posted: Some(f.posted),
                    ended: at,
                    outcome: None,
                    reason: None,
                    message: Some(format!(
                        "in flight for {:.1} s (stall threshold {stall_after:?})",
                        age.as_secs_f64()
                    )),
                    stalled: true,
                    stage: "stall",
                    mem: r.mem,
                });
            }
        }
        for (c, o) in self.counts.ops.iter_mut().zip(oldest) {
            c.oldest_seconds = if c.in_flight == 0 { 0.0 } else { o.as_secs_f64() };
        }
    }

    pub fn in_flight(&self) -> usize {
        self.flights.len()
    }

    /// The NIXL agent `agent` is gone: its requests, flights (released in
    /// flight) and remote agents with it.
    pub fn agent_released(&mut self, s: &mut TransferStatus, agent: AgentId, at: Instant) {
        let handles: Vec<u64> = self
            .requests
            .iter()
            .filter(|(_, r)| r.agent == agent)
            .map(|(h, _)| *h)
            .collect();
        for h in handles {
            self.released(s, h, at);
        }
        self.remote.remove(&agent);
        self.counts.remote_agents = self.remote.values().map(Vec::len).sum();
        for p in s.peers.iter_mut().filter(|p| p.agent == agent) {
            p.loaded = false;
        }
    }

    /// The status's counts, copied from the counts (one truth), in place.
    pub fn sync(&self, s: &mut TransferStatus, stall_after: Option<Duration>) {
        if s.ops.len() != XferOp::ALL.len() {
            s.ops = XferOp::ALL.iter().map(|op| op_status(*op, &self.counts)).collect();
        } else {
            for (o, op) in s.ops.iter_mut().zip(XferOp::ALL) {
                *o = op_status(op, &self.counts);
            }
        }
        if let Some(d) = stall_after {
            s.stall_after_seconds = Some(d.as_secs_f64());
        }
        s.remote_agents = self.counts.remote_agents;
        s.peers_lost = self.counts.peers_lost;
        let n = &self.counts.notifications;
        s.notifications_sent = n[notif_index(NotifDirection::Send)][0];
        s.notifications_received = n[notif_index(NotifDirection::Receive)][0];
        s.notification_failures = n[0][1] + n[1][1];
    }
}

fn op_status(op: XferOp, counts: &TransferCounts) -> XferOpStatus {
    let c = &counts.ops[op.index()];
    XferOpStatus {
        op,
        done: c.outcomes[XferOutcome::Done.index()],
        error: c.outcomes[XferOutcome::Error.index()],
        released_in_flight: c.outcomes[XferOutcome::ReleasedInFlight.index()],
        stalled: c.stalled,
        bytes: c.bytes,
        in_flight: c.in_flight,
        stalled_in_flight: c.stalled_in_flight,
        oldest_in_flight_seconds: c.oldest_seconds,
    }
}

mod peers;
#[cfg(test)]
mod tests;
