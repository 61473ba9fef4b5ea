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
//!
//! Several threads may post first to several peers at once: taking the
//! tables UCX printed, reading them and remembering them is one step under
//! one lock, so a thread that takes another's table leaves it among the
//! remembered ones before that other thread looks. A look that finds
//! nothing is tried again at the next posts to that peer for that op (up
//! to [`LOOKS`]) before the transports are recorded as unknown.

use super::Observer;
use crate::diagnose::proto::{self, ProtoTable};
use crate::event::Event;
use crate::ledger::TransportWanted;
use crate::model::{MemType, Transport, TransportScope, XferOp};
use crate::record::Capture;
use std::sync::{Mutex, OnceLock};

/// Tables remembered for peers that print none of their own.
const TABLES_KEPT: usize = 64;
/// Posts to a peer for an op whose look finds nothing before its
/// transports are recorded as unknown.
pub const LOOKS: u8 = 4;
/// (agent, peer, op) whose looks found nothing yet, remembered at most.
const MISSES_KEPT: usize = 256;

/// The tap that keeps UCX's tables, and the tables read so far.
#[derive(Default)]
pub(super) struct Learned {
    tap: OnceLock<Box<dyn Capture + Send + Sync>>,
    tables: Mutex<Tables>,
}

#[derive(Default)]
struct Tables {
    /// The tables read so far, the last [`TABLES_KEPT`].
    known: Vec<ProtoTable>,
    /// Looks that found nothing, per (agent, peer, op).
    misses: Vec<((crate::model::AgentId, String, XferOp), u8)>,
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
        let worker = self
            .status()
            .agents
            .iter()
            .find(|a| a.id == want.agent)
            .map(|a| a.name.clone())
            .unwrap_or_default();
        let found = {
            // Held while the tables are taken: what this thread takes of
            // another's is remembered before that one looks.
            let mut t = self.0.transports.tables.lock().unwrap_or_else(|e| e.into_inner());
            let fresh = proto::parse(&tap.protocol_tables());
            let found = pick(&fresh, &worker, &want).or_else(|| pick(&t.known, &worker, &want));
            t.known.extend(fresh);
            let excess = t.known.len().saturating_sub(TABLES_KEPT);
            t.known.drain(..excess);
            let key = (want.agent, want.peer.clone(), want.op);
            let at = t.misses.iter().position(|(k, _)| *k == key);
            match (&found, at) {
                (Some(_), Some(i)) => {
                    t.misses.remove(i);
                }
                (Some(_), None) => {}
                (None, Some(i)) if t.misses[i].1 + 1 < LOOKS => {
                    t.misses[i].1 += 1;
                    return;
                }
                (None, Some(i)) => {
                    t.misses.remove(i);
                }
                (None, None) => {
                    if t.misses.len() >= MISSES_KEPT {
                        t.misses.remove(0);
                    }
                    t.misses.push((key, 1));
                    return;
                }
            }
            found
        };
        self.0.rec.emit(&Event::XferTransport(crate::event::XferTransport {
            agent: want.agent,
            peer: &want.peer,
            op: want.op,
            transport: found.as_ref().map(|(s, t)| (*s, t.as_slice())),
        }));
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

    /// A tap whose first taker takes every table printed so far, and
    /// returns them only after a second taker came (who finds none left) or
    /// 300 ms passed: two threads whose first posts ran at once.
    struct Racing {
        lines: Mutex<Vec<String>>,
        takers: Mutex<u32>,
        cv: std::sync::Condvar,
    }

    impl Capture for Racing {
        fn begin(&self) {}
        fn end(&self, _: bool) -> Vec<String> {
            Vec::new()
        }
        fn protocol_tables(&self) -> Vec<String> {
            let taken = std::mem::take(&mut *self.lines.lock().unwrap());
            let mut n = self.takers.lock().unwrap();
            *n += 1;
            self.cv.notify_all();
            if *n == 1 {
                let t0 = std::time::Instant::now();
                while *n < 2 && t0.elapsed() < std::time::Duration::from_millis(300) {
                    n = self.cv.wait_timeout(n, std::time::Duration::from_millis(10)).unwrap().0;
                }
                drop(n);
                // The other look, if it ran meanwhile, has ended by now.
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
            taken
        }
    }

