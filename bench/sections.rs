//! Sections 2–5: scrape throughput and latency, memory, time to ready, idle
//! CPU. Each compares the agent binary with a peer started in the same run.

use crate::common::{cpu_time, median, ms, proc_status_kib, smaps_rollup_kib};
use crate::load::{self, Conns, LoadResult};
use crate::procs::{get, get_text, AgentProc, GroupShape, RawProc, DEFAULT_PLAN};
use nixl_agent::{AgentId, Call, Kind, MemType, ObserveSettings, Observer, Outcome, Region};
use serde::Serialize;
use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

const READY_TIMEOUT: Duration = Duration::from_secs(60);

/// The NIXL exporter process, answering on /metrics. Its port is picked
/// free then released, so another process may take it first (NIXL then runs
/// without its exporter): tried three times.
fn start_exporter() -> Result<(RawProc, SocketAddr), String> {
    let mut last = String::new();
    for _ in 0..3 {
        let attempt = (|| {
            let mut p = RawProc::spawn(DEFAULT_PLAN, true)?;
            p.wait_ready(READY_TIMEOUT)?;
            let addr = p.exporter.ok_or("no exporter address")?;
            wait_http(addr, "/metrics", Duration::from_secs(5))?;
            Ok::<_, String>((p, addr))
        })();
        match attempt {
            Ok(v) => return Ok(v),
            Err(e) => last = e,
        }
    }
    Err(format!("NIXL's Prometheus exporter did not answer: {last}"))
}

/// The agent binary, ready (three tries, for the same port race).
fn start_agent(bin: &Path, groups: Option<&[GroupShape]>) -> Result<AgentProc, String> {
    let mut last = String::new();
    for _ in 0..3 {
        let mut a = AgentProc::spawn(bin, groups)?;
        match a.wait_ready(READY_TIMEOUT, Duration::from_millis(20)) {
            Ok(_) => return Ok(a),
            // It exited (its port was taken): again. Not ready in time: stop.
            Err(e) if e.contains("exited") => last = e,
            Err(e) => return Err(e),
        }
    }
    Err(last)
}

/// Waits until `GET addr/path` answers 200.
fn wait_http(addr: SocketAddr, path: &str, timeout: Duration) -> Result<(), String> {
    let end = Instant::now() + timeout;
    loop {
        match get(addr, path) {
            Ok((200, _)) => return Ok(()),
            Ok((s, _)) if Instant::now() > end => return Err(format!("http://{addr}{path} answered {s}")),
            Err(e) if Instant::now() > end => return Err(format!("http://{addr}{path}: {e}")),
            _ => std::thread::sleep(Duration::from_millis(20)),
        }
    }
}

// --- 2. scrape ---------------------------------------------------------------

#[derive(Debug, Clone, Serialize)]
pub struct ScrapeReport {
    pub connections: usize,
    pub seconds: f64,
    pub agent_metrics: LoadResult,
    pub agent_readyz: LoadResult,
    /// /metrics with a new connection per request: how NIXL's exporter is
    /// always measured, since it closes the connection after each response.
    pub agent_metrics_close: LoadResult,
    /// NIXL's own exporter (libtelemetry_exporter_prometheus) in a bare
    /// nixl-sys process holding the default plan; an error when it could
    /// not be started.
    pub nixl_metrics: Option<LoadResult>,
    pub nixl_error: Option<String>,
    pub nixl_exporter_env: Vec<(String, String)>,
}

