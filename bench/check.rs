//! The loopback transfer's sections. `check`: the release binary's
//! `nixl-agent check --json` against `check --json --no-transfer`, fresh
//! processes, alternating, so the difference is what the loopback adds.
//! `canary`: the node canary's round (`Round::CANARY`) on two NIXL agents
//! with no progress thread, opened once and kept, in a fresh worker process:
//! the cold open and first round beside warm rounds, process CPU time.

use crate::common::{median, ms, nixl_lib_dir};
use nixl_agent::{MemType, ObserveSettings, Observer};
use nixl_agent_engine::datapath::{Loopback, Round, Side};
use serde::Serialize;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const MIB16: u64 = 16 << 20;

// --- check -----------------------------------------------------------------------

#[derive(Debug, Clone, Serialize)]
pub struct CheckReport {
    /// Fresh processes of each kind.
    pub runs: usize,
    /// Median wall seconds, process start → exit.
    pub with_transfer_s: f64,
    pub without_transfer_s: f64,
    /// What the loopback adds: the difference of the medians.
    pub added_s: f64,
    /// The loopback's own time (`transfers[0].seconds`), median.
    pub loopback_s: f64,
    /// Median bandwidth of the 16 MiB WRITE and READ, bytes a second.
    pub write_16mib_bps: f64,
    pub read_16mib_bps: f64,
    pub with_samples_s: Vec<f64>,
    pub without_samples_s: Vec<f64>,
}

/// One `check --json [--no-transfer]`: wall seconds and its report.
fn check_once(bin: &Path, transfer: bool) -> Result<(f64, serde_json::Value), String> {
    let mut cmd = Command::new(bin);
    cmd.env_remove("NIXL_AGENT_CONFIG")
        .env_remove("NIXL_PLUGIN_DIR")
        .env_remove("NIXL_AGENT_LOG")
        .env_remove("UCX_PROTO_INFO")
        .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
        .env_remove("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        .env("NIXL_LIB_DIR", nixl_lib_dir())
        .args(["check", "--json"]);
    if !transfer {
        cmd.arg("--no-transfer");
    }
    cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::null());
    let t0 = Instant::now();
    let out = cmd.output().map_err(|e| format!("{} check: {e}", bin.display()))?;
    let wall = t0.elapsed().as_secs_f64();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout)
        .map_err(|e| format!("check --json ({}) printed no report: {e}", out.status))?;
    if !out.status.success() || v["ok"] != true {
        return Err(format!("check --json failed ({}): {}", out.status, v["transfers"]));
    }
    Ok((wall, v))
}

pub fn check(bin: &Path, runs: usize) -> Result<CheckReport, String> {
    let (mut with, mut without) = (Vec::new(), Vec::new());
    let (mut own, mut write, mut read) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..runs * 2 {
        // Alternate, starting with a different one each pair.
        let transfer = (i % 2 == 0) == (i / 2 % 2 == 0);
        let (wall, v) = check_once(bin, transfer)?;
        if !transfer {
            without.push(wall);
            continue;
        }
        let x = &v["transfers"][0];
        if x["outcome"] != "ok" {
            return Err(format!("the loopback transfer did not pass: {x}"));
        }
        with.push(wall);
        own.push(x["seconds"].as_f64().ok_or("no transfers[0].seconds")?);
        for m in x["measured"].as_array().ok_or("no transfers[0].measured")? {
            let bps = m["bytes_per_second"].as_f64().unwrap_or(f64::NAN);
            match (m["op"].as_str(), m["bytes"].as_u64()) {
                (Some("write"), Some(MIB16)) => write.push(bps),
                (Some("read"), Some(MIB16)) => read.push(bps),
                _ => {}
            }
        }
    }
    let (w, wo) = (median(&with), median(&without));
    Ok(CheckReport {
        runs,
        with_transfer_s: w,
        without_transfer_s: wo,
        added_s: w - wo,
        loopback_s: median(&own),
        write_16mib_bps: median(&write),
        read_16mib_bps: median(&read),
        with_samples_s: with,
        without_samples_s: without,
    })
}

// --- canary ----------------------------------------------------------------------

