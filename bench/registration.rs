//! Section 1: registering and deregistering N DRAM regions through UCX.
//!
//! Contenders, interleaved repetition by repetition (the order rotates), each
//! on a fresh populated mapping of N × 64 KiB, first region 64 KiB-aligned
//! (so every registration is a first registration, as in a serving process,
//! no contender inherits another's UCX registration cache, and none is
//! luckier with alignment):
//! - `raw`: nixl-sys `Agent::register_memory` per region, handles dropped in
//!   registration order (what dropping a `Vec` of them does), nothing else;
//! - `raw_reverse`: the same, handles dropped newest first;
//! - `agent`, `agent_novalidate`: the agent's real lifecycle driver
//!   (`lifecycle::driver::Driver` → validation → `group::register_all` →
//!   events, metrics, status, log lines; drain → `group::release_all`) on its
//!   `NixlRegistrar`, with validation on and off;
//! - `batched_capi`: one NIXL C API call for the whole list (what a batched
//!   call on the agent's single NIXL agent would cost);
//! - `python`: the wheel's Python API, `register_memory(list, "DRAM")` and
//!   `deregister_memory(descs)` (what SGLang does), in its own process.
//!
//! Every contender runs in its own process with one NIXL agent (see
//! bench/worker.rs), created without progress and listen threads, as the
//! agent creates its own.

use crate::capi::BatchAgent;
use crate::common::{exponent, median, ms, nixl_lib_dir, per_call_ns, Arena};
use crate::worker::{self, Worker};
use nixl_agent::config::{ProcessEnv, RetryConfig};
use nixl_agent::MemType;
use nixl_agent::{Capture, Failure, GroupSpec, Kind, Plan, Region};
use nixl_agent_core::model::{NixlStatus, RuntimeFacts};
use nixl_agent_core::validate::MemoryProbe;
use nixl_agent_engine::lifecycle::driver::{Control, Driver};
use nixl_agent_engine::lifecycle::registrar::{HeldRegions, NixlRegistrar};
use nixl_agent_engine::lifecycle::{ListFailure, Registrar, Unreleased};
use nixl_agent_ledger::record::Recorder;
use nixl_agent_ledger::telemetry::metrics::BuildInfo;
use nixl_agent_sys::Backing;
use nixl_sys::{Agent, AgentConfig, Backend, OptArgs, RegistrationHandle};
use serde::Serialize;
use std::cell::Cell;
use std::collections::BTreeMap;
use std::sync::mpsc::Sender;
use std::time::{Duration, Instant};

pub const CONTENDERS: &[&str] = &[
    "raw",
    "raw_reverse",
    "agent",
    "agent_novalidate",
    "batched_capi",
    "python",
    "agent_group_only",
    "batched_capi_in_agent",
];

/// What runs by default. `agent_group_only` (the agent's `NixlRegistrar`
/// through `group::register_all`/`release_all`: the same one NIXL list
/// call, no driver, no validation) splits the agent's time in the same
/// run: validation (`agent` − `agent_novalidate`), the driver around the
/// call (`agent_novalidate` − `agent_group_only`: events, recording, log
/// lines, the drain's start) and NIXL's call itself. `batched_capi_in_agent`
/// (the batched C API call on a second NIXL agent inside the agent's worker
/// process) is a diagnostic of the process it runs in, on request.
pub const DEFAULT_CONTENDERS: &[&str] = &[
    "raw",
    "raw_reverse",
    "agent",
    "agent_novalidate",
    "batched_capi",
    "python",
    "agent_group_only",
];

pub struct Config {
    /// Which of [`CONTENDERS`] run (all by default).
    pub contenders: Vec<String>,
    pub sizes: Vec<usize>,
    pub region_size: usize,
    pub warmup: usize,
    pub reps: usize,
    /// Pause after each repetition, so one process's background work (UCX's
    /// async thread after unmaps, page freeing) settles before the next;
    /// [`Config::pause`] adds to it for the memory the repetition freed.
    pub settle: Duration,
    /// Fresh processes per contender and N for the cold first registration.
    pub cold_samples: usize,
}

