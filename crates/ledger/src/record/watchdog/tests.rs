//! The one watchdog of a recording, driven with explicit instants: stuck
//! episodes keyed by call, slots freed with their threads.

use super::*;
use crate::status::NixlStatus;
use crate::telemetry::exposition::Format;
use crate::telemetry::metrics::BuildInfo;
use std::sync::mpsc;

fn recorder() -> Recorder {
    Recorder::new(&BuildInfo::current(None), NixlStatus::default(), Instant::now())
}

/// Declares a planned group `name`: the id its calls are marked with.
fn declare(rec: &Recorder, name: &str) -> GroupId {
    let decl = crate::event::GroupDecl {
        group: name.to_string(),
        kind: crate::model::Kind::Kv,
        labels: None,
        backends: vec!["UCX".to_string()],
        required: true,
        validate: true,
        planned: (0, 0),
        source: crate::event::Source::Planned,
    };
    rec.emit(&Event::GroupDeclared(&decl)).group.expect("declared")
}

fn stuck_gauge(rec: &Recorder) -> String {
    let text = rec.metrics().encode(Format::Text);
    text.lines()
        .find(|l| l.starts_with("nixl_agent_lifecycle_stuck "))
        .unwrap_or_default()
        .to_string()
}

/// A call held on a thread of its own until told to return.
struct Held {
    done: mpsc::Sender<()>,
    thread: std::thread::JoinHandle<()>,
}

impl Held {
    fn start(calls: &InFlight, op: CallKind, group: Option<GroupId>, at: Instant, deadline: Duration) -> Held {
        let calls = calls.clone();
        let (done, wait) = mpsc::channel::<()>();
        let (marked, is_marked) = mpsc::channel();
        let thread = std::thread::spawn(move || {
            let mark = calls.begin(op, group, at, Some(deadline));
            marked.send(()).unwrap();
            let _ = wait.recv();
            drop(mark);
        });
        is_marked.recv().unwrap();
        Held { done, thread }
    }

    fn returns(self) {
        self.done.send(()).unwrap();
        self.thread.join().unwrap();
    }
}

/// The lifecycle's call and an observed one are both past their deadlines;
/// the observed one returns: /livez still fails, naming the lifecycle's.
/// (Two watchdogs writing one field let the observed call's end clear the
/// lifecycle's episode: /livez was 200 while the lifecycle was wedged.)
#[test]
fn one_stuck_call_ending_leaves_the_other_stuck_and_named() {
    let rec = recorder();
    let calls = rec.calls().clone();
    let t0 = Instant::now();
    // The lifecycle thread's registration of its planned group `kv`, and
    // an observed deregistration (no group), each on its own thread.
    let kv = declare(&rec, "kv");
    let lifecycle = Held::start(&calls, CallKind::Register, Some(kv), t0, Duration::from_millis(100));
    let observed = Held::start(&calls, CallKind::Deregister, None, t0, Duration::from_millis(40));
    let mut dog = Watchdog::default();
    dog.check(&calls, t0 + Duration::from_millis(50), &rec);
    let s = rec.ledger().snapshot();
    assert_eq!(
        s.stuck.len(),
        1,
        "only the observed call is past its deadline: {:?}",
        s.stuck
    );
    dog.check(&calls, t0 + Duration::from_millis(150), &rec);
    let s = rec.ledger().snapshot();
    let why = s.liveness_failure().expect("both stuck");
    assert!(why.contains("NIXL register of group kv past its deadline"), "{why}");
    assert!(why.contains("NIXL deregister past its deadline"), "{why}");
    assert_eq!(s.stuck.len(), 2);
    assert!(!s.ready);
    assert_eq!(stuck_gauge(&rec), "nixl_agent_lifecycle_stuck 1");

    observed.returns();
    dog.check(&calls, t0 + Duration::from_millis(300), &rec);
    let s = rec.ledger().snapshot();
    let why = s.liveness_failure().expect("the lifecycle's call is still stuck");
    assert!(
        why.starts_with("NIXL register of group kv past its deadline ("),
        "{why}"
    );
    assert!(!why.contains("deregister"), "only the call still stuck: {why}");
    assert!(s.checks().iter().any(|c| c.name == crate::status::CHECK_LIFECYCLE));
    assert_eq!(
        stuck_gauge(&rec),
        "nixl_agent_lifecycle_stuck 1",
        "one stuck call is enough"
    );
    // Looking again reports nothing twice.
    dog.check(&calls, t0 + Duration::from_millis(400), &rec);
    assert_eq!(rec.ledger().snapshot().stuck.len(), 1);

    lifecycle.returns();
    dog.check(&calls, t0 + Duration::from_millis(500), &rec);
    let s = rec.ledger().snapshot();
    assert!(s.liveness_failure().is_none(), "{:?}", s.stuck);
    assert!(s.in_flight.is_empty());
    assert_eq!(stuck_gauge(&rec), "nixl_agent_lifecycle_stuck 0");
}

/// A thread's next call is a new episode with a deadline of its own, even
/// when the watchdog never saw the slot idle in between.
#[test]
fn a_threads_next_call_is_a_new_episode() {
    let rec = recorder();
    let calls = rec.calls().clone();
    let mut dog = Watchdog::default();
    let t0 = Instant::now();
    let first = calls.begin(CallKind::Register, None, t0, Some(Duration::from_millis(10)));
    dog.check(&calls, t0 + Duration::from_millis(20), &rec);
    let key = rec.ledger().snapshot().stuck[0].call;
    drop(first);
    // Started at the same instant: still another call.
    let second = calls.begin(CallKind::Register, None, t0, Some(Duration::from_secs(3600)));
    dog.check(&calls, t0 + Duration::from_millis(30), &rec);
    let s = rec.ledger().snapshot();
    assert!(s.stuck.is_empty(), "the first call's episode ended: {:?}", s.stuck);
    assert_eq!(s.in_flight.len(), 1, "the second call is in flight");
    drop(second);
    let third = calls.begin(CallKind::Register, None, Instant::now(), Some(Duration::from_millis(1)));
    dog.check(&calls, Instant::now() + Duration::from_millis(5), &rec);
    assert_ne!(rec.ledger().snapshot().stuck[0].call, key);
    drop(third);
}

