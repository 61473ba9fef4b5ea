//! Observe mode on the ledger: the sequences where two projections used to
//! disagree (partial deregistration, concurrency, agents going away,
//! labels from the call, one owner per name).

use super::*;
use crate::model::{GroupState, Reason};
use crate::telemetry::exposition::Format;
use crate::validate::NullProbe;

fn observer(expect: &[&str]) -> Observer {
    let o = Observer::with_probe(
        ObserveSettings {
            expect: expect.iter().map(|g| Expected::new(g, Kind::parse(g))).collect(),
            ..Default::default()
        },
        Box::new(NullProbe),
    );
    o
}

fn call<'a>(agent: AgentId, group: &'a str, kind: &'a Kind, regions: &'a [Region]) -> Call<'a> {
    Call {
        agent,
        group,
        kind,
        mem_type: MemType::Dram,
        device: regions.first().map_or(0, |r| r.device),
        backends: None,
        regions,
    }
}

fn register(o: &Observer, c: &Call<'_>, ok: bool) {
    let p = o.begin(c);
    let outcome = if ok {
        Outcome::Registered
    } else {
        Outcome::Failed(Failure::new(Reason::NixlBackendError, "x"))
    };
    o.end(p, c, None, outcome);
}

/// The value of the one series of `family` whose labels include `labels`.
fn value(o: &Observer, family: &str, labels: &[(&str, &str)]) -> Option<f64> {
    let text = o.metrics().encode(Format::Text);
    text.lines()
        .filter(|l| l.starts_with(&format!("{family}{{")) || l.starts_with(&format!("{family} ")))
        .find(|l| labels.iter().all(|(k, v)| l.contains(&format!("{k}=\"{v}\""))))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
}

/// What /metrics says of a group must be what /v1/status and /readyz say.
fn assert_agree(o: &Observer, group: &str) {
    let s = o.status();
    let g = s.group(group).expect("declared");
    let l = [("group", group)];
    assert_eq!(
        value(o, "nixl_agent_group_registered", &l),
        Some(f64::from(u8::from(g.state == GroupState::Registered))),
        "{g:#?}"
    );
    assert_eq!(
        value(
            o,
            "nixl_agent_group_state",
            &[("group", group), ("state", g.state.as_str())]
        ),
        Some(1.0),
        "{g:#?}"
    );
    assert_eq!(
        value(o, "nixl_agent_registered_descriptors", &l),
        Some(g.descriptors as f64)
    );
    assert_eq!(value(o, "nixl_agent_registered_bytes", &l), Some(g.bytes as f64));
    assert_eq!(value(o, "nixl_agent_ready", &[]), Some(f64::from(u8::from(s.ready))));
}

#[test]
fn a_later_agent_failing_to_start_does_not_make_nixl_unavailable() {
    let o = observer(&[]);
    o.saw_agent(AgentId::fresh(), "a", || vec!["UCX".into()]);
    assert!(o.status().nixl.available);
    o.nixl_unavailable(&Failure::new(Reason::NixlUnavailable, "no plugins"));
    assert!(o.status().nixl.available, "agent a still works");
    let fresh = observer(&[]);
    fresh.nixl_unavailable(&Failure::new(Reason::NixlUnavailable, "no plugins"));
    assert!(!fresh.status().nixl.available);
}

/// Calls A and C succeed, B fails, A is deregistered: the group is as good
/// as its last registration call (failed), holds C, and every projection
/// says so.
#[test]
fn a_partial_deregistration_leaves_status_metrics_and_readiness_agreeing() {
    let o = observer(&["kv"]);
    let agent = AgentId::fresh();
    o.saw_agent(agent, "a", Vec::new);
    let (a, b, c) = (
        [Region::new(0x1000, 64, 0)],
        [Region::new(0x2000, 64, 0)],
        [Region::new(0x3000, 128, 0)],
    );
    register(&o, &call(agent, "kv", &Kind::Kv, &a), true);
    assert!(o.status().ready);
    assert_agree(&o, "kv");
    register(&o, &call(agent, "kv", &Kind::Kv, &b), false);
    register(&o, &call(agent, "kv", &Kind::Kv, &c), true);
    assert_eq!(o.status().group("kv").unwrap().state, GroupState::Registered);
    register(&o, &call(agent, "kv", &Kind::Kv, &b), false);
    o.deregistered(agent, a[0], 1, Duration::ZERO, None);
    let s = o.status();
    let g = s.group("kv").unwrap();
    assert_eq!((g.state, g.descriptors, g.bytes), (GroupState::Failed, 1, 128));
    assert!(!s.ready);
    assert_agree(&o, "kv");
    // The program registers B at last: registered again, holding B and C.
    register(&o, &call(agent, "kv", &Kind::Kv, &b), true);
    assert!(o.status().ready);
    assert_agree(&o, "kv");
    o.deregistered(agent, b[0], 1, Duration::ZERO, None);
    o.deregistered(agent, c[0], 1, Duration::ZERO, None);
    let s = o.status();
    assert_eq!(s.group("kv").unwrap().state, GroupState::Deregistered);
    assert!(!s.ready);
    assert_agree(&o, "kv");
}

