//! The data path's rules, written once in the ledger: a transfer counted
//! once when it ends, a stall once, a release in flight once; bounded
//! tables; peers as last seen.

use super::*;
use crate::event::XferEnd;
use crate::model::{AgentId, Failure, PeerOp, Reason, Transfer, XferOp, XferOutcome};
use crate::status::TransferStatus;
use std::time::{Duration, Instant};

const BOUNDS: &[f64] = &[0.001, 1.0];
const A: AgentId = AgentId(7);

fn request(handle: u64, op: XferOp, bytes: u64) -> Transfer<'static> {
    Transfer {
        agent: A,
        handle,
        op,
        descriptors: 1,
        bytes,
        local: None,
        remote: None,
        backend: Some("UCX"),
        peer: "decode-0",
    }
}

fn outcome(t: &Transfers, op: XferOp, o: XferOutcome) -> u64 {
    t.counts.ops[op.index()].outcomes[o.index()]
}

#[test]
fn a_transfer_is_counted_once_when_it_ends() {
    let (mut t, mut s) = (Transfers::new(BOUNDS), TransferStatus::default());
    let t0 = Instant::now();
    t.created(&request(1, XferOp::Write, 4096));
    assert!(t.posted(&mut s, 1, t0, None, false));
    assert_eq!(t.counts.ops[1].in_flight, 1);
    assert!(t.ended(
        &mut s,
        1,
        t0 + Duration::from_micros(500),
        XferEnd::Done,
        None,
        false,
        "status"
    ));
    // A second DONE poll of the same posting is not another transfer.
    assert!(!t.ended(
        &mut s,
        1,
        t0 + Duration::from_millis(3),
        XferEnd::Done,
        None,
        false,
        "status"
    ));
    assert_eq!(outcome(&t, XferOp::Write, XferOutcome::Done), 1);
    assert_eq!(t.counts.ops[1].bytes, 4096);
    assert_eq!(t.counts.ops[1].duration.count, 1);
    assert_eq!(t.counts.ops[1].in_flight, 0);
    // A success that was not sampled is not traced.
    assert!(t.traced.is_empty());
    // Reposted, it is a transfer again; NIXL's own measure wins.
    assert!(t.posted(&mut s, 1, t0, None, false));
    t.ended(
        &mut s,
        1,
        t0 + Duration::from_secs(5),
        XferEnd::Done,
        Some(Duration::from_micros(10)),
        true,
        "status",
    );
    assert_eq!(outcome(&t, XferOp::Write, XferOutcome::Done), 2);
    assert_eq!(t.counts.ops[1].duration.counts[0], 2, "both under a millisecond");
    assert_eq!(t.traced.len(), 1, "a sampled success is traced");
    // A poll of a request the recording never saw changes nothing.
    assert!(!t.posted(&mut s, 99, t0, None, false));
}

#[test]
fn a_stall_is_counted_once_and_traced_and_its_end_says_it_stalled() {
    let (mut t, mut s) = (Transfers::new(BOUNDS), TransferStatus::default());
    let t0 = Instant::now();
    let stall = Duration::from_secs(30);
    t.created(&request(1, XferOp::Read, 1));
    t.posted(&mut s, 1, t0, None, false);
    t.tick(t0 + Duration::from_secs(10), stall);
    assert_eq!(t.counts.ops[0].stalled, 0);
    assert_eq!(t.counts.ops[0].oldest_seconds, 10.0);
    for secs in [31, 32, 40, 100] {
        t.tick(t0 + Duration::from_secs(secs), stall);
    }
    assert_eq!(t.counts.ops[0].stalled, 1, "counted once");
    assert_eq!(t.counts.ops[0].stalled_in_flight, 1);
    assert_eq!(t.counts.ops[0].oldest_seconds, 100.0);
    let traced: Vec<_> = t.traced.drain(..).collect();
    assert_eq!(traced.len(), 1);
    assert!(traced[0].stalled && traced[0].outcome.is_none());
    t.ended(
        &mut s,
        1,
        t0 + Duration::from_secs(101),
        XferEnd::Done,
        None,
        false,
        "status",
    );
    assert_eq!(t.counts.ops[0].stalled_in_flight, 0);
    assert_eq!(t.counts.ops[0].oldest_seconds, 0.0);
    assert_eq!(outcome(&t, XferOp::Read, XferOutcome::Done), 1);
    assert!(t.traced[0].stalled, "the end of a stalled transfer is traced");
}

