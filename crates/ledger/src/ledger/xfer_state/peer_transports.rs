//! Which transports each peer's transfers take (`NIXL_AGENT_TRANSPORTS=1`):
//! per (local agent, peer, op), the scope and transports UCX reported for
//! the first transfer, bounded and evicted by age. The
//! `nixl_agent_transfer_transport` gauge and each peer's `transports` in
//! /v1/status are read from here.

use super::peers::peer_entry;
use super::Rows;
use super::Transfers;
use crate::ledger::counts::unix_now;
use crate::model::{AgentId, MemType, Transport, TransportScope, XferOp};
use crate::status::PeerTransport;
use std::collections::{BTreeSet, HashSet};
use std::sync::Arc;

/// (agent, peer, op) pairs remembered: the gauge is bounded by the closed
/// label values whatever this holds; this bounds the memory.
pub const PEER_TRANSPORTS_KEPT: usize = 256;

struct Seen {
    agent: AgentId,
    peer: Arc<str>,
    op: XferOp,
    /// `None`: looked at its first transfer and could not tell.
    transport: Option<(TransportScope, Vec<Transport>)>,
}

/// What was seen, oldest first, and the (agent, op, peer) looked at: a
/// post asks the set, not the list.
#[derive(Default)]
pub(super) struct PeerTransports(Vec<Seen>, HashSet<(AgentId, XferOp, Arc<str>)>);

impl PeerTransports {
    pub(super) fn agent_released(&mut self, agent: AgentId) {
        self.0.retain(|s| s.agent != agent);
        self.1.retain(|k| k.0 != agent);
    }

    /// `peer` was removed from `agent`: its transfers take nothing now, and
    /// a peer loaded again under that name is looked at anew.
    pub(super) fn peer_removed(&mut self, agent: AgentId, peer: &str) {
        self.0.retain(|s| !(s.agent == agent && &*s.peer == peer));
        self.1.retain(|k| !(k.0 == agent && &*k.2 == peer));
    }
}

/// What the first posting of a request to a peer needs to find its
/// transports: whose agent, which peer and op, and the memory types.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransportWanted {
    pub agent: AgentId,
    pub peer: String,
    pub op: XferOp,
    pub mem: (Option<MemType>, Option<MemType>),
}

impl Transfers {
    /// For the request `handle`: what to look for when nobody looked at its
    /// peer's transports for its op yet.
    pub fn transport_wanted(&self, handle: u64) -> Option<TransportWanted> {
        let r = self.requests.get(&handle)?;
        let m = &r.moves;
        if m.peer.is_empty() {
            return None;
        }
        let seen = self.transports.1.contains(&(m.agent, m.op, m.peer.clone()));
        (!seen).then(|| TransportWanted {
            agent: m.agent,
            peer: m.peer.to_string(),
            op: m.op,
            mem: m.mem,
        })
    }

    /// What UCX reported for `op` transfers between `agent` and `peer`.
    pub fn transport(
        &mut self,
        s: &mut Rows,
        agent: AgentId,
        peer: &str,
        op: XferOp,
        transport: Option<(TransportScope, &[Transport])>,
    ) {
        self.observing = true;
        let peer_name = self.intern(agent, peer);
        let (t, keys) = (&mut self.transports.0, &mut self.transports.1);
        t.retain(|x| !(x.agent == agent && x.op == op && &*x.peer == peer));
        if t.len() >= PEER_TRANSPORTS_KEPT {
            let old = t.remove(0);
            keys.remove(&(old.agent, old.op, old.peer));
        }
        keys.insert((agent, op, peer_name.clone()));
        t.push(Seen {
            agent,
            peer: peer_name,
            op,
            transport: transport.map(|(scope, ts)| (scope, ts.to_vec())),
        });
        if let Some((scope, ts)) = transport {
            let p = peer_entry(s, agent, peer);
            p.unix_seconds = unix_now();
            p.transports.retain(|x| x.op != op);
            p.transports.push(PeerTransport {
                op,
                scope,
                transports: ts.to_vec(),
            });
        }
    }

    /// The (op, scope, transport) triples some remembered peer's transfers
    /// take: the gauge's series.
    pub fn transport_series(&self) -> BTreeSet<(XferOp, TransportScope, Transport)> {
        let mut out = BTreeSet::new();
        for s in &self.transports.0 {
            if let Some((scope, ts)) = &s.transport {
                for t in ts {
                    out.insert((s.op, *scope, *t));
                }
            }
        }
        out
    }
}
