//! The ledger's own derivations: readiness in the write, the drain latch.

use super::*;
use crate::event::{GroupDecl, GroupProgress};
use crate::model::{GroupLabels, GroupState, Kind, MemType, Phase, RuntimeFacts};

fn ledger_with_kv() -> Ledger {
    let bounds = Bounds {
        duration: &[0.001, 1.0],
        descriptors: &[1.0, 64.0],
        transfer_duration: &[0.001, 1.0],
    };
    let ledger = Ledger::new(NixlStatus::default(), Instant::now(), bounds);
    let labels = GroupLabels::new("kv", &Kind::Kv, MemType::Dram, &["UCX".to_string()], 0);
    let decl = GroupDecl {
        group: "kv".into(),
        kind: Kind::Kv,
        labels: Some(labels),
        backends: vec!["UCX".into()],
        required: true,
        validate: true,
        planned: (1, 4096),
        source: Source::Planned,
    };
    ledger.apply(&Event::GroupDeclared(&decl), |_, _, _| {});
    ledger.apply(&Event::NixlLoaded(&RuntimeFacts::default()), |_, _, _| {});
    ledger
}

fn registered() -> [GroupProgress; 1] {
    [GroupProgress {
        group: GroupId(0),
        state: GroupState::Registered,
        attempts: 1,
        consecutive_failures: 0,
    }]
}

#[test]
fn readiness_is_derived_in_the_write_and_reports_its_flip_once() {
    let ledger = ledger_with_kv();
    let groups = registered();
    let progress = Event::Progress(crate::event::Progress {
        phase: Phase::Running,
        groups: &groups,
    });
    let mut seen = None;
    let a = ledger.apply(&progress, |_, st, a| seen = Some((st.process.ready, a.ready)));
    assert_eq!(seen, Some((true, Some(true))), "the projection sees the derived state");
    assert!(a.time_to_ready.is_some());
    let g0 = ledger.snapshot().generation;
    assert!(ledger.snapshot().ready);
    let again = ledger.apply(&progress, |_, _, _| {});
    assert_eq!(again.ready, None);
    assert!(ledger.snapshot().generation > g0, "every write is a generation");
}

/// The lifecycle thread may publish "every group registered" after
/// shutdown began: the snapshot stays not ready.
#[test]
fn nothing_applied_after_the_drain_latch_makes_the_snapshot_ready() {
    let ledger = ledger_with_kv();
    ledger.begin_drain(|st, _| assert!(!st.process.ready));
    let groups = registered();
    let a = ledger.apply(
        &Event::Progress(crate::event::Progress {
            phase: Phase::Running,
            groups: &groups,
        }),
        |_, _, _| {},
    );
    assert_eq!(a.ready, None);
    let s = ledger.snapshot();
    assert!(!s.ready);
    assert_eq!(
        s.phase,
        Phase::Draining,
        "a late Progress does not undo the drain phase"
    );
}

#[test]
fn a_snapshot_is_shared_until_the_next_write() {
    let ledger = ledger_with_kv();
    let a = ledger.snapshot();
    assert!(Arc::ptr_eq(&a, &ledger.snapshot()));
    ledger.apply(&Event::DrainStarted, |_, _, _| {});
    assert!(!Arc::ptr_eq(&a, &ledger.snapshot()));
}

/// A call with no record of its own is counted by method and status, each
/// pair once however often it repeats.
#[test]
fn calls_with_no_record_of_their_own_are_counted_by_method_and_status() {
    let ledger = ledger_with_kv();
    let called = |method, status| Event::NixlCalled(crate::event::NixlCalled { method, status });
    for e in [
        called("queryMem", "NIXL_SUCCESS"),
        called("queryMem", "NIXL_ERR_NOT_SUPPORTED"),
        called("queryMem", "NIXL_SUCCESS"),
        called("queryMem", crate::event::NixlCalled::THREW),
    ] {
        ledger.apply(&e, |_, _, _| {});
    }
    let counts = ledger.read(|st| st.calls.nixl_calls.clone());
    assert_eq!(
        counts,
        [
            (("queryMem", "NIXL_SUCCESS"), 2),
            (("queryMem", "NIXL_ERR_NOT_SUPPORTED"), 1),
            (("queryMem", "exception"), 1),
        ]
    );
    // The status document lists the same counts, in the same order.
    let listed: Vec<_> = ledger
        .snapshot()
        .nixl_calls
        .iter()
        .map(|c| ((c.method, c.status), c.count))
        .collect();
    assert_eq!(listed, counts);
}

/// A recording with no such call leaves `nixl_calls` out of the document,
/// as its metric family is left out of /metrics.
#[test]
fn nixl_calls_are_left_out_of_the_status_until_the_first() {
    let ledger = ledger_with_kv();
    let doc = serde_json::to_value(&*ledger.snapshot()).unwrap();
    assert!(doc.get("nixl_calls").is_none(), "{doc}");
    assert!(doc.get("in_flight").is_some(), "{doc}");
}
