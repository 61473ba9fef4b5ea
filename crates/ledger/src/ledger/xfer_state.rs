//! The data path's recorded state: transfer requests and the postings in
//! flight, how each ended, peers and notifications. Applied under the
//! ledger's lock like every other event; the metric families of the data
//! path and /v1/status `transfers` are both read from here.
//!
//! A transfer is counted once, when it ends (done, error, released in
//! flight), and a stall once (ARCHITECTURE.md). A posting in flight carries what it
//! moves (op, bytes, peer) from the moment it was posted: a refused repost
//! is a failed call of its own and leaves it alone, and forgetting or
//! re-creating its request cannot change how it is counted. Peers are
//! keyed by (local agent, remote name) and never become a label; the
//! tables are bounded and evict by last use.

use super::counts::{unix_now, Histogram};
use crate::event::XferEnd;
use crate::model::{AgentId, Failure, MemType, NotifDirection, PeerOp, Reason, Transfer, XferOp, XferOutcome};
use crate::status::{PeerStatus, TransferStatus, XferFailure, XferOpStatus};
pub use peer_transports::TransportWanted;
use peers::{peer_entry, Remote};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};
use table::{least_recent, ByHandle};
pub use traced::TracedXfer;

/// Failed transfers kept in /v1/status.
pub const RECENT_FAILURES_KEPT: usize = 8;
/// Peers kept in /v1/status (the most recently seen).
pub const PEERS_KEPT: usize = 16;
/// Transfer requests remembered between creation and release; a program
/// that never releases its handles cannot grow the ledger past this.
pub const REQUESTS_KEPT: usize = 1 << 16;
/// Remote agents remembered per local NIXL agent.
pub const REMOTE_AGENTS_KEPT: usize = 4096;

/// What a request moves each time it is posted: shared by the request and
/// its posting in flight.
#[derive(Debug)]
struct Moves {
    agent: AgentId,
    op: XferOp,
    descriptors: usize,
    bytes: u64,
    backend: Option<Box<str>>,
    peer: Arc<str>,
    mem: (Option<MemType>, Option<MemType>),
    /// When the request was created: a peer invalidated after this makes
    /// it stale.
    created: Instant,
}

struct RequestState {
    moves: Arc<Moves>,
    /// The ledger's use counter when it was last created or posted.
    last_used: u64,
}

/// One posting in flight.
struct Flight {
    moves: Arc<Moves>,
    posted: Instant,
    stalled: bool,
}

/// How a posting ended within its call: when, how, and, when known
/// already, how long it took and the Unix time of its end.
#[derive(Clone, Copy)]
pub(super) struct Ending<'a> {
    pub at: Instant,
    pub end: XferEnd<'a>,
    pub measured: Option<Duration>,
    pub unix: Option<f64>,
}

/// One operation's counts.
#[derive(Debug, Clone, Default)]
pub struct OpCounts {
    /// Indexed by [`XferOutcome::index`].
    pub outcomes: [u64; 4],
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
    /// Heartbeats among the notifications, by direction.
    pub heartbeats: [u64; 2],
    pub remote_agents: usize,
}

/// The rows the data path keeps for /v1/status: the last failures and the
/// peers seen most recently (both bounded).
#[derive(Debug, Default)]
pub struct Rows {
    pub recent_failures: Vec<XferFailure>,
    pub peers: Vec<PeerStatus>,
}

/// The data path's state.
#[derive(Default)]
pub struct Transfers {
    /// Failures and peers, as shown.
    rows: Rows,
    /// The stall threshold the watchdog's last tick used.
    stall_after: Option<Duration>,
    /// An event that moves a count was heard: the per-op rows are shown.
    shown: bool,
    requests: ByHandle<RequestState>,
    flights: ByHandle<Flight>,
    remote: HashMap<AgentId, Vec<Remote>>,
    /// Each local NIXL agent's own name: a request to itself is no peer
    /// arriving.
    names: HashMap<AgentId, Arc<str>>,
    /// Counts creations and posts: a request's last use.
    uses: u64,
    /// Which transports each peer's transfers take, per op.
    transports: peer_transports::PeerTransports,
    pub counts: TransferCounts,
    /// What the last event ended or stalled that is to be traced (taken by
    /// the recorder after the write).
    pub traced: Vec<TracedXfer>,
    pub duration_bounds: &'static [f64],
    /// The recording follows a caller's NIXL agent (or saw a data-path
    /// event): its data-path families are exported.
    pub observing: bool,
    /// Stamps a transfer's end from the instant that timed it.
    pub(super) wall: super::counts::WallAnchor,
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