impl Config {
    /// The pause after a repetition (or a cold process) of N regions: the
    /// base [`Config::settle`] and 1 ms for each MiB it unmapped. The kernel
    /// hands freed memory back in the background, and a 1 GiB registration
    /// that starts during it can take 2–6× as long: on a 2-core VM,
    /// `nixl-bench --sections registration --sizes 16384 --settle-ms 50`
    /// with a pause of 50 ms alone left about a third of the 49 samples
    /// that slow, with 1.5 s one.
    fn pause(&self, n: usize) -> Duration {
        self.settle + Duration::from_millis(((n * self.region_size) >> 20) as u64)
    }
}

/// Median times of one contender at one N, with the samples.
#[derive(Debug, Clone, Serialize, Default)]
pub struct Timing {
    pub register_ms: f64,
    pub deregister_ms: f64,
    /// The first registration in a fresh process (median over
    /// `cold_samples` processes): what a serving process pays at start-up.
    pub cold_register_ms: Option<f64>,
    /// Each of those processes' first registration, in the order run.
    pub cold_register_samples_ms: Vec<f64>,
    pub register_samples_ms: Vec<f64>,
    pub deregister_samples_ms: Vec<f64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Row {
    pub n: usize,
    pub contenders: BTreeMap<String, Timing>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Exponents {
    /// The fit uses every N from this one up (1024, or 1 in smoke runs).
    pub fit_from_n: usize,
    /// Least-squares slope of log(time) on log(N) over N >= `fit_from_n`.
    pub register_fit: f64,
    pub deregister_fit: f64,
    /// Slope between the two largest N.
    pub register_top: f64,
    pub deregister_top: f64,
}

/// What validation's probes cost, measured in the agent's worker process
/// (which, like the agent, has NIXL and UCX loaded).
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct ProbeCost {
    /// Reading and parsing /proc/self/maps once (`SystemProbe::mapped_ranges`).
    pub maps_ms: f64,
    /// Merged mapped ranges it returned.
    pub maps_ranges: usize,
    /// Lines of /proc/self/maps (one per mapping).
    pub maps_lines: usize,
    /// `SystemProbe::first_unmapped` over 4096 mapped 64 KiB regions, per region.
    pub first_unmapped_per_region_us: f64,
    /// One `msync(MS_ASYNC)` over the same 4096 regions merged into the one
    /// contiguous range they form: what a probe that merges adjacent regions
    /// before asking the kernel would pay for the whole group.
    pub merged_range_us: f64,
    /// RLIMIT_MEMLOCK and CAP_IPC_LOCK (`SystemProbe::memlock`), the
    /// first readings of the process.
    pub memlock_ms: f64,
    /// The same once warm, per call (what each validation pays; its
    /// readings stand for 100 ms).
    pub memlock_warm_ns: f64,
    /// One `getrlimit(RLIMIT_MEMLOCK)` system call, warm: what each
    /// validation paid before the limit's reading was kept.
    pub getrlimit_ns: f64,
}

fn probe_cost() -> ProbeCost {
    let probe = nixl_agent_sys::SystemProbe;
    let (mut maps, mut memlock, mut ranges) = (Vec::new(), Vec::new(), 0);
    for _ in 0..7 {
        let t = Instant::now();
        ranges = probe.mapped_ranges().map(|r| r.len()).unwrap_or(0);
        maps.push(ms(t.elapsed()));
        let t = Instant::now();
        let _ = probe.memlock();
        memlock.push(ms(t.elapsed()));
    }
    let (n, size) = (4096, 64 << 10);
    let arena = Arena::new(n * size);
    let regions = arena.regions(n, size);
    let mut per_region = Vec::new();
    for _ in 0..5 {
        let t = Instant::now();
        let unmapped = probe.first_unmapped(&regions);
        per_region.push(t.elapsed().as_secs_f64() * 1e6 / n as f64);
        assert!(
            matches!(unmapped, Ok(None)),
            "mapped regions reported unmapped: {unmapped:?}"
        );
    }
    let mut merged = Vec::new();
    for _ in 0..5 {
        let t = Instant::now();
        // Safety: msync only inspects the mapping; MS_ASYNC writes nothing.
        let rc = unsafe { libc::msync(regions[0].addr as *mut libc::c_void, n * size, libc::MS_ASYNC) };
        merged.push(t.elapsed().as_secs_f64() * 1e6);
        assert_eq!(rc, 0, "msync over a mapped range");
    }
    ProbeCost {
        maps_ms: median(&maps),
        maps_ranges: ranges,
        maps_lines: std::fs::read_to_string("/proc/self/maps").map_or(0, |t| t.lines().count()),
        first_unmapped_per_region_us: median(&per_region),
        merged_range_us: median(&merged),
        memlock_ms: median(&memlock),
        memlock_warm_ns: per_call_ns(|| {
            std::hint::black_box(probe.memlock());
        }),
        getrlimit_ns: per_call_ns(|| {
            let mut lim = libc::rlimit {
                rlim_cur: 0,
                rlim_max: 0,
            };
            // Safety: getrlimit writes into the live `lim` struct only.
            std::hint::black_box(unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut lim) });
        }),
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub region_size: usize,
    pub warmup: usize,
    pub reps: usize,
    /// What the Python worker reported about itself (versions; torch not loaded).
    pub python: serde_json::Value,
    /// Measured in the agent's worker process.
    pub validation_probe: Option<ProbeCost>,
    pub rows: Vec<Row>,
    pub exponents: BTreeMap<String, Exponents>,
}

impl Report {
    pub fn get(&self, n: usize, who: &str) -> Option<&Timing> {
        self.rows.iter().find(|r| r.n == n)?.contenders.get(who)
    }
}

/// One region as nixl-sys wants it.
#[derive(Debug)]
pub struct Desc(pub Region);

impl nixl_sys::MemoryRegion for Desc {
    // Safety (contract): the pointer only goes to NIXL for registration.
    unsafe fn as_ptr(&self) -> *const u8 {
        self.0.addr as *const u8
    }
    fn size(&self) -> usize {
        self.0.len
    }
}

impl nixl_sys::NixlDescriptor for Desc {
    fn mem_type(&self) -> nixl_sys::MemType {
        nixl_sys::MemType::Dram
    }
    fn device_id(&self) -> u64 {
        u64::from(self.0.device)
    }
}

/// Raw nixl-sys: an agent, its UCX backend and the options selecting it.
struct Raw {
    agent: Agent,
    _backend: Backend,
    opts: OptArgs,
}

impl Raw {
    fn new() -> Result<Raw, String> {
        let cfg = AgentConfig {
            enable_prog_thread: false,
            enable_listen_thread: false,
            ..AgentConfig::default()
        };
        let agent = Agent::new_configured("bench-raw", &cfg).map_err(|e| format!("raw agent: {e}"))?;
        let (_mems, params) = agent.get_plugin_params("UCX").map_err(|e| format!("UCX params: {e}"))?;
        let backend = agent
            .create_backend("UCX", &params)
            .map_err(|e| format!("UCX backend: {e}"))?;
        let mut opts = OptArgs::new().map_err(|e| e.to_string())?;
        opts.add_backend(&backend).map_err(|e| e.to_string())?;
        Ok(Raw {
            agent,
            _backend: backend,
            opts,
        })
    }

