//! A pod of three ranks: three instrumented Python processes (real NIXL
//! Python API) publish to one directory, `nixl-agent pod` serves it, a real
//! Prometheus scrapes it with the shipped rules. A rank killed with SIGKILL
//! makes the pod not ready within 2 s and the not-ready alert fire; the
//! restarted rank makes it ready again.

use crate::support::{self, prom, CommandWithin};
use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// `nixl-agent-instrument python <script> <args>` with a clean
/// NIXL_AGENT_* / rank environment plus `env`; stdin and stdout piped.
fn instrumented(script: &str, args: &[&str], env: &[(&str, &str)]) -> (Child, support::Lines) {
    instrumented_via(&[], script, args, env)
}

/// [`instrumented`], run by `via` (a command and its arguments, which
/// `exec`s the rest).
fn instrumented_via(via: &[&str], script: &str, args: &[&str], env: &[(&str, &str)]) -> (Child, support::Lines) {
    let instrument = support::venv_bin("nixl-agent-instrument");
    let mut c = match via.split_first() {
        Some((first, rest)) => {
            let mut c = Command::new(first);
            c.args(rest).arg(&instrument);
            c
        }
        None => Command::new(&instrument),
    };
    c.arg(support::python()).arg(repo().join(script)).args(args);
    for (k, _) in std::env::vars() {
        if k.starts_with("NIXL_AGENT_") || k.starts_with("OTEL_") || k == "PYTHONPATH" || k.ends_with("RANK") {
            c.env_remove(k);
        }
    }
    for (k, v) in env {
        c.env(k, v);
    }
    let mut child = support::spawn_piped(&mut c);
    let out = support::Lines::new(child.stdout.take().unwrap());
    (child, out)
}

/// One rank: the SGLang-shaped program, held after registering.
struct RankProcess {
    child: Child,
}

impl RankProcess {
    fn start(dir: &Path, rank: u32) -> RankProcess {
        RankProcess::start_with(dir, &[("LOCAL_RANK", &rank.to_string())])
    }

