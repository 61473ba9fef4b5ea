//! The `nixl-agent` binary against the real NIXL runtime (UCX registering
//! DRAM on this CPU-only machine): readiness, metrics, failures, signals.

use crate::support::{self, AgentProcess, Spawn};
use std::time::Duration;

const READY: Duration = Duration::from_secs(30);
const M_REG_DESC: &str = "nixl_agent_registered_descriptors";
const M_REG_BYTES: &str = "nixl_agent_registered_bytes";
const M_FAILURES: &str = "nixl_agent_registration_failures_total";
const M_ATTEMPTS: &str = "nixl_agent_registration_attempts_total";

#[test]
fn default_plan_becomes_ready_with_descriptors_and_bytes_per_group() {
    let agent = AgentProcess::spawn(Spawn::default());
    agent.wait_ready(READY);
    support::assert_projections_agree(agent.addr);
    let s = agent.scrape();
    assert_eq!(
        s.metric(M_REG_DESC)
            .label("group", "kv")
            .label("kind", "kv")
            .label("mem_type", "DRAM")
            .value(),
        8.0
    );
    assert_eq!(
        s.metric(M_REG_BYTES).label("group", "kv").value(),
        (8 * 512 * 1024) as f64
    );
    assert_eq!(s.metric(M_REG_DESC).label("group", "aux").value(), 4.0);
    assert_eq!(
        s.metric(M_REG_BYTES).label("group", "aux").value(),
        (4 * 64 * 1024) as f64
    );
    assert_eq!(s.metric("nixl_agent_ready").value(), 1.0);
    assert_eq!(s.metric("nixl_agent_nixl_available").value(), 1.0);
    assert_eq!(s.metric("nixl_agent_backend_up").label("backend", "UCX").value(), 1.0);
    assert_eq!(
        s.metric(M_ATTEMPTS)
            .label("group", "kv")
            .label("backend", "UCX")
            .value(),
        1.0
    );
    assert_eq!(s.metric(M_FAILURES).label("group", "kv").sum(), 0.0);
    // Failure series appear with the first failure (the series budget);
    // the attempt, duration and state series exist from the start.
    assert!(s.metric(M_FAILURES).samples().is_empty());
    assert!(s
        .metric("nixl_agent_deregistration_failures_total")
        .samples()
        .is_empty());
    assert_eq!(
        s.metric("nixl_agent_registration_descriptors_count")
            .label("group", "kv")
            .value(),
        1.0
    );
    assert_eq!(
        s.metric("nixl_agent_registration_descriptors_sum")
            .label("group", "kv")
            .value(),
        8.0
    );
    assert!(s.metric("nixl_agent_time_to_ready_seconds").value() > 0.0);
    let build = s
        .metric("nixl_agent_build_info")
        .label("nixl_version", "1.5.1")
        // The binding is the runtime's own version (the wheel stops at 1.5.1).
        .label("nixl_sys_version", "1.5.1")
        .label("version", env!("CARGO_PKG_VERSION"));
    assert_eq!(build.value(), 1.0);
    assert!(s.metric("process_resident_memory_bytes").value() > 0.0);

    let verbose = agent.get("/readyz?verbose");
    assert_eq!(verbose.status, 200);
    assert_eq!(verbose.body, "[+]nixl ok\n[+]group:kv ok\n[+]group:aux ok\nok\n");
    assert_eq!(agent.get("/livez").status, 200);
    let st = agent.status();
    assert_eq!(st["nixl"]["found_by"], "configured");
    assert_eq!(st["nixl"]["binding_version"], st["nixl"]["version"]);
    assert_eq!(st["nixl"]["version"], "1.5.1");
    assert!(st["nixl"]["plugins"].as_array().unwrap().iter().any(|p| p == "UCX"));
    assert_eq!(st["groups"][0]["state"], "registered");
    assert_eq!(st["groups"][0]["descriptors"], 8);
}

