//! Smoke run of the benchmark (bench/, `make bench`): the real `nixl-bench`
//! driver with tiny N (1 and 64 regions), a second of load per endpoint and
//! two seconds of idle, against the real NIXL runtime, the wheel's Python API
//! and NIXL's own Prometheus exporter. It checks that every section ran and
//! the JSON has everything docs/performance.md's tables are made from, so
//! the benchmark cannot rot. Timings are not judged here: these are not
//! timed tests.

use crate::support;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn nixl_lib_dir() -> PathBuf {
    let p = std::env::var_os("NIXL_LIB_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo().join(".deps/nixl/.nixl_cu12.mesonpy.libs"));
    assert!(
        p.join("libnixl_capi.so").exists(),
        "no NIXL runtime in {}; run `bash scripts/setup.sh` (make test does)",
        p.display()
    );
    p
}

/// The Python venv with numpy that scripts/bench.sh sets up (idempotent).
fn ensure_python() {
    let python = repo().join(".deps/venv/bin/python");
    let ok = Command::new(&python)
        .args(["-c", "import numpy"])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        let status = Command::new("bash")
            .arg(repo().join("scripts/bench.sh"))
            .arg("setup")
            .stdout(Stdio::null())
            .status()
            .expect("run scripts/bench.sh setup");
        assert!(status.success(), "scripts/bench.sh setup failed");
    }
}

fn num(v: &serde_json::Value, path: &str) -> f64 {
    let mut cur = v;
    for key in path.split('.') {
        cur = match key.parse::<usize>() {
            Ok(i) => &cur[i],
            Err(_) => &cur[key],
        };
    }
    cur.as_f64().unwrap_or_else(|| panic!("{path} is not a number: {cur}"))
}

#[test]
fn benchmark_smoke_run_produces_every_section() {
    let lib = nixl_lib_dir();
    ensure_python();
    let bin = support::example_binary("nixl-bench");
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("smoke.json");
    let started = Instant::now();
    let mut child = Command::new(&bin)
        .args(["--smoke", "--out"])
        .arg(&out)
        .arg("--agent-bin")
        .arg(env!("CARGO_BIN_EXE_nixl-agent"))
        .env("NIXL_LIB_DIR", &lib)
        .env_remove("NIXL_PLUGIN_DIR")
        .env_remove("BENCH_PYTHON")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start nixl-bench");
    // Kill it rather than hang the suite.
    let deadline = Duration::from_secs(120);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if started.elapsed() > deadline {
            let _ = child.kill();
            panic!("nixl-bench --smoke did not finish within {deadline:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let output = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        status.success(),
        "nixl-bench --smoke failed ({status})\n{stdout}\n{stderr}"
    );
    eprintln!("nixl-bench --smoke took {:.1} s", started.elapsed().as_secs_f64());

    // The printed tables.
    for header in [
        "| N | raw nixl-sys | agent |",
        "| N | raw, registration order |",
        "| endpoint | connections | req/s |",
        "| plan | agent MiB |",
        "| pod /metrics (8 ranks) |",
        "Time to ready",
        "Idle CPU",
        "| target | measured | status |",
    ] {
        assert!(stdout.contains(header), "no {header:?} in the output:\n{stdout}");
    }

    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    assert_eq!(v["smoke"], true);
    assert!(v["errors"].as_array().unwrap().is_empty(), "errors: {}", v["errors"]);
    assert!(num(&v, "machine.cores") >= 1.0);

    // 1. Registration: every contender at every N, both directions.
    let reg = &v["registration"];
    let rows = reg["rows"].as_array().expect("registration rows");
    assert_eq!(
        rows.iter().map(|r| r["n"].as_u64().unwrap()).collect::<Vec<_>>(),
        [1, 64]
    );
    for row in rows {
        for who in [
            "raw",
            "raw_reverse",
            "agent",
            "agent_novalidate",
            "batched_capi",
            "python",
        ] {
            let t = &row["contenders"][who];
            for key in ["register_ms", "deregister_ms"] {
                let x = t[key]
                    .as_f64()
                    .unwrap_or_else(|| panic!("N={} {who}.{key}: {t}", row["n"]));
                assert!(x.is_finite() && x >= 0.0, "N={} {who}.{key} = {x}", row["n"]);
            }
            assert_eq!(t["register_samples_ms"].as_array().unwrap().len(), 2, "{who}");
        }
    }
    for who in ["raw", "agent", "python", "batched_capi"] {
        assert!(reg["exponents"][who].is_object(), "no exponent for {who}");
    }
    assert!(num(reg, "validation_probe.maps_ms") > 0.0);
    assert!(num(reg, "validation_probe.first_unmapped_per_region_us") > 0.0);
    assert_eq!(reg["python"]["ready"], true, "python worker: {}", reg["python"]);

    // 2. Scrape: the agent's two endpoints and NIXL's exporter answered.
    let scrape = &v["scrape"];
    for key in ["agent_metrics", "agent_readyz", "agent_metrics_close", "nixl_metrics"] {
        assert!(num(scrape, &format!("{key}.requests")) > 0.0, "{key}: {}", scrape[key]);
        assert!(num(scrape, &format!("{key}.p99_ms")) > 0.0, "{key}");
        assert_eq!(num(scrape, &format!("{key}.errors")), 0.0, "{key}: {}", scrape[key]);
    }
    assert_eq!(num(scrape, "connections"), 64.0);

    // The pod: 8 ranks merged, a single process beside it, the registration
    // path with and without publishing.
    let pod = &v["pod"];
    for key in ["pod_metrics", "single_metrics"] {
        assert!(num(pod, &format!("{key}.requests")) > 0.0, "{key}: {}", pod[key]);
        assert_eq!(num(pod, &format!("{key}.errors")), 0.0, "{key}: {}", pod[key]);
    }
    assert!(num(pod, "register_ns_publishing") > 0.0 && num(pod, "register_ns_plain") > 0.0);

    // 3. Memory: both plans, both processes.
    let mem = v["memory"].as_array().expect("memory rows");
    assert_eq!(mem.len(), 2);
    for m in mem {
        assert!(num(m, "agent_rss_kib") > 0.0 && num(m, "raw_rss_kib") > 0.0, "{m}");
    }

    // 4. Time to ready; 5. idle CPU.
    assert!(num(&v, "time_to_ready.agent_ms") > 0.0);
    assert!(num(&v, "time_to_ready.raw_ms") > 0.0);
    assert!(num(&v, "time_to_ready.agent_self_reported_ms") > 0.0);
    assert!(num(&v, "idle_cpu.agent_pct") >= 0.0);
    assert!(v["idle_cpu"]["nixl_exporter_pct"].is_number());

    // Every target was judged (met or missed, none left unmeasured).
    let targets = v["targets"].as_array().unwrap();
    assert!(targets.len() >= 13, "{} targets", targets.len());
    for t in targets {
        assert!(t["met"].is_boolean(), "target not measured: {t}");
    }
}