    fn start_with(dir: &Path, env: &[(&str, &str)]) -> RankProcess {
        let d = dir.display().to_string();
        let mut all = vec![
            ("NIXL_AGENT_MULTIPROC_DIR", d.as_str()),
            ("NIXL_AGENT_EXPECT", "kv:DRAM,aux"),
        ];
        all.extend_from_slice(env);
        let (child, mut out) = instrumented("tests/python/serving.py", &["sglang", "--hold"], &all);
        out.skip_to("HOLD", support::RUN_WITHIN, &format!("the rank's HOLD ({env:?})"));
        RankProcess { child }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn kill9(&mut self) {
        support::signal(self.child.id(), "KILL");
        let _ = self.child.wait();
    }
}

impl Drop for RankProcess {
    fn drop(&mut self) {
        if let Some(mut s) = self.child.stdin.take() {
            let _ = s.write_all(b"\n");
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Waits (30 s at most) for NixlAgentNotReady to fire for the pod's target.
fn wait_not_ready_alert(prom: &prom::Prometheus, pod: &PodAgent) {
    let instance = pod.addr.to_string();
    support::wait_for(Duration::from_secs(30), "NixlAgentNotReady firing for the pod", || {
        prom.alerts()
            .iter()
            .any(|a| {
                a["labels"]["alertname"] == "NixlAgentNotReady"
                    && a["labels"]["instance"] == instance.as_str()
                    && a["state"] == "firing"
            })
            .then_some(())
    });
}

struct PodAgent {
    /// Held for its drop: the pod agent is killed with the test.
    _child: support::Killed,
    addr: SocketAddr,
}

impl PodAgent {
    fn start(dir: &Path, ranks: u32) -> PodAgent {
        let (child, addr) = support::pod_server(dir, ranks);
        PodAgent { _child: child, addr }
    }

    fn readyz(&self) -> u16 {
        support::get(self.addr, "/readyz").unwrap().status
    }
}

#[test]
fn a_pod_of_three_ranks_is_one_target_and_one_readiness() {
    let dir = tempfile::tempdir().unwrap();
    let pod = PodAgent::start(dir.path(), 3);
    assert_eq!(pod.readyz(), 503, "no rank yet");
    let mut ranks: Vec<RankProcess> = (0..3).map(|r| RankProcess::start(dir.path(), r)).collect();
    support::wait_for(Duration::from_secs(10), "the pod ready", || {
        (pod.readyz() == 200).then_some(())
    });

    // Every rank's groups, with the right descriptors and bytes, one target.
    let s = support::scrape(pod.addr);
    for rank in ["0", "1", "2"] {
        let v = |metric: &str, group: &str| s.metric(metric).label("rank", rank).label("group", group).value();
        assert_eq!(v("nixl_agent_registered_descriptors", "kv"), 4.0, "rank {rank}");
        assert_eq!(v("nixl_agent_registered_bytes", "kv"), 4.0 * 65536.0, "rank {rank}");
        assert_eq!(v("nixl_agent_registered_bytes", "aux"), 4096.0, "rank {rank}");
        assert_eq!(s.metric("nixl_agent_rank_up").label("rank", rank).value(), 1.0);
    }
    assert!(
        s.samples.iter().all(|x| !x.labels.iter().any(|(k, _)| k == "pid")),
        "no pid label"
    );
    // Each rank within the series budget.
    for r in 0..3 {
        let file: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(dir.path().join(format!("rank-{r}.json"))).unwrap()).unwrap();
        let series = file["metrics"]
            .as_str()
            .unwrap()
            .lines()
            .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
            .count();
        assert!(series <= 160, "rank {r}: {series} series");
    }
    // A scrape of the merged pod passes promtool's lint.
    let body = support::get(pod.addr, "/metrics").unwrap().body;
    support::assert_promtool_clean(&body);

    let prom = prom::Prometheus::start(&[pod.addr], Some(&prom::rules_with_short_for()));
    prom.wait_scraped(&[pod.addr], 3, Duration::from_secs(30));

    // kill -9 of rank 1: not ready within 2 s, its gauges go, its counters stay.
    ranks[1].kill9();
    let killed = Instant::now();
    support::wait_for(Duration::from_secs(3), "the pod not ready", || {
        (pod.readyz() == 503).then_some(())
    });
    let took = killed.elapsed();
    assert!(took <= Duration::from_secs(2), "not ready after {took:?}");
    let verbose = support::get(pod.addr, "/readyz?verbose").unwrap().body;
    assert!(verbose.contains("[-]rank:1 failed"), "{verbose}");
    let s = support::scrape(pod.addr);
    assert!(s
        .metric("nixl_agent_registered_bytes")
        .label("rank", "1")
        .get()
        .is_none());
    assert_eq!(s.metric("nixl_agent_rank_up").label("rank", "1").value(), 0.0);
    assert_eq!(
        s.metric("nixl_agent_registration_attempts_total")
            .label("rank", "1")
            .label("group", "kv")
            .value(),
        1.0
    );
    wait_not_ready_alert(&prom, &pod);

    // The rank comes back: ready again.
    ranks[1] = RankProcess::start(dir.path(), 1);
    support::wait_for(Duration::from_secs(10), "the pod ready again", || {
        (pod.readyz() == 200).then_some(())
    });
    let st: serde_json::Value = serde_json::from_str(&support::get(pod.addr, "/v1/status").unwrap().body).unwrap();
    assert_eq!(st["ready"], true, "{st}");
    assert_eq!(st["ranks"].as_array().unwrap().len(), 3);
}

/// SGLang's tensor parallelism: one launcher, N scheduler processes started
/// with multiprocessing's `spawn`, one environment (tests/python/tp.py).
struct Tp {
    child: Child,
    /// (rank the worker was given, its pid, what its registration did).
    workers: Vec<(u32, u32, String)>,
}

impl Tp {
    fn start(n: u32, args: &[&str], env: &[(&str, &str)]) -> Tp {
        Tp::start_via(&[], n, args, env)
    }

    fn start_via(via: &[&str], n: u32, args: &[&str], env: &[(&str, &str)]) -> Tp {
        let n = n.to_string();
        let mut all = vec![n.as_str()];
        all.extend_from_slice(args);
        let (child, mut out) = instrumented_via(via, "tests/python/tp.py", &all, env);
        let mut workers = Vec::new();
        loop {
            let line = out
                .next_within(
                    support::RUN_WITHIN,
                    &format!("the TP launcher's next line after {workers:?}"),
                )
                .unwrap_or_else(|| panic!("the launcher ended: {workers:?}"));
            let line = line.trim_end();
            if line == "ranks up" {
                break;
            }
            // UCX writes its own errors to stdout (the null aux rank's).
            if !line.starts_with("rank ") {
                continue;
            }
            let f: Vec<&str> = line.splitn(5, ' ').collect();
            workers.push((f[1].parse().unwrap(), f[3].parse().unwrap(), f[4].to_string()));
        }
        Tp { child, workers }
    }
}

impl Drop for Tp {
    fn drop(&mut self) {
        // Closing stdin ends the workers cleanly (they retire their ranks).
        drop(self.child.stdin.take());
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        for (_, pid, _) in &self.workers {
            support::signal(*pid, "KILL");
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The ranks a scrape shows samples for.
fn ranks_of(s: &support::Scrape, metric: &str) -> std::collections::BTreeSet<String> {
    s.samples
        .iter()
        .filter(|x| x.name == metric)
        .filter_map(|x| x.labels.iter().find(|(k, _)| k == "rank").map(|(_, v)| v.clone()))
        .collect()
}

/// Every rank's kv and aux, registered, under its own rank label.
fn assert_three_ranks_registered(s: &support::Scrape) {
    for rank in ["0", "1", "2"] {
        let v = |group: &str| {
            s.metric("nixl_agent_registered_descriptors")
                .label("rank", rank)
                .label("group", group)
                .value()
        };
        assert_eq!((v("kv"), v("aux")), (4.0, 1.0), "rank {rank}");
    }
}

/// Plants what a messy or hostile pod directory holds: a symlink to
/// /dev/zero, a FIFO, a 1 GiB sparse file, garbage, a leftover copy of rank
/// 0 under another name, a file whose content names another rank, and one
/// with a modification time an hour ahead.
fn plant_hostile_files(dir: &Path) {
    let real = std::fs::read_to_string(dir.join("rank-0.json")).unwrap();
    std::os::unix::fs::symlink("/dev/zero", dir.join("rank-20.json")).unwrap();
    assert!(Command::new("mkfifo")
        .arg(dir.join("rank-21.json"))
        .status_within(support::RUN_WITHIN)
        .success());
    std::fs::File::create(dir.join("rank-22.json"))
        .unwrap()
        .set_len(1 << 30)
        .unwrap();
    std::fs::write(dir.join("rank-23.json"), "{\"version\": 1, garbage").unwrap();
    std::fs::write(dir.join("rank-0-old.json"), &real).unwrap();
    std::fs::write(dir.join("rank-24.json"), &real).unwrap();
    let mut v: serde_json::Value = serde_json::from_str(&real).unwrap();
    v["rank"] = 25.into();
    std::fs::write(dir.join("rank-25.json"), v.to_string()).unwrap();
    std::fs::File::options()
        .write(true)
        .open(dir.join("rank-25.json"))
        .unwrap()
        .set_modified(std::time::SystemTime::now() + Duration::from_secs(3600))
        .unwrap();
}

/// With nothing but the launcher (no pod directory, no sidecar, no rank
/// variable), the three scheduler processes sharing the default address
/// are one pod: whichever holds the port serves the three ranks, ready.
/// `kill -9` of the port holder: another rank serves the address within
/// 2 s, and it is not ready (a rank died).
#[test]
fn tp_ranks_of_one_launcher_are_one_pod_with_no_configuration() {
    let addr = support::free_port();
    let listen = addr.to_string();
    let tp = Tp::start(3, &[], &[("NIXL_AGENT_LISTEN", &listen)]);
    assert!(tp.workers.iter().all(|w| w.2 == "registered"), "{:?}", tp.workers);
    support::wait_for(Duration::from_secs(10), "the three ranks, ready", || {
        let st: serde_json::Value = serde_json::from_str(&support::get(addr, "/v1/status").ok()?.body).ok()?;
        (st["ranks"].as_array()?.len() == 3 && support::get(addr, "/readyz").ok()?.status == 200).then_some(())
    });
    let s = support::scrape(addr);
    assert_three_ranks_registered(&s);
    support::assert_promtool_clean(&support::get(addr, "/metrics").unwrap().body);

    let inode = support::listening_inode(addr.port()).expect("the address is served");
    let holder = tp
        .workers
        .iter()
        .map(|w| w.1)
        .find(|pid| support::socket_inodes(*pid).contains(&inode))
        .expect("a worker holds the port");
    support::signal(holder, "KILL");
    let killed = Instant::now();
    support::wait_for(Duration::from_secs(3), "another rank serving, not ready", || {
        let r = support::get(addr, "/readyz?verbose").ok()?;
        (r.status == 503).then_some(r)
    });
    let took = killed.elapsed();
    assert!(
        took <= Duration::from_secs(2),
        "served again, not ready, after {took:?}"
    );
    let verbose = support::get(addr, "/readyz?verbose").unwrap().body;
    // SIGKILL freed its slot's lock: ended at the next look, not 1.5 s on;
    // its counters stay on the address.
    assert!(
        verbose.contains(&format!("failed: ended: pid {holder} died without an end record")),
        "{verbose}"
    );
    assert_ne!(
        support::listening_inode(addr.port()),
        Some(inode),
        "a new holder's socket"
    );
}

/// With a pod directory and `nixl-agent pod`: the three scheduler
/// processes of one launcher publish three distinct ranks (no rank
/// variable), the pod is ready, and a hostile directory changes nothing
/// but the rejected-file counter. Then a launch whose rank 1 gets a null
/// aux pointer (the seed): not ready, the failure counted under rank 1,
/// NixlAgentNotReady fires in a real Prometheus. Then two processes told
/// the same rank: the second is refused, counted and named, nothing is
/// overwritten.
#[test]
fn tp_ranks_publish_distinct_ranks_to_a_pod_directory() {
    let dir = tempfile::tempdir().unwrap();
    let pod = PodAgent::start(dir.path(), 3);
    let d = dir.path().display().to_string();
    {
        let tp = Tp::start(3, &[], &[("NIXL_AGENT_MULTIPROC_DIR", &d)]);
        assert!(tp.workers.iter().all(|w| w.2 == "registered"), "{:?}", tp.workers);
        support::wait_for(Duration::from_secs(10), "the pod ready", || {
            (pod.readyz() == 200).then_some(())
        });
        assert_three_ranks_registered(&support::scrape(pod.addr));
        plant_hostile_files(dir.path());
        let s = support::wait_for(Duration::from_secs(5), "the hostile files counted", || {
            let s = support::scrape(pod.addr);
            let rejected: f64 = s
                .samples
                .iter()
                .filter(|x| x.name == "nixl_agent_pod_files_rejected_total")
                .map(|x| x.value)
                .sum();
            (rejected >= 6.0).then_some(s)
        });
        let ranks = ranks_of(&s, "nixl_agent_registered_descriptors");
        assert_eq!(
            ranks.into_iter().collect::<Vec<_>>(),
            ["0", "1", "2"],
            "only the real ranks"
        );
        assert_eq!(pod.readyz(), 200);
        support::assert_promtool_clean(&support::get(pod.addr, "/metrics").unwrap().body);
        // OpenMetrics when the scraper asks for it, as Prometheus does.
        let om = support::request(
            pod.addr,
            "GET",
            "/metrics",
            &[("Accept", "application/openmetrics-text;version=1.0.0,text/plain;q=0.5")],
        )
        .unwrap();
        assert!(
            om.header("content-type")
                .is_some_and(|c| c.starts_with("application/openmetrics-text")),
            "{:?}",
            om.headers
        );
        assert_eq!(om.body.matches("# EOF").count(), 1);
        assert!(om.body.ends_with("# EOF\n"));
        assert!(om.body.contains("rank=\"2\""));
    }
    // The launcher ended cleanly: its ranks retired.
    support::wait_for(Duration::from_secs(10), "the pod not ready", || {
        (pod.readyz() == 503).then_some(())
    });
    for f in std::fs::read_dir(dir.path()).unwrap() {
        let p = f.unwrap().path();
        if p.file_name().unwrap().to_string_lossy().starts_with("rank-2") || p.to_string_lossy().contains("old") {
            let _ = std::fs::remove_file(p);
        }
    }

    let prom = prom::Prometheus::start(&[pod.addr], Some(&prom::rules_with_short_for()));
    let tp = Tp::start(3, &["--null-aux", "1"], &[("NIXL_AGENT_MULTIPROC_DIR", &d)]);
    assert!(
        tp.workers.iter().any(|w| w.0 == 1 && w.2.starts_with("raised")),
        "{:?}",
        tp.workers
    );
    let s = support::wait_for(Duration::from_secs(10), "rank 1's failure published", || {
        let s = support::scrape(pod.addr);
        let failed = s
            .samples
            .iter()
            .filter(|x| x.name == "nixl_agent_registration_failures_total" && x.value > 0.0)
            .filter(|x| x.labels.iter().any(|(k, v)| k == "group" && v == "aux"))
            .filter_map(|x| x.labels.iter().find(|(k, _)| k == "rank").map(|(_, v)| v.clone()))
            .collect::<Vec<_>>();
        (!failed.is_empty()).then_some((s, failed))
    });
    // The rank that failed is the worker given a null pointer: its slot is
    // its engine rank, 1.
    assert_eq!(s.1, ["1"], "the failure counted under rank 1 only");
    // Ranks 0 and 2 are ready once their files are read again (a pass of
    // the pod's watcher after their registrations); rank 1 never is.
    support::wait_for(Duration::from_secs(10), "ranks 0 and 2 ready, rank 1 not", || {
        let r = support::get(pod.addr, "/readyz?verbose").ok()?;
        let b = &r.body;
        (r.status == 503
            && b.contains("[-]rank:1 failed: not ready")
            && b.contains("[+]rank:0 ok")
            && b.contains("[+]rank:2 ok"))
        .then_some(())
    });
    wait_not_ready_alert(&prom, &pod);
    drop(tp);

    // Two processes told the same rank.
    let first = RankProcess::start_with(dir.path(), &[("NIXL_AGENT_RANK_ENV", "MY_RANK"), ("MY_RANK", "0")]);
    let second = RankProcess::start_with(dir.path(), &[("NIXL_AGENT_RANK_ENV", "MY_RANK"), ("MY_RANK", "0")]);
    let verbose = support::wait_for(Duration::from_secs(10), "the conflict named", || {
        let v = support::get(pod.addr, "/readyz?verbose").ok()?.body;
        v.contains(&format!("conflict: pid {} was told rank 0", second.pid()))
            .then_some(v)
    });
    assert_eq!(pod.readyz(), 503, "{verbose}");
    let owner: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("rank-0.json")).unwrap()).unwrap();
    assert_eq!(owner["pid"], first.pid(), "rank 0 is still the first's");
    assert_eq!(
        support::scrape(pod.addr)
            .metric("nixl_agent_rank_conflicts_total")
            .value(),
        1.0
    );
}

/// The port holder of a zero-configuration pod, and a rank killed.
fn holder_of(tp: &Tp, addr: SocketAddr) -> u32 {
    let inode = support::listening_inode(addr.port()).expect("the address is served");
    tp.workers
        .iter()
        .map(|w| w.1)
        .find(|pid| support::socket_inodes(*pid).contains(&inode))
        .expect("a worker holds the port")
}

/// Another user created `/dev/shm/nixl-agent-<uid>` first (here: in a
/// mount namespace of the test's own with a fresh /dev/shm, owned by uid
/// 4321). The ranks still meet, in a fallback of their user's own that the
/// pod names; every rank is served; when the port holder dies another rank
/// takes the port over. (Before: each rank ran alone, only the port
/// holder's recording was served, and nobody took the port over.)
/// Needs root for its mount namespace: where the build found none, the
/// runner reports it as skipped (build.rs, the same gate as the netns test).
#[cfg_attr(
    not(nixl_agent_netns),
    ignore = "needs root to make a mount namespace of its own (unshare -m); the build found no root"
)]
#[test]
fn tp_ranks_meet_elsewhere_when_another_user_took_their_directory() {
    let isolated = Command::new("unshare")
        .args(["-m", "--propagation", "private", "true"])
        .spawn()
        .is_ok_and(|mut c| support::wait_within(&mut c, Duration::from_secs(30), "unshare -m true").success());
    assert!(isolated, "unshare -m failed although the build found root");
    let addr = support::free_port();
    let listen = addr.to_string();
    let setup = "mount -t tmpfs tmpfs /dev/shm && d=/dev/shm/nixl-agent-$(id -u) && mkdir -m 0755 $d && chown 4321 $d && exec \"$@\"";
    let tp = Tp::start_via(
        &["unshare", "-m", "--propagation", "private", "sh", "-c", setup, "sh"],
        3,
        &[],
        &[("NIXL_AGENT_LISTEN", &listen), ("XDG_RUNTIME_DIR", "")],
    );
    assert!(tp.workers.iter().all(|w| w.2 == "registered"), "{:?}", tp.workers);
    // Ready, and each rank says the directory it publishes to in its own
    // status, as the pod does in its.
    let st = support::wait_for(Duration::from_secs(10), "the three ranks, ready", || {
        let st: serde_json::Value = serde_json::from_str(&support::get(addr, "/v1/status").ok()?.body).ok()?;
        let ranks = st["ranks"].as_array()?;
        let said = ranks.iter().all(|r| r["status"]["pod"]["dir"] == st["dir"]);
        (ranks.len() == 3 && said && support::get(addr, "/readyz").ok()?.status == 200).then_some(st)
    });
    let dir = st["dir"].as_str().unwrap().to_string();
    assert!(
        dir.starts_with("/dev/shm/nixl-agent-") && !dir.starts_with(&format!("/dev/shm/nixl-agent-{}/", own_uid())),
        "the pod says which directory it uses: {dir}"
    );
    assert_three_ranks_registered(&support::scrape(addr));
    support::signal(holder_of(&tp, addr), "KILL");
    support::wait_for(Duration::from_secs(3), "another rank serving, not ready", || {
        let r = support::get(addr, "/readyz?verbose").ok()?;
        (r.status == 503 && r.body.contains("died without an end record")).then_some(())
    });
}

fn own_uid() -> u32 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("Uid:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// Rank files written by hand beside a real rank: one whose exposition
/// carries its own `rank` label (merged, `rank="1",rank="x"`: Prometheus
/// would refuse the whole pod scrape), and a fresh copy of a real one, as
/// rank 2, with an unrelated process's pid and no lock held. The pod's
/// /metrics stays promtool-clean, the first is rejected and counted by its
/// reason, the second is a dead rank, never a healthy one.
#[test]
fn rank_files_written_by_hand_cannot_break_the_pods_scrape() {
    let dir = tempfile::tempdir().unwrap();
    let pod = PodAgent::start(dir.path(), 3);
    let _rank0 = RankProcess::start(dir.path(), 0);
    support::wait_for(Duration::from_secs(10), "rank 0 published", || {
        dir.path().join("rank-0.json").exists().then_some(())
    });
    let real: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("rank-0.json")).unwrap()).unwrap();
    let mut injected = real.clone();
    injected["rank"] = 1.into();
    for key in ["metrics", "openmetrics"] {
        let body = injected[key]
            .as_str()
            .unwrap()
            .replace("\nnixl_agent_ready ", "\nnixl_agent_ready{rank=\"x\"} ");
        injected[key] = body.into();
    }
    assert!(injected["metrics"].as_str().unwrap().contains("rank=\"x\""));
    std::fs::write(dir.path().join("rank-1.json"), injected.to_string()).unwrap();
    let mut unheld = real.clone();
    unheld["rank"] = 2.into();
    unheld["pid"] = 1.into();
    std::fs::write(dir.path().join("rank-2.json"), unheld.to_string()).unwrap();
    let s = support::wait_for(Duration::from_secs(5), "the injected rank label counted", || {
        let s = support::scrape(pod.addr);
        (s.metric("nixl_agent_pod_files_rejected_total")
            .label("reason", "rank_label")
            .get()
            == Some(1.0))
        .then_some(s)
    });
    support::assert_promtool_clean(&support::get(pod.addr, "/metrics").unwrap().body);
    assert_eq!(s.metric("nixl_agent_rank_up").label("rank", "2").value(), 0.0);
    assert!(s.metric("nixl_agent_rank_up").label("rank", "1").get().is_none());
    let verbose = support::get(pod.addr, "/readyz?verbose").unwrap().body;
    assert!(
        verbose.contains("[-]rank:1 failed: its file was rejected: rank_label"),
        "{verbose}"
    );
    assert!(
        verbose.contains("[-]rank:2 failed: ended: pid 1 died without an end record"),
        "{verbose}"
    );
    // Counted once, however many passes see it.
    std::thread::sleep(Duration::from_millis(600));
    assert_eq!(
        support::scrape(pod.addr)
            .metric("nixl_agent_pod_files_rejected_total")
            .label("reason", "rank_label")
            .value(),
        1.0
    );
}

/// The sidecar says the life of each rank in its log, in words: joined,
/// ready, ended (a clean exit, which /readyz?verbose names instead of "no
/// process has published this rank"; kill -9, a death without an end
/// record), and its own shutdown on SIGTERM.
#[test]
fn the_sidecar_logs_the_life_of_each_rank() {
    let dir = tempfile::tempdir().unwrap();
    let log_dir = tempfile::tempdir().unwrap();
    let log_path = log_dir.path().join("pod.log");
    let addr = support::free_port();
    let pod = support::binary()
        .args([
            "pod",
            "--ranks",
            "1",
            "--log-format",
            "json",
            "--listen",
            &addr.to_string(),
            "--dir",
        ])
        .arg(dir.path())
        .env_remove("NIXL_AGENT_CONFIG")
        .env_remove("NIXL_AGENT_LOG")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log_path).unwrap())
        .spawn()
        .unwrap();
    let mut pod = support::Killed(pod);
    let messages = || -> Vec<String> {
        std::fs::read_to_string(&log_path)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .filter_map(|v| v["message"].as_str().map(String::from))
            .collect()
    };
    let said = |what: &str| {
        support::wait_for(Duration::from_secs(10), what, || {
            messages().into_iter().find(|m| m.contains(what))
        })
    };
    let verbose = || {
        support::get(addr, "/readyz?verbose")
            .map(|r| r.body)
            .unwrap_or_default()
    };
    support::wait_for(Duration::from_secs(10), "the pod agent", || {
        support::get(addr, "/livez").ok().filter(|r| r.status == 200)
    });

    let mut first = RankProcess::start(dir.path(), 0);
    let pid = first.pid();
    said(&format!("rank 0 joined: pid {pid} publishes it"));
    said(&format!("rank 0 is ready: pid {pid}"));
    // A clean exit: the rank ends with its end record, and readiness says
    // so.
    if let Some(mut s) = first.child.stdin.take() {
        s.write_all(b"\n").unwrap();
    }
    assert!(support::wait_within(&mut first.child, support::RUN_WITHIN, "rank 0's clean exit").success());
    said(&format!("rank 0 ended: pid {pid} exited at "));
    let body = support::wait_for(Duration::from_secs(5), "the end in readyz", || {
        Some(verbose()).filter(|b| b.contains("[-]rank:0"))
    });
    assert!(
        body.contains(&format!("[-]rank:0 failed: ended: pid {pid} exited at ")),
        "{body}"
    );
    assert!(!body.contains("no process has published this rank"), "{body}");

    // kill -9: a death, without an end record.
    let mut second = RankProcess::start(dir.path(), 0);
    let pid = second.pid();
    said(&format!("rank 0 joined: pid {pid} publishes it"));
    second.kill9();
    said(&format!(
        "rank 0 ended: pid {pid} died without an end record (a signal, os._exit, abort or kill -9)"
    ));

    support::signal(pod.id(), "TERM");
    assert!(support::wait_within(&mut pod, Duration::from_secs(30), "the pod agent's exit on SIGTERM").success());
    said("shutting down on SIGTERM");
}