#[test]
fn promtool_check_metrics_is_clean_on_a_live_scrape() {
    let agent = AgentProcess::spawn(Spawn::default());
    agent.wait_ready(READY);
    for accept in [
        None,
        Some("application/openmetrics-text;version=1.0.0,text/plain;q=0.5"),
    ] {
        let headers: Vec<(&str, &str)> = accept.map(|a| vec![("Accept", a)]).unwrap_or_default();
        let r = support::request(agent.addr, "GET", "/metrics", &headers).unwrap();
        assert_eq!(r.status, 200);
        match accept {
            None => assert_eq!(
                r.header("content-type"),
                Some("text/plain; version=0.0.4; charset=utf-8")
            ),
            Some(_) => {
                assert!(r
                    .header("content-type")
                    .unwrap()
                    .starts_with("application/openmetrics-text; version=1.0.0"));
                assert!(r.body.ends_with("# EOF\n"));
                assert!(r.body.contains("# TYPE nixl_agent_registration_attempts counter"));
            }
        }
        if accept.is_some() {
            continue; // promtool check metrics reads the text format
        }
        support::assert_promtool_clean(&r.body);
    }
}

#[test]
fn sigterm_drains_every_registration_and_exits_zero() {
    let mut agent = AgentProcess::spawn(Spawn::default());
    agent.wait_ready(READY);
    assert!(agent.scrape().metric(M_REG_DESC).sum() > 0.0);
    agent.signal("TERM");
    let status = agent.wait_exit(Duration::from_secs(15));
    assert_eq!(status.code(), Some(0), "log:\n{}", agent.log().join("\n"));
    let groups = agent.events("group deregistered");
    let total: u64 = groups.iter().map(|e| e["descriptors"].as_u64().unwrap()).sum();
    assert_eq!(total, 12, "kv 8 + aux 4 deregistered");
    assert!(groups.iter().all(|e| e["failed"] == 0));
    let done = agent.events("drain complete");
    assert_eq!(done.len(), 1);
    assert_eq!(done[0]["registered_descriptors"], 0);
    assert_eq!(done[0]["deregistered_descriptors"], 12);
}

#[cfg_attr(
    nixl_agent_cuda,
    ignore = "CPU-only: a CUDA driver is present, so VRAM is available (tests/gpu.rs covers it)"
)]
#[test]
fn vram_group_without_cuda_is_cuda_unavailable() {
    assert!(
        !nixl_agent::cuda_driver_present(),
        "built without a CUDA driver, but one loads now"
    );
    let cfg = "[[group]]\nname='kv'\nkind='kv'\nmem_type='VRAM'\ncount=2\nsize='1MiB'\n\
               [[group]]\nname='aux'\nkind='aux'\nmem_type='DRAM'\ncount=2\nsize='4KiB'\n";
    let agent = AgentProcess::spawn(Spawn {
        config: Some(cfg),
        ..Default::default()
    });
    let s = agent.wait_metrics("a cuda_unavailable failure", READY, |s| {
        s.metric(M_FAILURES)
            .label("group", "kv")
            .label("reason", "cuda_unavailable")
            .sum()
            >= 1.0
    });
    assert_eq!(
        s.metric(M_REG_DESC)
            .label("group", "kv")
            .label("mem_type", "VRAM")
            .value(),
        0.0
    );
    assert_eq!(
        s.metric("nixl_agent_group_registered").label("group", "kv").value(),
        0.0
    );
    let s = agent.wait_metrics("aux registered", READY, |s| {
        s.metric(M_REG_DESC).label("group", "aux").value() == 2.0
    });
    assert_eq!(s.metric("nixl_agent_ready").value(), 0.0);
    let r = agent.get("/readyz?verbose");
    assert_eq!(r.status, 503);
    assert!(r.body.contains("[-]group:kv failed: cuda_unavailable"), "{}", r.body);
    assert!(r.body.contains("[+]group:aux ok"), "{}", r.body);
}

