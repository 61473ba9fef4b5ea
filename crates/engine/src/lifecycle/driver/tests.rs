//! The driver against scripted registrars: timers and retries timed against
//! the control channel, the duration's scope, a call past its deadline.

use super::*;
use crate::lifecycle::{At, ListFailure, Unreleased};
use crate::model::{Failure, GroupState, Kind, MemType, Region, RuntimeFacts};
use crate::plan::GroupSpec;
use crate::status::NixlStatus;
use crate::telemetry::metrics::BuildInfo;
use crate::validate::{MemoryProbe, NullProbe};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// The parts of a scripted registrar that every one here makes alike: an
/// agent that starts, backends that exist, no memory facts.
macro_rules! plain_preflight {
    () => {
        fn preflight(&mut self) -> Result<RuntimeFacts, Failure> {
            Ok(RuntimeFacts::default())
        }
    };
}
macro_rules! plain_backends {
    () => {
        fn ensure_backend(&mut self, _: &str) -> Result<Option<Duration>, Failure> {
            Ok(None)
        }
    };
}
macro_rules! plain_probe {
    () => {
        fn probe(&self) -> &dyn MemoryProbe {
            &NullProbe
        }
    };
}

/// A registrar whose every registration takes `delay`, is counted, and
/// fails when `fail` says so.
struct Scripted {
    calls: Arc<AtomicUsize>,
    delay: Duration,
    fail: bool,
}

impl Scripted {
    fn failing(calls: Arc<AtomicUsize>) -> Scripted {
        Scripted {
            calls,
            delay: Duration::ZERO,
            fail: true,
        }
    }
}

impl Registrar for Scripted {
    type Handle = ();
    type Backing = ();
    plain_preflight!();
    plain_backends!();
    fn allocate(&mut self, _: &GroupSpec, _: usize, _: usize) -> Result<(Vec<Region>, ()), Failure> {
        Ok((vec![], ()))
    }
    plain_probe!();
    fn register(&mut self, _: &GroupSpec, _: &[Region]) -> Result<(), ListFailure> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        std::thread::sleep(self.delay);
        if self.fail {
            let f = Failure::new(Reason::NixlBackendError, "scripted to fail");
            return Err(ListFailure::new(f, At::Region(0)));
        }
        Ok(())
    }
    fn deregister(&mut self, _: ()) -> Result<(), Unreleased<()>> {
        Ok(())
    }
}

/// Re-registering a failed group attempts it at once; the retry timer of
/// the earlier failure is stale then and must not fire an extra attempt
/// before the new backoff has elapsed.
#[test]
fn reregistering_a_failed_group_drops_its_stale_retry_timer() {
    let attempts = Arc::new(AtomicUsize::new(0));
    let plan = Plan {
        groups: vec![
            GroupSpec::provided("aux", Kind::Aux, MemType::Dram, vec![Region::new(0x1000, 4096, 0)])
                .with_validate(false),
        ],
    };
    let retry = RetryConfig {
        initial_backoff: Duration::from_millis(300),
        max_backoff: Duration::from_millis(300),
        max_attempts: 0,
    };
    let rec = Recorder::new(&BuildInfo::current(None), NixlStatus::default(), Instant::now());
    let (tx, rx) = std::sync::mpsc::channel();
    let registrar = Scripted::failing(attempts.clone());
    let thread = std::thread::spawn(move || Driver::new(registrar, plan, retry, rec, rx).run());
    let t0 = Instant::now();
    let wait_until = |ms: u64| std::thread::sleep(Duration::from_millis(ms).saturating_sub(t0.elapsed()));
    wait_until(100);
    assert_eq!(attempts.load(Ordering::SeqCst), 1, "the first attempt failed");
    tx.send(Control::Reregister(Some(0))).unwrap();
    wait_until(200);
    assert_eq!(attempts.load(Ordering::SeqCst), 2, "re-registered at once");
    // The stale timer (due at ~300 ms) must not fire; the new one is due at
    // ~400 ms.
    wait_until(360);
    assert_eq!(attempts.load(Ordering::SeqCst), 2, "no attempt from the stale timer");
    wait_until(550);
    assert_eq!(attempts.load(Ordering::SeqCst), 3, "the new backoff's retry");
    tx.send(Control::Shutdown).unwrap();
    thread.join().unwrap();
}

/// Allocation sleeps, registration is instant, a backend named `NOPE`
/// fails: what the duration histogram sees.
struct SlowAlloc;

