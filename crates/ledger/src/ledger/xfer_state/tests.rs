//! The data path's rules, written once in the ledger: a transfer counted
//! once when it ends, a stall once, a release in flight once; bounded
//! tables; peers as last seen.

use super::Rows;
use super::*;
use crate::event::XferEnd;
use crate::model::{AgentId, Failure, NotifDirection, PeerOp, Reason, Transfer, XferOp, XferOutcome};
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
    let (mut t, mut s) = (Transfers::new(BOUNDS), Rows::default());
    let t0 = Instant::now();
    t.created(&request(1, XferOp::Write, 4096), Instant::now());
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
    let (mut t, mut s) = (Transfers::new(BOUNDS), Rows::default());
    let t0 = Instant::now();
    let stall = Duration::from_secs(30);
    t.created(&request(1, XferOp::Read, 1), Instant::now());
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
    let (mut t, mut s) = (Transfers::new(BOUNDS), Rows::default());
    let t0 = Instant::now();
    t.created(&request(1, XferOp::Write, 1), Instant::now());
    t.created(&request(2, XferOp::Write, 1), Instant::now());
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
    let (mut t, mut s) = (Transfers::new(BOUNDS), Rows::default());
    let t0 = Instant::now();
    t.peer(&mut s, A, PeerOp::Add, "decode-0", None);
    assert_eq!(t.counts.remote_agents, 1);
    t.created(&request(1, XferOp::Write, 1), Instant::now());
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
    t.created(&request(2, XferOp::Read, 1), Instant::now());
    t.posted(&mut s, 2, t0, None, false);
    t.agent_released(&mut s, A, t0);
    assert_eq!(t.counts.remote_agents, 0);
    assert_eq!(outcome(&t, XferOp::Read, XferOutcome::ReleasedInFlight), 1);
    assert!(!s.peers.last().unwrap().loaded);
}

#[test]
fn the_tables_are_bounded() {
    let (mut t, mut s) = (Transfers::new(BOUNDS), Rows::default());
    for h in 0..(REQUESTS_KEPT as u64 + 10) {
        t.created(&request(h, XferOp::Write, 1), Instant::now());
    }
    assert!(t.requests.len() <= REQUESTS_KEPT);
    for i in 0..(PEERS_KEPT + 5) {
        t.peer(&mut s, A, PeerOp::Connect, &format!("peer-{i}"), None);
    }
    assert_eq!(s.peers.len(), PEERS_KEPT);
    assert_eq!(s.peers.last().unwrap().name, format!("peer-{}", PEERS_KEPT + 4));
    let f = Failure::new(Reason::NixlNotFound, "nixlNotFoundError");
    for _ in 0..(RECENT_FAILURES_KEPT + 3) {
        t.create_failed(&mut s, A, XferOp::Write, "nobody", &f, None, Instant::now());
    }
    assert_eq!(s.recent_failures.len(), RECENT_FAILURES_KEPT);
    assert_eq!(
        outcome(&t, XferOp::Write, XferOutcome::Error),
        RECENT_FAILURES_KEPT as u64 + 3
    );
}

#[test]
fn a_refused_repost_is_a_failure_of_its_own_and_the_posting_in_flight_lives_on() {
    let (mut t, mut s) = (Transfers::new(BOUNDS), Rows::default());
    let t0 = Instant::now();
    t.created(&request(1, XferOp::Read, 100), t0);
    assert!(t.posted(&mut s, 1, t0, None, false));
    t.tick(t0 + Duration::from_secs(5), Duration::from_secs(1));
    assert_eq!(t.counts.ops[0].stalled_in_flight, 1);
    let refused = Failure::new(Reason::RepostActive, "nixlRepostActiveError: NIXL_ERR_REPOST_ACTIVE");
    let later = t0 + Duration::from_secs(6);
    assert!(t.posted(&mut s, 1, later, Some((later, XferEnd::Failed(&refused))), false));
    assert_eq!(t.counts.failures, vec![(XferOp::Read, Reason::RepostActive, 1)]);
    assert_eq!(outcome(&t, XferOp::Read, XferOutcome::Error), 1);
    assert_eq!(t.counts.ops[0].in_flight, 1, "the first posting is still in flight");
    assert_eq!(t.counts.ops[0].stalled_in_flight, 1);
    // Its DONE is counted, with its bytes, and nothing stays stalled.
    assert!(t.ended(&mut s, 1, later, XferEnd::Done, None, false, "status"));
    assert_eq!(outcome(&t, XferOp::Read, XferOutcome::Done), 1);
    assert_eq!(t.counts.ops[0].bytes, 100);
    assert_eq!((t.counts.ops[0].in_flight, t.counts.ops[0].stalled_in_flight), (0, 0));
}

