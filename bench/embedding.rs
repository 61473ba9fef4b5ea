//! Section "embedding": observe mode against calling
//! `nixl_sys::Agent::register_memory` directly, on the same NIXL agent and
//! the same regions, in the same process.
//!
//! Each sample is a fresh process (`nixl-bench embed-worker FIRST`): its
//! very first registration of the largest N is timed cold with the contender
//! FIRST (samples alternate which one), then warm repetitions interleave the
//! two contenders at every N. Each worker also reports its RSS right after
//! that cold registration and its deregistration: observe-first processes
//! against direct-first ones is what the observer adds to an embedding
//! process (nixl-agent's own memory; there is no second UCX context).

use crate::common::{load_nixl, median, ms, proc_status_kib, Arena};
use nixl_agent::{Descriptor, Kind, MemType, ObserveSettings, ObservedAgent, ObservedRegistration, Observer, Region};
use nixl_sys::{Agent, AgentConfig, OptArgs, RegistrationHandle};
use serde::Serialize;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Instant;

pub const CONTENDERS: [&str; 2] = ["direct", "observe"];
const REGION: usize = 64 << 10;

#[derive(Debug, Clone, Serialize)]
pub struct Row {
    pub n: usize,
    pub contender: String,
    /// Median over warm repetitions, every sample process pooled.
    pub register_ms: f64,
    pub deregister_ms: f64,
    /// Median of the first registration in a fresh process (largest N only).
    pub cold_register_ms: Option<f64>,
    pub samples: usize,
}

#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub region_size: usize,
    pub processes: usize,
    pub reps: usize,
    pub rows: Vec<Row>,
    /// RSS after the cold registration, observe-first processes minus
    /// direct-first ones (KiB, medians).
    pub observer_rss_kib: f64,
    /// The recording alone: one observed call of N regions, no NIXL call.
    pub recording: Vec<Recording>,
    /// Two `Instant::now` reads (a call's start and its elapsed time), ns:
    /// the least any recording that times a call adds to it.
    pub clock_pair_ns: f64,
}

/// What observe mode adds to one call of `n` regions, NIXL left out.
#[derive(Debug, Clone, Serialize)]
pub struct Recording {
    pub n: usize,
    pub ns_per_call: f64,
    pub ns_per_region: f64,
}

/// Median ns of a start stamp and its elapsed time.
fn clock_pair_ns() -> f64 {
    crate::common::per_call_ns(|| {
        let t = Instant::now();
        std::hint::black_box(t.elapsed());
    })
}

/// One observed call of N regions with no NIXL call in it, warm, median of
/// `reps` batches: the recording's own cost (a call, not its regions, is
/// recorded: one pass for bytes and extent, one ledger entry).
fn recording(sizes: &[usize], reps: usize) -> Vec<Recording> {
    let o = Observer::new(ObserveSettings::default());
    let mut out = Vec::new();
    for &n in sizes {
        let regions: Vec<Region> = (0..n)
            .map(|i| Region::new(0x9000_0000 + i * 0x1000, 0x1000, 0))
            .collect();
        let calls = (200_000 / n.max(1)).clamp(20, 2000);
        crate::sections::call_ns(&o, &regions, calls);
        let v: Vec<f64> = (0..reps.max(3))
            .map(|_| crate::sections::call_ns(&o, &regions, calls))
            .collect();
        let ns = median(&v);
        out.push(Recording {
            n,
            ns_per_call: ns,
            ns_per_region: ns / n.max(1) as f64,
        });
    }
    out
}

impl Report {
    pub fn get(&self, n: usize, contender: &str) -> Option<&Row> {
        self.rows.iter().find(|r| r.n == n && r.contender == contender)
    }
}

/// A registration of either contender.
enum Held {
    Direct(RegistrationHandle),
    Observed(ObservedRegistration),
}

struct Bench {
    agent: Agent,
    opts: OptArgs,
    observed: ObservedAgent,
}

impl Bench {
    fn register(&self, contender: &str, regions: &[Region]) -> Result<(f64, Vec<Held>), String> {
        let descs: Vec<Descriptor> = regions.iter().map(|r| Descriptor::new(*r, MemType::Dram)).collect();
        let t0 = Instant::now();
        let mut handles = Vec::with_capacity(descs.len());
        for d in &descs {
            let h = match contender {
                "direct" => self.agent.register_memory(d, Some(&self.opts)).map(Held::Direct),
                _ => self
                    .observed
                    .register("kv", Kind::Kv, d, Some(&self.opts))
                    .map(Held::Observed),
            };
            handles.push(h.map_err(|e| format!("{contender} register: {e}"))?);
        }
        Ok((ms(t0.elapsed()), handles))
    }

    fn deregister(&self, contender: &str, handles: Vec<Held>) -> Result<f64, String> {
        let t0 = Instant::now();
        // Newest first, as every contender of the registration section does.
        for h in handles.into_iter().rev() {
            match h {
                Held::Direct(mut h) => h.deregister(),
                Held::Observed(mut h) => h.deregister(),
            }
            .map_err(|e| format!("{contender} deregister: {e}"))?;
        }
        Ok(ms(t0.elapsed()))
    }
}

