//! Faults against the real binary and NIXL: signals at the wrong moment, a
//! killed agent restarting, a missing plugin dir, a backend that cannot be
//! created, a required group that never registers.

use crate::support::{self, AgentProcess, Spawn};
use std::time::{Duration, Instant};

const WAIT: Duration = Duration::from_secs(30);

#[test]
fn sigterm_during_registration_drains_what_was_registered() {
    // A group large enough that SIGTERM lands while the lifecycle is busy.
    let cfg = "[[group]]\nname='kv'\nkind='kv'\nmem_type='DRAM'\ncount=16384\nsize='4KiB'\n\
               [[group]]\nname='aux'\nkind='aux'\nmem_type='DRAM'\ncount=4\nsize='4KiB'\n";
    let mut a = AgentProcess::spawn(Spawn {
        config: Some(cfg),
        ..Default::default()
    });
    support::wait_for(WAIT, "backend created", || {
        (!a.events("NIXL backend created").is_empty()).then_some(())
    });
    a.signal("TERM");
    assert_eq!(a.wait_exit(WAIT).code(), Some(0), "{}", a.log().join("\n"));
    let registered: u64 = a
        .events("group registered")
        .iter()
        .map(|e| e["descriptors"].as_u64().unwrap())
        .sum();
    let drained = a.events("drain complete");
    assert_eq!(drained.len(), 1);
    assert_eq!(
        drained[0]["deregistered_descriptors"].as_u64().unwrap(),
        registered,
        "everything registered was deregistered"
    );
    assert_eq!(drained[0]["registered_descriptors"], 0);
}

#[test]
fn sigkill_then_restart_starts_clean_on_the_same_port() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let listen = format!("127.0.0.1:{port}");
    let mut a = AgentProcess::spawn(Spawn {
        args: &["--listen", &listen],
        ..Default::default()
    });
    a.wait_ready(WAIT);
    a.signal("KILL");
    a.wait_exit(WAIT);
    let b = AgentProcess::spawn(Spawn {
        args: &["--listen", &listen],
        ..Default::default()
    });
    b.wait_ready(WAIT);
    assert_eq!(b.addr.port(), port);
    assert_eq!(
        b.scrape()
            .metric("nixl_agent_registered_descriptors")
            .label("group", "kv")
            .value(),
        8.0
    );
}

#[test]
fn second_sigterm_during_a_long_drain_exits_fast() {
    // 131072 regions: NIXL's deregistration is slow enough at this size
    // (seconds) for a second signal to land during the drain.
    let cfg = "[[group]]\nname='kv'\nkind='kv'\nmem_type='DRAM'\ncount=131072\nsize='4KiB'\n";
    let mut a = AgentProcess::spawn(Spawn {
        config: Some(cfg),
        ..Default::default()
    });
    a.wait_ready(Duration::from_secs(60));
    a.signal("TERM");
    std::thread::sleep(Duration::from_millis(300));
    a.signal("TERM");
    let t = Instant::now();
    let code = a.wait_exit(WAIT).code();
    assert!(
        t.elapsed() < Duration::from_secs(3),
        "exited {:?} after the second signal",
        t.elapsed()
    );
    let log = a.log().join("\n");
    if code == Some(1) {
        assert!(log.contains("second signal"), "{log}");
        assert!(log.contains("interrupted by a second signal"), "{log}");
    } else {
        // The drain finished first: then it must have been complete.
        assert_eq!(code, Some(0));
        assert_eq!(a.events("drain complete")[0]["registered_descriptors"], 0);
    }
}

#[test]
fn missing_plugin_dir_is_plugin_unavailable_and_the_agent_stays_up() {
    let a = AgentProcess::spawn(Spawn {
        env: &[("NIXL_PLUGIN_DIR", "/nonexistent/plugins")],
        ..Default::default()
    });
    let s = a.wait_metrics("plugin_unavailable", WAIT, |s| {
        s.metric("nixl_agent_registration_failures_total")
            .label("group", "kv")
            .label("reason", "plugin_unavailable")
            .sum()
            >= 1.0
    });
    assert_eq!(s.metric("nixl_agent_backend_up").label("backend", "UCX").value(), 0.0);
    assert_eq!(a.get("/readyz").status, 503);
    assert_eq!(a.get("/livez").status, 200);
}

#[test]
fn backend_creation_failing_is_backend_init_failed_with_ucx_diagnostics() {
    let a = AgentProcess::spawn(Spawn {
        env: &[("UCX_TLS", "no_such_transport")],
        ..Default::default()
    });
    let s = a.wait_metrics("backend_init_failed", WAIT, |s| {
        s.metric("nixl_agent_registration_failures_total")
            .label("group", "kv")
            .label("reason", "backend_init_failed")
            .sum()
            >= 1.0
    });
    assert_eq!(s.metric("nixl_agent_backend_up").label("backend", "UCX").value(), 0.0);
    let st = a.status();
    assert_eq!(st["backends"][0]["reason"], "backend_init_failed");
    let diag = st["groups"][0]["last_diagnostics"].as_array().unwrap();
    assert!(
        diag.iter()
            .any(|l| l.as_str().unwrap().contains("no usable transports")),
        "UCX's own words: {diag:?}"
    );
}