#[test]
fn missing_library_is_nixl_unavailable_and_the_agent_keeps_serving() {
    let mut agent = AgentProcess::spawn(Spawn {
        no_nixl: true,
        env: &[("NIXL_LIB_DIR", "/nonexistent/nixl/lib")],
        ..Default::default()
    });
    // The reason (NixlUnavailable) and the phase (the machine's next step)
    // are two events: wait for the state both lead to.
    let st = support::wait_for(READY, "nixl reason and phase in status", || {
        let st = agent.status();
        (!st["nixl"]["reason"].is_null() && st["phase"] == "unavailable").then_some(st)
    });
    assert_eq!(st["nixl"]["reason"], "nixl_unavailable");
    assert_eq!(st["nixl"]["available"], false);
    assert_eq!(st["phase"], "unavailable");
    assert!(st["nixl"]["searched"][0]
        .as_str()
        .unwrap()
        .starts_with("/nonexistent/nixl/lib/libnixl_capi.so"));
    assert!(st["nixl"]["error"].as_str().unwrap().contains("/nonexistent/nixl/lib"));
    assert_eq!(agent.get("/livez").status, 200);
    let r = agent.get("/readyz?verbose");
    assert_eq!(r.status, 503);
    // The check names its fix: the configured folder is the wrong one.
    assert!(
        r.body
            .starts_with("[-]nixl failed: nixl_unavailable; fix: point NIXL_LIB_DIR (or --nixl-lib-dir"),
        "{}",
        r.body
    );
    assert!(r.body.contains(".nixl_cu12.mesonpy.libs"), "{}", r.body);
    assert!(st["nixl"]["fix"].as_str().unwrap().contains("NIXL_LIB_DIR"), "{st}");
    let s = agent.scrape();
    assert_eq!(s.metric("nixl_agent_nixl_available").value(), 0.0);
    assert_eq!(s.metric("nixl_agent_ready").value(), 0.0);
    support::assert_projections_agree(agent.addr);
    assert_eq!(
        s.metric("nixl_agent_build_info")
            .label("nixl_version", "unknown")
            .value(),
        1.0
    );
    assert_eq!(s.metric(M_ATTEMPTS).sum(), 0.0);
    std::thread::sleep(Duration::from_millis(300));
    assert!(agent.is_running(), "no nixl-sys abort");
    agent.signal("TERM");
    assert_eq!(agent.wait_exit(Duration::from_secs(10)).code(), Some(0));
}

/// `target/release/nixl-agent run` with no NIXL_LIB_DIR, no virtualenv and
/// no NIXL on the system: the log line and /readyz?verbose name the fix
/// (the variable, the flag, the virtualenv and where the wheel puts it).
#[test]
fn nixl_not_found_names_its_fix_in_the_log_line_and_readyz() {
    let home = tempfile::tempdir().unwrap();
    let home = home.path().to_str().unwrap();
    let agent = AgentProcess::spawn(Spawn {
        no_nixl: true,
        env: &[
            ("PATH", "/usr/bin:/bin"),
            ("HOME", home),
            ("VIRTUAL_ENV", ""),
            ("PYTHONPATH", ""),
        ],
        ..Default::default()
    });
    // The reason (NixlUnavailable) and the phase (the machine's next step)
    // are two events: wait for the state both lead to.
    let st = support::wait_for(READY, "nixl reason and phase in status", || {
        let st = agent.status();
        (!st["nixl"]["reason"].is_null() && st["phase"] == "unavailable").then_some(st)
    });
    assert_eq!(st["nixl"]["reason"], "nixl_unavailable", "{st}");
    let r = agent.get("/readyz?verbose");
    assert_eq!(r.status, 503);
    let first = r.body.lines().next().unwrap();
    for fix in [
        "fix: set NIXL_LIB_DIR (or --nixl-lib-dir)",
        "activate the virtualenv that has NIXL installed",
        "pip install nixl-cu12",
        "site-packages/.nixl_cu12.mesonpy.libs",
    ] {
        assert!(first.contains(fix), "no {fix:?} in {first}");
    }
    let line = agent
        .events("NIXL runtime unavailable; serving probes, never ready")
        .pop()
        .unwrap_or_else(|| panic!("no unavailable line: {:?}", agent.log()));
    let error = line["error"].as_str().unwrap_or_else(|| panic!("{line}"));
    assert!(error.contains("fix: set NIXL_LIB_DIR (or --nixl-lib-dir)"), "{error}");
    assert!(
        error.find("fix:") < error.find("searched:"),
        "the fix comes before the searched paths: {error}"
    );
}