    fn rep(&self, regions: &[Region], reverse: bool) -> Result<(f64, f64), String> {
        let t0 = Instant::now();
        let mut handles: Vec<RegistrationHandle> = Vec::with_capacity(regions.len());
        for r in regions {
            handles.push(
                self.agent
                    .register_memory(&Desc(*r), Some(&self.opts))
                    .map_err(|e| format!("raw register: {e}"))?,
            );
        }
        let t1 = Instant::now();
        if reverse {
            while let Some(h) = handles.pop() {
                drop(h);
            }
        } else {
            drop(handles);
        }
        let t2 = Instant::now();
        Ok((ms(t1 - t0), ms(t2 - t1)))
    }
}

/// Timestamps the driver's attempt from the outside.
#[derive(Clone, Copy, Default)]
struct Marks {
    begin: Option<Instant>,
    first_deregister: Option<Instant>,
}

/// The agent's `NixlRegistrar` behind the `Registrar` seam, plus timestamps:
/// the driver opens the capture window first thing in an attempt and
/// `deregister_region` first thing in the drain's release. Preflight (the
/// NIXL agent) and the UCX backend are created once beforehand, so what is
/// timed is the attempt: validation, registration, events and status.
struct Timed<'a> {
    inner: &'a mut NixlRegistrar,
    facts: RuntimeFacts,
    marks: &'a Cell<Marks>,
    shutdown: Sender<Control>,
}