#[test]
fn a_release_in_flight_counts_once_and_a_release_after_the_end_not_at_all() {
    let (mut t, mut s) = (Transfers::new(BOUNDS), TransferStatus::default());
    let t0 = Instant::now();
    t.created(&request(1, XferOp::Write, 1));
    t.created(&request(2, XferOp::Write, 1));
    t.posted(&mut s, 1, t0, None, false);
    t.posted(&mut s, 2, t0, Some((t0, XferEnd::Done)), false);
    t.released(&mut s, 1, t0);
    t.released(&mut s, 2, t0);
    t.released(&mut s, 1, t0);
    assert_eq!(outcome(&t, XferOp::Write, XferOutcome::ReleasedInFlight), 1);
    assert_eq!(outcome(&t, XferOp::Write, XferOutcome::Done), 1);
    assert_eq!(t.in_flight(), 0);
}

#[test]
fn a_lost_peer_is_counted_named_and_cleared_when_it_is_added_again() {
    let (mut t, mut s) = (Transfers::new(BOUNDS), TransferStatus::default());
    let t0 = Instant::now();
    t.peer(&mut s, A, PeerOp::Add, "decode-0", None);
    assert_eq!(t.counts.remote_agents, 1);
    t.created(&request(1, XferOp::Write, 1));
    t.posted(&mut s, 1, t0, None, false);
    let lost = Failure::new(
        Reason::PeerLost,
        "nixlRemoteDisconnectError: NIXL_ERR_REMOTE_DISCONNECT",
    );
    t.ended(&mut s, 1, t0, XferEnd::Failed(&lost), None, false, "status");
    assert_eq!(t.counts.peers_lost, 1);
    assert_eq!(t.counts.failures, vec![(XferOp::Write, Reason::PeerLost, 1)]);
    let p = s.peers.last().unwrap();
    assert_eq!(
        (p.name.as_str(), p.last_event, p.lost, p.loaded),
        ("decode-0", "lost", true, true)
    );
    assert_eq!(s.recent_failures[0].stage, "status");
    t.peer(&mut s, A, PeerOp::Remove, "decode-0", None);
    assert_eq!(t.counts.remote_agents, 0);
    t.peer(&mut s, A, PeerOp::Add, "decode-0", None);
    let p = s.peers.last().unwrap();
    assert!(!p.lost && p.loaded && p.ok);
    assert_eq!(s.peers.len(), 1, "one entry per (agent, peer)");
    // The agent goes: its remote agents and requests with it.
    t.created(&request(2, XferOp::Read, 1));
    t.posted(&mut s, 2, t0, None, false);
    t.agent_released(&mut s, A, t0);
    assert_eq!(t.counts.remote_agents, 0);
    assert_eq!(outcome(&t, XferOp::Read, XferOutcome::ReleasedInFlight), 1);
    assert!(!s.peers.last().unwrap().loaded);
}

#[test]
fn the_tables_are_bounded() {
    let (mut t, mut s) = (Transfers::new(BOUNDS), TransferStatus::default());
    for h in 0..(REQUESTS_KEPT as u64 + 10) {
        t.created(&request(h, XferOp::Write, 1));
    }
    assert!(t.requests.len() <= REQUESTS_KEPT);
    for i in 0..(PEERS_KEPT + 5) {
        t.peer(&mut s, A, PeerOp::Connect, &format!("peer-{i}"), None);
    }
    assert_eq!(s.peers.len(), PEERS_KEPT);
    assert_eq!(s.peers.last().unwrap().name, format!("peer-{}", PEERS_KEPT + 4));
    let f = Failure::new(Reason::NixlNotFound, "nixlNotFoundError");
    for _ in 0..(RECENT_FAILURES_KEPT + 3) {
        t.create_failed(&mut s, A, XferOp::Write, "nobody", &f, Instant::now());
    }
    assert_eq!(s.recent_failures.len(), RECENT_FAILURES_KEPT);
    assert_eq!(
        outcome(&t, XferOp::Write, XferOutcome::Error),
        RECENT_FAILURES_KEPT as u64 + 3
    );
}