#[test]
fn absent_backend_plugin_is_plugin_unavailable() {
    let cfg = "[[group]]\nname='kv'\nkind='kv'\nmem_type='DRAM'\ncount=2\nsize='64KiB'\nbackends=['MOONCAKE']\n";
    let agent = AgentProcess::spawn(Spawn {
        config: Some(cfg),
        ..Default::default()
    });
    let s = agent.wait_metrics("plugin_unavailable", READY, |s| {
        s.metric(M_FAILURES)
            .label("group", "kv")
            .label("backend", "MOONCAKE")
            .label("reason", "plugin_unavailable")
            .sum()
            >= 1.0
    });
    assert_eq!(
        s.metric("nixl_agent_backend_up").label("backend", "MOONCAKE").value(),
        0.0
    );
    assert_eq!(s.metric(M_REG_DESC).label("group", "kv").value(), 0.0);
    let st = agent.status();
    assert_eq!(st["backends"][0]["reason"], "plugin_unavailable");
    assert!(st["groups"][0]["last_error"].as_str().unwrap().contains("MOONCAKE"));
    assert_eq!(agent.get("/readyz").status, 503);
}

#[test]
fn failing_group_is_retried_with_capped_backoff_while_others_stay_registered() {
    let cfg = "[retry]\ninitial_backoff='200ms'\nmax_backoff='400ms'\n\
               [[group]]\nname='kv'\nkind='kv'\nmem_type='DRAM'\ncount=2\nsize='64KiB'\n\
               [[group]]\nname='bad'\nkind='state'\nmem_type='DRAM'\ncount=1\nsize='4KiB'\nbackends=['NOPE']\nrequired=false\n";
    let agent = AgentProcess::spawn(Spawn {
        config: Some(cfg),
        ..Default::default()
    });
    agent.wait_ready(READY); // `bad` is optional: kv alone gates readiness
    let s = agent.wait_metrics("5 attempts of `bad`", READY, |s| {
        s.metric(M_ATTEMPTS).label("group", "bad").value() >= 5.0
    });
    assert_eq!(s.metric(M_REG_DESC).label("group", "kv").value(), 2.0);
    // The log holds one failure per attempt and a scheduled retry between.
    let retries: Vec<u64> = agent
        .events("retry scheduled")
        .iter()
        .filter(|e| e["group"] == "bad")
        .map(|e| e["after_ms"].as_u64().unwrap())
        .collect();
    assert!(retries.len() >= 4, "{retries:?}");
    assert_eq!(
        &retries[..4],
        &[200, 400, 400, 400],
        "doubles, then capped at max_backoff"
    );
    let failed = agent.events("group registration failed");
    let ts: Vec<chrono_free::Ts> = failed
        .iter()
        .filter(|e| e["group"] == "bad")
        .map(chrono_free::ts)
        .collect();
    for (pair, want) in ts.windows(2).zip([200u64, 400, 400]) {
        let gap = pair[1].0 - pair[0].0;
        assert!(gap + 5 >= want as i64, "attempts {gap} ms apart, backoff was {want} ms");
    }
    assert_eq!(agent.status()["groups"][1]["state"], "failed");
}

/// The group state outlives the alert windows: an optional group that gave
/// up says so for as long as the agent runs; no sentinels.
#[test]
fn group_state_says_gave_up_and_memlock_has_no_sentinel() {
    let cfg = "[retry]\ninitial_backoff='50ms'\nmax_backoff='50ms'\nmax_attempts=2\n\
               [[group]]\nname='kv'\nkind='kv'\nmem_type='DRAM'\ncount=2\nsize='64KiB'\n\
               [[group]]\nname='bad'\nkind='state'\nmem_type='DRAM'\ncount=1\nsize='4KiB'\nbackends=['NOPE']\nrequired=false\n";
    let agent = AgentProcess::spawn(Spawn {
        config: Some(cfg),
        ..Default::default()
    });
    let state = |s: &support::Scrape, group: &str, state: &str| {
        s.metric("nixl_agent_group_state")
            .label("group", group)
            .label("state", state)
            .value()
    };
    let s = agent.wait_metrics("bad gave up", READY, |s| state(s, "bad", "gave_up") == 1.0);
    for st in ["pending", "registering", "registered", "failed", "deregistered"] {
        assert_eq!(state(&s, "bad", st), 0.0, "bad {st}");
    }
    assert_eq!(state(&s, "kv", "registered"), 1.0);
    assert_eq!(s.metric("nixl_agent_group_state").label("group", "kv").sum(), 1.0);
    assert_eq!(agent.status()["groups"][1]["state"], "gave_up");
    // Unlimited is +Inf, never -1; the capability is its own gauge.
    let limit = s.metric("nixl_agent_memlock_limit_bytes").value();
    assert!(limit > 0.0, "{limit}");
    let exempt = s.metric("nixl_agent_memlock_exempt").value();
    assert!(exempt == 0.0 || exempt == 1.0, "{exempt}");
    assert!(s.metric("nixl_agent_time_to_ready_seconds").value() > 0.0);
}