/// A call with no deadline is in flight, never stuck.
#[test]
fn a_call_without_a_deadline_is_shown_never_stuck() {
    let rec = recorder();
    let calls = rec.calls().clone();
    let mut dog = Watchdog::default();
    let t0 = Instant::now();
    let m = calls.begin(CallKind::Drain, None, t0, None);
    dog.check(&calls, t0 + Duration::from_secs(3600), &rec);
    let s = rec.ledger().snapshot();
    assert!(s.stuck.is_empty());
    assert_eq!(s.in_flight[0].operation, "drain");
    drop(m);
}

/// Thread-pool churn: every thread that ever made a call took a slot; the
/// slots of threads that ended are freed, so the table the watchdog scans
/// stays as large as the threads alive.
#[test]
fn slots_of_ended_threads_are_freed() {
    let calls = InFlight::new();
    for round in 0..20 {
        let threads: Vec<_> = (0..10)
            .map(|_| {
                let calls = calls.clone();
                std::thread::spawn(move || {
                    for _ in 0..3 {
                        drop(calls.begin(CallKind::Register, None, Instant::now(), None));
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(calls.slots(), 0, "round {round}: no thread alive holds a slot");
    }
    // A live thread keeps its one slot across calls.
    drop(calls.begin(CallKind::Register, None, Instant::now(), None));
    drop(calls.begin(CallKind::Deregister, None, Instant::now(), None));
    assert_eq!(calls.slots(), 1);
    assert!(calls.look(Instant::now()).is_empty());
}

/// A thread that made calls under many recordings keeps no slot of those
/// that are gone.
#[test]
fn a_threads_slots_of_dropped_tables_are_freed() {
    for _ in 0..100 {
        let calls = InFlight::new();
        drop(calls.begin(CallKind::Register, None, Instant::now(), None));
    }
    let kept = SLOTS.with(|s| s.borrow().len());
    assert!(kept <= 1, "{kept} slots kept for dropped tables");
}

/// The watchdog thread runs once per recording and ends with it.
#[test]
fn the_watchdog_thread_ends_with_the_recording() {
    let rec = recorder();
    let thread = watch(&rec, Duration::from_millis(20)).expect("the first watch starts the thread");
    assert!(
        watch(&rec, Duration::from_millis(40)).is_none(),
        "one thread a recording"
    );
    let ledger = rec.ledger().clone();
    let m = rec.calls().begin(
        CallKind::Register,
        None,
        Instant::now(),
        Some(Duration::from_millis(20)),
    );
    let t0 = Instant::now();
    while ledger.snapshot().stuck.is_empty() {
        assert!(
            t0.elapsed() < Duration::from_secs(5),
            "waited 5 s for the stuck call to be flagged"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    drop(m);
    while !ledger.snapshot().stuck.is_empty() {
        assert!(
            t0.elapsed() < Duration::from_secs(5),
            "waited 5 s for the stuck call to clear"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    drop(rec);
    // The thread itself ends (not only its hold on the table): within a
    // period or two of the recording going.
    let t0 = Instant::now();
    while !thread.is_finished() {
        assert!(
            t0.elapsed() < Duration::from_secs(5),
            "waited 5 s for the watchdog thread to end after its recording"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    thread.join().expect("the watchdog thread did not panic");
}

/// A look never shows a call under another call's operation, group or
/// deadline, while one thread marks calls back to back (the slot's fields
/// are published as a sequence lock). On x86 the stores are never
/// reordered; on a weakly ordered CPU (aarch64) this is where a relaxed
/// store published before the idle one would show.
#[test]
fn a_look_never_mixes_two_calls_fields() {
    let calls = InFlight::new();
    let (g1, g2) = (GroupId(0), GroupId(1));
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (calls, stop) = (calls.clone(), stop.clone());
        std::thread::spawn(move || {
            let t0 = Instant::now();
            // Each call held for a few hundred spins, so that looks land
            // inside calls as well as between them.
            let hold = || (0..256).for_each(|_| std::hint::spin_loop());
            while !stop.load(Ordering::Relaxed) && t0.elapsed() < Duration::from_secs(20) {
                for (kind, group, deadline) in [(CallKind::Register, g1, 1), (CallKind::Deregister, g2, 2)] {
                    let call = calls.begin(kind, Some(group), Instant::now(), Some(Duration::from_secs(deadline)));
                    hold();
                    drop(call);
                }
            }
        })
    };
    // Until enough looks caught a call (a loaded machine may take a while).
    let t0 = Instant::now();
    let mut seen = 0usize;
    while seen < 200 && t0.elapsed() < Duration::from_secs(15) {
        for c in calls.look(Instant::now()) {
            seen += 1;
            let want = match c.operation {
                CallKind::Register => (Some(g1), Some(Duration::from_secs(1))),
                _ => (Some(g2), Some(Duration::from_secs(2))),
            };
            assert_eq!((c.group, c.deadline), want, "{c:?}");
        }
    }
    stop.store(true, Ordering::Relaxed);
    writer.join().expect("the writer ended");
    assert!(seen > 0, "waited 15 s for a look to catch a call in flight");
}