pub fn scrape(
    agent_bin: &Path,
    connections: usize,
    warmup: Duration,
    duration: Duration,
) -> Result<ScrapeReport, String> {
    let agent = start_agent(agent_bin, None)?;
    let nixl = start_exporter();
    let ka = Conns::KeepAlive;
    let agent_metrics = load::run(agent.addr, "/metrics", connections, ka, warmup, duration);
    let nixl_metrics = nixl
        .as_ref()
        .ok()
        .map(|(_, addr)| load::run(*addr, "/metrics", connections, ka, warmup, duration));
    let nixl_error = nixl.as_ref().err().cloned();
    let agent_readyz = load::run(agent.addr, "/readyz", connections, ka, warmup, duration);
    let agent_metrics_close = load::run(agent.addr, "/metrics", connections, Conns::Close, warmup, duration);
    drop(nixl);
    Ok(ScrapeReport {
        connections,
        seconds: duration.as_secs_f64(),
        agent_metrics,
        agent_readyz,
        agent_metrics_close,
        nixl_metrics,
        nixl_error,
        nixl_exporter_env: [
            ("NIXL_TELEMETRY_ENABLE", "y"),
            ("NIXL_TELEMETRY_EXPORTER", "prometheus"),
            ("NIXL_TELEMETRY_PROMETHEUS_PORT", "<free port>"),
            ("NIXL_TELEMETRY_PROMETHEUS_LOCAL", "y"),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect(),
    })
}

// --- 3. memory ---------------------------------------------------------------

#[derive(Debug, Clone, Serialize)]
pub struct MemoryRow {
    pub plan: String,
    pub groups: Vec<GroupShape>,
    pub agent_rss_kib: u64,
    pub raw_rss_kib: u64,
    pub agent_private_kib: u64,
    pub raw_private_kib: u64,
    pub delta_rss_mib: f64,
    pub delta_private_mib: f64,
}

fn private_kib(pid: u32) -> u64 {
    smaps_rollup_kib(pid, "Private_Clean").unwrap_or(0) + smaps_rollup_kib(pid, "Private_Dirty").unwrap_or(0)
}

/// RSS of the agent binary (ready, scraped once) minus a bare nixl-sys
/// process holding the same registrations.
pub fn memory(agent_bin: &Path, plans: &[(&str, Option<Vec<GroupShape>>)]) -> Result<Vec<MemoryRow>, String> {
    let mut rows = Vec::new();
    for (name, groups) in plans {
        let shapes = groups.clone().unwrap_or_else(|| DEFAULT_PLAN.to_vec());
        let mut raw = RawProc::spawn(&shapes, false)?;
        let agent = start_agent(agent_bin, groups.as_deref())?;
        raw.wait_ready(READY_TIMEOUT)?;
        // Steady state: what a scraped agent holds.
        let _ = get(agent.addr, "/metrics");
        let _ = get(agent.addr, "/v1/status");
        std::thread::sleep(Duration::from_millis(500));
        let a_rss = proc_status_kib(agent.pid(), "VmRSS").ok_or("agent VmRSS")?;
        let r_rss = proc_status_kib(raw.pid(), "VmRSS").ok_or("raw VmRSS")?;
        let (a_priv, r_priv) = (private_kib(agent.pid()), private_kib(raw.pid()));
        rows.push(MemoryRow {
            plan: name.to_string(),
            groups: shapes,
            agent_rss_kib: a_rss,
            raw_rss_kib: r_rss,
            agent_private_kib: a_priv,
            raw_private_kib: r_priv,
            delta_rss_mib: (a_rss as f64 - r_rss as f64) / 1024.0,
            delta_private_mib: (a_priv as f64 - r_priv as f64) / 1024.0,
        });
    }
    Ok(rows)
}

// --- 4. time to ready ----------------------------------------------------------

#[derive(Debug, Clone, Serialize)]
pub struct ReadyReport {
    pub reps: usize,
    /// Process start → first /readyz 200 seen by a 1 ms poll.
    pub agent_ms: f64,
    /// Process start → "ready" line from a bare nixl-sys process that loads
    /// NIXL, creates the agent and the UCX backend and registers the plan.
    pub raw_ms: f64,
    pub delta_ms: f64,
    /// The agent's own `nixl_agent_time_to_ready_seconds` (from its start).
    pub agent_self_reported_ms: f64,
    pub agent_samples_ms: Vec<f64>,
    pub raw_samples_ms: Vec<f64>,
}

fn metric_value(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
}

pub fn time_to_ready(agent_bin: &Path, reps: usize) -> Result<ReadyReport, String> {
    let (mut a, mut r, mut own) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..reps * 2 {
        // Alternate, starting with a different one each pair.
        if (i % 2 == 0) == (i / 2 % 2 == 0) {
            let mut agent = AgentProc::spawn(agent_bin, None)?;
            let at = agent.wait_ready(READY_TIMEOUT, Duration::from_millis(1))?;
            a.push(ms(at - agent.spawned));
            if let Ok((_, text)) = get_text(agent.addr, "/metrics") {
                if let Some(v) = metric_value(&text, "nixl_agent_time_to_ready_seconds") {
                    own.push(v * 1e3);
                }
            }
        } else {
            let mut raw = RawProc::spawn(DEFAULT_PLAN, false)?;
            let at = raw.wait_ready(READY_TIMEOUT)?;
            r.push(ms(at - raw.spawned));
        }
    }
    let (am, rm) = (median(&a), median(&r));
    Ok(ReadyReport {
        reps,
        agent_ms: am,
        raw_ms: rm,
        delta_ms: am - rm,
        agent_self_reported_ms: median(&own),
        agent_samples_ms: a,
        raw_samples_ms: r,
    })
}

// --- 5. idle CPU -----------------------------------------------------------------

#[derive(Debug, Clone, Serialize)]
pub struct IdleReport {
    pub seconds: f64,
    pub scrapes: usize,
    /// Percent of one core: the agent binary (default plan), scraped once a second.
    pub agent_pct: f64,
    /// A bare nixl-sys process holding the same plan, not scraped.
    pub raw_pct: f64,
    /// A bare nixl-sys process with NIXL's exporter, scraped once a second.
    pub nixl_exporter_pct: Option<f64>,
}

pub fn idle_cpu(agent_bin: &Path, seconds: u64) -> Result<IdleReport, String> {
    let mut raw = RawProc::spawn(DEFAULT_PLAN, false)?;
    let agent = start_agent(agent_bin, None)?;
    raw.wait_ready(READY_TIMEOUT)?;
    let exporter = start_exporter().ok();
    std::thread::sleep(Duration::from_secs(1));
    let pids = [
        Some(agent.pid()),
        Some(raw.pid()),
        exporter.as_ref().map(|(p, _)| p.pid()),
    ];
    let before: Vec<Option<Duration>> = pids.iter().map(|p| p.and_then(cpu_time)).collect();
    let t0 = Instant::now();
    let mut scrapes = 0;
    for i in 1..=seconds {
        let _ = get(agent.addr, "/metrics");
        if let Some((_, addr)) = &exporter {
            let _ = get(*addr, "/metrics");
        }
        scrapes += 1;
        let next = t0 + Duration::from_secs(i);
        std::thread::sleep(next.saturating_duration_since(Instant::now()));
    }
    let wall = t0.elapsed().as_secs_f64();
    let pct = |i: usize| -> Option<f64> {
        let after = pids[i].and_then(cpu_time)?;
        Some((after - before[i]?).as_secs_f64() / wall * 100.0)
    };
    Ok(IdleReport {
        seconds: wall,
        scrapes,
        agent_pct: pct(0).ok_or("agent CPU time")?,
        raw_pct: pct(1).ok_or("raw CPU time")?,
        nixl_exporter_pct: pct(2),
    })
}

// --- 7. pod ------------------------------------------------------------------

#[derive(Debug, Clone, Serialize)]
pub struct PodReport {
    pub ranks: u32,
    pub connections: usize,
    pub seconds: f64,
    /// `nixl-agent pod` serving `ranks` SGLang-shaped rank files.
    pub pod_metrics: LoadResult,
    /// The binary's own /metrics (its default plan): one process.
    pub single_metrics: LoadResult,
    /// One observed registration call (64 regions, begin to end, no NIXL
    /// call), median ns: a recording that publishes to a pod directory, and
    /// one that does not, interleaved.
    pub register_ns_publishing: f64,
    pub register_ns_plain: f64,
    /// `nixl-agent pod` watching a directory of large rank files that do
    /// not change (`crate::pod_dir`).
    pub big_dir: crate::pod_dir::DirCost,
}

/// One rank in the SGLang shape: kv (4 regions), aux (1), state (1),
/// recorded by an observer as the instrumented scheduler would.
fn sglang_rank() -> Observer {
    let o = Observer::new(ObserveSettings::default());
    let agent = AgentId::fresh();
    o.saw_agent(agent, "bench-rank", Vec::new);
    for (group, kind, n) in [("kv", Kind::Kv, 4), ("aux", Kind::Aux, 1), ("state", Kind::State, 1)] {
        let regions: Vec<Region> = (0..n)
            .map(|i| Region::new(0x7000_0000 + i * 0x10000, 0x10000, 0))
            .collect();
        call(&o, agent, group, &kind, &regions);
    }
    o
}

fn call(o: &Observer, agent: AgentId, group: &str, kind: &Kind, regions: &[Region]) {
    let c = Call {
        agent,
        backends: None,
        group,
        kind,
        mem_type: MemType::Dram,
        device: 0,
        regions,
    };
    let p = o.begin(&c);
    o.end(p, &c, None, Outcome::Registered);
}

/// Median ns of one observed call on `o`, `calls` at a time.
pub fn call_ns(o: &Observer, regions: &[Region], calls: usize) -> f64 {
    let agent = AgentId::fresh();
    let t0 = Instant::now();
    for _ in 0..calls {
        call(o, agent, "kv", &Kind::Kv, regions);
    }
    t0.elapsed().as_nanos() as f64 / calls as f64
}

pub fn pod(
    agent_bin: &Path,
    ranks: u32,
    connections: usize,
    warmup: Duration,
    duration: Duration,
    reps: usize,
    (big_files, big_watch): (u32, Duration),
) -> Result<PodReport, String> {
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let mut held = Vec::new();
    for r in 0..ranks {
        let o = sglang_rank();
        let p = o.publish(dir.path(), r).map_err(|e| format!("publish rank {r}: {e}"))?;
        held.push((o, p));
    }
    let port = crate::procs::free_port();
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().map_err(|e| format!("{e}"))?;
    let mut pod = crate::procs::spawn_pod(agent_bin, dir.path(), ranks, addr)?;
    let served = (|| {
        wait_http(addr, "/livez", READY_TIMEOUT)?;
        // Every rank merged in.
        let end = Instant::now() + READY_TIMEOUT;
        loop {
            let (_, body) = get_text(addr, "/metrics").map_err(|e| e.to_string())?;
            let merged = (0..ranks).all(|r| body.contains(&format!("rank=\"{r}\"")));
            if merged {
                break;
            }
            if Instant::now() > end {
                return Err("the pod never merged every rank".to_string());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let single = start_agent(agent_bin, None)?;
        let ka = Conns::KeepAlive;
        let pod_metrics = load::run(addr, "/metrics", connections, ka, warmup, duration);
        let single_metrics = load::run(single.addr, "/metrics", connections, ka, warmup, duration);
        Ok((pod_metrics, single_metrics))
    })();
    let _ = pod.kill();
    let _ = pod.wait();
    let (pod_metrics, single_metrics) = served?;
    // The registration path with and without a publisher beside it.
    let plain = Observer::new(ObserveSettings::default());
    let publishing = Observer::new(ObserveSettings::default());
    let _publisher = publishing
        .publish(dir.path(), ranks)
        .map_err(|e| format!("publish: {e}"))?;
    let regions: Vec<Region> = (0..64)
        .map(|i| Region::new(0x9000_0000 + i * 0x1000, 0x1000, 0))
        .collect();
    let (mut with, mut without): (Vec<f64>, Vec<f64>) = (Vec::new(), Vec::new());
    for rep in 0..reps.max(3) {
        if rep % 2 == 0 {
            with.push(call_ns(&publishing, &regions, 2000));
            without.push(call_ns(&plain, &regions, 2000));
        } else {
            without.push(call_ns(&plain, &regions, 2000));
            with.push(call_ns(&publishing, &regions, 2000));
        }
    }
    drop(held);
    let big_dir = crate::pod_dir::cost(agent_bin, big_files, big_watch)?;
    Ok(PodReport {
        ranks,
        connections,
        seconds: duration.as_secs_f64(),
        pod_metrics,
        single_metrics,
        register_ns_publishing: median(&with),
        register_ns_plain: median(&without),
        big_dir,
    })
}