impl Registrar for SlowAlloc {
    type Handle = ();
    type Backing = ();
    plain_preflight!();
    fn ensure_backend(&mut self, name: &str) -> Result<Option<Duration>, Failure> {
        match name {
            "NOPE" => Err(Failure::new(Reason::PluginUnavailable, "no NOPE")),
            _ => Ok(None),
        }
    }
    fn allocate(&mut self, _: &GroupSpec, count: usize, size: usize) -> Result<(Vec<Region>, ()), Failure> {
        std::thread::sleep(Duration::from_millis(150));
        Ok((
            (0..count).map(|i| Region::new(0x10000 * (i + 1), size, 0)).collect(),
            (),
        ))
    }
    plain_probe!();
    fn register(&mut self, _: &GroupSpec, _: &[Region]) -> Result<(), ListFailure> {
        Ok(())
    }
    fn deregister(&mut self, _: ()) -> Result<(), Unreleased<()>> {
        Ok(())
    }
}

/// The duration histogram times validation and NIXL only: not the agent's
/// own allocation (150 ms here), and nothing at all for an attempt that
/// failed before reaching NIXL (a missing backend).
#[test]
fn the_duration_excludes_allocation_and_attempts_that_never_reached_nixl() {
    let alloc = |name: &str, backend: &str| {
        let mut g = GroupSpec::provided(name, Kind::Kv, MemType::Dram, vec![])
            .with_validate(false)
            .with_backends(&[backend]);
        g.source = crate::plan::RegionSource::Allocate { count: 4, size: 4096 };
        g
    };
    let plan = Plan {
        groups: vec![alloc("kv", "UCX"), alloc("bad", "NOPE")],
    };
    let retry = RetryConfig {
        initial_backoff: Duration::from_secs(3600),
        max_backoff: Duration::from_secs(3600),
        max_attempts: 1,
    };
    let rec = Recorder::new(&BuildInfo::current(None), NixlStatus::default(), Instant::now());
    let (tx, rx) = std::sync::mpsc::channel();
    let driver = Driver::new(SlowAlloc, plan, retry, rec.clone(), rx);
    let thread = std::thread::spawn(move || driver.run());
    let t0 = Instant::now();
    while rec
        .ledger()
        .snapshot()
        .as_ref()
        .groups
        .iter()
        .any(|g| g.attempts == 0 || g.state == GroupState::Registering)
    {
        assert!(t0.elapsed() < Duration::from_secs(10), "{:#?}", rec.ledger().snapshot());
        std::thread::sleep(Duration::from_millis(10));
    }
    tx.send(Control::Shutdown).unwrap();
    thread.join().unwrap();
    let text = rec.metrics().encode(crate::telemetry::exposition::Format::Text);
    let sample = |name: &str, group: &str| -> f64 {
        text.lines()
            .find(|l| l.starts_with(name) && l.contains(&format!("group=\"{group}\"")))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no {name} for {group} in\n{text}"))
    };
    let kv_sum = sample("nixl_agent_registration_duration_seconds_sum", "kv");
    assert!(kv_sum < 0.1, "allocation is not in the duration: {kv_sum} s");
    assert_eq!(sample("nixl_agent_registration_duration_seconds_count", "kv"), 1.0);
    assert_eq!(sample("nixl_agent_registration_attempts_total", "bad"), 1.0);
    assert_eq!(
        sample("nixl_agent_registration_duration_seconds_count", "bad"),
        0.0,
        "never reached NIXL"
    );
}