    pub fn created(&mut self, r: &Transfer<'_>, at: Instant) {
        self.observing = true;
        if self.requests.len() >= REQUESTS_KEPT && !self.requests.contains_key(&r.handle) {
            // Handles never released: the least recently used go, a
            // sixteenth at a time; a request with a posting in flight stays.
            let flights = &self.flights;
            for h in least_recent(
                &self.requests,
                REQUESTS_KEPT / 16,
                |q| q.last_used,
                |h| flights.contains_key(&h),
            ) {
                self.requests.remove(&h);
            }
            if self.requests.len() >= REQUESTS_KEPT {
                return;
            }
        }
        let peer = self.intern(r.agent, r.peer);
        self.uses += 1;
        self.requests.insert(
            r.handle,
            RequestState {
                moves: Arc::new(Moves {
                    agent: r.agent,
                    op: r.op,
                    descriptors: r.descriptors,
                    bytes: r.bytes,
                    backend: r.backend.map(Into::into),
                    peer,
                    mem: (r.local, r.remote),
                    created: at,
                }),
                last_used: self.uses,
            },
        );
    }

    /// Whether `handle` names a request the ledger holds.
    #[cfg(any(test, feature = "testing"))]
    pub fn holds(&self, handle: u64) -> bool {
        self.requests.contains_key(&handle)
    }

    /// The peer's name, shared with the remote-agent table when it is there.
    fn intern(&self, agent: AgentId, peer: &str) -> Arc<str> {
        self.remote
            .get(&agent)
            .and_then(|l| l.iter().find(|p| &*p.name == peer).map(|p| p.name.clone()))
            .unwrap_or_else(|| peer.into())
    }

    /// A creation NIXL refused while the peer's metadata is awaited
    /// (`peer_pending`): counted apart, no failure, no trace.
    pub fn create_pending(&mut self, op: XferOp) {
        self.observing = true;
        self.counts.ops[op.index()].outcomes[XferOutcome::PeerPending.index()] += 1;
    }