/// The node canary: the default plan registered again every
/// probe_interval, its metrics marked role="canary", within 100 series.
#[test]
fn canary_reregisters_every_probe_interval_and_says_it_is_a_canary() {
    let agent = AgentProcess::spawn(Spawn {
        config: Some("probe_interval = '1s'\n"),
        ..Default::default()
    });
    agent.wait_ready(READY);
    let s = agent.wait_metrics("three attempts of kv", Duration::from_secs(15), |s| {
        s.metric(M_ATTEMPTS).label("group", "kv").value() >= 3.0
    });
    assert_eq!(s.metric("nixl_agent_build_info").label("role", "canary").value(), 1.0);
    assert!(s.metric(M_FAILURES).samples().is_empty(), "every probe registered");
    assert!(
        s.metric("nixl_agent_deregistrations_total")
            .label("group", "kv")
            .value()
            >= 2.0
    );
    assert_eq!(agent.get("/readyz").status, 200);
    // After the registrations, a loopback round on two NIXL agents of its own.
    let s = agent.wait_metrics("two loopback rounds", Duration::from_secs(15), |s| {
        s.metric("nixl_agent_probe_transfers_total")
            .label("outcome", "ok")
            .sum()
            >= 2.0
    });
    assert_eq!(s.metric("nixl_agent_probe_transfer_up").value(), 1.0);
    assert_eq!(
        s.metric("nixl_agent_probe_transfers_total")
            .label("outcome", "error")
            .value(),
        0.0
    );
    for op in ["read", "write"] {
        let bps = s
            .metric("nixl_agent_probe_transfer_bytes_per_second")
            .label("op", op)
            .value();
        assert!(bps > 1e6, "{op}: {bps} B/s for a 1 MiB loopback transfer");
    }
    // Freshness: the interval, and when the last round ended (now-ish).
    assert_eq!(s.metric("nixl_agent_probe_interval_seconds").value(), 1.0);
    let stamp = s
        .metric("nixl_agent_probe_transfer_last_round_timestamp_seconds")
        .value();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    assert!(stamp > now - 10.0 && stamp <= now + 1.0, "{stamp} vs now {now}");
    // /v1/status says the same: the one record the families render from.
    let probe = &agent.status()["probe"];
    assert_eq!(probe["up"], true, "{probe}");
    assert_eq!(probe["interval_seconds"], 1.0, "{probe}");
    assert!(probe["last_round_unix_seconds"].as_f64().unwrap() >= stamp, "{probe}");
    assert!(probe["rounds_ok"].as_u64().unwrap() >= 2, "{probe}");
    assert!(probe["last_error"].is_null(), "{probe}");
    // The canary moves no KV: no data-path families of a serving process.
    assert!(s.metric("nixl_agent_transfers_total").samples().is_empty());
    let series = agent
        .get("/metrics")
        .body
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .count();
    assert!(series <= 100, "{series} series for the canary");
}

