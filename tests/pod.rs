//! A pod of three ranks: three instrumented Python processes (real NIXL
//! Python API) publish to one directory, `nixl-agent pod` serves it, a real
//! Prometheus scrapes it with the shipped rules. A rank killed with SIGKILL
//! makes the pod not ready within 2 s and the not-ready alert fire; the
//! restarted rank makes it ready again.

#[path = "support/prom.rs"]
mod prom;
mod support;

use std::io::{BufRead, BufReader, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// One rank: the SGLang-shaped program, held after registering.
struct RankProcess {
    child: Child,
}

impl RankProcess {
    fn start(dir: &Path, rank: u32) -> RankProcess {
        let mut c = Command::new(support::venv_bin("nixl-agent-instrument"));
        c.arg(support::python())
            .arg(repo().join("tests/python/serving.py"))
            .args(["sglang", "--hold"]);
        for (k, _) in std::env::vars() {
            if k.starts_with("NIXL_AGENT_") || k.starts_with("OTEL_") || k == "PYTHONPATH" {
                c.env_remove(k);
            }
        }
        c.env("NIXL_AGENT_MULTIPROC_DIR", dir)
            .env("LOCAL_RANK", rank.to_string())
            .env("NIXL_AGENT_EXPECT", "kv:DRAM,aux");
        let mut child = c
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        while line.trim_end() != "HOLD" {
            line.clear();
            assert!(out.read_line(&mut line).unwrap() > 0, "rank {rank} ended before HOLD");
        }
        RankProcess { child }
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

struct PodAgent {
    child: Child,
    addr: SocketAddr,
}

impl PodAgent {
    fn start(dir: &Path, ranks: u32) -> PodAgent {
        let addr = support::free_port();
        let child = support::binary()
            .args([
                "pod",
                "--ranks",
                &ranks.to_string(),
                "--listen",
                &addr.to_string(),
                "--dir",
            ])
            .arg(dir)
            .env_remove("NIXL_AGENT_CONFIG")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        support::wait_for(Duration::from_secs(10), "the pod agent", || {
            support::get(addr, "/livez").ok().filter(|r| r.status == 200)
        });
        PodAgent { child, addr }
    }

    fn readyz(&self) -> u16 {
        support::get(self.addr, "/readyz").unwrap().status
    }
}

impl Drop for PodAgent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
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
        assert!(series <= 120, "rank {r}: {series} series");
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

    // The rank comes back: ready again.
    ranks[1] = RankProcess::start(dir.path(), 1);
    support::wait_for(Duration::from_secs(10), "the pod ready again", || {
        (pod.readyz() == 200).then_some(())
    });
    let st: serde_json::Value = serde_json::from_str(&support::get(pod.addr, "/v1/status").unwrap().body).unwrap();
    assert_eq!(st["ready"], true, "{st}");
    assert_eq!(st["ranks"].as_array().unwrap().len(), 3);
}