/// The `embed-worker FIRST SIZES REPS` role: prints one JSON line.
pub fn worker_main(first: &str, sizes: &[usize], reps: usize) -> Result<(), String> {
    load_nixl()?;
    let cfg = AgentConfig {
        enable_prog_thread: false,
        enable_listen_thread: false,
        ..AgentConfig::default()
    };
    let agent = Agent::new_configured("bench-embed", &cfg).map_err(|e| format!("agent: {e}"))?;
    let (_, params) = agent.get_plugin_params("UCX").map_err(|e| e.to_string())?;
    let backend = agent.create_backend("UCX", &params).map_err(|e| e.to_string())?;
    let mut opts = OptArgs::new().map_err(|e| e.to_string())?;
    opts.add_backend(&backend).map_err(|e| e.to_string())?;
    let max = sizes.iter().copied().max().unwrap_or(1);
    let arena = Arena::new(max * REGION);
    let observer = Observer::new(ObserveSettings::default());
    let observed = observer.agent(&agent);
    let b = Bench { agent, opts, observed };

    let regions = arena.regions(max, REGION);
    let (cold, handles) = b.register(first, &regions)?;
    b.deregister(first, handles)?;
    let rss_cold = proc_status_kib(std::process::id(), "VmRSS").unwrap_or(0);

    let mut warm: Vec<serde_json::Value> = Vec::new();
    for &n in sizes {
        let regions = arena.regions(n, REGION);
        for rep in 0..reps {
            // Interleaved, and alternating which goes first.
            let order = if rep % 2 == 0 {
                CONTENDERS
            } else {
                [CONTENDERS[1], CONTENDERS[0]]
            };
            for c in order {
                let (reg, handles) = b.register(c, &regions)?;
                let dereg = b.deregister(c, handles)?;
                warm.push(serde_json::json!({ "n": n, "contender": c, "reg_ms": reg, "dereg_ms": dereg }));
            }
        }
    }
    println!(
        "{}",
        serde_json::json!({ "first": first, "n": max, "cold_ms": cold, "warm": warm, "rss_cold_kib": rss_cold })
    );
    Ok(())
}

/// Runs `processes` fresh workers (alternating the cold contender).
pub fn run(sizes: &[usize], reps: usize, processes: usize) -> Result<Report, String> {
    let me = std::env::current_exe().map_err(|e| e.to_string())?;
    let sizes_arg = sizes.iter().map(|s| s.to_string()).collect::<Vec<_>>().join(",");
    let mut cold: Vec<(String, f64)> = Vec::new();
    let mut warm: Vec<(usize, String, f64, f64)> = Vec::new();
    let mut rss: Vec<(String, f64)> = Vec::new();
    for p in 0..processes {
        let first = CONTENDERS[p % 2];
        let out = Command::new(&me)
            .args(["embed-worker", first, &sizes_arg, &reps.to_string()])
            .env("NIXL_LIB_DIR", crate::common::nixl_lib_dir())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .output()
            .map_err(|e| format!("embed-worker: {e}"))?;
        let line = BufReader::new(&out.stdout[..])
            .lines()
            .map_while(Result::ok)
            .find(|l| l.starts_with('{'))
            .ok_or_else(|| format!("embed-worker printed nothing ({})", out.status))?;
        let v: serde_json::Value = serde_json::from_str(&line).map_err(|e| e.to_string())?;
        if let Some(e) = v.get("error") {
            return Err(format!("embed-worker: {e}"));
        }
        cold.push((first.to_string(), v["cold_ms"].as_f64().unwrap_or(f64::NAN)));
        for w in v["warm"].as_array().into_iter().flatten() {
            warm.push((
                w["n"].as_u64().unwrap_or(0) as usize,
                w["contender"].as_str().unwrap_or_default().to_string(),
                w["reg_ms"].as_f64().unwrap_or(f64::NAN),
                w["dereg_ms"].as_f64().unwrap_or(f64::NAN),
            ));
        }
        rss.push((first.to_string(), v["rss_cold_kib"].as_f64().unwrap_or(f64::NAN)));
    }
    let max = sizes.iter().copied().max().unwrap_or(1);
    let mut rows = Vec::new();
    for &n in sizes {
        for c in CONTENDERS {
            let pick = |f: fn(&(usize, String, f64, f64)) -> f64| -> Vec<f64> {
                warm.iter().filter(|w| w.0 == n && w.1 == c).map(f).collect()
            };
            let reg = pick(|w| w.2);
            let cold_c: Vec<f64> = cold.iter().filter(|x| x.0 == c).map(|x| x.1).collect();
            rows.push(Row {
                n,
                contender: c.to_string(),
                register_ms: median(&reg),
                deregister_ms: median(&pick(|w| w.3)),
                cold_register_ms: (n == max && !cold_c.is_empty()).then(|| median(&cold_c)),
                samples: reg.len(),
            });
        }
    }
    Ok(Report {
        region_size: REGION,
        processes,
        reps,
        rows,
        observer_rss_kib: {
            let of = |c: &str| median(&rss.iter().filter(|r| r.0 == c).map(|r| r.1).collect::<Vec<_>>());
            of("observe") - of("direct")
        },
        recording: recording(sizes, reps),
        clock_pair_ns: clock_pair_ns(),
    })
}