impl Registrar for Timed<'_> {
    type Handle = HeldRegions;
    type Backing = Backing;

    fn preflight(&mut self) -> Result<RuntimeFacts, Failure> {
        Ok(self.facts.clone())
    }
    fn ensure_backend(&mut self, name: &str) -> Result<Option<Duration>, Failure> {
        self.inner.ensure_backend(name)
    }
    fn allocate(&mut self, spec: &GroupSpec, count: usize, size: usize) -> Result<(Vec<Region>, Backing), Failure> {
        self.inner.allocate(spec, count, size)
    }
    fn probe(&self) -> &dyn MemoryProbe {
        self.inner.probe()
    }
    fn register(&mut self, spec: &GroupSpec, regions: &[Region]) -> Result<HeldRegions, ListFailure> {
        self.inner.register(spec, regions)
    }
    fn deregister(&mut self, handle: HeldRegions) -> Result<(), Unreleased<HeldRegions>> {
        let mut m = self.marks.get();
        if m.first_deregister.is_none() {
            m.first_deregister = Some(Instant::now());
            self.marks.set(m);
        }
        self.inner.deregister(handle)
    }
    fn capture(&self) -> &dyn Capture {
        self
    }
}

impl Capture for Timed<'_> {
    fn begin(&self) {
        let mut m = self.marks.get();
        m.begin = Some(Instant::now());
        self.marks.set(m);
        self.inner.capture().begin();
    }
    fn end(&self, wanted: bool) -> Vec<String> {
        let lines = self.inner.capture().end(wanted);
        // Queued now, read by the driver once the attempt is recorded: the
        // drain then follows at once.
        let _ = self.shutdown.send(Control::Shutdown);
        lines
    }
}

struct AgentPath {
    registrar: NixlRegistrar,
    facts: RuntimeFacts,
}

impl AgentPath {
    fn new() -> Result<AgentPath, String> {
        let loaded = nixl_agent_sys::load(nixl_agent_sys::discover(Some(&nixl_lib_dir()), &ProcessEnv));
        let mut registrar = NixlRegistrar::new("bench-agent", loaded);
        let facts = registrar.preflight().map_err(|f| format!("agent preflight: {f}"))?;
        registrar
            .ensure_backend("UCX")
            .map_err(|f| format!("agent UCX backend: {f}"))?;
        Ok(AgentPath { registrar, facts })
    }

    /// `group::register_all` then `group::release_all` on the registrar: the
    /// agent's registration path without the driver around it.
    fn group_only(&mut self, regions: &[Region]) -> Result<(f64, f64), String> {
        let spec = GroupSpec::provided("bench", Kind::Kv, MemType::Dram, Vec::new()).with_validate(false);
        let t0 = Instant::now();
        let handles = nixl_agent_engine::lifecycle::group::register_all(&mut self.registrar, &spec, regions)
            .map_err(|f| format!("register_all: {}", f.failure.message))?;
        let t1 = Instant::now();
        let failed = nixl_agent_engine::lifecycle::group::release_all(&mut self.registrar, handles).failed;
        let t2 = Instant::now();
        if failed > 0 {
            return Err(format!("release_all: {failed} failed"));
        }
        Ok((ms(t1 - t0), ms(t2 - t1)))
    }

