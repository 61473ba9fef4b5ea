//! Which transport a peer's transfers take (`NIXL_AGENT_TRANSPORTS=1`):
//! UCX prints a protocol table (`UCX_PROTO_INFO=y`) when an endpoint
//! first moves a kind of data; the output tap keeps those tables off the
//! program's stdout, and after the first posting of a request to a peer
//! for an op this module reads them (`diagnose::proto`, the parser `check`
//! uses) into the scope and transports of that peer's op, recorded once.
//! Later postings to the same peer and op cost one ledger lookup.
//!
//! UCX prints a table per endpoint *configuration*: a second peer whose
//! endpoint is configured like an earlier one's prints none. Its transports
//! are then those of the tables already seen for this agent, op and memory
//! types when they all agree, and unknown (not recorded) when they differ.
//! A worker's endpoint to itself (scope `self`) is never another peer's.

use super::Observer;
use crate::diagnose::proto::{self, ProtoTable};
use crate::event::Event;
use crate::ledger::TransportWanted;
use crate::model::{MemType, Transport, TransportScope, XferOp};
use crate::record::Capture;
use std::sync::{Mutex, OnceLock};

/// Tables remembered for peers that print none of their own.
const TABLES_KEPT: usize = 64;

/// The tap that keeps UCX's tables, and the tables read so far.
#[derive(Default)]
pub(super) struct Learned {
    tap: OnceLock<Box<dyn Capture + Send + Sync>>,
    tables: Mutex<Vec<ProtoTable>>,
}

impl Observer {
    /// Reads UCX's protocol tables from `tap` (told to keep them) to learn
    /// which transports each peer's transfers take. The first one set stays.
    pub fn with_protocol_tables(self, tap: Box<dyn Capture + Send + Sync>) -> Observer {
        let _ = self.0.transports.tap.set(tap);
        self
    }

    /// Whether transports are learned ([`Observer::with_protocol_tables`]).
    pub fn learns_transports(&self) -> bool {
        self.0.transports.tap.get().is_some()
    }

    /// Whether nobody looked yet at the transports of `handle`'s peer for
    /// its op (then [`Observer::transport_after_post`] has work to do): one
    /// ledger lookup, for a front-end to decide whether to release its
    /// interpreter lock at all.
    pub fn wants_transport(&self, handle: u64) -> bool {
        self.learns_transports() && self.0.rec.ledger().transport_wanted(handle).is_some()
    }

    /// After `handle` was posted (and NIXL did not refuse it): on the first
    /// posting of a request to its peer for its op, waits (at most 200 ms)
    /// for what UCX printed to be copied, and records the transports the
    /// tables name. A front-end holding an interpreter lock calls this
    /// without it. Nothing happens when transports are not learned.
    pub fn transport_after_post(&self, handle: u64) {
        let Some(tap) = self.0.transports.tap.get() else { return };
        let Some(want) = self.0.rec.ledger().transport_wanted(handle) else {
            return;
        };
        let lines = tap.protocol_tables();
        let worker = self
            .status()
            .agents
            .iter()
            .find(|a| a.id == want.agent)
            .map(|a| a.name.clone())
            .unwrap_or_default();
        let found = {
            let mut known = self.0.transports.tables.lock().unwrap_or_else(|e| e.into_inner());
            let fresh = proto::parse(&lines);
            let found = pick(&fresh, &worker, &want).or_else(|| pick(&known, &worker, &want));
            known.extend(fresh);
            let excess = known.len().saturating_sub(TABLES_KEPT);
            known.drain(..excess);
            found
        };
        self.0.rec.emit(&Event::XferTransport {
            agent: want.agent,
            peer: &want.peer,
            op: want.op,
            transport: found.as_ref().map(|(s, t)| (*s, t.as_slice())),
        });
    }
}

/// UCX's operation words for a transfer: a WRITE is a put, a READ a get.
fn ucx_op(op: XferOp) -> &'static str {
    match op {
        XferOp::Write => "put",
        XferOp::Read => "get",
    }
}

fn ucx_mem(m: Option<MemType>) -> &'static str {
    proto::ucx_mem(m == Some(MemType::Vram))
}