/// A canary whose UCX cannot connect two of its own agents (UCX_TLS=self:
/// no transport between workers) says its data path is broken, by reason,
/// in /metrics, /v1/status and its log — and says nothing of that kind
/// when it is not a canary.
#[test]
fn a_canary_whose_loopback_fails_says_so_by_reason() {
    let mut agent = AgentProcess::spawn(Spawn {
        config: Some("probe_interval = '1s'\n"),
        env: &[("UCX_TLS", "self")],
        ..Default::default()
    });
    let s = agent.wait_metrics("a failed loopback round", Duration::from_secs(20), |s| {
        s.metric("nixl_agent_probe_transfers_total")
            .label("outcome", "error")
            .sum()
            >= 2.0
    });
    assert_eq!(s.metric("nixl_agent_probe_transfer_up").value(), 0.0);
    assert_eq!(
        s.metric("nixl_agent_probe_transfers_total")
            .label("outcome", "ok")
            .value(),
        0.0
    );
    let probe = agent.status()["probe"].clone();
    assert_eq!(probe["up"], false, "{probe}");
    let last = probe["last_reason"].as_str().unwrap().to_string();
    let failures = s.metric("nixl_agent_probe_transfer_failures_total");
    let reasons: Vec<&str> = failures
        .samples()
        .iter()
        .flat_map(|x| x.labels.iter().filter(|(k, _)| k == "reason").map(|(_, v)| v.as_str()))
        .collect();
    assert_eq!(reasons, [last.as_str()], "the reason label is the status's last_reason");
    assert!(!probe["last_error"].as_str().unwrap().is_empty(), "{probe}");
    agent.signal("TERM");
    assert!(
        agent.wait_exit(Duration::from_secs(15)).code().is_some(),
        "drained and exited"
    );
    assert!(
        agent
            .log()
            .iter()
            .any(|l| l.contains("canary loopback transfer failed") && l.contains(&last)),
        "{:?}",
        agent.log()
    );

    // Not a canary: no round, no probe families.
    let plain = AgentProcess::spawn(Spawn::default());
    plain.wait_ready(READY);
    let s = plain.scrape();
    assert!(s.metric("nixl_agent_probe_transfer_up").samples().is_empty());
    assert!(s.metric("nixl_agent_probe_interval_seconds").samples().is_empty());
    assert!(plain.status()["probe"].is_null());
}

#[test]
fn bad_config_exits_2_naming_the_key_and_starts_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        (
            "[[group]]\nname='kv'\nkind='kv'\nmem_type='DRAM'\ncount=0\nsize='4KiB'\n",
            "group[0].count",
        ),
        ("lisen = '127.0.0.1:1'\n", "lisen"),
        ("probe_interval = '10ms'\n", "probe_interval"),
        (
            "[[group]]\nname='kv'\nkind='kv'\nmem_type='DRAM'\ncount=4\nsize='4 parsecs'\n",
            "size",
        ),
        (
            "[[group]]\nname='kv'\nkind='kv'\nmem_type='DRAM'\ncount=1000000000000\nsize='1MiB'\n",
            "group[0].count",
        ),
    ];
    for (text, key) in cases {
        let path = dir.path().join("bad.toml");
        std::fs::write(&path, text).unwrap();
        let out = support::binary()
            .args(["run", "--listen", "127.0.0.1:0", "--config"])
            .arg(&path)
            .env("NIXL_LIB_DIR", support::nixl_lib_dir())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{text:?}: {err}");
        assert!(err.contains(key), "{text:?}: stderr does not name {key}: {err}");
        assert!(!err.contains("serving"), "nothing may start: {err}");
    }
    let out = support::binary()
        .args(["run", "--listen", "not-an-address"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--listen"));
    // A log filter that does not parse is one line naming key and value,
    // never the default filter taken silently.
    let out = support::binary()
        .args(["run", "--listen", "127.0.0.1:0"])
        .env("NIXL_AGENT_LOG", "notalevel[")
        .env("NIXL_LIB_DIR", support::nixl_lib_dir())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.starts_with("nixl-agent: config key `NIXL_AGENT_LOG`: `notalevel[` is not a log filter"),
        "{err}"
    );
    assert!(err.contains("e.g. info, warn, nixl_agent=debug"), "{err}");
}

#[test]
fn port_in_use_fails_fast_and_registers_nothing() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let out = support::binary()
        .args(["run", "--log-format", "json", "--listen", &addr])
        .env("NIXL_LIB_DIR", support::nixl_lib_dir())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains(&addr) && err.contains("cannot listen"), "{err}");
    // The line names its fix.
    assert!(
        err.contains("give a free ADDR:PORT with --listen, NIXL_AGENT_LISTEN or `listen` in the config"),
        "{err}"
    );
    assert!(!err.contains("group registered"), "{err}");
}