/// A deregistration NIXL refuses of a list that matches no registration
/// exactly (a registered region and one never registered: NIXL 1.5.1
/// removes none) is counted against the group its first region is in, and
/// the group keeps everything.
#[test]
fn a_refused_deregistration_of_a_mismatched_list_is_counted() {
    let o = observer(&["kv"]);
    let agent = AgentId::fresh();
    let kv: Vec<Region> = (0..4).map(|i| Region::new(0x20_0000 + i * 0x1000, 4096, 0)).collect();
    register(&o, &call(agent, "kv", &Kind::Kv, &kv), true);
    let refused = Failure::new(Reason::Unknown, "NIXL_ERR_NOT_FOUND");
    o.deregistered(agent, kv[0], 2, Duration::ZERO, Some(refused));
    let failures = value(&o, "nixl_agent_deregistration_failures_total", &[("group", "kv")]);
    assert_eq!(failures, Some(1.0), "the refusal is counted against kv");
    let s = o.status();
    let g = s.group("kv").unwrap();
    assert_eq!((g.state, g.descriptors), (GroupState::Registered, 4));
    assert_agree(&o, "kv");
}

/// Two threads register and deregister one group 10,000 times each: at
/// the end the gauges equal the ledger, which equals what is held.
#[test]
fn concurrent_calls_leave_the_gauges_equal_to_the_ledger() {
    let o = observer(&["kv"]);
    let agent = AgentId::fresh();
    o.saw_agent(agent, "a", Vec::new);
    let threads: Vec<_> = (0..2usize)
        .map(|t| {
            let o = o.clone();
            std::thread::spawn(move || {
                for i in 0..10_000usize {
                    let r = [Region::new(0x10_0000 * (t + 1) + (i % 7) * 0x1000, 4096, 0)];
                    register(&o, &call(agent, "kv", &Kind::Kv, &r), true);
                    o.deregistered(agent, r[0], 1, Duration::ZERO, None);
                }
                // Each thread leaves one region registered.
                let r = [Region::new(0x90_0000 + t * 0x1000, 4096, 0)];
                register(&o, &call(agent, "kv", &Kind::Kv, &r), true);
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let s = o.status();
    let g = s.group("kv").unwrap();
    assert_eq!(
        (g.state, g.descriptors, g.bytes, g.attempts),
        (GroupState::Registered, 2, 8192, 20_002)
    );
    assert_agree(&o, "kv");
    assert_eq!(
        value(&o, "nixl_agent_registration_attempts_total", &[("group", "kv")]),
        Some(20_002.0)
    );
    assert_eq!(
        value(&o, "nixl_agent_deregistrations_total", &[("group", "kv")]),
        Some(20_000.0)
    );
}

/// The same buffer registered on two agents: a deregistration on one
/// finds its own registration, and an agent that goes away releases what
/// it held — readiness follows.
#[test]
fn holdings_belong_to_the_agent_they_were_made_on() {
    let o = observer(&["kv"]);
    let (one, two) = (AgentId::fresh(), AgentId::fresh());
    o.saw_agent(one, "one", Vec::new);
    o.saw_agent(two, "two", Vec::new);
    let r = [Region::new(0x5000, 4096, 0)];
    register(&o, &call(one, "kv", &Kind::Kv, &r), true);
    register(&o, &call(two, "kv", &Kind::Kv, &r), true);
    assert_eq!(o.status().group("kv").unwrap().descriptors, 2);
    o.deregistered(two, r[0], 1, Duration::ZERO, None);
    let s = o.status();
    let agents: Vec<(u64, usize)> = s.agents.iter().map(|a| (a.id.0, a.descriptors)).collect();
    assert_eq!(agents, [(one.0, 1), (two.0, 0)]);
    // A second deregistration on two finds nothing of its own there.
    o.deregistered(two, r[0], 1, Duration::ZERO, None);
    assert_eq!(o.status().group("kv").unwrap().descriptors, 1);
    assert!(o.status().ready);
    o.agent_released(one);
    let s = o.status();
    let g = s.group("kv").unwrap();
    assert_eq!((g.state, g.descriptors), (GroupState::Deregistered, 0));
    assert!(!s.ready, "the agent that held kv is gone");
    assert!(s.agents.iter().any(|a| a.id == one && a.released));
    assert_agree(&o, "kv");
}

/// An expected group's labels come from its first call, never from a
/// default; a later call that differs is recorded, not relabelled.
#[test]
fn labels_come_from_the_first_call() {
    let o = observer(&["kv"]);
    let agent = AgentId::fresh();
    o.saw_agent(agent, "a", Vec::new);
    assert_eq!(
        value(&o, "nixl_agent_group_state", &[("group", "kv"), ("state", "pending")]),
        Some(1.0)
    );
    assert_eq!(o.status().group("kv").unwrap().mem_type, None);
    let r = [Region::new(0x1000, 64, 3)];
    let backends = ["UCX".to_string(), "GDS".to_string()];
    let first = Call {
        device: 3,
        backends: Some(&backends),
        ..call(agent, "kv", &Kind::Kv, &r)
    };
    register(&o, &first, true);
    let full = [
        ("group", "kv"),
        ("mem_type", "DRAM"),
        ("device", "3"),
        ("backend", "UCX+GDS"),
    ];
    assert_eq!(value(&o, "nixl_agent_group_registered", &full), Some(1.0));
    let text = o.metrics().encode(Format::Text);
    assert!(
        !text.contains(r#"mem_type="""#),
        "the placeholder series are gone:\n{text}"
    );
    let vram = Call {
        mem_type: MemType::Vram,
        ..first
    };
    register(&o, &vram, true);
    let s = o.status();
    let g = s.group("kv").unwrap();
    assert_eq!((g.mem_type, g.device.as_deref()), (Some("DRAM"), Some("3")));
    assert_eq!(g.differing_calls, 1, "{g:#?}");
    assert_eq!(
        value(&o, "nixl_agent_registration_attempts_total", &full),
        Some(2.0),
        "counted under the fixed labels"
    );
}

/// A name has one owner: an observed group never shares a planned
/// group's name.
#[test]
fn a_planned_group_name_is_not_taken_by_observed_calls() {
    let rec = Recorder::new(&BuildInfo::current(None), NixlStatus::default(), Instant::now());
    let spec = crate::plan::GroupSpec::provided("kv", Kind::Kv, MemType::Dram, vec![]);
    rec.emit(&Event::GroupDeclared(&crate::lifecycle::registration::declaration(
        &spec,
    )));
    let refused = Observer::with_recorder(
        rec.clone(),
        ObserveSettings {
            expect: vec![Expected::new("kv", Kind::Kv)],
            ..Default::default()
        },
        Box::new(NullProbe),
    );
    let err = refused.err().expect("refused").to_string();
    assert!(err.contains("`kv`") && err.contains("planned"), "{err}");
    let o = Observer::with_recorder(rec.clone(), ObserveSettings::default(), Box::new(NullProbe)).unwrap();
    let agent = AgentId::fresh();
    let r = [Region::new(0x1000, 64, 0)];
    register(&o, &call(agent, "kv", &Kind::Kv, &r), true);
    let s = o.status();
    assert_eq!(s.group("kv").unwrap().source, Source::Planned);
    assert_eq!(s.group("kv").unwrap().attempts, 0, "the planned group is untouched");
    assert_eq!(s.group(OVERFLOW_GROUP).unwrap().descriptors, 1);
}

/// Observe mode's watchdog: a call past `call_timeout` is stuck while it
/// runs (not live, `lifecycle_stuck` 1, its age shown) and clears when it
/// returns; it is no failure.
#[test]
fn a_call_past_its_deadline_is_stuck_until_it_returns() {
    let o = Observer::with_probe(
        ObserveSettings {
            expect: vec![Expected::new("kv", Kind::Kv)],
            call_timeout: Some(Duration::from_millis(40)),
            ..Default::default()
        },
        Box::new(NullProbe),
    );
    let agent = AgentId::fresh();
    o.saw_agent(agent, "a", Vec::new);
    let r = [Region::new(0x1000, 64, 0)];
    let c = call(agent, "kv", &Kind::Kv, &r);
    let p = o.begin(&c);
    let t0 = Instant::now();
    let stuck = loop {
        let s = o.status();
        if let Some(st) = s.stuck.first().cloned() {
            break (st, s);
        }
        assert!(t0.elapsed() < Duration::from_secs(5), "never flagged stuck");
        std::thread::sleep(Duration::from_millis(5));
    };
    assert_eq!(
        (stuck.0.operation.as_str(), stuck.0.group.as_deref()),
        ("register", Some("kv"))
    );
    assert!(stuck
        .1
        .liveness_failure()
        .is_some_and(|w| w.contains("register of group kv")));
    assert_eq!(value(&o, "nixl_agent_lifecycle_stuck", &[]), Some(1.0));
    o.end(p, &c, None, Outcome::Registered);
    let t0 = Instant::now();
    while !o.status().stuck.is_empty() || !o.status().in_flight.is_empty() {
        assert!(t0.elapsed() < Duration::from_secs(5), "never cleared");
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(o.status().ready);
    assert_eq!(value(&o, "nixl_agent_lifecycle_stuck", &[]), Some(0.0));
    assert_eq!(value(&o, "nixl_agent_registration_failures_total", &[]), None);
}

/// A probe standing in for CUDA: device memory at 0x7f00_0000_0000 lives on
/// device 1; it counts what it is asked. Its interface has no way to make
/// or bind a context (see `MemoryProbe::device_pointer`).
struct OnDeviceOne(std::sync::Arc<std::sync::atomic::AtomicUsize>);

impl MemoryProbe for OnDeviceOne {
    fn mapped_ranges(&self) -> Result<Vec<(usize, usize)>, String> {
        Ok(vec![])
    }
    fn device_pointer(&self, addr: usize, _descriptor_device: u32) -> Result<validate::DevicePointer, Reason> {
        self.0.fetch_add(1, Ordering::SeqCst);
        Ok(validate::DevicePointer {
            is_device: addr >= 0x7f00_0000_0000,
            device: 1,
        })
    }
    fn memlock(&self) -> validate::Memlock {
        validate::Memlock {
            soft_limit: None,
            exempt: true,
            locked_bytes: None,
        }
    }
}

/// vLLM has passed `tp_rank` as the device id: the descriptor says device 0
/// for memory on device 1. The group is labelled with the pointer's own
/// ordinal; the descriptor's id is a `device_mismatch` finding in `record`
/// mode, never a refusal, and NIXL's success is recorded as such.
#[test]
fn a_vram_call_is_labelled_by_the_pointers_own_device() {
    let asked = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let o = Observer::with_probe(
        ObserveSettings {
            validate: true,
            ..Default::default()
        },
        Box::new(OnDeviceOne(asked.clone())),
    );
    let agent = AgentId::fresh();
    o.saw_agent(agent, "a", Vec::new);
    let r = [
        Region::new(0x7f00_0000_0000, 1 << 20, 0),
        Region::new(0x7f00_0010_0000, 1 << 20, 0),
    ];
    let c = Call {
        mem_type: MemType::Vram,
        device: o.device_of(MemType::Vram, &r),
        ..call(agent, "kv", &Kind::Kv, &r)
    };
    assert_eq!(c.device, 1);
    let p = o.begin(&c);
    let finding = o.check(&c);
    assert_eq!(
        finding.as_ref().map(|f| (f.reason, f.region)),
        Some((Reason::DeviceMismatch, Some(0)))
    );
    assert!(!o.enforcing(), "record mode");
    o.end(p, &c, finding, Outcome::Registered);
    let g = o.status().group("kv").unwrap().clone();
    assert_eq!((g.state, g.device.as_deref()), (GroupState::Registered, Some("1")));
    assert!(g.last_accepted_invalid.unwrap().starts_with("device_mismatch"));
    assert_eq!(
        value(
            &o,
            "nixl_agent_accepted_invalid_total",
            &[("group", "kv"), ("reason", "device_mismatch")]
        ),
        Some(1.0)
    );
    // One question for the label; validation stops at the descriptor's id.
    assert_eq!(asked.load(Ordering::SeqCst), 1);
}

/// A registrar whose registrations take a while (and are counted).
struct Slow(std::sync::Arc<std::sync::atomic::AtomicUsize>, Duration);

impl crate::lifecycle::Registrar for Slow {
    type Handle = ();
    type Backing = ();
    fn preflight(&mut self) -> Result<RuntimeFacts, Failure> {
        Ok(RuntimeFacts::default())
    }
    fn ensure_backend(&mut self, _: &str) -> Result<Option<Duration>, Failure> {
        Ok(None)
    }
    fn allocate(&mut self, _: &crate::plan::GroupSpec, _: usize, _: usize) -> Result<(Vec<Region>, ()), Failure> {
        Ok((vec![], ()))
    }
    fn probe(&self) -> &dyn MemoryProbe {
        &NullProbe
    }
    fn register(&mut self, _: &crate::plan::GroupSpec, _: &[Region]) -> Result<(), crate::lifecycle::ListFailure> {
        self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        std::thread::sleep(self.1);
        Ok(())
    }
    fn deregister(&mut self, _: ()) -> Result<(), crate::lifecycle::Unreleased<()>> {
        Ok(())
    }
}

/// The lifecycle's registration and an observer's deregistration on the
/// same recording (what `LifecycleHandle::observer` hands out) are both
/// past their deadlines; the observed one returns: the recording's one
/// watchdog keeps the lifecycle's call stuck and /livez names it.
#[test]
fn an_observed_call_returning_never_clears_the_lifecycles_stuck_call() {
    use crate::config::RetryConfig;
    use crate::lifecycle::driver::{spawn, Control};
    use crate::plan::{GroupSpec, Plan};
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    let plan = Plan {
        groups: vec![
            GroupSpec::provided("kv", Kind::Kv, MemType::Dram, vec![Region::new(0x1000, 64, 0)]).with_validate(false),
        ],
    };
    let rec = Recorder::new(&BuildInfo::current(None), NixlStatus::default(), Instant::now());
    let calls = Arc::new(AtomicUsize::new(0));
    let seen = calls.clone();
    let make = move || Slow(seen, Duration::from_secs(3));
    let deadline = Duration::from_millis(40);
    let (tx, thread) = spawn(make, plan, RetryConfig::default(), rec.clone(), deadline).unwrap();
    let observer = Observer::with_recorder(
        rec.clone(),
        ObserveSettings {
            call_timeout: Some(deadline),
            ..Default::default()
        },
        Box::new(NullProbe),
    )
    .unwrap();
    let t0 = Instant::now();
    while calls.load(Ordering::SeqCst) == 0 {
        assert!(t0.elapsed() < Duration::from_secs(5), "the registration never started");
        std::thread::sleep(Duration::from_millis(2));
    }
    let observed = observer.deregistration_started();
    let wait = |what: &str, done: &dyn Fn(&crate::status::Status) -> bool| {
        let t0 = Instant::now();
        loop {
            let s = rec.ledger().snapshot();
            if done(&s) {
                return s;
            }
            assert!(t0.elapsed() < Duration::from_secs(2), "{what}: {:?}", s.stuck);
            std::thread::sleep(Duration::from_millis(5));
        }
    };
    let s = wait("both stuck", &|s| s.stuck.len() == 2);
    let why = s.liveness_failure().unwrap();
    assert!(
        why.contains("register of group kv") && why.contains("NIXL deregister past"),
        "{why}"
    );
    drop(observed);
    let s = wait("the observed call returned", &|s| s.stuck.len() == 1);
    let why = s.liveness_failure().unwrap_or_default();
    assert!(
        why.starts_with("NIXL register of group kv past its deadline (") && !why.contains("deregister"),
        "the lifecycle's call is still stuck, alone: {why}"
    );
    assert!(!s.ready);
    assert_eq!(s.groups[0].state, GroupState::Registering, "still in its first call");
    tx.send(Control::Shutdown).unwrap();
    thread.join().unwrap();
    let s = wait("everything returned", &|s| s.stuck.is_empty());
    assert!(s.liveness_failure().is_none());
}

#[test]
fn the_sole_backend_is_the_one_an_agent_created_and_only_then() {
    let o = observer(&[]);
    let (a, b, c) = (AgentId(91), AgentId(92), AgentId(93));
    let ok = || Ok(Duration::from_millis(1));
    assert!(o.sole_backend(a).is_none(), "nothing created yet");
    o.backend(a, "UCX", ok());
    assert_eq!(o.sole_backend(a).as_deref(), Some(&["UCX".to_string()][..]));
    o.backend(a, "POSIX", ok());
    assert!(o.sole_backend(a).is_none(), "two backends: NIXL chose one");
    // A backend whose name cannot be a label is still a backend NIXL may choose.
    o.backend(b, "UCX", ok());
    o.backend(b, "not a label!", ok());
    assert!(o.sole_backend(b).is_none());
    // One that failed to be created is none.
    o.backend(c, "UCX", ok());
    o.backend(c, "GDS", Err(Failure::new(Reason::BackendInitFailed, "no GDS")));
    assert_eq!(o.sole_backend(c).as_deref(), Some(&["UCX".to_string()][..]));
    o.agent_released(c);
    assert!(o.sole_backend(c).is_none(), "a released agent has none");
}
