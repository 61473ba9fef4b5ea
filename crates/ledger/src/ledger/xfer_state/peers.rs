//! Peers and notifications in the ledger's data path: what happened with
//! each remote agent (bounded, most recent last: transfers, bytes, failures
//! by reason, the last failure, notifications and heartbeats), the remote
//! agents loaded per local NIXL agent and when each was last invalidated,
//! and the notification counts.

use super::Rows;
use super::{notif_index, outcome_index, peer_index, Transfers, PEERS_KEPT, REMOTE_AGENTS_KEPT};
use crate::ledger::counts::unix_now;
use crate::model::{AgentId, Failure, NotifDirection, PeerOp, Reason, XferOutcome};
use crate::status::{PeerFailure, PeerStatus, ReasonCount};
use std::sync::Arc;
use std::time::Instant;

/// A remote agent a local NIXL agent has met.
pub(super) struct Remote {
    pub(super) name: Arc<str>,
    /// Its metadata is loaded now.
    loaded: bool,
    /// When it was last removed or loaded again over loaded metadata.
    invalidated: Option<Instant>,
}

impl Transfers {
    /// A call about the remote agent `peer` on `agent`: counted, its entry
    /// in /v1/status updated, the remote-agent table kept.
    pub fn peer(&mut self, s: &mut Rows, agent: AgentId, op: PeerOp, peer: &str, failure: Option<&Failure>) {
        self.observing = true;
        self.counts.peer_events[peer_index(op)][outcome_index(failure.is_none())] += 1;
        if let Some(f) = failure {
            match self
                .counts
                .peer_failures
                .iter_mut()
                .find(|(o, r, _)| *o == op && *r == f.reason)
            {
                Some(e) => e.2 += 1,
                None => self.counts.peer_failures.push((op, f.reason, 1)),
            }
        }
        let mut invalidated = None;
        if failure.is_none() && matches!(op, PeerOp::Add | PeerOp::Remove) && !peer.is_empty() {
            let now = Instant::now();
            let list = self.remote.entry(agent).or_default();
            match list.iter_mut().find(|p| &*p.name == peer) {
                Some(p) => {
                    // Loaded again, or removed: what was made before is stale.
                    if op == PeerOp::Remove || p.loaded || p.invalidated.is_some() {
                        p.invalidated = Some(now);
                        invalidated = Some(now);
                    }
                    p.loaded = op == PeerOp::Add;
                }
                None if op == PeerOp::Add => {
                    if list.len() >= REMOTE_AGENTS_KEPT {
                        // Forget the first one not loaded, if any.
                        if let Some(i) = list.iter().position(|p| !p.loaded) {
                            list.remove(i);
                        }
                    }
                    if list.len() < REMOTE_AGENTS_KEPT {
                        list.push(Remote {
                            name: peer.into(),
                            loaded: true,
                            invalidated: None,
                        });
                    }
                }
                None => {}
            }
            self.counts.remote_agents = self.loaded_remotes();
            if op == PeerOp::Remove {
                self.transports.peer_removed(agent, peer);
            }
        }
        if peer.is_empty() {
            return;
        }
        let loaded = self.loaded(agent, peer);
        let unix = unix_now();
        let p = peer_entry(s, agent, peer);
        p.last_event = op.as_str();
        p.ok = failure.is_none();
        p.reason = failure.map(|f| f.reason);
        p.error = failure.map(|f| f.message.clone());
        p.unix_seconds = unix;
        p.loaded = loaded;
        if invalidated.is_some() {
            p.invalidated_unix_seconds = Some(unix);
        }
        if op == PeerOp::Remove && failure.is_none() {
            p.transports.clear();
        }
        if let Some(f) = failure {
            failure_of_peer(p, f, unix);
        }
        if op == PeerOp::Add && failure.is_none() {
            p.lost = false;
        }
    }

    /// `peer`'s metadata is known to be on `agent` (NIXL found it, or took
    /// a request to it): when no loading of it was seen since it was last
    /// removed, it arrived another way than `add_remote_agent` /
    /// `loadRemoteMD` (NIXL's listener: `send_local_metadata`, partial
    /// metadata, a fetch) and is counted as added, once, as a loading is.
    pub(super) fn arrived(&mut self, s: &mut Rows, agent: AgentId, peer: &str) {
        if peer.is_empty() || self.loaded(agent, peer) || self.names.get(&agent).is_some_and(|n| &**n == peer) {
            return;
        }
        // A table full of loaded peers keeps no more: inferring again at
        // every request to one it could not keep would count it each time.
        let full = self
            .remote
            .get(&agent)
            .is_some_and(|l| l.len() >= REMOTE_AGENTS_KEPT && l.iter().all(|p| p.loaded));
        if !full {
            self.peer(s, agent, PeerOp::Add, peer, None);
        }
    }

    fn loaded(&self, agent: AgentId, peer: &str) -> bool {
        self.remote
            .get(&agent)
            .is_some_and(|l| l.iter().any(|p| p.loaded && &*p.name == peer))
    }