/// A call past its deadline is stuck while it runs and counted once, when
/// it ends, with the reason it ends with: 0 failures when it then
/// succeeds, 1 when it then fails.
#[test]
fn a_stuck_call_is_counted_once_when_it_ends() {
    use crate::record::watchdog::Watchdog;
    for fail in [false, true] {
        let plan = Plan {
            groups: vec![
                GroupSpec::provided("kv", Kind::Kv, MemType::Dram, vec![Region::new(0x1000, 64, 0)])
                    .with_validate(false),
            ],
        };
        let retry = RetryConfig {
            initial_backoff: Duration::from_secs(3600),
            max_backoff: Duration::from_secs(3600),
            max_attempts: 1,
        };
        let rec = Recorder::new(&BuildInfo::current(None), NixlStatus::default(), Instant::now());
        let mut watchdog = Watchdog::default();
        let registrar = Scripted {
            calls: Arc::default(),
            delay: Duration::from_millis(400),
            fail,
        };
        let (tx, rx) = std::sync::mpsc::channel();
        let driver = Driver::new(registrar, plan, retry, rec.clone(), rx).with_deadline(Duration::from_millis(50));
        let thread = std::thread::spawn(move || driver.run());
        let t0 = Instant::now();
        let mut saw_stuck = false;
        let mut checked_while_running = false;
        loop {
            watchdog.check(rec.calls(), Instant::now(), &rec);
            let s = rec.ledger().snapshot();
            if !s.stuck.is_empty() {
                saw_stuck = true;
                assert!(!s.ready);
                assert_eq!(
                    s.groups[0].last_reason,
                    Some(Reason::Timeout),
                    "the reason while it runs"
                );
                let text = rec.metrics().encode(crate::telemetry::exposition::Format::Text);
                assert!(text.contains("nixl_agent_lifecycle_stuck 1"), "{text}");
                // While the call runs (its attempt not counted yet), being
                // stuck has counted no failure either.
                let running = text
                    .lines()
                    .any(|l| l.starts_with("nixl_agent_registration_attempts_total{") && l.ends_with(" 0"));
                if running {
                    checked_while_running = true;
                    assert!(
                        !text.contains("nixl_agent_registration_failures_total{"),
                        "stuck is not a failure:\n{text}"
                    );
                }
            }
            if s.groups[0].attempts == 1 && s.groups[0].state != GroupState::Registering && s.stuck.is_empty() {
                break;
            }
            assert!(t0.elapsed() < Duration::from_secs(10), "{s:#?}");
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(saw_stuck, "the call overran its deadline");
        assert!(checked_while_running, "looked while the stuck call ran");
        let text = rec.metrics().encode(crate::telemetry::exposition::Format::Text);
        let failures: f64 = text
            .lines()
            .filter(|l| l.starts_with("nixl_agent_registration_failures_total{"))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum();
        let attempts: f64 = text
            .lines()
            .filter(|l| l.starts_with("nixl_agent_registration_attempts_total{"))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum();
        assert_eq!((attempts, failures), (1.0, if fail { 1.0 } else { 0.0 }), "{text}");
        assert!(text.contains("nixl_agent_lifecycle_stuck 0"), "{text}");
        // The status says why the last attempt failed, or nothing when it
        // succeeded: the deadline was about the call, not its outcome.
        let g = rec.ledger().snapshot().groups[0].clone();
        let want = if fail { Some(Reason::NixlBackendError) } else { None };
        assert_eq!(g.last_reason, want, "{g:#?}");
        if !fail {
            assert_eq!(g.last_error, None);
        }
        if fail {
            assert!(
                text.contains(r#"reason="nixl_backend_error""#),
                "the reason it ended with:\n{text}"
            );
            assert!(!text.contains(r#"reason="timeout""#), "{text}");
        }
        tx.send(Control::Shutdown).unwrap();
        thread.join().unwrap();
    }
}

/// Memory whose release flags when it is freed.
struct Guard(Arc<std::sync::atomic::AtomicBool>);

impl Drop for Guard {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// Whether each group's memory was freed, by group name.
type Freed = Arc<Mutex<Vec<(String, Arc<std::sync::atomic::AtomicBool>)>>>;

/// Allocates a guard per group; the deregistration of group `stuck` fails.
struct Sticky {
    freed: Freed,
}

impl Registrar for Sticky {
    type Handle = String;
    type Backing = Guard;
    plain_preflight!();
    plain_backends!();
    fn allocate(&mut self, spec: &GroupSpec, count: usize, size: usize) -> Result<(Vec<Region>, Guard), Failure> {
        let flag = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let mut freed = self.freed.lock().unwrap();
        freed.push((spec.name.clone(), flag.clone()));
        let base = 0x100_0000 * freed.len();
        Ok((
            (0..count).map(|i| Region::new(base + i * size, size, 0)).collect(),
            Guard(flag),
        ))
    }
    plain_probe!();
    fn register(&mut self, spec: &GroupSpec, _: &[Region]) -> Result<String, ListFailure> {
        Ok(spec.name.clone())
    }
    fn deregister(&mut self, group: String) -> Result<(), Unreleased<String>> {
        if group != "stuck" {
            return Ok(());
        }
        Err(Unreleased {
            failure: Failure::new(Reason::NixlNotFound, "stuck"),
            regions: 4,
            bytes: 4 * 4096,
            held: vec![group],
            split: false,
        })
    }
}

/// A drain frees the memory of the groups NIXL released and keeps the
/// memory of a group whose deregistration failed; the failed group reports
/// what it still holds, bytes included.
#[test]
fn a_failed_deregistration_keeps_its_memory_and_reports_its_bytes() {
    let alloc = |name: &str| {
        let mut g = GroupSpec::provided(name, Kind::Kv, MemType::Dram, vec![]).with_validate(false);
        g.source = crate::plan::RegionSource::Allocate { count: 4, size: 4096 };
        g
    };
    let plan = Plan {
        groups: vec![alloc("kv"), alloc("stuck")],
    };
    let rec = Recorder::new(&BuildInfo::current(None), NixlStatus::default(), Instant::now());
    let (tx, rx) = std::sync::mpsc::channel();
    let freed = Freed::default();
    let registrar = Sticky { freed: freed.clone() };
    let driver = Driver::new(registrar, plan, RetryConfig::default(), rec.clone(), rx);
    // The driver (and every slot) is dropped when `run` returns.
    let thread = std::thread::spawn(move || driver.run());
    let t0 = Instant::now();
    while !rec.ledger().snapshot().ready {
        assert!(t0.elapsed() < Duration::from_secs(10), "{:#?}", rec.ledger().snapshot());
        std::thread::sleep(Duration::from_millis(10));
    }
    tx.send(Control::Shutdown).unwrap();
    let report = thread.join().unwrap();
    assert_eq!(report.failed, 4);
    assert_eq!(report.still_registered, [("stuck".to_string(), 4)]);
    let flags = freed.lock().unwrap();
    let freed_of = |g: &str| flags.iter().find(|(n, _)| n == g).unwrap().1.load(Ordering::SeqCst);
    assert!(freed_of("kv"), "a released group's memory is freed");
    assert!(!freed_of("stuck"), "memory NIXL may still hold was freed");
    let snapshot = rec.ledger().snapshot();
    let stuck = snapshot.groups.iter().find(|g| g.name == "stuck").unwrap();
    assert_eq!(
        (stuck.descriptors, stuck.bytes),
        (4, 4 * 4096),
        "what the failed group still holds"
    );
}

/// Registers lists like NIXL 1.5.1: a list holding a `bad` address fails
/// whole; the deregistration of a list holding a `stuck` address removes
/// none of it. Counts register calls; allocates one guard.
struct Rollback {
    live: Arc<Mutex<Vec<usize>>>,
    bad: usize,
    stuck: Arc<Mutex<Option<usize>>>,
    registers: Arc<AtomicUsize>,
    freed: Arc<std::sync::atomic::AtomicBool>,
}

impl Registrar for Rollback {
    type Handle = Vec<usize>;
    type Backing = Guard;
    plain_preflight!();
    plain_backends!();
    fn allocate(&mut self, _: &GroupSpec, count: usize, size: usize) -> Result<(Vec<Region>, Guard), Failure> {
        Ok((
            (1..=count).map(|i| Region::new(i * size, size, 0)).collect(),
            Guard(self.freed.clone()),
        ))
    }
    plain_probe!();
    fn register(&mut self, _: &GroupSpec, regions: &[Region]) -> Result<Vec<usize>, ListFailure> {
        self.registers.fetch_add(1, Ordering::SeqCst);
        if regions.iter().any(|r| r.addr == self.bad) {
            let f = Failure::new(Reason::NixlBackendError, "refused");
            return Err(ListFailure::new(f, At::List));
        }
        let addrs: Vec<usize> = regions.iter().map(|r| r.addr).collect();
        self.live.lock().unwrap().extend(&addrs);
        Ok(addrs)
    }
    fn deregister(&mut self, h: Vec<usize>) -> Result<(), Unreleased<Vec<usize>>> {
        let stuck = *self.stuck.lock().unwrap();
        if stuck.is_some_and(|s| h.contains(&s)) {
            let split = h.len() > 1;
            let n = h.len();
            let held = if split {
                h.iter().map(|a| vec![*a]).collect()
            } else {
                vec![h]
            };
            return Err(Unreleased {
                failure: Failure::new(Reason::NixlNotFound, "stuck"),
                regions: n,
                bytes: 4096 * n as u64,
                held,
                split,
            });
        }
        self.live.lock().unwrap().retain(|a| !h.contains(a));
        Ok(())
    }
}

/// A rollback that fails leaves the group holding exactly what NIXL still
/// holds: shown in the status, never registered again on top while it
/// cannot be released, released first once it can, and its memory kept
/// at a drain while it cannot.
#[test]
fn a_failed_rollback_is_held_shown_and_never_registered_again_on_top() {
    let mut g = GroupSpec::provided("aux", Kind::Aux, MemType::Dram, vec![]).with_validate(false);
    g.source = crate::plan::RegionSource::Allocate { count: 4, size: 4096 };
    let plan = Plan { groups: vec![g] };
    let retry = RetryConfig {
        initial_backoff: Duration::from_millis(20),
        max_backoff: Duration::from_millis(20),
        max_attempts: 3,
    };
    let live = Arc::new(Mutex::new(Vec::new()));
    let stuck = Arc::new(Mutex::new(Some(2 * 4096)));
    let registers = Arc::new(AtomicUsize::new(0));
    let freed = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let registrar = Rollback {
        live: live.clone(),
        bad: 4 * 4096,
        stuck: stuck.clone(),
        registers: registers.clone(),
        freed: freed.clone(),
    };
    let rec = Recorder::new(&BuildInfo::current(None), NixlStatus::default(), Instant::now());
    let (tx, rx) = std::sync::mpsc::channel();
    let driver = Driver::new(registrar, plan, retry, rec.clone(), rx);
    let thread = std::thread::spawn(move || driver.run());
    let t0 = Instant::now();
    while rec.ledger().snapshot().groups[0].attempts < 3
        || rec.ledger().snapshot().groups[0].state == GroupState::Registering
    {
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "waited 10 s for three attempts: {:#?}",
            rec.ledger().snapshot()
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    let after_first = registers.load(Ordering::SeqCst);
    let snapshot = rec.ledger().snapshot();
    let group = &snapshot.groups[0];
    assert_eq!(
        (group.descriptors, group.bytes),
        (1, 4096),
        "the region the rollback could not release"
    );
    assert_eq!(*live.lock().unwrap(), vec![2 * 4096], "nothing registered on top");
    assert!(
        group
            .last_error
            .as_deref()
            .unwrap_or_default()
            .contains("not registered again on top"),
        "{:?}",
        group.last_error
    );
    let text = rec.metrics().encode(crate::telemetry::exposition::Format::Text);
    assert!(
        text.lines()
            .any(|l| l.starts_with("nixl_agent_deregistration_failures_total{") && l.ends_with(" 3")),
        "the failed rollback and the two failed retries are counted:\n{text}"
    );
    // The later attempts made no registration call at all.
    assert!(after_first <= 4, "{after_first} register calls");
    tx.send(Control::Shutdown).unwrap();
    let report = thread.join().unwrap();
    assert_eq!(report.still_registered, [("aux".to_string(), 1)]);
    assert!(!freed.load(Ordering::SeqCst), "memory NIXL may still hold was freed");
    let _ = stuck;
}

/// A call's deadline is about NIXL's call: the agent's own allocation
/// (150 ms here, past a 50 ms deadline) is never marked, so it is never
/// "stuck" and never fails /livez.
#[test]
fn allocation_is_not_held_to_a_nixl_calls_deadline() {
    use crate::record::watchdog::Watchdog;
    let mut g = GroupSpec::provided("kv", Kind::Kv, MemType::Dram, vec![]).with_validate(false);
    g.source = crate::plan::RegionSource::Allocate { count: 4, size: 4096 };
    let plan = Plan { groups: vec![g] };
    let rec = Recorder::new(&BuildInfo::current(None), NixlStatus::default(), Instant::now());
    let (tx, rx) = std::sync::mpsc::channel();
    let driver =
        Driver::new(SlowAlloc, plan, RetryConfig::default(), rec.clone(), rx).with_deadline(Duration::from_millis(50));
    let thread = std::thread::spawn(move || driver.run());
    let mut watchdog = Watchdog::default();
    let t0 = Instant::now();
    while !rec.ledger().snapshot().ready {
        watchdog.check(rec.calls(), Instant::now(), &rec);
        let s = rec.ledger().snapshot();
        assert!(
            s.stuck.is_empty(),
            "allocation was held to the call deadline: {:?}",
            s.stuck
        );
        assert!(t0.elapsed() < Duration::from_secs(10), "waited 10 s for ready: {s:#?}");
        std::thread::sleep(Duration::from_millis(5));
    }
    tx.send(Control::Shutdown).unwrap();
    thread.join().unwrap();
}