/// The one (scope, transports) the tables of `worker` name for `want`'s op
/// and memory types; `None` when none does or they disagree.
fn pick(tables: &[ProtoTable], worker: &str, want: &TransportWanted) -> Option<(TransportScope, Vec<Transport>)> {
    let (local, remote) = (ucx_mem(want.mem.0), ucx_mem(want.mem.1));
    let mut found: Option<(TransportScope, Vec<Transport>)> = None;
    // Each agent's worker has an endpoint to itself (scope "self"): a
    // peer's transfers take it only when the peer is the agent itself.
    let own = want.peer == worker;
    for t in tables
        .iter()
        .filter(|t| t.worker == worker && t.is(ucx_op(want.op), local, remote))
    {
        let scope = TransportScope::parse(&t.scope)?;
        if (scope == TransportScope::Local) != own {
            continue;
        }
        let mut transports: Vec<Transport> = Vec::new();
        for name in t.transports() {
            let tr = Transport::of_ucx(&name);
            if !transports.contains(&tr) {
                transports.push(tr);
            }
        }
        match &found {
            Some(f) if *f != (scope, transports.clone()) => return None,
            _ => found = Some((scope, transports)),
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::AgentId;

    fn table(worker: &str, scope: &str, op: &str, lane: &str) -> Vec<String> {
        [
            "+--------+-------------+-----------------------------------+".to_string(),
            format!("| {worker} {scope} cfg#1 |"),
            format!("| remote memory {op} from host memory to host |"),
            "+--------+-------------+-----------------------------------+".to_string(),
            "| Range  | Description |              Config               |".to_string(),
            "+--------+-------------+-----------------------------------+".to_string(),
            format!("| 0..inf | zero-copy   | {lane} |"),
            "+--------+-------------+-----------------------------------+".to_string(),
        ]
        .into_iter()
        .map(|l| format!("[1796185907.212271] [vm:4013 :0]   {l}"))
        .collect()
    }

    fn want(op: XferOp) -> TransportWanted {
        TransportWanted {
            agent: AgentId(1),
            peer: "p".into(),
            op,
            mem: (Some(MemType::Dram), Some(MemType::Dram)),
        }
    }

    #[test]
    fn the_table_of_the_agents_worker_and_op_names_the_transport() {
        let mut lines = table("decode", "intra-node", "write by ucp_put*", "tcp/lo");
        lines.extend(table("other", "intra-node", "write by ucp_put*", "cma/memory"));
        lines.extend(table("decode", "inter-node", "read by ucp_get*", "rc_mlx5/mlx5_0:1"));
        let t = proto::parse(&lines);
        assert_eq!(
            pick(&t, "decode", &want(XferOp::Write)),
            Some((TransportScope::IntraNode, vec![Transport::Tcp]))
        );
        // A read's table says "into host memory from host".
        let mut read = table("decode", "inter-node", "read by ucp_get*", "rc_mlx5/mlx5_0:1");
        read[2] =
            "[1796185907.212271] [vm:4013 :0]   | remote memory read by ucp_get* into host memory from host |".into();
        assert_eq!(
            pick(&proto::parse(&read), "decode", &want(XferOp::Read)),
            Some((TransportScope::InterNode, vec![Transport::RcMlx5]))
        );
        assert_eq!(pick(&t, "nobody", &want(XferOp::Write)), None);
        // The agent's endpoint to itself is not a peer's.
        let mut own = table("decode", "self", "write by ucp_put*", "cma/memory");
        own.extend(table("decode", "intra-node", "write by ucp_put*", "cma/memory"));
        assert_eq!(
            pick(&proto::parse(&own), "decode", &want(XferOp::Write)),
            Some((TransportScope::IntraNode, vec![Transport::Cma]))
        );
        // Two configurations that disagree: unknown, never a guess.
        let mut two = table("decode", "intra-node", "write by ucp_put*", "tcp/lo");
        two.extend(table("decode", "inter-node", "write by ucp_put*", "rc_mlx5/mlx5_0:1"));
        assert_eq!(pick(&proto::parse(&two), "decode", &want(XferOp::Write)), None);
    }
}