/// The top-level keys of a /v1/status document, checked against the schema.
fn document_keys(addr: SocketAddr) -> (serde_json::Value, Vec<String>) {
    let doc = support::status_document(addr);
    let keys = doc.as_object().unwrap().keys().cloned().collect();
    (doc, keys)
}

/// /v1/status is one document whatever serves it: a lone process (the
/// binary), a zero-configuration pod of two and a sidecar pod of two each
/// validate against docs/status.schema.json, with the same top-level keys
/// and one rank element per rank. (Before: a lone process served its
/// recording bare, a pod another shape.)
#[test]
fn status_is_one_schema_for_a_process_a_zero_config_pod_and_a_sidecar() {
    let mut lone = support::AgentProcess::spawn(support::Spawn::default());
    lone.wait_ready(Duration::from_secs(30));
    let (doc, process_keys) = document_keys(lone.addr);
    assert_eq!(doc["shape"], "process");
    assert_eq!(doc["ranks"].as_array().unwrap().len(), 1);
    assert_eq!(doc["ranks"][0]["status"]["ready"], true, "{doc}");
    assert_eq!(doc["live"], true);
    // Strict enough to catch a missing, renamed or extra key, at the top
    // and in a rank.
    let mutated = |f: &dyn Fn(&mut serde_json::Map<String, serde_json::Value>)| {
        let mut d = doc.clone();
        f(d.as_object_mut().unwrap());
        d
    };
    let rank_mutated = |f: &dyn Fn(&mut serde_json::Map<String, serde_json::Value>)| {
        let mut d = doc.clone();
        f(d["ranks"][0].as_object_mut().unwrap());
        d
    };
    for (what, bad) in [
        ("ranks missing", mutated(&|m| drop(m.remove("ranks")))),
        (
            "ready renamed",
            mutated(&|m| {
                let v = m.remove("ready").unwrap();
                m.insert("is_ready".into(), v);
            }),
        ),
        ("an extra key", mutated(&|m| drop(m.insert("extra".into(), 1.into())))),
        ("a rank's status missing", rank_mutated(&|m| drop(m.remove("status")))),
        (
            "an extra rank key",
            rank_mutated(&|m| drop(m.insert("extra".into(), 1.into()))),
        ),
    ] {
        assert!(support::status_schema_errors(&bad).is_err(), "{what} passes the schema");
    }
    lone.signal("TERM");
    lone.wait_exit(Duration::from_secs(30));

    let addr = support::free_port();
    let listen = addr.to_string();
    let tp = Tp::start(2, &[], &[("NIXL_AGENT_LISTEN", &listen)]);
    assert!(tp.workers.iter().all(|w| w.2 == "registered"), "{:?}", tp.workers);
    support::wait_for(Duration::from_secs(10), "two ranks, ready", || {
        let st: serde_json::Value = serde_json::from_str(&support::get(addr, "/v1/status").ok()?.body).ok()?;
        (st["ranks"].as_array()?.len() == 2 && st["ready"] == true).then_some(())
    });
    let (doc, zero_config_keys) = document_keys(addr);
    assert_eq!(doc["shape"], "zero_config_pod");
    assert_eq!(doc["watcher"]["stalled"], false, "{doc}");
    assert_eq!(zero_config_keys, process_keys);
    drop(tp);

    let dir = tempfile::tempdir().unwrap();
    let pod = PodAgent::start(dir.path(), 2);
    let _ranks: Vec<RankProcess> = (0..2).map(|r| RankProcess::start(dir.path(), r)).collect();
    support::wait_for(Duration::from_secs(10), "the pod ready", || {
        (pod.readyz() == 200).then_some(())
    });
    let (doc, sidecar_keys) = document_keys(pod.addr);
    assert_eq!(doc["shape"], "sidecar");
    assert_eq!(doc["ranks"].as_array().unwrap().len(), 2);
    assert_eq!(sidecar_keys, process_keys);
}

