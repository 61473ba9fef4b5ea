//! The seed failure kills the serving process: the evidence outlives it.
//! Real NIXL (the nixl-cu12 wheel's UCX backend, DRAM), real Python
//! processes under `nixl-agent-instrument` that die of "NIXL memory
//! registration failed for aux tensors" (an aux region at address 0) in the
//! three ways serving processes die — an uncaught exception, `os._exit(1)`
//! (multiprocessing's children), SIGKILL — a real sidecar, a real
//! zero-configuration pod, a real Prometheus and Alertmanager with the
//! shipped rules.

use crate::support::{self, prom, CommandWithin};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, ExitStatus, Stdio};
use std::time::Duration;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// `nixl-agent-instrument python tests/python/serving.py <args>`, with a
/// clean NIXL_AGENT_* environment plus `env`; stdin and stdout piped,
/// stderr dropped (`DEATH_DEBUG` set: inherited).
fn instrumented(args: &[&str], env: &[(&str, &str)]) -> (Child, support::Lines) {
    let program = repo().join("tests/python/serving.py");
    let mut child = support::held::command(program.to_str().unwrap(), true, args, env)
        .env_remove("LOCAL_RANK")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(if std::env::var_os("DEATH_DEBUG").is_some() {
            Stdio::inherit()
        } else {
            Stdio::null()
        })
        .spawn()
        .unwrap();
    let out = support::Lines::new(child.stdout.take().unwrap());
    (child, out)
}

/// Reads `out` until a line equal to `want` (the program printed it),
/// which must come within [`support::RUN_WITHIN`].
fn until_line(out: &mut support::Lines, want: &str) {
    let what = format!("the program's line {want:?}");
    loop {
        let line = out
            .next_within(support::RUN_WITHIN, &what)
            .unwrap_or_else(|| panic!("ended before {want}"));
        if line.trim_end() == want {
            return;
        }
    }
}

/// Waits at most 30 s for `child` to exit.
fn wait_exit(child: &mut Child) -> ExitStatus {
    support::wait_for(Duration::from_secs(30), "the process to exit", || {
        child.try_wait().unwrap()
    })
}

/// The three deaths, and the exit each leaves.
const DEATHS: [(&str, &str); 3] = [("exception", "exception"), ("os_exit", "died"), ("sigkill", "died")];

fn assert_exit(how: &str, status: ExitStatus) {
    use std::os::unix::process::ExitStatusExt;
    match how {
        "sigkill" => assert_eq!(status.signal(), Some(9), "{status:?}"),
        _ => assert_eq!(status.code(), Some(1), "{how}: {status:?}"),
    }
}

/// The termination-message file's one line, checked.
fn assert_last_words(path: &Path) {
    let text = std::fs::read_to_string(path).unwrap();
    assert!(text.len() <= 4096, "{} bytes", text.len());
    assert_eq!(text.lines().count(), 1, "{text}");
    for part in [
        "NIXL memory registration failed for group aux",
        "reason invalid_address",
        "NIXL status NIXL_ERR_BACKEND",
        "region 0 (addr 0x0, 4096 bytes, DRAM device 0)",
    ] {
        assert!(text.contains(part), "{part}: {text}");
    }
}