#[test]
fn a_posting_ends_with_what_it_moved_when_its_handle_is_reused_for_another_op() {
    let (mut t, mut s) = (Transfers::new(BOUNDS), Rows::default());
    let t0 = Instant::now();
    t.created(&request(1, XferOp::Write, 64), t0);
    t.posted(&mut s, 1, t0, None, false);
    // The address comes back as a READ request before the write's end is seen.
    t.created(&request(1, XferOp::Read, 8), t0);
    assert!(t.ended(&mut s, 1, t0, XferEnd::Done, None, false, "status"));
    assert_eq!(outcome(&t, XferOp::Write, XferOutcome::Done), 1);
    assert_eq!(t.counts.ops[1].bytes, 64);
    assert_eq!((t.counts.ops[0].in_flight, t.counts.ops[1].in_flight), (0, 0));
    assert_eq!(outcome(&t, XferOp::Read, XferOutcome::Done), 0);
    // NIXL accepted a second posting: the first, never polled, completed.
    t.posted(&mut s, 1, t0, None, false);
    t.posted(&mut s, 1, t0, None, false);
    assert_eq!(outcome(&t, XferOp::Read, XferOutcome::Done), 1);
    assert_eq!(t.counts.ops[0].in_flight, 1);
}

#[test]
fn eviction_takes_the_least_recently_used_requests_and_keeps_those_in_flight() {
    let (mut t, mut s) = (Transfers::new(BOUNDS), Rows::default());
    let t0 = Instant::now();
    let n = REQUESTS_KEPT as u64;
    for h in 0..n {
        t.created(&request(h, XferOp::Write, 1), t0);
    }
    // 0 is in flight, 1 was posted (used) last; n - 1 was created last.
    t.posted(&mut s, 0, t0, None, false);
    t.posted(&mut s, 1, t0, Some((t0, XferEnd::Done)), false);
    t.created(&request(n, XferOp::Write, 1), t0);
    assert!(t.requests.len() < REQUESTS_KEPT);
    for kept in [0, 1, n - 1, n] {
        assert!(t.holds(kept), "request {kept} was evicted");
    }
    assert!(!t.holds(2) && !t.holds(3), "the oldest unused go first");
    let evicted = (2..n).filter(|h| !t.holds(*h)).count();
    assert_eq!(evicted, REQUESTS_KEPT / 16);
    assert!((2..2 + evicted as u64).all(|h| !t.holds(h)), "exactly the oldest");
}