/// SGLang's default shape with a hung call: two instrumented processes
/// share one address (no pod directory, no sidecar); in the second (rank
/// 1), a NIXL deregistration runs far past `NIXL_AGENT_CALL_TIMEOUT`. The
/// shared /livez, served by the first, is 503 while it runs and names the
/// rank and the call; /v1/status says the same; 200 once it returned.
/// (Before: the shared /livez stayed 200 the whole time.)
#[test]
fn a_hung_call_in_one_rank_fails_the_zero_config_pods_livez_naming_rank_and_call() {
    let addr = support::free_port();
    let listen = addr.to_string();
    let hold = |out: &mut support::Lines| out.skip_to("HOLD", support::RUN_WITHIN, "the rank's HOLD");
    let (mut first, mut first_out) = instrumented(
        "tests/python/serving.py",
        &["sglang", "--hold"],
        &[("NIXL_AGENT_LISTEN", &listen), ("NIXL_AGENT_EXPECT", "kv:DRAM,aux")],
    );
    hold(&mut first_out);
    let (mut hung, mut hung_out) = instrumented(
        "tests/python/serving.py",
        &["hung", HUNG_REGIONS, "--hold"],
        &[("NIXL_AGENT_LISTEN", &listen), ("NIXL_AGENT_CALL_TIMEOUT", "10ms")],
    );
    hold(&mut hung_out);
    support::wait_for(Duration::from_secs(10), "two ranks, live", || {
        let st: serde_json::Value = serde_json::from_str(&support::get(addr, "/v1/status").ok()?.body).ok()?;
        (st["ranks"].as_array()?.len() == 2 && support::get(addr, "/livez").ok()?.status == 200).then_some(())
    });
    let stdin = hung.stdin.as_mut().unwrap();
    stdin.write_all(b"\n").unwrap();
    stdin.flush().unwrap();
    let body = support::wait_for(Duration::from_secs(30), "the shared /livez 503", || {
        let r = support::get(addr, "/livez").ok()?;
        (r.status == 503).then_some(r.body)
    });
    assert!(
        body.starts_with("rank 1: NIXL deregister") && body.contains("past its deadline"),
        "{body}"
    );
    let doc = support::status_document(addr);
    assert_eq!(doc["shape"], "zero_config_pod", "{doc}");
    hold(&mut hung_out);
    support::wait_for(
        Duration::from_secs(10),
        "the shared /livez 200 once it returned",
        || (support::get(addr, "/livez").ok()?.status == 200).then_some(()),
    );
    for c in [&mut first, &mut hung] {
        drop(c.stdin.take());
        let _ = c.kill();
        let _ = c.wait();
    }
}

