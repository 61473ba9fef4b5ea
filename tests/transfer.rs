//! Proof by transfer: what nixl-agent registers is what the serving process
//! transfers with. Two real NIXL agents in one process (UCX, DRAM, this
//! CPU-only machine): the serving process's agent hands its kv/aux buffers
//! to nixl-agent — once through the lifecycle on its own agent, once through
//! observe mode — exchanges metadata with a peer, WRITEs and READs real
//! bytes, then drains; NIXL itself then refuses a transfer over the drained
//! regions and its metadata no longer carries them.

use crate::support::{self, Scrape};
use nixl_agent::Format;
use nixl_agent::{Descriptor, Expected, GroupSpec, Kind, Lifecycle, MemType, ObserveSettings, Observer, Plan, Region};
use nixl_sys::{Agent, Backend, OptArgs, XferDescList, XferOp, XferStatus};
use std::time::{Duration, Instant};

const LEN: usize = 64 << 10;
const AUX: usize = 4 << 10;

/// A NIXL agent as a serving process creates it: default config (progress
/// thread on, so the peer side of a transfer progresses), UCX backend.
fn serving_agent(name: &str) -> (Agent, Backend) {
    nixl_agent::load_nixl(Some(&support::nixl_lib_dir())).expect("NIXL runtime from the wheel");
    let agent = Agent::new(name).expect("NIXL agent");
    let (_, params) = agent.get_plugin_params("UCX").expect("UCX plugin");
    let backend = agent.create_backend("UCX", &params).expect("UCX backend");
    (agent, backend)
}

fn opts(b: &Backend) -> OptArgs {
    let mut o = OptArgs::new().unwrap();
    o.add_backend(b).unwrap();
    o
}

fn dlist(buf: &[u8]) -> XferDescList<'static> {
    let mut l = XferDescList::new(nixl_sys::MemType::Dram).unwrap();
    l.add_desc(buf.as_ptr() as usize, buf.len(), 0);
    l
}

/// Posts `op` from `a` between `local` and the peer's `remote`, waits for
/// completion. The request is dropped before returning (NIXL must not hold
/// a request over a region that is about to be deregistered).
fn transfer(a: &Agent, op: XferOp, local: &[u8], remote: &[u8], peer: &str) {
    let req = a
        .create_xfer_req(op, &dlist(local), &dlist(remote), peer, None)
        .expect("transfer request over registered memory");
    let t0 = Instant::now();
    if a.post_xfer_req(&req, None).expect("post") {
        while a.get_xfer_status(&req).expect("status") != XferStatus::Success {
            assert!(t0.elapsed() < Duration::from_secs(20), "transfer did not complete");
            std::thread::yield_now();
        }
    }
}