#[test]
fn a_stale_handle_is_peer_invalidated_and_a_peer_never_added_is_not_found() {
    let (mut t, mut s) = (Transfers::new(BOUNDS), Rows::default());
    // NIXL 1.5.1's words, on stderr; the exception says NIXL_ERR_NOT_FOUND.
    let not_found = Failure::new(Reason::NixlNotFound, "nixlNotFoundError: NIXL_ERR_NOT_FOUND");
    let t0 = Instant::now();
    t.peer(&mut s, A, PeerOp::Add, "decode-0", None);
    t.created(&request(1, XferOp::Write, 1), t0);
    let prepared = Instant::now();
    t.peer(&mut s, A, PeerOp::Remove, "decode-0", None);
    t.peer(&mut s, A, PeerOp::Add, "decode-0", None);
    assert!(s.peers.last().unwrap().invalidated_unix_seconds.is_some());
    let at = Instant::now();
    t.posted(&mut s, 1, at, Some((at, XferEnd::Failed(&not_found))), false);
    t.create_failed(&mut s, A, XferOp::Read, "decode-0", &not_found, Some(prepared), at);
    assert_eq!(
        t.counts.failures,
        vec![
            (XferOp::Write, Reason::PeerInvalidated, 1),
            (XferOp::Read, Reason::PeerInvalidated, 1)
        ]
    );
    // Made after the reload: not stale. Never added: not found.
    t.created(&request(2, XferOp::Write, 1), Instant::now());
    let at = Instant::now();
    t.posted(&mut s, 2, at, Some((at, XferEnd::Failed(&not_found))), false);
    t.create_failed(&mut s, A, XferOp::Write, "nobody", &not_found, Some(t0), at);
    t.create_failed(&mut s, A, XferOp::Write, "decode-0", &not_found, None, at);
    assert_eq!(t.counts.failures[2], (XferOp::Write, Reason::NixlNotFound, 3));
    let p = s.peers.iter().find(|p| p.name == "decode-0").unwrap();
    assert_eq!(p.failures.len(), 2, "{:?}", p.failures);
    assert_eq!(p.failures[0].reason, Reason::PeerInvalidated);
    assert_eq!(p.failures[0].count, 2);
}

#[test]
fn each_peer_has_its_transfers_bytes_failures_last_failure_and_heartbeats() {
    let (mut t, mut s) = (Transfers::new(BOUNDS), Rows::default());
    let t0 = Instant::now();
    t.created(&request(1, XferOp::Read, 65536), t0);
    t.posted(&mut s, 1, t0, None, false);
    let lost = Failure::new(Reason::PeerLost, "nixlRemoteDisconnectError");
    t.ended(&mut s, 1, t0, XferEnd::Failed(&lost), None, false, "status");
    for _ in 0..2 {
        t.posted(&mut s, 1, t0, Some((t0, XferEnd::Done)), false);
    }
    t.notified(&mut s, A, NotifDirection::Send, "decode-0", 3, 2, None);
    t.notified(&mut s, A, NotifDirection::Receive, "decode-0", 1, 0, None);
    let p = s.peers.last().unwrap();
    assert_eq!((p.done, p.failed, p.bytes), (2, 1, 2 * 65536));
    assert!(p.ok, "the last transfer succeeded");
    let last = p.last_failure.as_ref().unwrap();
    assert_eq!(
        (last.reason, last.error.as_str()),
        (Reason::PeerLost, "nixlRemoteDisconnectError")
    );
    assert_eq!((p.notifications_sent, p.heartbeats_sent), (3, 2));
    assert_eq!((p.notifications_received, p.heartbeats_received), (1, 0));
    let status = t.status();
    assert_eq!((status.heartbeats_sent, status.notifications_sent), (2, 3));
}