/// A sidecar and one rank that dies of the aux failure, three times over
/// (an exception, `os._exit(1)`, SIGKILL — a crash loop): after each exit
/// the sidecar's /metrics has the rank's failure counter and counts the
/// exit by how; `/v1/status` and `/readyz?verbose` say how it ended; the
/// termination-message file holds the one-line cause; the sidecar's own
/// /livez stays 200. The next process of the rank serves the previous
/// run's failure; a clean drain writes no termination message.
#[test]
fn a_rank_that_dies_of_the_aux_failure_leaves_it_on_the_sidecar_however_it_died() {
    let dir = tempfile::tempdir().unwrap();
    let words = tempfile::tempdir().unwrap();
    let (_pod, addr) = support::pod_server(dir.path(), 1);
    let d = dir.path().display().to_string();
    let mut deaths = std::collections::BTreeMap::<&str, f64>::new();
    for (how, exit) in DEATHS {
        let log = words.path().join(format!("termination-log-{how}"));
        std::fs::write(&log, "").unwrap();
        let l = log.display().to_string();
        let (mut child, _out) = instrumented(
            &["dies", how],
            &[("NIXL_AGENT_MULTIPROC_DIR", &d), ("NIXL_AGENT_TERMINATION_LOG", &l)],
        );
        assert_exit(how, wait_exit(&mut child));
        *deaths.entry(exit).or_default() += 1.0;
        // Scraped after the exit: the failure that killed it is there.
        let s = support::wait_for(Duration::from_secs(5), "the exit counted", || {
            let s = support::scrape(addr);
            (s.value_at("nixl_agent_pod_rank_exits_total", &[("rank", "0"), ("how", exit)]) == deaths[exit])
                .then_some(s)
        });
        let failures = s
            .metric("nixl_agent_registration_failures_total")
            .label("rank", "0")
            .label("group", "aux")
            .label("reason", "invalid_address")
            .value();
        assert_eq!(failures, 1.0, "{how}");
        assert!(
            s.metric("nixl_agent_group_registered")
                .label("rank", "0")
                .get()
                .is_none(),
            "{how}: the dead rank's gauges go"
        );
        let doc = support::status_document(addr);
        assert_eq!(doc["ranks"][0]["ended"]["how"], exit, "{how}: {doc}");
        if how == "exception" {
            assert_eq!(doc["ranks"][0]["ended"]["exception"], "nixlBackendError");
        }
        let verbose = support::get(addr, "/readyz?verbose").unwrap().body;
        assert!(verbose.contains("[-]rank:0 failed: ended: pid "), "{verbose}");
        assert_last_words(&log);
        assert_eq!(
            support::get(addr, "/livez").unwrap().status,
            200,
            "the sidecar is not what broke"
        );
    }
    // The merged scrape of a dead rank passes promtool's lint.
    support::assert_promtool_clean(&support::get(addr, "/metrics").unwrap().body);

    // The restarted process: it registers, and serves the previous run's
    // failure (the last run died by SIGKILL); a clean exit writes nothing.
    let log = words.path().join("termination-log-clean");
    std::fs::write(&log, "").unwrap();
    let l = log.display().to_string();
    let (mut child, mut out) = instrumented(
        &["sglang", "--hold"],
        &[
            ("NIXL_AGENT_MULTIPROC_DIR", &d),
            ("NIXL_AGENT_TERMINATION_LOG", &l),
            ("NIXL_AGENT_EXPECT", "kv:DRAM,aux"),
        ],
    );
    until_line(&mut out, "HOLD");
    let s = support::wait_for(Duration::from_secs(10), "the restarted rank ready", || {
        let s = support::scrape(addr);
        (s.metric("nixl_agent_ready").label("rank", "0").get() == Some(1.0)).then_some(s)
    });
    let previous = s
        .metric("nixl_agent_previous_run_registration_failures")
        .label("rank", "0")
        .label("group", "aux")
        .label("reason", "invalid_address")
        .value();
    assert_eq!(previous, 1.0);
    let ended = s
        .metric("nixl_agent_previous_run_end_timestamp_seconds")
        .label("rank", "0")
        .label("how", "died")
        .value();
    assert!(ended > 1.7e9, "{ended}");
    assert!(
        s.metric("nixl_agent_registration_failures_total")
            .label("rank", "0")
            .get()
            .is_none(),
        "its own counters start afresh (a counter reset to Prometheus)"
    );
    child.stdin.take().unwrap().write_all(b"\n").unwrap();
    assert!(wait_exit(&mut child).success());
    support::wait_for(Duration::from_secs(5), "the clean exit counted", || {
        let s = support::scrape(addr);
        (s.value_at("nixl_agent_pod_rank_exits_total", &[("rank", "0"), ("how", "exited")]) == 1.0).then_some(())
    });
    assert_eq!(
        std::fs::read_to_string(&log).unwrap(),
        "",
        "a clean drain writes nothing"
    );
}