#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct CanaryReport {
    pub rounds: usize,
    pub warmup: usize,
    /// Cold: `Loopback::open` (two agents, two UCX backends in parallel,
    /// buffers registered, metadata exchanged), wall and process CPU.
    pub open_ms: f64,
    pub open_cpu_ms: f64,
    /// Cold: the first round after the open (UCX connects lazily).
    pub first_round_ms: f64,
    pub first_round_cpu_ms: f64,
    /// Warm: process CPU time over `rounds` rounds, a round.
    pub cpu_us_per_round: f64,
    /// Warm: wall time a round, median and mean.
    pub wall_us_per_round_median: f64,
    pub wall_us_per_round_mean: f64,
    /// `cpu_us_per_round` as a percentage of one core at a 60 s interval.
    pub pct_at_60s: f64,
    /// The loopback open and nothing done for `idle_seconds`.
    pub idle_seconds: f64,
    pub idle_cpu_ms: f64,
    pub idle_pct: f64,
}

/// User + system CPU time of this process (every thread), from getrusage.
fn cpu_self() -> Duration {
    // Safety: getrusage writes one rusage into the zeroed struct we own.
    let ru = unsafe {
        let mut ru: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut ru);
        ru
    };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

fn round(lb: &mut Loopback) -> Result<(), String> {
    let r = lb.round(&Round::CANARY);
    match r.failure {
        Some(f) => Err(format!("canary round: {}", f.message)),
        None => Ok(()),
    }
}

/// The worker: prints one JSON line.
pub fn worker_main(rounds: usize, warmup: usize, idle: Duration) -> Result<(), String> {
    crate::common::load_nixl()?;
    let observer = Observer::new(ObserveSettings::default());
    let dram = Side {
        mem_type: MemType::Dram,
        device: 0,
    };
    let (c0, t0) = (cpu_self(), Instant::now());
    let mut lb = Loopback::open(&observer, "bench-canary", "UCX", dram, dram, &Round::CANARY)
        .map_err(|f| format!("opening the loopback: {}", f.message))?;
    let (open_ms, open_cpu_ms) = (ms(t0.elapsed()), ms(cpu_self() - c0));
    let (c0, t0) = (cpu_self(), Instant::now());
    round(&mut lb)?;
    let (first_round_ms, first_round_cpu_ms) = (ms(t0.elapsed()), ms(cpu_self() - c0));
    for _ in 0..warmup {
        round(&mut lb)?;
    }
    let mut walls = Vec::with_capacity(rounds);
    let c0 = cpu_self();
    for _ in 0..rounds {
        let t = Instant::now();
        round(&mut lb)?;
        walls.push(t.elapsed().as_secs_f64() * 1e6);
    }
    let cpu_us_per_round = (cpu_self() - c0).as_secs_f64() * 1e6 / rounds.max(1) as f64;
    let (c0, t0) = (cpu_self(), Instant::now());
    std::thread::sleep(idle);
    let (idle_seconds, idle_cpu) = (t0.elapsed().as_secs_f64(), (cpu_self() - c0).as_secs_f64());
    drop(lb);
    let report = CanaryReport {
        rounds,
        warmup,
        open_ms,
        open_cpu_ms,
        first_round_ms,
        first_round_cpu_ms,
        cpu_us_per_round,
        wall_us_per_round_median: median(&walls),
        wall_us_per_round_mean: walls.iter().sum::<f64>() / walls.len().max(1) as f64,
        pct_at_60s: cpu_us_per_round / 60e6 * 100.0,
        idle_seconds,
        idle_cpu_ms: idle_cpu * 1e3,
        idle_pct: idle_cpu / idle_seconds * 100.0,
    };
    println!("{}", serde_json::to_string(&report).map_err(|e| e.to_string())?);
    Ok(())
}

/// Runs the worker in a fresh process.
pub fn canary(rounds: usize, warmup: usize, idle: Duration) -> Result<CanaryReport, String> {
    let me = std::env::current_exe().map_err(|e| e.to_string())?;
    let out = Command::new(me)
        .args([
            "canary-worker",
            &rounds.to_string(),
            &warmup.to_string(),
            &idle.as_secs_f64().to_string(),
        ])
        .env("NIXL_LIB_DIR", nixl_lib_dir())
        .env_remove("NIXL_PLUGIN_DIR")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .output()
        .map_err(|e| format!("canary-worker: {e}"))?;
    let line = BufReader::new(&out.stdout[..])
        .lines()
        .map_while(Result::ok)
        .find(|l| l.starts_with('{'))
        .ok_or_else(|| format!("canary-worker printed nothing ({})", out.status))?;
    let v: serde_json::Value = serde_json::from_str(&line).map_err(|e| e.to_string())?;
    if let Some(e) = v.get("error") {
        return Err(format!("canary-worker: {e}"));
    }
    serde_json::from_value(v).map_err(|e| format!("canary-worker: {e}"))
}