    pub(super) fn loaded_remotes(&self) -> usize {
        self.remote
            .values()
            .map(|l| l.iter().filter(|p| p.loaded).count())
            .sum()
    }

    /// NIXL's "not found" on a request (or prepared list) made at `made`
    /// for `peer`, when the peer was removed or loaded again since: the
    /// stale handle NIXL 1.5.1 refuses ("was invalidated or re-registered
    /// after transfer request creation"), not a peer never added.
    pub(super) fn stale(&self, agent: AgentId, peer: &str, f: &Failure, made: Instant) -> Option<Failure> {
        if f.reason != Reason::NixlNotFound {
            return None;
        }
        let invalidated = self
            .remote
            .get(&agent)?
            .iter()
            .find(|p| &*p.name == peer)?
            .invalidated?;
        (invalidated >= made).then(|| Failure::new(Reason::PeerInvalidated, f.message.clone()))
    }

    /// Notifications sent to or received from `peer` ("" when not known),
    /// `heartbeats` of them the framework's heartbeats, or a failed call.
    #[allow(clippy::too_many_arguments)]
    pub fn notified(
        &mut self,
        s: &mut Rows,
        agent: AgentId,
        direction: NotifDirection,
        peer: &str,
        messages: u64,
        heartbeats: u64,
        failure: Option<&Failure>,
    ) {
        self.observing = true;
        let i = notif_index(direction);
        match failure {
            None => {
                self.counts.notifications[i][0] += messages;
                self.counts.heartbeats[i] += heartbeats;
            }
            Some(_) => self.counts.notifications[i][1] += 1,
        }
        if peer.is_empty() || failure.is_some() {
            return;
        }
        let p = peer_entry(s, agent, peer);
        p.unix_seconds = unix_now();
        let (n, hb) = match direction {
            NotifDirection::Send => (&mut p.notifications_sent, &mut p.heartbeats_sent),
            NotifDirection::Receive => (&mut p.notifications_received, &mut p.heartbeats_received),
        };
        *n += messages;
        *hb += heartbeats;
    }
}

/// A failure counted on a peer's entry and kept as its last.
pub(super) fn failure_of_peer(p: &mut PeerStatus, f: &Failure, unix: f64) {
    match p.failures.iter_mut().find(|c| c.reason == f.reason) {
        Some(c) => c.count += 1,
        None => p.failures.push(ReasonCount {
            reason: f.reason,
            count: 1,
        }),
    }
    p.last_failure = Some(PeerFailure {
        reason: f.reason,
        error: f.message.clone(),
        unix_seconds: unix,
    });
}

/// `times` transfers with `peer` that ended without a failure, each
/// moving `bytes`. `unix`: when the last ended.
pub(super) fn ended_with_peer(
    s: &mut Rows,
    agent: AgentId,
    peer: &str,
    outcome: XferOutcome,
    (times, bytes): (u64, u64),
    unix: f64,
) {
    if peer.is_empty() {
        return;
    }
    let p = peer_entry(s, agent, peer);
    p.unix_seconds = unix;
    p.last_event = "transfer";
    p.ok = true;
    p.reason = None;
    p.error = None;
    match outcome {
        XferOutcome::Done => {
            p.done += times;
            p.bytes = p.bytes.saturating_add(bytes.saturating_mul(times));
        }
        _ => p.released_in_flight += times,
    }
}

/// The status entry of (agent, peer), moved to the end (most recent) and
/// created when new; the oldest is dropped past [`PEERS_KEPT`].
pub(super) fn peer_entry<'a>(s: &'a mut Rows, agent: AgentId, peer: &str) -> &'a mut PeerStatus {
    let last = s.peers.len().wrapping_sub(1);
    let at = match s.peers.last() {
        // The most recent is the usual one: no move.
        Some(p) if p.agent == agent && p.name == peer => last,
        _ => {
            let entry = match s.peers.iter().position(|p| p.agent == agent && p.name == peer) {
                Some(i) => s.peers.remove(i),
                None => new_peer(agent, peer),
            };
            s.peers.push(entry);
            if s.peers.len() > PEERS_KEPT {
                s.peers.remove(0);
            }
            s.peers.len() - 1
        }
    };
    &mut s.peers[at]
}

fn new_peer(agent: AgentId, peer: &str) -> PeerStatus {
    PeerStatus {
        name: peer.to_string(),
        agent,
        last_event: "transfer",
        ok: true,
        reason: None,
        error: None,
        unix_seconds: 0.0,
        loaded: false,
        lost: false,
        done: 0,
        failed: 0,
        released_in_flight: 0,
        bytes: 0,
        failures: Vec::new(),
        last_failure: None,
        notifications_sent: 0,
        notifications_received: 0,
        heartbeats_sent: 0,
        heartbeats_received: 0,
        invalidated_unix_seconds: None,
        transports: Vec::new(),
    }
}