/// Regions of the hung rank's one deregistration: NIXL removes them one by
/// one, long past a 10 ms deadline and past the pod's passes.
const HUNG_REGIONS: &str = "1048576";

/// `nixl_plain fork files DIR` (C++, tests/programs/cpp), bare or under
/// the launcher with `env`: its stdout, unstamped, and the 12 files its
/// forked child wrote, by name.
fn fork_files(instrumented: Option<&[(&str, &str)]>) -> (String, Vec<(String, Vec<u8>)>) {
    use support::programs::{launched, plain_command, unstamped};
    let files = tempfile::tempdir().unwrap();
    let to = files.path().to_str().unwrap();
    let mut cmd = match instrumented {
        Some(env) => launched("cpp", "fork", env),
        None => plain_command("cpp", "fork"),
    };
    cmd.args(["files", to]);
    let out = support::output_within(&mut cmd, support::RUN_WITHIN, "nixl_plain fork files");
    assert!(out.status.success(), "{out:?}");
    let mut written: Vec<(String, Vec<u8>)> = std::fs::read_dir(files.path())
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            (
                e.file_name().to_string_lossy().into_owned(),
                std::fs::read(e.path()).unwrap(),
            )
        })
        .collect();
    written.sort();
    (unstamped(&out.stdout), written)
}