/// A zero-configuration pod (processes sharing a listen address, no pod
/// directory): a rank that dies of the aux failure keeps its counters on
/// the address, whether it held the address or not; when it held it,
/// another rank takes the address over and serves them.
#[test]
fn a_zero_config_pod_keeps_a_dead_ranks_failure_whoever_held_the_address() {
    for holder_dies in [false, true] {
        let addr = support::free_port();
        let listen = addr.to_string();
        let env = [("NIXL_AGENT_LISTEN", listen.as_str()), ("NIXL_AGENT_EXPECT", "none")];
        // Served with both ranks: the dead one's failure (rank-labelled)
        // and the healthy one's registration (which reaches its file within
        // a publish interval).
        let both = || {
            let s = support::get(addr, "/metrics")
                .ok()
                .filter(|r| r.status == 200)
                .map(|r| support::Scrape::parse(&r.body))?;
            let failed = s
                .metric("nixl_agent_registration_failures_total")
                .label("group", "aux")
                .label("reason", "invalid_address")
                .samples()
                .iter()
                .any(|x| x.value == 1.0 && x.labels.iter().any(|(k, _)| k == "rank"));
            (failed && s.metric("nixl_agent_registered_bytes").label("group", "kv").sum() > 0.0).then_some(())
        };
        let serving = || support::get(addr, "/metrics").ok().filter(|r| r.status == 200);
        // The first process started holds the address.
        let (first, second) = if holder_dies {
            (&["dies", "sigkill", "--wait"][..], &["sglang", "--hold"][..])
        } else {
            (&["sglang", "--hold"][..], &["dies", "exception", "--wait"][..])
        };
        let (mut a, mut a_out) = instrumented(first, &env);
        until_line(&mut a_out, if holder_dies { "AGENT" } else { "HOLD" });
        support::wait_for(Duration::from_secs(10), "the holder serving", serving);
        let (mut b, mut b_out) = instrumented(second, &env);
        until_line(&mut b_out, if holder_dies { "HOLD" } else { "AGENT" });
        let (dying, healthy, how) = if holder_dies {
            (&mut a, &mut b, "sigkill")
        } else {
            (&mut b, &mut a, "exception")
        };
        dying.stdin.take().unwrap().write_all(b"\n").unwrap();
        assert_exit(how, wait_exit(dying));
        support::wait_for(Duration::from_secs(10), "the dead rank's failure on the address", both);
        // The failure can reach the address a pass of the pod's watcher
        // before the rank's end record does (it is published when it
        // happens; the end record when the process exits).
        let ended_seen = |doc: &serde_json::Value| {
            doc["ranks"]
                .as_array()
                .is_some_and(|r| r.iter().any(|r| !r["ended"].is_null()))
        };
        let doc = support::wait_for(Duration::from_secs(10), "the dead rank's end record", || {
            Some(support::status_document(addr)).filter(ended_seen)
        });
        let ended: Vec<&serde_json::Value> = doc["ranks"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| !r["ended"].is_null())
            .collect();
        assert_eq!(ended.len(), 1, "{doc}");
        let how = if holder_dies { "died" } else { "exception" };
        assert_eq!(ended[0]["ended"]["how"], how);
        // Counted once by the server of the address, also when it is the
        // rank that took the address over from the one that died.
        let exits = support::scrape(addr)
            .metric("nixl_agent_pod_rank_exits_total")
            .label("how", how)
            .sum();
        assert_eq!(exits, 1.0, "holder died: {holder_dies}");
        let _ = healthy.kill();
        let _ = healthy.wait();
    }
}

/// A live Prometheus with the shipped rules and a live Alertmanager: a
/// process that raises the aux failure and exits within a second of it
/// fires NixlRegistrationFailing for its group and reason, notified.
#[test]
fn a_live_prometheus_fires_the_registration_alert_for_a_process_that_already_exited() {
    let dir = tempfile::tempdir().unwrap();
    let (_pod, addr) = support::pod_server(dir.path(), 1);
    let hook = prom::Webhook::start();
    let am = prom::Alertmanager::start(hook.addr);
    let prom = prom::Prometheus::start_alerting(&[addr], Some(&prom::rules_with_short_for()), Some(am.addr));
    prom.wait_scraped(&[addr], 2, Duration::from_secs(30));
    let d = dir.path().display().to_string();
    let (mut child, _out) = instrumented(&["dies", "exception"], &[("NIXL_AGENT_MULTIPROC_DIR", &d)]);
    assert_exit("exception", wait_exit(&mut child));
    let instance = addr.to_string();
    support::wait_for(
        Duration::from_secs(60),
        "NixlRegistrationFailing firing for aux",
        || {
            prom.alerts().into_iter().find(|a| {
                a["labels"]["alertname"] == "NixlRegistrationFailing"
                    && a["labels"]["instance"] == instance.as_str()
                    && a["labels"]["group"] == "aux"
                    && a["labels"]["reason"] == "invalid_address"
                    && a["labels"]["rank"] == "0"
                    && a["state"] == "firing"
            })
        },
    );
    support::wait_for(Duration::from_secs(60), "NixlRegistrationFailing notified", || {
        hook.notified()
            .iter()
            .any(|(_, name, inst, status)| name == "NixlRegistrationFailing" && *inst == instance && status == "firing")
            .then_some(())
    });
}