    /// One attempt through the real driver, then its drain.
    fn rep(&mut self, regions: &[Region], validate: bool) -> Result<(f64, f64), String> {
        let n = regions.len();
        let plan = Plan {
            groups: vec![
                GroupSpec::provided("bench", Kind::Kv, MemType::Dram, regions.to_vec()).with_validate(validate)
            ],
        };
        let rec = Recorder::new(&BuildInfo::current(None), NixlStatus::default(), Instant::now());
        let (tx, rx) = std::sync::mpsc::channel();
        let marks = Cell::new(Marks::default());
        let timed = Timed {
            inner: &mut self.registrar,
            facts: self.facts.clone(),
            marks: &marks,
            shutdown: tx,
        };
        let retry = RetryConfig {
            max_attempts: 1,
            ..RetryConfig::default()
        };
        let driver = Driver::new(timed, plan, retry, rec.clone(), rx);
        let report = driver.run();
        let end = Instant::now();
        let m = marks.get();
        let snapshot = rec.ledger().snapshot();
        if report.deregistered != n || report.failed != 0 {
            let g = snapshot.groups.first();
            return Err(format!(
                "agent registered {} of {n} (failed {}): {:?} {:?}",
                report.deregistered,
                report.failed,
                g.and_then(|g| g.last_reason),
                g.and_then(|g| g.last_error.clone())
            ));
        }
        let (begin, split) = m.begin.zip(m.first_deregister).ok_or("driver made no attempt")?;
        Ok((ms(split - begin), ms(end - split)))
    }
}

/// Runs one repetition of a contender on the regions it is given.
type RepFn<'a> = &'a mut dyn FnMut(&str, &[Region]) -> Result<(f64, f64), String>;

/// The `worker KIND` role: one contender process (see bench/worker.rs).
pub fn worker_main(kind: &str) -> Result<(), String> {
    crate::common::load_nixl()?;
    let rep = |variant: &str, n: usize, size: usize, f: RepFn| {
        let arena = Arena::new(n * size);
        let regions = arena.regions(n, size);
        let (reg, dereg) = f(variant, &regions)?;
        drop(arena);
        Ok(serde_json::json!({ "reg_ns": reg * 1e6, "dereg_ns": dereg * 1e6 }))
    };
    let args = |m: &serde_json::Value| -> Result<(String, usize, usize), String> {
        let s = |k: &str| m.get(k).ok_or(format!("no {k} in {m}"));
        Ok((
            s("variant")?.as_str().unwrap_or_default().to_string(),
            s("n")?.as_u64().unwrap_or(0) as usize,
            s("size")?.as_u64().unwrap_or(0) as usize,
        ))
    };
    let ready = serde_json::json!({ "ready": true, "kind": kind, "pid": std::process::id() });
    match kind {
        "raw" => {
            let raw = Raw::new()?;
            worker::serve(ready, |m| {
                let (variant, n, size) = args(m)?;
                rep(&variant, n, size, &mut |v, r| raw.rep(r, v == "raw_reverse"))
            })
        }
        "agent" => {
            // The agent's log lines are formatted as in the binary but go to
            // /dev/null: their cost is part of the agent's.
            let devnull = std::fs::OpenOptions::new()
                .write(true)
                .open("/dev/null")
                .map_err(|e| e.to_string())?;
            let _guard = nixl_agent::cli::init_logs(&nixl_agent::Config::default(), Some(std::sync::Arc::new(devnull)));
            let mut agent = AgentPath::new()?;
            let mut here: Option<BatchAgent> = None;
            worker::serve(ready, |m| {
                if m.get("cmd").and_then(|c| c.as_str()) == Some("probe") {
                    return serde_json::to_value(probe_cost()).map_err(|e| e.to_string());
                }
                let (variant, n, size) = args(m)?;
                rep(&variant, n, size, &mut |v, r| match v {
                    "agent_group_only" => agent.group_only(r),
                    "batched_capi_in_agent" => {
                        if here.is_none() {
                            here = Some(BatchAgent::new("bench-batched-here")?);
                        }
                        batched_rep(here.as_ref().expect("made above"), r)
                    }
                    _ => agent.rep(r, v == "agent"),
                })
            })
        }
        "batched" => {
            let batch = BatchAgent::new("bench-batched")?;
            worker::serve(ready, |m| {
                let (variant, n, size) = args(m)?;
                rep(&variant, n, size, &mut |_, r| batched_rep(&batch, r))
            })
        }
        other => Err(format!("no worker kind {other:?}")),
    }
}