/// Issue #51: a C++ process under the launcher, publishing to a pod
/// directory and serving HTTP, forks a child that never calls NIXL; the
/// child closes every fd it inherited and writes 12 files through C stdio,
/// flushed by `exit`. It keeps every byte (as bare), and it is no rank: the
/// pod directory holds the parent's rank alone, and the sidecar counts one
/// exit, the parent's.
#[test]
fn a_forked_child_that_never_calls_nixl_keeps_its_bytes_and_is_no_rank() {
    let (bare_out, bare_files) = fork_files(None);
    assert_eq!(bare_files.len(), 12, "{bare_files:?}");
    assert!(bare_files.iter().all(|(_, b)| b.len() == 20), "{bare_files:?}");

    let pod = tempfile::tempdir().unwrap();
    let d = pod.path().to_str().unwrap();
    let listen = support::free_port().to_string();
    let (out, files) = fork_files(Some(&[("NIXL_AGENT_MULTIPROC_DIR", d), ("NIXL_AGENT_LISTEN", &listen)]));
    assert_eq!(files, bare_files, "the child's files, instrumented vs bare");
    assert_eq!(out, bare_out);

    let mut names: Vec<String> = std::fs::read_dir(pod.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["rank-0.json", "rank-0.lock"], "the child claimed no slot");
    let (_sidecar, addr) = support::pod_server(pod.path(), 1);
    let s = support::wait_for(Duration::from_secs(10), "the parent's exit counted", || {
        let s = support::scrape(addr);
        (s.value_at("nixl_agent_pod_rank_exits_total", &[("rank", "0"), ("how", "exited")]) == 1.0).then_some(s)
    });
    assert_eq!(s.metric("nixl_agent_pod_rank_exits_total").sum(), 1.0, "{}", s.text);
    assert_eq!(
        ranks_of(&s, "nixl_agent_rank_up"),
        ["0".to_string()].into(),
        "{}",
        s.text
    );
}

