//! Postings recorded off the ledger's lock (`Recorder::posted_quietly`):
//! every reader sees them, and a thread's later event is applied after
//! them.

use super::*;
use crate::model::{AgentId, Transfer, XferOp};
use crate::telemetry::exposition::Format;

fn recorder() -> Recorder {
    Recorder::new(&BuildInfo::current(None), NixlStatus::default(), Instant::now())
}

fn create(rec: &Recorder, handle: u64) {
    rec.emit(&Event::XferCreated(&Transfer {
        agent: AgentId(3),
        handle,
        op: XferOp::Write,
        descriptors: 1,
        bytes: 4096,
        local: None,
        remote: None,
        backend: Some("UCX"),
        peer: "decode-0",
    }));
}

fn write_ops(rec: &Recorder) -> crate::status::XferOpStatus {
    let st = rec.ledger().snapshot();
    st.transfers
        .ops
        .iter()
        .find(|o| o.op == XferOp::Write)
        .cloned()
        .expect("the write row is shown")
}

#[test]
fn a_deferred_posting_is_in_the_snapshot_the_exposition_and_the_generation() {
    let rec = recorder();
    create(&rec, 1);
    let before = rec.ledger().snapshot();
    let now = rec.nanos(Instant::now()).unwrap();
    for i in 0..3 {
        let at = now + i * 10_000;
        assert!(rec.posted_quietly(1, at, Some(at + 2_000)));
    }
    // Nothing else happened: the cached snapshot is not served.
    let after = rec.ledger().snapshot();
    assert!(after.generation > before.generation);
    let w = write_ops(&rec);
    assert_eq!((w.done, w.bytes, w.in_flight), (3, 3 * 4096, 0));
    let text = String::from_utf8(rec.metrics().exposition(Format::Text).to_vec()).unwrap();
    let line = text
        .lines()
        .find(|l| l.starts_with("nixl_agent_transfers_total") && l.contains("outcome=\"done\"") && l.contains("write"))
        .unwrap_or_else(|| panic!("no done writes in\n{text}"));
    assert!(line.ends_with(" 3"), "{line}");
    let peers = &rec.ledger().snapshot().transfers.peers;
    assert_eq!(peers.iter().map(|p| p.done).sum::<u64>(), 3);
}

#[test]
fn a_posting_in_flight_then_released_is_released_in_flight_not_lost() {
    let rec = recorder();
    create(&rec, 7);
    let at = rec.nanos(Instant::now()).unwrap();
    assert!(rec.posted_quietly(7, at, None));
    // The watchdog's question sees the flight.
    assert_eq!(rec.ledger().transfers_in_flight(), 1);
    rec.emit(&Event::XferReleased(crate::event::XferReleased {
        handle: 7,
        at: Instant::now(),
    }));
    let w = write_ops(&rec);
    assert_eq!((w.in_flight, w.released_in_flight), (0, 1), "{w:?}");
}

#[test]
fn another_threads_postings_are_applied_before_a_read() {
    let rec = recorder();
    create(&rec, 2);
    let at = rec.nanos(Instant::now()).unwrap();
    let other = rec.clone();
    std::thread::spawn(move || {
        for i in 0..10 {
            assert!(other.posted_quietly(2, at + i * 100, Some(at + i * 100 + 50)));
        }
    })
    .join()
    .unwrap();
    assert_eq!(write_ops(&rec).done, 10);
}

#[test]
fn after_a_failure_is_told_postings_are_not_deferred() {
    struct Quiet;
    impl Sink for Quiet {
        fn on(&self, _: &Event<'_>) {}
    }
    let rec = recorder();
    create(&rec, 4);
    let at = rec.nanos(Instant::now()).unwrap();
    assert!(rec.posted_quietly(4, at, Some(at + 1)));
    rec.subscribe(Box::new(Quiet));
    rec.sink.failed.store(true, std::sync::atomic::Ordering::Release);
    // A subscriber waits for the successes that may resolve a failure.
    assert!(!rec.posted_quietly(4, at + 10, Some(at + 11)));
}

#[test]
fn a_full_ring_refuses_and_the_usual_path_applies_it_first() {
    let rec = recorder();
    create(&rec, 5);
    let at = rec.nanos(Instant::now()).unwrap();
    let mut deferred = 0u64;
    while rec.posted_quietly(5, at + deferred * 10, Some(at + deferred * 10 + 5)) {
        deferred += 1;
        assert!(deferred < 100_000, "a ring is bounded");
    }
    // The usual path: the emit applies the ring first, then this posting.
    rec.emit(&Event::XferPosted(crate::event::XferPosted {
        handle: 5,
        at: Instant::now(),
        ended: Some((Instant::now(), crate::event::XferEnd::Done)),
        sampled: false,
    }));
    assert_eq!(write_ops(&rec).done, deferred + 1);
}