/// One batched registration and deregistration of `regions`, timed apart.
fn batched_rep(batch: &BatchAgent, regions: &[Region]) -> Result<(f64, f64), String> {
    let t0 = Instant::now();
    let b = batch.register(regions)?;
    let t1 = Instant::now();
    batch.deregister(b)?;
    Ok((ms(t1 - t0), ms(t1.elapsed())))
}

/// The worker process serving a contender.
fn worker_of(contender: &str) -> &'static str {
    match contender {
        "raw" | "raw_reverse" => "raw",
        "agent" | "agent_novalidate" | "agent_group_only" | "batched_capi_in_agent" => "agent",
        "batched_capi" => "batched",
        _ => "python",
    }
}

/// Cold first registrations: for each N and sample, a fresh process per
/// contender (started together, then used one after the other), whose very
/// first registration is timed.
fn cold(cfg: &Config, chosen: &[&str], python: &std::path::Path, rows: &mut [Row]) -> Result<(), String> {
    let t0 = Instant::now();
    for row in rows.iter_mut() {
        let mut samples: BTreeMap<&str, Vec<f64>> = BTreeMap::new();
        for _ in 0..cfg.cold_samples {
            let mut fresh: Vec<(&str, Worker)> = Vec::new();
            for who in chosen.iter().copied().filter(|c| row.contenders.contains_key(*c)) {
                let kind = worker_of(who);
                let cmd = if kind == "python" {
                    Ok(worker::python_command(&python.to_path_buf()))
                } else {
                    worker::self_command(kind)
                };
                fresh.push((who, cmd.and_then(|c| Worker::spawn(kind, c))?));
            }
            for (who, w) in fresh {
                let mut w = w.ready()?;
                let (reg, _) = w
                    .rep(who, row.n, cfg.region_size)
                    .map_err(|e| format!("{who} cold at N={}: {e}", row.n))?;
                samples.entry(who).or_default().push(reg);
                drop(w);
                std::thread::sleep(cfg.pause(row.n));
            }
        }
        for (who, v) in samples {
            if let Some(t) = row.contenders.get_mut(who) {
                t.cold_register_ms = Some(median(&v));
                t.cold_register_samples_ms = v;
            }
        }
    }
    eprintln!("  registration cold: {:.1} s", t0.elapsed().as_secs_f64());
    Ok(())
}