/// A rank whose pod directory fills up (a small memory-backed `emptyDir`)
/// cannot write its file: it keeps beating on the last file it wrote, so
/// the sidecar reads it as alive and ready with its file stale since its
/// last write — never as dead — and once there is room again its file is
/// written and its write failures, counted by cause, reach the pod.
/// Needs root for a mount namespace with a 512 KiB tmpfs of its own (the
/// same gate as the other namespace tests: the runner reports it skipped
/// where the build found no root).
#[cfg_attr(
    not(nixl_agent_netns),
    ignore = "needs root to mount a small tmpfs in a mount namespace of its own (unshare -m); the build found no root"
)]
#[test]
fn a_rank_whose_directory_is_full_is_stale_never_dead() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().display().to_string();
    let program = repo().join("tests/python/serving.py");
    // The rank: in a mount namespace of its own, the directory a small
    // tmpfs; the sidecar and the filler join that namespace.
    let inner = support::held::command(
        program.to_str().unwrap(),
        true,
        &["sglang", "--hold"],
        &[("NIXL_AGENT_MULTIPROC_DIR", &d), ("NIXL_AGENT_EXPECT", "kv:DRAM,aux")],
    );
    let mut c = std::process::Command::new("unshare");
    c.args(["-m", "--propagation", "private", "sh", "-c"])
        .arg("mount -t tmpfs -o size=512k tmpfs \"$0\" && exec \"$@\"")
        .arg(&d)
        .arg(inner.get_program())
        .args(inner.get_args());
    for (k, v) in inner.get_envs() {
        match v {
            Some(v) => c.env(k, v),
            None => c.env_remove(k),
        };
    }
    let mut rank = support::Killed(support::spawn_piped(&mut c));
    let mut out = support::Lines::new(rank.0.stdout.take().unwrap());
    until_line(&mut out, "HOLD");
    let ns = format!("--mount=/proc/{}/ns/mnt", rank.0.id());
    let addr = support::free_port();
    let _pod = support::Killed(
        std::process::Command::new("nsenter")
            .arg(&ns)
            .arg(env!("CARGO_BIN_EXE_nixl-agent"))
            .args(["pod", "--ranks", "1", "--listen", &addr.to_string(), "--dir", &d])
            .env_remove("NIXL_AGENT_CONFIG")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let verbose = || support::get(addr, "/readyz?verbose").ok();
    support::wait_for(Duration::from_secs(20), "the rank ready on the sidecar", || {
        verbose().filter(|r| r.status == 200)
    });
    let fill = format!("{d}/fill");
    let filled = std::process::Command::new("nsenter")
        .arg(&ns)
        .args([
            "sh",
            "-c",
            "dd if=/dev/zero of=\"$0\" bs=1k 2>/dev/null; test -s \"$0\"",
        ])
        .arg(&fill)
        .status_within(support::RUN_WITHIN);
    assert!(filled.success());
    // Rewritten at least every 2 s: those writes fail; stale within 5 s.
    let stale = support::wait_for(Duration::from_secs(20), "the rank read as stale", || {
        let r = verbose()?;
        assert!(
            !r.body.contains("[-]rank:0"),
            "a rank that cannot write was not ready or dead: {}",
            r.body
        );
        r.body.contains("[+]rank:0 ok (its file is stale since ").then_some(r)
    });
    assert_eq!(stale.status, 200, "{}", stale.body);
    let s = support::scrape(addr);
    assert_eq!(s.metric("nixl_agent_rank_up").label("rank", "0").value(), 1.0);
    assert!(support::status_document(addr)["ranks"][0]["stale_since_unix"].is_number());
    let freed = std::process::Command::new("nsenter")
        .arg(&ns)
        .args(["rm", "-f"])
        .arg(&fill)
        .status_within(support::RUN_WITHIN);
    assert!(freed.success());
    let s = support::wait_for(
        Duration::from_secs(20),
        "the failures counted, once written again",
        || {
            let s = support::scrape(addr);
            let n = s.value_at(
                "nixl_agent_pod_publish_failures_total",
                &[("rank", "0"), ("cause", "no_space")],
            );
            (n >= 1.0 && !verbose()?.body.contains("stale since")).then_some(s)
        },
    );
    assert_eq!(s.metric("nixl_agent_rank_up").label("rank", "0").value(), 1.0);
    let _ = rank.0.stdin.take().map(|mut i| i.write_all(b"\n"));
}