#[test]
fn a_required_group_failing_forever_keeps_the_agent_up_with_capped_backoff() {
    let cfg = "[retry]\ninitial_backoff='50ms'\nmax_backoff='100ms'\n\
               [[group]]\nname='kv'\nkind='kv'\nmem_type='DRAM'\ncount=1\nsize='4KiB'\nbackends=['NOPE']\n";
    let mut a = AgentProcess::spawn(Spawn {
        config: Some(cfg),
        ..Default::default()
    });
    let s = a.wait_metrics("10 attempts", WAIT, |s| {
        s.metric("nixl_agent_registration_attempts_total")
            .label("group", "kv")
            .value()
            >= 10.0
    });
    assert_eq!(s.metric("nixl_agent_ready").value(), 0.0);
    let delays: Vec<u64> = a
        .events("retry scheduled")
        .iter()
        .map(|e| e["after_ms"].as_u64().unwrap())
        .collect();
    assert!(delays.iter().all(|d| *d <= 100), "capped: {delays:?}");
    assert!(a.is_running());
    assert_eq!(a.get("/livez").status, 200);
    a.signal("TERM");
    assert_eq!(a.wait_exit(WAIT).code(), Some(0));
}

/// A NIXL call past its deadline (`nixl_call_timeout`): NIXL 1.5.1
/// deregisters region by region in O(N) each, so re-registering a group of
/// 65,536 regions spends seconds in deregistration — past a 1 s deadline.
/// While it runs: a `timeout` failure of the group, /livez 503 naming the
/// call, not ready; when it returns: all clear, and the group registers.
/// (Backend creation is not used: while UCX initialises, the whole process
/// stalls and the probes cannot answer at all.)
#[test]
fn a_nixl_call_past_its_deadline_fails_livez_until_it_returns() {
    // A group registers and deregisters in one NIXL call each: 262,144
    // regions (1 GiB) keep that call busy for hundreds of milliseconds,
    // far past the shortest deadline.
    let cfg = "nixl_call_timeout='10ms'\nshutdown_grace='30s'\n\
               [[group]]\nname='kv'\nkind='kv'\nmem_type='DRAM'\ncount=262144\nsize='4KiB'\nvalidate=false\n";
    let mut a = AgentProcess::spawn(Spawn {
        config: Some(cfg),
        ..Default::default()
    });
    a.wait_ready(WAIT);
    a.signal("USR1");
    let stuck = support::wait_for(WAIT, "/livez 503 while kv deregisters", || {
        let r = a.get("/livez");
        (r.status == 503).then_some(r.body)
    });
    assert!(
        stuck.starts_with("NIXL deregister of group kv past its deadline ("),
        "{stuck}"
    );
    let verbose = a.get("/readyz?verbose");
    assert_eq!(verbose.status, 503);
    assert!(
        verbose.body.contains("[-]lifecycle failed: timeout"),
        "{}",
        verbose.body
    );
    assert_eq!(a.scrape().metric("nixl_agent_lifecycle_stuck").value(), 1.0);

    support::wait_for(WAIT, "/livez 200 once the call returned", || {
        (a.get("/livez").status == 200).then_some(())
    });
    a.wait_ready(WAIT);
    support::assert_projections_agree(a.addr);
    let s = a.scrape();
    assert_eq!(s.metric("nixl_agent_lifecycle_stuck").value(), 0.0);
    // A stuck deregistration is no registration failure: the family counts
    // attempts that ended failed, once, with the reason they ended with.
    assert_eq!(
        s.metric("nixl_agent_registration_failures_total")
            .label("group", "kv")
            .sum(),
        0.0,
        "a call past its deadline is stuck, not failed"
    );
    assert_eq!(
        s.metric("nixl_agent_group_registered").label("group", "kv").value(),
        1.0
    );
    assert!(!a
        .events("a NIXL call is past its deadline: not ready, /livez failing until it returns")
        .is_empty());
    assert!(!a.events("the NIXL call past its deadline returned").is_empty());
    a.signal("TERM");
    assert_eq!(a.wait_exit(WAIT).code(), Some(0));
}

/// A SIGTERM that lands while NIXL is still being loaded (before the agent
/// serves anything) is handled by a drain, not by the default action: the
/// handlers exist before the lifecycle starts.
#[test]
fn sigterm_while_nixl_loads_exits_through_the_drain() {
    let mut a = AgentProcess::spawn(Spawn::default());
    let maps = format!("/proc/{}/maps", a.pid());
    support::wait_for(WAIT, "libnixl_capi.so being mapped", || {
        std::fs::read_to_string(&maps)
            .ok()
            .filter(|m| m.contains("libnixl_capi"))
            .map(|_| ())
    });
    a.signal("TERM");
    let status = a.wait_exit(WAIT);
    assert_eq!(
        status.code(),
        Some(0),
        "killed by the signal instead of draining: {status}\n{}",
        a.log().join("\n")
    );
    assert_eq!(a.events("drain complete").len(), 1);
}