#[test]
fn a_peers_transports_are_looked_for_once_and_shown_per_op() {
    use crate::model::{Transport, TransportScope};
    let (mut t, mut s) = (Transfers::new(BOUNDS), Rows::default());
    t.created(&request(1, XferOp::Write, 1), Instant::now());
    let want = t.transport_wanted(1).unwrap();
    assert_eq!((want.peer.as_str(), want.op), ("decode-0", XferOp::Write));
    t.transport(
        &mut s,
        A,
        "decode-0",
        XferOp::Write,
        Some((TransportScope::IntraNode, &[Transport::Tcp])),
    );
    assert_eq!(t.transport_wanted(1), None, "once per peer and op");
    t.created(&request(2, XferOp::Read, 1), Instant::now());
    t.transport(&mut s, A, "decode-0", XferOp::Read, None);
    assert_eq!(t.transport_wanted(2), None, "looked and could not tell: not again");
    let series: Vec<_> = t.transport_series().into_iter().collect();
    assert_eq!(series, [(XferOp::Write, TransportScope::IntraNode, Transport::Tcp)]);
    let p = s.peers.last().unwrap();
    assert_eq!(p.transports.len(), 1);
    assert_eq!(p.transports[0].transports, [Transport::Tcp]);
    // The peer removed: its transfers take nothing now; loaded again, it
    // is looked at anew.
    t.peer(&mut s, A, PeerOp::Add, "decode-0", None);
    t.peer(&mut s, A, PeerOp::Remove, "decode-0", None);
    assert!(t.transport_series().is_empty());
    assert!(s.peers.last().unwrap().transports.is_empty());
    assert!(t.transport_wanted(1).is_some());
    t.transport(
        &mut s,
        A,
        "decode-0",
        XferOp::Write,
        Some((TransportScope::IntraNode, &[Transport::Cma])),
    );
    t.agent_released(&mut s, A, Instant::now());
    assert!(t.transport_series().is_empty());
}

#[test]
fn a_creation_refused_while_the_peer_is_awaited_is_no_failure() {
    let (mut t, s) = (Transfers::new(BOUNDS), Rows::default());
    t.create_pending(XferOp::Read);
    t.create_pending(XferOp::Read);
    assert_eq!(outcome(&t, XferOp::Read, XferOutcome::PeerPending), 2);
    assert_eq!(outcome(&t, XferOp::Read, XferOutcome::Error), 0);
    assert!(s.recent_failures.is_empty());
    assert!(t.counts.failures.is_empty(), "no failure by reason");
    assert!(t.traced.is_empty(), "nothing on the trace error path");
}

fn adds(t: &Transfers) -> u64 {
    t.counts.peer_events[peer_index(PeerOp::Add)][outcome_index(true)]
}

#[test]
fn a_peer_whose_metadata_arrived_unseen_is_added_once_when_nixl_first_shows_it() {
    use crate::event::{Event, Peer};
    let mut t = Transfers::new(BOUNDS);
    t.agent_named(A, "prefill");
    // NIXL's listener delivered decode-0's metadata: the first request to
    // it is the first sign, counted as its loading; the next is not.
    t.apply(&Event::XferCreated(&request(1, XferOp::Write, 64)));
    assert_eq!(adds(&t), 1);
    t.apply(&Event::XferCreated(&request(2, XferOp::Write, 64)));
    assert_eq!(adds(&t), 1, "once per arrival");
    // check_remote_metadata finding a peer nobody loaded: arrived too.
    let check = |peer| {
        Event::Peer(Peer {
            agent: A,
            op: PeerOp::Check,
            peer,
            failure: None,
        })
    };
    t.apply(&check("decode-1"));
    t.apply(&check("decode-1"));
    assert_eq!(adds(&t), 2);
    assert_eq!(t.counts.peer_events[peer_index(PeerOp::Check)][outcome_index(true)], 2);
    // Removed, then back through the listener: a second arrival.
    t.apply(&Event::Peer(Peer {
        agent: A,
        op: PeerOp::Remove,
        peer: "decode-0",
        failure: None,
    }));
    t.apply(&Event::XferCreated(&request(3, XferOp::Write, 64)));
    assert_eq!(adds(&t), 3);
    // A request to the agent itself is no peer arriving.
    let own = Transfer {
        peer: "prefill",
        ..request(4, XferOp::Read, 64)
    };
    t.apply(&Event::XferCreated(&own));
    assert_eq!(adds(&t), 3);
    // A peer loaded by the program is not counted again by its requests.
    t.apply(&Event::Peer(Peer {
        agent: A,
        op: PeerOp::Add,
        peer: "decode-2",
        failure: None,
    }));
    let to2 = Transfer {
        peer: "decode-2",
        ..request(5, XferOp::Read, 64)
    };
    t.apply(&Event::XferCreated(&to2));
    assert_eq!(adds(&t), 4);
}