#[test]
fn help_matches_the_snapshot() {
    let out = support::binary().arg("--help").output().unwrap();
    assert!(out.status.success());
    let help = String::from_utf8(out.stdout).unwrap();
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/snapshots/help.txt");
    if std::env::var_os("UPDATE_SNAPSHOTS").is_some() {
        std::fs::write(&path, &help).unwrap();
    }
    let want = std::fs::read_to_string(&path).expect("tests/snapshots/help.txt (UPDATE_SNAPSHOTS=1 writes it)");
    assert_eq!(
        help, want,
        "--help changed; rerun with UPDATE_SNAPSHOTS=1 and review the diff"
    );
}

/// Timestamps of JSON log lines ("2026-11-30T15:24:19.702351Z") as
/// milliseconds within the day: enough to measure gaps between attempts.
mod chrono_free {
    pub struct Ts(pub i64);

    pub fn ts(e: &serde_json::Value) -> Ts {
        let t = e["timestamp"].as_str().expect("timestamp");
        let time = t.split('T').nth(1).unwrap().trim_end_matches('Z');
        let mut parts = time.split(':');
        let h: i64 = parts.next().unwrap().parse().unwrap();
        let m: i64 = parts.next().unwrap().parse().unwrap();
        let s: f64 = parts.next().unwrap().parse().unwrap();
        Ts(((h * 60 + m) * 60) * 1000 + (s * 1000.0) as i64)
    }
}

/// `run` as uid 65534 from a root shell whose HOME (a root-owned 0700
/// directory) that user may not search: NIXL refuses the agent, and the
/// agent says `nixl_config` on /readyz?verbose, in
/// `nixl_agent_nixl_failures_total` and in its log, which names
/// `$HOME/.nixl.cfg`, the user and the fix. It serves, never ready, and
/// drains on SIGTERM with exit 0.
#[test]
fn run_names_a_home_the_user_may_not_search() {
    use std::os::unix::fs::PermissionsExt;
    let home = tempfile::tempdir().unwrap();
    std::fs::set_permissions(home.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    let cfg = home.path().join(".nixl.cfg").display().to_string();
    let addr = support::free_port();
    let child = std::process::Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(env!("CARGO_BIN_EXE_nixl-agent"))
        .args(["run", "--log-format", "json", "--listen"])
        .arg(addr.to_string())
        .env_remove("NIXL_CONFIG_FILE")
        .env_remove("NIXL_AGENT_CONFIG")
        .env_remove("NIXL_PLUGIN_DIR")
        .env("NIXL_LIB_DIR", support::nixl_lib_dir())
        .env("HOME", home.path())
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let ready = support::wait_for(Duration::from_secs(30), "/readyz?verbose names nixl_config", || {
        support::get(addr, "/readyz?verbose")
            .ok()
            .filter(|r| r.body.contains("[-]nixl failed: nixl_config"))
    });
    assert_eq!(ready.status, 503, "{}", ready.body);
    assert!(
        ready.body.contains("fix: run with a HOME this user can search"),
        "{}",
        ready.body
    );
    let scrape = support::scrape(addr);
    assert_eq!(
        scrape
            .metric("nixl_agent_nixl_failures_total")
            .label("reason", "nixl_config")
            .value(),
        1.0
    );
    assert_eq!(scrape.metric("nixl_agent_nixl_available").value(), 0.0);
    support::signal(child.id(), "TERM");
    let out = support::wait_with_output_within(child, Duration::from_secs(30), "the agent draining");
    assert_eq!(out.status.code(), Some(0));
    let log = String::from_utf8_lossy(&out.stderr);
    let line = log
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|v| v["reason"] == "nixl_config")
        .unwrap_or_else(|| panic!("no nixl_config log line:\n{log}"));
    let error = line["error"].as_str().unwrap_or_default();
    assert!(error.contains(&cfg) && error.contains("uid 65534"), "{line}");
    assert!(
        line["fix"].as_str().unwrap_or_default().contains("NIXL_CONFIG_FILE"),
        "{line}"
    );
}