/// Both agents learn each other's registrations.
fn exchange(a: &Agent, b: &Agent) -> (String, String) {
    let name_a = b.load_remote_md(&a.get_local_md().unwrap()).unwrap();
    let name_b = a.load_remote_md(&b.get_local_md().unwrap()).unwrap();
    (name_a, name_b)
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

fn config(name: &str) -> nixl_agent::Config {
    support::library_config(name)
}

fn host(buf: &[u8]) -> Region {
    Region::new(buf.as_ptr() as usize, buf.len(), 0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lifecycle_on_the_serving_agent_registers_what_it_transfers_with() {
    let (a, _backend_a) = serving_agent("prefill-0");
    let (b, backend_b) = serving_agent("decode-0");
    let kv = pattern(LEN, 7);
    let aux = vec![0u8; AUX];
    let peer = pattern(LEN, 99);
    let _peer_reg = b
        .register_memory(&Descriptor::host(&peer), Some(&opts(&backend_b)))
        .unwrap();
    let md_unregistered = a.get_local_md().unwrap().len();

    let plan = Plan {
        groups: vec![
            GroupSpec::provided("kv", Kind::Kv, MemType::Dram, vec![host(&kv)]),
            GroupSpec::provided("aux", Kind::Aux, MemType::Dram, vec![host(&aux)]),
        ],
    };
    let running = Lifecycle::prepare(config("ignored-on-the-callers-agent"), plan)
        .unwrap()
        .on_agent(a.clone())
        .without_server()
        .start()
        .await
        .unwrap();
    assert!(
        running.wait_ready(Duration::from_secs(30)).await,
        "{:#?}",
        running.status()
    );
    assert_eq!(running.local_addr(), None, "no port of its own");

    // The registrations belong to the caller's agent: no NIXL agent of ours.
    let status = running.status();
    assert_eq!(status.nixl.agent.as_deref(), Some("prefill-0"));
    assert_eq!(status.nixl.agent_owner, Some("caller"));
    let s = Scrape::parse(&running.metrics().encode(Format::Text));
    for (group, bytes) in [("kv", LEN), ("aux", AUX)] {
        let m = s.metric("nixl_agent_registered_descriptors").label("group", group);
        assert_eq!(m.value(), 1.0, "{group}");
        let m = s.metric("nixl_agent_registered_bytes").label("group", group);
        assert_eq!(m.value(), bytes as f64, "{group}");
    }

    // A's metadata now carries kv and aux; the peer learns them.
    assert!(a.get_local_md().unwrap().len() > md_unregistered);
    let (_, name_b) = exchange(&a, &b);
    transfer(&a, XferOp::Write, &kv, &peer, &name_b);
    assert_eq!(peer, kv, "WRITE from the kv group reached the peer");
    transfer(&a, XferOp::Read, &aux, &peer[..AUX], &name_b);
    assert_eq!(aux, kv[..AUX], "READ into the aux group brought the peer's bytes");

    // Drain: Ok means NIXL holds nothing of ours.
    let md_registered = a.get_local_md().unwrap().len();
    let report = running.shutdown().await.expect("clean drain");
    assert_eq!(report.deregistered, 2);
    assert!(report.still_registered.is_empty());

    // NIXL's own view: the regions are gone from A's metadata, and a
    // transfer over them is refused.
    assert_eq!(a.get_local_md().unwrap().len(), md_unregistered);
    assert!(a.get_local_md().unwrap().len() < md_registered);
    for (op, local) in [(XferOp::Write, &kv), (XferOp::Read, &aux)] {
        let refused = a.create_xfer_req(op, &dlist(local), &dlist(&peer[..local.len()]), &name_b, None);
        assert!(refused.is_err(), "NIXL still transfers over a drained region");
    }
    // The caller's agent and backend are the caller's again, still usable.
    let again = a.register_memory(&Descriptor::host(&kv), Some(&opts(&a.get_backend("UCX").unwrap())));
    assert!(again.is_ok(), "the serving agent still registers after the drain");
}

#[test]
fn observe_mode_records_the_callers_own_calls_and_hands_back_what_nixl_returned() {
    let (a, backend_a) = serving_agent("prefill-1");
    let (b, backend_b) = serving_agent("decode-1");
    let (opts_a, opts_b) = (opts(&backend_a), opts(&backend_b));
    let kv = pattern(LEN, 3);
    let aux = vec![0u8; AUX];
    let peer = pattern(LEN, 42);
    let _peer_reg = b.register_memory(&Descriptor::host(&peer), Some(&opts_b)).unwrap();
    let observer = Observer::new(ObserveSettings {
        expect: vec![Expected::new("kv", Kind::Kv), Expected::new("aux", Kind::Aux)],
        validate: true,
        ..ObserveSettings::default()
    });
    let scrape = || Scrape::parse(&observer.metrics().encode(Format::Text));
    assert!(!observer.status().ready, "expected groups not registered yet");
    let on_a = observer.agent(&a);

    // The caller's own registration calls, through the observer.
    let kv_desc = Descriptor::host(&kv);
    let aux_desc = Descriptor::host(&aux);
    let mut kv_reg = on_a
        .register("kv", Kind::Kv, &kv_desc, Some(&opts_a))
        .expect("kv registers");
    assert!(!observer.status().ready, "aux still missing");
    let mut aux_reg = on_a
        .register("aux", Kind::Aux, &aux_desc, Some(&opts_a))
        .expect("aux registers");
    let status = observer.status();
    assert!(status.ready, "{status:#?}");
    assert_eq!(status.nixl.agent.as_deref(), Some("prefill-1"));
    let s = scrape();
    assert_eq!(
        s.metric("nixl_agent_registered_bytes").label("group", "kv").value(),
        LEN as f64
    );
    assert_eq!(
        s.metric("nixl_agent_registration_attempts_total")
            .label("group", "aux")
            .value(),
        1.0
    );
    assert_eq!(s.metric("nixl_agent_ready").value(), 1.0);

    // The seed: a null aux pointer. The caller sees exactly the error NIXL
    // gives without the observer, and the failure is recorded by reason.
    let null = Descriptor::new(Region::new(0, AUX, 0), MemType::Dram);
    let direct = a.register_memory(&null, Some(&opts_a)).map(|_| ()).unwrap_err();
    let observed = on_a
        .register("aux", Kind::Aux, &null, Some(&opts_a))
        .map(|_| ())
        .unwrap_err();
    assert_eq!(format!("{observed:?}"), format!("{direct:?}"));
    let s = scrape();
    let failures = s
        .metric("nixl_agent_registration_failures_total")
        .label("group", "aux")
        .label("reason", "invalid_address");
    assert_eq!(failures.value(), 1.0, "validation names the null pointer");
    let status = observer.status();
    let aux_status = status.group("aux").unwrap();
    assert_eq!(aux_status.last_reason, Some(nixl_agent::Reason::InvalidAddress));
    assert_eq!(aux_status.descriptors, 1, "the earlier aux registration still holds");

    // The observed registrations are the ones the process transfers with.
    let (_, name_b) = exchange(&a, &b);
    transfer(&a, XferOp::Write, &kv, &peer, &name_b);
    assert_eq!(peer, kv);
    transfer(&a, XferOp::Read, &aux, &peer[..AUX], &name_b);
    assert_eq!(aux, kv[..AUX]);

    // Deregistration through the observer: gauges drop, NIXL refuses.
    kv_reg.deregister().unwrap();
    aux_reg.deregister().unwrap();
    let s = scrape();
    for group in ["kv", "aux"] {
        assert_eq!(
            s.metric("nixl_agent_registered_descriptors")
                .label("group", group)
                .value(),
            0.0
        );
        assert_eq!(
            s.metric("nixl_agent_deregistrations_total")
                .label("group", group)
                .value(),
            1.0
        );
    }
    assert!(
        !observer.status().ready,
        "a fully deregistered expected group is not ready"
    );
    for (op, local) in [(XferOp::Write, &kv), (XferOp::Read, &aux)] {
        let refused = a.create_xfer_req(op, &dlist(local), &dlist(&peer[..local.len()]), &name_b, None);
        assert!(refused.is_err(), "NIXL still transfers over a deregistered region");
    }
}

#[test]
fn observed_groups_are_capped_and_names_follow_the_label_rules() {
    let (a, backend) = serving_agent("prefill-2");
    let o = opts(&backend);
    let observer = Observer::new(ObserveSettings {
        max_groups: 2,
        ..ObserveSettings::default()
    });
    let bufs: Vec<Vec<u8>> = (0..5).map(|i| pattern(4096, i)).collect();
    let on_a = observer.agent(&a);
    let names = ["layer0", "layer1", "layer2", "bad name\"}", "layer0"];
    let mut regs = Vec::new();
    for (buf, name) in bufs.iter().zip(names) {
        regs.push(on_a.register(name, Kind::Kv, &Descriptor::host(buf), Some(&o)).unwrap());
    }
    let s = scrape_groups(&observer);
    assert_eq!(s, ["layer0", "layer1", "other"], "two by name, the rest under `other`");
    let m = Scrape::parse(&observer.metrics().encode(Format::Text));
    assert_eq!(
        m.metric("nixl_agent_registered_descriptors")
            .label("group", "layer0")
            .value(),
        2.0
    );
    assert_eq!(
        m.metric("nixl_agent_registered_descriptors")
            .label("group", "other")
            .value(),
        2.0
    );
}

fn scrape_groups(o: &Observer) -> Vec<String> {
    let mut g: Vec<String> = o.status().groups.iter().map(|g| g.name.clone()).collect();
    g.sort();
    g
}

/// Dropping an observed registration deregisters it in NIXL, as dropping a
/// nixl-sys handle does — and the recording follows: the group is not ready
/// any more, its gauges read 0, and NIXL itself refuses a transfer over it.
#[test]
fn dropping_an_observed_registration_is_recorded_as_its_deregistration() {
    let (a, backend_a) = serving_agent("prefill-drop");
    let (b, backend_b) = serving_agent("decode-drop");
    let (opts_a, opts_b) = (opts(&backend_a), opts(&backend_b));
    let (kv, aux, peer) = (pattern(LEN, 5), pattern(AUX, 6), pattern(LEN, 7));
    let _peer_reg = b.register_memory(&Descriptor::host(&peer), Some(&opts_b)).unwrap();
    let observer = Observer::new(ObserveSettings {
        expect: vec![Expected::new("kv", Kind::Kv), Expected::new("aux", Kind::Aux)],
        ..ObserveSettings::default()
    });
    let on_a = observer.agent(&a);
    let _kv_reg = on_a
        .register("kv", Kind::Kv, &Descriptor::host(&kv), Some(&opts_a))
        .unwrap();
    let aux_reg = on_a
        .register("aux", Kind::Aux, &Descriptor::host(&aux), Some(&opts_a))
        .unwrap();
    assert!(observer.status().ready);
    // The agent's UCX backend, created before the observer saw the agent,
    // is recorded as up (a setting naming it never made it a series).
    let s = Scrape::parse(&observer.metrics().encode(Format::Text));
    assert_eq!(s.metric("nixl_agent_backend_up").label("backend", "UCX").value(), 1.0);
    let (_, name_b) = exchange(&a, &b);
    transfer(&a, XferOp::Write, &aux, &peer[..AUX], &name_b);

    drop(aux_reg);
    let status = observer.status();
    assert!(!status.ready, "aux is gone from NIXL: {status:#?}");
    assert_eq!(status.group("aux").unwrap().descriptors, 0);
    let s = Scrape::parse(&observer.metrics().encode(Format::Text));
    assert_eq!(
        s.metric("nixl_agent_registered_descriptors")
            .label("group", "aux")
            .value(),
        0.0
    );
    assert_eq!(s.metric("nixl_agent_ready").value(), 0.0);
    // NIXL's own view agrees: no transfer over the dropped region.
    let refused = a.create_xfer_req(XferOp::Write, &dlist(&aux), &dlist(&peer[..AUX]), &name_b, None);
    assert!(refused.is_err(), "NIXL still holds the dropped registration");
}

/// A backend created through the observed agent is recorded as created —
/// or, when NIXL refuses it, as down with the reason — and a backend merely
/// named by the observer's settings is no series at all.
#[test]
fn observed_backends_are_what_the_agent_created() {
    nixl_agent::load_nixl(Some(&support::nixl_lib_dir())).expect("NIXL runtime from the wheel");
    let a = Agent::new("prefill-backends").expect("NIXL agent");
    let observer = Observer::new(ObserveSettings {
        backends: vec!["UCX".into(), "POSIX".into()],
        ..ObserveSettings::default()
    });
    let on_a = observer.agent(&a);
    let scrape = || Scrape::parse(&observer.metrics().encode(Format::Text));
    assert!(
        scrape().metric("nixl_agent_backend_up").samples().is_empty(),
        "no backend yet"
    );
    let (_, params) = a.get_plugin_params("UCX").expect("UCX plugin");
    let backend = on_a.create_backend("UCX", &params).expect("UCX backend");
    let opts = opts(&backend);
    let buf = pattern(AUX, 9);
    let _reg = on_a
        .register("kv", Kind::Kv, &Descriptor::host(&buf), Some(&opts))
        .unwrap();
    let s = scrape();
    assert_eq!(s.metric("nixl_agent_backend_up").label("backend", "UCX").value(), 1.0);
    assert!(
        s.metric("nixl_agent_backend_up")
            .label("backend", "POSIX")
            .samples()
            .is_empty(),
        "POSIX was only named by the settings"
    );
    // The call is labelled with the backend the agent created.
    assert_eq!(
        s.metric("nixl_agent_registered_descriptors")
            .label("group", "kv")
            .label("backend", "UCX")
            .value(),
        1.0
    );
    let refused = on_a.create_backend("NO_SUCH_PLUGIN", &params);
    assert!(refused.is_err());
    let status = observer.status();
    let down = status
        .backends
        .iter()
        .find(|b| b.name == "NO_SUCH_PLUGIN")
        .expect("recorded");
    assert!(!down.up);
    assert_eq!(down.reason, Some(nixl_agent::Reason::BackendInitFailed));
}