/// A process that outlives the test is killed when this is dropped.
struct KillPid(u32);

impl Drop for KillPid {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-s", "KILL", &self.0.to_string()])
            .stderr(Stdio::null())
            .status();
    }
}

/// Issue #51: a C++ rank under the launcher forks a helper that sleeps and
/// never calls NIXL, then is SIGKILLed while the helper lives. The sidecar
/// reads the rank as died within 10 s (the helper shares none of its slot:
/// what it inherited was let go of at the fork), and a new process claims
/// the slot again.
#[test]
fn a_killed_rank_whose_forked_helper_lives_is_died_and_its_slot_free() {
    use support::programs::launched;
    let pod = tempfile::tempdir().unwrap();
    let d = pod.path().to_str().unwrap();
    let (_sidecar, addr) = support::pod_server(pod.path(), 1);
    let listen = support::free_port().to_string();
    let mut cmd = launched(
        "cpp",
        "fork",
        &[("NIXL_AGENT_MULTIPROC_DIR", d), ("NIXL_AGENT_LISTEN", &listen)],
    );
    cmd.arg("helper");
    let mut rank = support::Killed(support::spawn_piped(&mut cmd));
    let mut out = support::Lines::new(rank.0.stdout.take().unwrap());
    let helper = loop {
        let line = out
            .next_within(support::RUN_WITHIN, "the helper's pid")
            .expect("the program ended before forking its helper");
        if let Some(pid) = line.trim().strip_prefix("helper ") {
            break KillPid(pid.parse().unwrap());
        }
    };
    support::wait_for(Duration::from_secs(10), "rank 0 up on the sidecar", || {
        (support::scrape(addr).value_at("nixl_agent_rank_up", &[("rank", "0")]) == 1.0).then_some(())
    });
    let pid = rank.id();
    support::signal(pid, "KILL");
    support::wait_within(&mut rank.0, Duration::from_secs(10), "the killed rank");
    support::wait_for(Duration::from_secs(10), "rank 0 died on the sidecar", || {
        (support::scrape(addr).value_at("nixl_agent_pod_rank_exits_total", &[("rank", "0"), ("how", "died")]) == 1.0)
            .then_some(())
    });
    let doc = support::status_document(addr);
    assert_eq!(doc["ranks"][0]["ended"]["how"], "died", "{doc}");
    // The helper still lives: it is not what freed the slot.
    assert!(Path::new(&format!("/proc/{}", helper.0)).exists());

    // The slot is free: the next process takes rank 0 (the lowest free).
    let next = support::output_within(
        &mut launched(
            "cpp",
            "ok",
            &[("NIXL_AGENT_MULTIPROC_DIR", d), ("NIXL_AGENT_LISTEN", &listen)],
        ),
        support::RUN_WITHIN,
        "the next process of the pod",
    );
    assert!(next.status.success(), "{next:?}");
    assert!(
        !pod.path().join("rank-1.json").exists(),
        "the next process took another slot"
    );
    support::wait_for(Duration::from_secs(10), "the next process's exit on rank 0", || {
        (support::scrape(addr).value_at("nixl_agent_pod_rank_exits_total", &[("rank", "0"), ("how", "exited")]) == 1.0)
            .then_some(())
    });
}