    fn posted(o: &Observer, agent: AgentId, handle: u64, peer: &str) {
        o.transfer_created(&crate::model::Transfer {
            agent,
            handle,
            op: XferOp::Write,
            descriptors: 1,
            bytes: 4096,
            local: Some(MemType::Dram),
            remote: Some(MemType::Dram),
            backend: Some("UCX"),
            peer,
        });
    }

    fn transports_of(o: &Observer, peer: &str) -> Vec<Transport> {
        let s = o.status();
        s.transfers
            .peers
            .iter()
            .find(|p| p.name == peer)
            .and_then(|p| p.transports.first())
            .map(|t| t.transports.clone())
            .unwrap_or_default()
    }

    /// Two threads post first to two peers at once; one takes the table
    /// UCX printed for both (one endpoint configuration): the other still
    /// finds it, and neither peer is left unknown.
    #[test]
    fn concurrent_first_posts_do_not_steal_each_others_tables() {
        let tap = Racing {
            lines: Mutex::new(table("decode", "intra-node", "write by ucp_put*", "tcp/lo")),
            takers: Mutex::new(0),
            cv: std::sync::Condvar::new(),
        };
        let o = Observer::new(Default::default()).with_protocol_tables(Box::new(tap));
        let agent = AgentId::fresh();
        o.saw_agent(agent, "decode", Vec::new);
        posted(&o, agent, 1, "pa");
        posted(&o, agent, 2, "pb");
        assert!(o.wants_transport(1) && o.wants_transport(2));
        std::thread::scope(|s| {
            s.spawn(|| o.transport_after_post(1));
            std::thread::sleep(std::time::Duration::from_millis(20));
            s.spawn(|| o.transport_after_post(2));
        });
        assert_eq!(transports_of(&o, "pa"), [Transport::Tcp]);
        assert_eq!(
            transports_of(&o, "pb"),
            [Transport::Tcp],
            "the second look found the table the first took"
        );
    }

    /// A look that finds no table (UCX printed it later) is not the last:
    /// the next posts look again, and only after [`LOOKS`] of them are the
    /// transports recorded as unknown.
    #[test]
    fn a_look_that_finds_nothing_is_tried_again() {
        struct Late(Mutex<Vec<Vec<String>>>);
        impl Capture for Late {
            fn begin(&self) {}
            fn end(&self, _: bool) -> Vec<String> {
                Vec::new()
            }
            fn protocol_tables(&self) -> Vec<String> {
                self.0.lock().unwrap().pop().unwrap_or_default()
            }
        }
        let late = vec![table("decode", "intra-node", "write by ucp_put*", "tcp/lo"), Vec::new()];
        let o = Observer::new(Default::default()).with_protocol_tables(Box::new(Late(Mutex::new(late))));
        let agent = AgentId::fresh();
        o.saw_agent(agent, "decode", Vec::new);
        posted(&o, agent, 1, "pa");
        o.transport_after_post(1);
        assert!(o.wants_transport(1), "one look found nothing: looked again");
        o.transport_after_post(1);
        assert!(!o.wants_transport(1));
        assert_eq!(transports_of(&o, "pa"), [Transport::Tcp]);
        // Nothing ever printed for another agent's worker: unknown after
        // LOOKS posts, then no more looks.
        let other = AgentId::fresh();
        o.saw_agent(other, "prefill", Vec::new);
        posted(&o, other, 2, "pb");
        for _ in 0..LOOKS {
            assert!(o.wants_transport(2));
            o.transport_after_post(2);
        }
        assert!(!o.wants_transport(2));
        assert!(transports_of(&o, "pb").is_empty());
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