    #[allow(clippy::too_many_arguments)]
    pub fn create_failed(
        &mut self,
        s: &mut Rows,
        agent: AgentId,
        op: XferOp,
        peer: &str,
        failure: &Failure,
        prepared: Option<Instant>,
        at: Instant,
    ) {
        self.observing = true;
        let stale = prepared.and_then(|p| self.stale(agent, peer, failure, p));
        let failure = stale.as_ref().unwrap_or(failure);
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

    /// A failure's counts, its line in /v1/status and its peer's.
    fn failed(&mut self, s: &mut Rows, agent: AgentId, op: XferOp, peer: &str, f: &Failure, stage: &'static str) {
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
        p.failed += 1;
        peers::failure_of_peer(p, f, unix);
    }

    /// `handle` posted at `at`; `ended`: it also ended within the call.
    pub fn posted(
        &mut self,
        s: &mut Rows,
        handle: u64,
        at: Instant,
        ended: Option<(Instant, XferEnd<'_>)>,
        sampled: bool,
    ) -> bool {
        let ended = ended.map(|(at, end)| Ending {
            at,
            end,
            measured: None,
            unix: None,
        });
        self.posted_within(s, handle, at, ended, sampled)
    }

    /// [`Transfers::posted`], with what is known already of a posting
    /// that ended within the call.
    pub(super) fn posted_within(
        &mut self,
        s: &mut Rows,
        handle: u64,
        at: Instant,
        ended: Option<Ending<'_>>,
        sampled: bool,
    ) -> bool {
        // Done within the call, not traced (the data path's common case).
        if let Some(e @ Ending { end: XferEnd::Done, .. }) = &ended {
            if !sampled {
                let took = e.measured.unwrap_or_else(|| e.at.saturating_duration_since(at));
                let unix = e.unix.unwrap_or_else(|| self.wall.unix_at(e.at));
                if self.done_within(s, handle, std::iter::once(took), unix) {
                    return true;
                }
            }
        }
        self.uses += 1;
        let uses = self.uses;
        let Some(r) = self.requests.get_mut(&handle) else {
            return false;
        };
        r.last_used = uses;
        let moves = r.moves.clone();
        // NIXL refused to post it again while its last posting is in
        // flight: a failed call of its own; that posting goes on.
        if let Some(Ending {
            at: end_at,
            end: XferEnd::Failed(f),
            ..
        }) = ended
        {
            if f.reason == Reason::RepostActive {
                self.counts.ops[moves.op.index()].outcomes[XferOutcome::Error.index()] += 1;
                self.trace(&moves, Some(at), end_at, XferOutcome::Error, Some(f), false, "post");
                self.failed(s, moves.agent, moves.op, &moves.peer, f, "post");
                return true;
            }
        }
        // NIXL posts a request again only once its last posting finished:
        // one the program never polled to its end completed.
        if self.flights.contains_key(&handle) {
            self.ended(s, handle, at, XferEnd::Done, None, false, "post");
        }
        self.counts.ops[moves.op.index()].in_flight += 1;
        let flight = Flight {
            moves,
            posted: at,
            stalled: false,
        };
        match ended {
            // Done (or failed) within the call: never in flight between
            // events, so never in the table.
            Some(e) => self.finish(s, flight, e.at, e.end, e.measured, sampled, "post"),
            None => {
                self.flights.insert(handle, flight);
            }
        }
        true
    }

    /// Postings of `handle` that each ended well within its call (`took`
    /// each, the last at `unix`), counted on one look-up of the request as
    /// `finish` counts done flights; `false`, with nothing counted, when
    /// the request is not held or has a posting in flight (apply them one
    /// by one then).
    pub(super) fn done_within(
        &mut self,
        s: &mut Rows,
        handle: u64,
        took: impl ExactSizeIterator<Item = Duration>,
        unix: f64,
    ) -> bool {
        if took.len() == 0 || self.flights.contains_key(&handle) {
            return false;
        }
        let Some(r) = self.requests.get_mut(&handle) else {
            return false;
        };
        self.uses += took.len() as u64;
        r.last_used = self.uses;
        let m = &r.moves;
        let c = &mut self.counts.ops[m.op.index()];
        if c.in_flight == 0 {
            c.oldest_seconds = 0.0;
        }
        let times = (took.len() as u64, m.bytes);
        for t in took {
            count_done(c, self.duration_bounds, m.bytes, t);
        }
        peers::ended_with_peer(s, m.agent, &m.peer, XferOutcome::Done, times, unix);
        true
    }

    /// The flight of `handle` ended; `false` when it was not in flight (a
    /// second DONE poll, a request created before the recording).
    #[allow(clippy::too_many_arguments)]
    pub fn ended(
        &mut self,
        s: &mut Rows,
        handle: u64,
        at: Instant,
        end: XferEnd<'_>,
        measured: Option<Duration>,
        sampled: bool,
        stage: &'static str,
    ) -> bool {
        let Some(flight) = self.flights.remove(&handle) else {
            return false;
        };
        self.finish(s, flight, at, end, measured, sampled, stage);
        true
    }

    /// A flight that ended (taken from the table, or never in it).
    #[allow(clippy::too_many_arguments)]
    fn finish(
        &mut self,
        s: &mut Rows,
        flight: Flight,
        at: Instant,
        end: XferEnd<'_>,
        measured: Option<Duration>,
        sampled: bool,
        stage: &'static str,
    ) {
        let m = flight.moves;
        let c = &mut self.counts.ops[m.op.index()];
        c.in_flight = c.in_flight.saturating_sub(1);
        if flight.stalled {
            c.stalled_in_flight = c.stalled_in_flight.saturating_sub(1);
        }
        if c.in_flight == 0 {
            c.oldest_seconds = 0.0;
        }
        let elapsed = measured.unwrap_or_else(|| at.saturating_duration_since(flight.posted));
        let stale = match end {
            XferEnd::Failed(f) => self.stale(m.agent, &m.peer, f, m.created),
            _ => None,
        };
        let (outcome, failure) = match end {
            XferEnd::Done => (XferOutcome::Done, None),
            XferEnd::Failed(f) => (XferOutcome::Error, Some(stale.as_ref().unwrap_or(f))),
            XferEnd::Released => (XferOutcome::ReleasedInFlight, None),
        };
        let c = &mut self.counts.ops[m.op.index()];
        if outcome == XferOutcome::Done {
            count_done(c, self.duration_bounds, m.bytes, elapsed);
        } else {
            c.outcomes[outcome.index()] += 1;
        }
        if outcome != XferOutcome::Done || sampled || flight.stalled {
            self.trace(&m, Some(flight.posted), at, outcome, failure, flight.stalled, stage);
        }
        match failure {
            Some(f) => self.failed(s, m.agent, m.op, &m.peer, f, stage),
            None => {
                let unix = self.wall.unix_at(at);
                peers::ended_with_peer(s, m.agent, &m.peer, outcome, (1, m.bytes), unix);
            }
        }
    }

    /// `handle` released: a flight still open ends as released in flight.
    pub fn released(&mut self, s: &mut Rows, handle: u64, at: Instant) {
        self.ended(s, handle, at, XferEnd::Released, None, false, "release");
        self.requests.remove(&handle);
    }

    pub fn in_flight(&self) -> usize {
        self.flights.len()
    }

    /// The NIXL agent `agent` is gone: its requests, flights (released in
    /// flight) and remote agents with it.
    pub fn agent_released(&mut self, s: &mut Rows, agent: AgentId, at: Instant) {
        let mut handles: Vec<u64> = self
            .requests
            .iter()
            .filter(|(_, r)| r.moves.agent == agent)
            .map(|(h, _)| *h)
            .collect();
        handles.extend(
            self.flights
                .iter()
                .filter(|(_, f)| f.moves.agent == agent)
                .map(|(h, _)| *h),
        );
        for h in handles {
            self.released(s, h, at);
        }
        self.remote.remove(&agent);
        self.transports.agent_released(agent);
        self.counts.remote_agents = self.loaded_remotes();
        for p in s.peers.iter_mut().filter(|p| p.agent == agent) {
            p.loaded = false;
        }
    }

    /// The data path's part of /v1/status, built from its tables and
    /// counts (one truth). `ops` stays empty until an event that moves a
    /// count was heard, as the document has always shown it.
    pub fn status(&self) -> TransferStatus {
        let n = &self.counts.notifications;
        TransferStatus {
            ops: if self.shown {
                XferOp::ALL.iter().map(|op| op_status(*op, &self.counts)).collect()
            } else {
                Vec::new()
            },
            stall_after_seconds: self.stall_after.map(|d| d.as_secs_f64()),
            recent_failures: self.rows.recent_failures.clone(),
            peers: self.rows.peers.clone(),
            remote_agents: self.counts.remote_agents,
            peers_lost: self.counts.peers_lost,
            notifications_sent: n[notif_index(NotifDirection::Send)][0],
            notifications_received: n[notif_index(NotifDirection::Receive)][0],
            notification_failures: n[0][1] + n[1][1],
            heartbeats_sent: self.counts.heartbeats[notif_index(NotifDirection::Send)],
            heartbeats_received: self.counts.heartbeats[notif_index(NotifDirection::Receive)],
        }
    }
}

/// A posting that moved `bytes` in `elapsed`, done.
fn count_done(c: &mut OpCounts, bounds: &[f64], bytes: u64, elapsed: Duration) {
    c.outcomes[XferOutcome::Done.index()] += 1;
    c.bytes = c.bytes.saturating_add(bytes);
    c.duration.observe(bounds, elapsed.as_secs_f64());
}

fn op_status(op: XferOp, counts: &TransferCounts) -> XferOpStatus {
    let c = &counts.ops[op.index()];
    XferOpStatus {
        op,
        done: c.outcomes[XferOutcome::Done.index()],
        error: c.outcomes[XferOutcome::Error.index()],
        released_in_flight: c.outcomes[XferOutcome::ReleasedInFlight.index()],
        peer_pending: c.outcomes[XferOutcome::PeerPending.index()],
        stalled: c.stalled,
        bytes: c.bytes,
        in_flight: c.in_flight,
        stalled_in_flight: c.stalled_in_flight,
        oldest_in_flight_seconds: c.oldest_seconds,
    }
}

mod apply;
mod peer_transports;
mod peers;
mod table;
#[cfg(test)]
mod tests;
mod traced;
