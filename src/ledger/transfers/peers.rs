//! Peers and notifications in the ledger's data path: what last happened
//! with each remote agent (bounded, most recent last), the remote agents
//! loaded per local NIXL agent, and the notification counts.

use super::{notif_index, outcome_index, peer_index, Transfers, PEERS_KEPT, REMOTE_AGENTS_KEPT};
use crate::ledger::counts::unix_now;
use crate::model::{AgentId, Failure, NotifDirection, PeerOp};
use crate::status::{PeerStatus, TransferStatus};

impl Transfers {
    /// A call about the remote agent `peer` on `agent`: counted, its entry
    /// in /v1/status updated, the remote-agent table kept.
    pub fn peer(&mut self, s: &mut TransferStatus, agent: AgentId, op: PeerOp, peer: &str, failure: Option<&Failure>) {
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
        if failure.is_none() {
            let list = self.remote.entry(agent).or_default();
            match op {
                PeerOp::Add if !list.iter().any(|p| &**p == peer) && list.len() < REMOTE_AGENTS_KEPT => {
                    list.push(peer.into());
                }
                PeerOp::Remove => list.retain(|p| &**p != peer),
                _ => {}
            }
            self.counts.remote_agents = self.remote.values().map(Vec::len).sum();
        }
        if peer.is_empty() {
            return;
        }
        let loaded = self.remote.get(&agent).is_some_and(|l| l.iter().any(|p| &**p == peer));
        let p = peer_entry(s, agent, peer);
        p.last_event = op.as_str();
        p.ok = failure.is_none();
        p.reason = failure.map(|f| f.reason);
        p.error = failure.map(|f| f.message.clone());
        p.unix_seconds = unix_now();
        p.loaded = loaded;
        if op == PeerOp::Add && failure.is_none() {
            p.lost = false;
        }
    }

    /// Notifications sent or received, or a failed call.
    pub fn notified(&mut self, direction: NotifDirection, messages: u64, failure: Option<&Failure>) {
        self.observing = true;
        let n = &mut self.counts.notifications[notif_index(direction)];
        match failure {
            None => n[0] += messages,
            Some(_) => n[1] += 1,
        }
    }
}

/// The status entry of (agent, peer), moved to the end (most recent) and
/// created when new; the oldest is dropped past [`PEERS_KEPT`].
pub(super) fn peer_entry<'a>(s: &'a mut TransferStatus, agent: AgentId, peer: &str) -> &'a mut PeerStatus {
    let entry = match s.peers.iter().position(|p| p.agent == agent && p.name == peer) {
        Some(i) => s.peers.remove(i),
        None => PeerStatus {
            name: peer.to_string(),
            agent,
            last_event: "transfer",
            ok: true,
            reason: None,
            error: None,
            unix_seconds: 0.0,
            loaded: false,
            lost: false,
        },
    };
    s.peers.push(entry);
    if s.peers.len() > PEERS_KEPT {
        s.peers.remove(0);
    }
    s.peers.last_mut().expect("just pushed")
}