/// A forked child that calls NIXL itself (its own agent, one region
/// registered) records on its own: a rank of its own in the pod
/// directory, its registration counted there, its exit counted apart from
/// its parent's.
#[test]
fn a_forked_child_that_calls_nixl_is_a_rank_of_its_own() {
    use support::programs::launched;
    let pod = tempfile::tempdir().unwrap();
    let d = pod.path().to_str().unwrap();
    let listen = support::free_port().to_string();
    let mut cmd = launched(
        "cpp",
        "fork",
        &[("NIXL_AGENT_MULTIPROC_DIR", d), ("NIXL_AGENT_LISTEN", &listen)],
    );
    cmd.arg("nixl");
    let out = support::output_within(&mut cmd, support::RUN_WITHIN, "nixl_plain fork nixl");
    assert!(out.status.success(), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("child exited 0"),
        "{out:?}"
    );
    let (_sidecar, addr) = support::pod_server(pod.path(), 2);
    let s = support::wait_for(Duration::from_secs(10), "both exits counted", || {
        let s = support::scrape(addr);
        (s.metric("nixl_agent_pod_rank_exits_total").label("how", "exited").sum() == 2.0).then_some(s)
    });
    for rank in ["0", "1"] {
        assert_eq!(
            s.metric("nixl_agent_registration_attempts_total")
                .label("rank", rank)
                .sum(),
            1.0,
            "rank {rank}: {}",
            s.text
        );
    }
}