/// Runs the section. When the Python API cannot start, its column is left
/// out and the error is returned beside the report.
pub fn run(cfg: &Config, python: &std::path::Path) -> Result<(Report, Option<String>), String> {
    let chosen: Vec<&str> = CONTENDERS
        .iter()
        .copied()
        .filter(|c| cfg.contenders.iter().any(|x| x == c))
        .collect();
    // Start every worker first (each creates its NIXL agent and UCX backend,
    // ~0.5 s), then wait for all of them.
    let mut starting: Vec<(&str, Result<Worker, String>)> = Vec::new();
    for kind in chosen.iter().map(|c| worker_of(c)) {
        if starting.iter().any(|(k, _)| *k == kind) {
            continue;
        }
        let w = if kind == "python" {
            Worker::spawn(kind, worker::python_command(&python.to_path_buf()))
        } else {
            worker::self_command(kind).and_then(|cmd| Worker::spawn(kind, cmd))
        };
        starting.push((kind, w));
    }
    let mut workers: BTreeMap<&str, Worker> = BTreeMap::new();
    let mut python_error = None;
    for (kind, w) in starting {
        match w.and_then(Worker::ready) {
            Ok(w) => {
                workers.insert(kind, w);
            }
            Err(e) if kind == "python" => python_error = Some(e),
            Err(e) => return Err(e),
        }
    }
    let python_info = workers
        .get("python")
        .map(|w| w.info.clone())
        .unwrap_or_else(|| serde_json::json!({ "error": python_error }));
    let validation_probe = match workers.get_mut("agent") {
        Some(w) => {
            Some(serde_json::from_value(w.request(serde_json::json!({ "cmd": "probe" }))?).map_err(|e| e.to_string())?)
        }
        None => None,
    };
    let mut rows = Vec::new();
    for &n in &cfg.sizes {
        let mut samples: BTreeMap<&str, (Vec<f64>, Vec<f64>)> = BTreeMap::new();
        let t_n = Instant::now();
        for rep in 0..cfg.warmup + cfg.reps {
            // Rotate the order so drift and cache effects spread evenly.
            let k = chosen.len();
            for i in 0..k {
                let who = chosen[(i + rep) % k];
                let Some(w) = workers.get_mut(worker_of(who)) else {
                    continue;
                };
                let (reg, dereg) = w
                    .rep(who, n, cfg.region_size)
                    .map_err(|e| format!("{who} at N={n}: {e}"))?;
                if rep >= cfg.warmup {
                    let s = samples.entry(who).or_default();
                    s.0.push(reg);
                    s.1.push(dereg);
                }
                std::thread::sleep(cfg.pause(n));
            }
        }
        let contenders = samples
            .into_iter()
            .map(|(who, (r, d))| {
                let t = Timing {
                    register_ms: median(&r),
                    deregister_ms: median(&d),
                    cold_register_ms: None,
                    cold_register_samples_ms: Vec::new(),
                    register_samples_ms: r,
                    deregister_samples_ms: d,
                };
                (who.to_string(), t)
            })
            .collect();
        eprintln!("  registration N={n}: {:.1} s", t_n.elapsed().as_secs_f64());
        rows.push(Row { n, contenders });
    }
    drop(workers);
    cold(cfg, &chosen, python, &mut rows)?;
    // Fit over N >= 1024 (below that, fixed costs dominate), or over every
    // N when fewer than two are that large (smoke runs).
    let fit_from = if rows.iter().filter(|r| r.n >= 1024).count() >= 2 {
        1024
    } else {
        1
    };
    let mut exponents = BTreeMap::new();
    for who in CONTENDERS {
        let pts = |f: fn(&Timing) -> f64| -> Vec<(f64, f64)> {
            rows.iter()
                .filter(|r| r.n >= fit_from)
                .filter_map(|r| r.contenders.get(*who).map(|t| (r.n as f64, f(t))))
                .collect()
        };
        let reg = pts(|t| t.register_ms);
        let dereg = pts(|t| t.deregister_ms);
        if reg.len() < 2 {
            continue;
        }
        let top = |v: &[(f64, f64)]| exponent(&v[v.len() - 2..]);
        exponents.insert(
            who.to_string(),
            Exponents {
                fit_from_n: fit_from,
                register_fit: exponent(&reg),
                deregister_fit: exponent(&dereg),
                register_top: top(&reg),
                deregister_top: top(&dereg),
            },
        );
    }
    let report = Report {
        region_size: cfg.region_size,
        warmup: cfg.warmup,
        reps: cfg.reps,
        python: python_info,
        validation_probe,
        rows,
        exponents,
    };
    Ok((report, python_error))
}
