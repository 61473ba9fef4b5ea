//! `nixl-agent check`: a preflight and registration smoke test for
//! deployment images, init containers and nodes. It walks the same path as
//! the agent (discovery, loading, backends, allocation, validation,
//! registration) once, deregisters everything, and reports in plain words
//! what is wrong and what to do.

mod host;
mod peer;
mod progress;
mod render;
mod transfer;

pub use host::HostCheck;
pub use peer::PeerCheck;
pub use progress::StepLines;
pub use render::render_human;
pub use transfer::{TransferCheck, TransportSeen};

use crate::config::Config;
use crate::lifecycle::registrar::NixlRegistrar;
use crate::lifecycle::registration::{CreatedBackends, Registration};
use crate::lifecycle::Registrar;
use crate::model::{Failure, GroupFailure};
use crate::model::{MemType, Reason};
use crate::nixl::facts::{self, CudaDevice, UcxFacts};
use crate::nixl::{self, StderrTap};
use crate::plan::{Plan, RegionSource};
use crate::record::Recorder;
use crate::status::NixlStatus;
use crate::telemetry::metrics::BuildInfo;
use serde::Serialize;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

/// What `nixl-agent check` was asked to do.
#[derive(Debug, Clone)]
pub struct Options {
    pub json: bool,
    /// Run the loopback transfer (`--no-transfer` turns it off).
    pub transfer: bool,
    /// The peer check across nodes, and this side's role in it.
    pub peer: Option<PeerRole>,
    /// The most the peer check may take, waiting included.
    pub peer_timeout: Duration,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            json: false,
            transfer: true,
            peer: None,
            peer_timeout: Duration::from_secs(60),
        }
    }
}

/// This side of `check --serve ADDR` / `check --peer ADDR`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PeerRole {
    Serve(SocketAddr),
    Connect(SocketAddr),
}

/// UCX prints the protocol it selects for each operation when
/// `UCX_PROTO_INFO=y`.
pub const PROTO_INFO_ENV: &str = "UCX_PROTO_INFO";

/// Turns UCX's protocol tables on for a check that moves bytes, unless the
/// operator set `UCX_PROTO_INFO` already; returns whether it did (then the
/// tables are kept from stdout). Call while the process has one thread.
pub fn proto_info_for(options: &Options) -> bool {
    let moves = options.transfer || options.peer.is_some();
    if !moves || std::env::var_os(PROTO_INFO_ENV).is_some() {
        return false;
    }
    std::env::set_var(PROTO_INFO_ENV, "y");
    true
}

/// How one check of `nixl-agent check` came out (the report's `outcome`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CheckOutcome {
    Ok,
    /// Failed, and something required depends on it: exit code 1.
    Fail,
    /// Failed or missing, but nothing required depends on it.
    Warn,
    /// Not run (e.g. no NIXL to register with).
    Skip,
}

#[derive(Debug, Clone, Serialize)]
pub struct NixlCheck {
    pub outcome: CheckOutcome,
    #[serde(flatten)]
    pub runtime: NixlStatus,
}

#[derive(Debug, Clone, Serialize)]
pub struct BackendCheck {
    pub name: String,
    pub outcome: CheckOutcome,
    pub seconds: f64,
    pub reason: Option<Reason>,
    pub error: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct UcxCheck {
    pub outcome: CheckOutcome,
    #[serde(flatten)]
    pub facts: UcxFacts,
    /// UCX_TLS, UCX_NET_DEVICES, UCX_MODULE_DIR as set in the environment.
    pub env: std::collections::BTreeMap<String, String>,
    pub note: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct MemlockCheck {
    pub outcome: CheckOutcome,
    pub soft_bytes: Option<u64>,
    pub hard_bytes: Option<u64>,
    pub plan_dram_bytes: u64,
    pub cap_ipc_lock: bool,
    pub fix: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct CudaCheck {
    pub outcome: CheckOutcome,
    pub driver: bool,
    /// Whether the plan has VRAM groups (then CUDA is required).
    pub required: bool,
    pub devices: Vec<CudaDevice>,
    pub error: Option<String>,
    /// Every device supports DMA-BUF (`None` without devices).
    pub dmabuf: Option<bool>,
}

#[derive(Debug, Clone, Serialize)]
pub struct GroupCheck {
    pub name: String,
    pub kind: String,
    pub mem_type: &'static str,
    pub required: bool,
    pub outcome: CheckOutcome,
    pub descriptors: usize,
    pub bytes: u64,
    pub seconds: f64,
    pub reason: Option<Reason>,
    pub error: Option<String>,
    pub diagnostics: Vec<String>,
    pub advice: Option<&'static str>,
}

/// Everything `check` found.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// True when every required check passed (exit code 0).
    pub ok: bool,
    pub version: &'static str,
    pub nixl: NixlCheck,
    pub backends: Vec<BackendCheck>,
    pub ucx: UcxCheck,
    pub memlock: MemlockCheck,
    pub cuda: CudaCheck,
    /// Capabilities, GPU RDMA, GPU–NIC affinity, /dev/shm.
    pub host: HostCheck,
    pub groups: Vec<GroupCheck>,
    /// The loopback transfers (empty with `--no-transfer`).
    pub transfers: Vec<TransferCheck>,
    /// UCX did not say which transports it picked (tables off or absent).
    pub transports_unknown: Option<String>,
    /// The peer check (`--serve` / `--peer`).
    pub peer: Option<PeerCheck>,
}

/// Runs every check. `progress` shows steps while they run.
pub fn run(
    config: &Config,
    plan: &Plan,
    tap: Option<StderrTap>,
    options: &Options,
    progress: &mut StepLines,
) -> Report {
    let found = nixl::discover(config.nixl_lib_dir.as_deref(), &crate::config::ProcessEnv);
    let searched = found.as_ref().err().map(|nf| nf.searched.clone()).unwrap_or_default();

    progress.start("NIXL runtime");
    let loaded = nixl::load(found);
    let mut runtime = nixl::status_of(&loaded, searched);
    if loaded.is_err() {
        runtime.reason = Some(Reason::NixlUnavailable);
    }
    let outcome = if loaded.is_ok() {
        CheckOutcome::Ok
    } else {
        CheckOutcome::Fail
    };
    let mut nixl_check = NixlCheck { outcome, runtime };
    let mut registrar = NixlRegistrar::new(&config.agent_name, loaded).with_tap(tap.clone());
    if nixl_check.outcome == CheckOutcome::Ok {
        match registrar.preflight() {
            Ok(facts) => {
                nixl_check.runtime.available = true;
                nixl_check.runtime.plugins = facts.plugins;
            }
            Err(f) => {
                nixl_check.outcome = CheckOutcome::Fail;
                nixl_check.runtime.reason = Some(f.reason);
                nixl_check.runtime.error = Some(f.message);
                nixl_check.runtime.fix = f.fix;
            }
        }
    }
    let nixl_up = nixl_check.outcome == CheckOutcome::Ok;
    // What a step that needs NIXL is skipped for: the runtime's own reason.
    let nixl_down = nixl_check.runtime.reason.unwrap_or(Reason::NixlUnavailable);
    progress.done(nixl_check.outcome, &render::nixl_summary(&nixl_check));

    progress.start("NIXL backends");
    let mut backends = Vec::new();
    for name in plan.backends() {
        let t0 = Instant::now();
        let r = if nixl_up {
            registrar.ensure_backend(&name).map(|_| ())
        } else {
            Err(Failure::new(nixl_down, "NIXL runtime unavailable"))
        };
        let (outcome, reason, error) = match r {
            Ok(()) => (CheckOutcome::Ok, None, None),
            Err(f) if !nixl_up => (CheckOutcome::Skip, Some(f.reason), None),
            Err(f) => (CheckOutcome::Fail, Some(f.reason), Some(f.message)),
        };
        backends.push(BackendCheck {
            name,
            outcome,
            seconds: t0.elapsed().as_secs_f64(),
            reason,
            error,
        });
    }
    progress.done(
        worst(backends.iter().map(|b| b.outcome)),
        &render::backends_summary(&backends),
    );

    progress.start("UCX");
    let ucx_up = backends
        .iter()
        .any(|b| b.name == "UCX" && b.outcome == CheckOutcome::Ok);
    let ucx = ucx_check(ucx_up, plan);
    progress.done(ucx.outcome, &render::ucx_summary(&ucx));

    progress.start("memlock");
    let non_root = host::cap_check(std::path::Path::new("/"), 0, None)
        .uid
        .is_some_and(|u| u != 0);
    let memlock = memlock_check(plan, registrar.probe().memlock().exempt, non_root);
    progress.done(memlock.outcome, &render::memlock_summary(&memlock));

    progress.start("CUDA");
    let cuda = cuda_check(plan);
    progress.done(cuda.outcome, &render::cuda_summary(&cuda));

    let vram = plan.groups.iter().any(|g| g.mem_type == MemType::Vram);
    let dram = plan.groups.iter().any(|g| g.mem_type == MemType::Dram);
    progress.start("host");
    let mut host = host::host_check(
        std::path::Path::new("/"),
        vram,
        memlock.plan_dram_bytes,
        memlock.soft_bytes,
    );
    host.gpu_rdma = host.gpu_rdma.with_dmabuf(cuda.dmabuf);
    progress.done(
        worst(host::summary(&host).into_iter().map(|(_, o, _)| o)),
        &render::host_summary(&host),
    );

    let mut groups = Vec::new();
    for spec in &plan.groups {
        progress.start(&format!("register {}", spec.name));
        let g = smoke(&mut registrar, spec, nixl_up.then_some(()).ok_or(nixl_down));
        progress.done(g.outcome, &render::group_summary(&g));
        groups.push(g);
    }
    let rdma = !host.gpu_rdma.rdma_devices.is_empty();
    let mut transfers = Vec::new();
    if options.transfer && nixl_up {
        let pairs = transfer::pairings(dram, vram, cuda.devices.len() as u32);
        // Backends that move memory to memory (not POSIX, GDS, OBJ: files).
        let movers = backends
            .iter()
            .filter(|b| b.outcome == CheckOutcome::Ok && crate::datapath::MEMORY_BACKENDS.contains(&b.name.as_str()));
        for backend in movers {
            for (from, to) in &pairs {
                let i = transfers.len();
                progress.start(&format!(
                    "transfer {backend} {}",
                    transfer::pairing_name(*from, *to),
                    backend = backend.name
                ));
                let t = transfer::loopback(&backend.name, i, *from, *to);
                progress.done(t.outcome, &render::transfer_summary(&t));
                transfers.push(t);
            }
        }
    }
    let mut tables_seen = false;
    if let (Some(t), false) = (&tap, transfers.is_empty()) {
        let tables = crate::diagnose::proto::parse(&t.protocol_tables());
        tables_seen = !tables.is_empty();
        transfer::attribute(&mut transfers, &tables, rdma);
    }
    let peer = options.peer.map(|role| {
        progress.start("peer");
        let mut p = peer::run(
            role,
            options.peer_timeout,
            plan,
            nixl_up,
            cuda.devices.len(),
            tap.as_ref(),
            progress,
        );
        peer::judge(&mut p, rdma);
        progress.done(p.outcome, &render::peer_summary(&p));
        p
    });
    drop(registrar);
    tables_seen |= peer.iter().flat_map(|p| &p.sides).any(|s| !s.transports.is_empty());
    let moved = !transfers.is_empty() || peer.as_ref().is_some_and(|p| !p.sides.is_empty());
    let transports_unknown = match (&tap, moved, tables_seen) {
        (_, false, _) | (_, _, true) => None,
        (None, true, false) => Some("the output tap is off, so UCX's protocol tables could not be read".to_string()),
        (Some(_), true, false) => Some(format!(
            "UCX printed no protocol tables ({PROTO_INFO_ENV}=y asks for them; it was set to {:?})",
            std::env::var(PROTO_INFO_ENV).unwrap_or_default()
        )),
    };

    let ok = [nixl_check.outcome, memlock.outcome, cuda.outcome, ucx.outcome]
        .into_iter()
        .chain(backends.iter().map(|b| b.outcome))
        .chain(groups.iter().map(|g| g.outcome))
        .chain(transfers.iter().map(|t| t.outcome))
        .chain(peer.iter().map(|p| p.outcome))
        .all(|o| o != CheckOutcome::Fail);
    Report {
        ok,
        version: env!("CARGO_PKG_VERSION"),
        nixl: nixl_check,
        backends,
        ucx,
        memlock,
        cuda,
        host,
        groups,
        transfers,
        transports_unknown,
        peer,
    }
}

/// `nixl-agent check` as the binary runs it: progress on the real stderr,
/// the report on stdout (human or JSON). Returns whether every required
/// check passed.
pub fn run_cli(config: &Config, tap: Option<StderrTap>, options: &Options, proto_ours: bool) -> bool {
    match &tap {
        // Kept from stdout when nixl-agent turned them on, read either way.
        // Quiet too under --json, whoever turned them on: stdout is the report.
        Some(t) if proto_ours || std::env::var_os(PROTO_INFO_ENV).is_some() => {
            t.keep_protocol_tables(proto_ours || options.json)
        }
        // No tap: the tables would land in the report's stdout.
        None if proto_ours => std::env::remove_var(PROTO_INFO_ENV),
        _ => {}
    }
    use std::io::IsTerminal;
    let err: Box<dyn std::io::Write + Send> = match tap.as_ref().map(StderrTap::original) {
        Some(f) => Box::new(f.try_clone().expect("dup stderr")),
        None => Box::new(std::io::stderr()),
    };
    let tty = tap
        .as_ref()
        .map_or(std::io::stderr().is_terminal(), |t| t.original().is_terminal());
    let mut progress = StepLines::new(err, tty);
    let report = run(config, &Plan::from_config(config), tap.clone(), options, &mut progress);
    // Everything NIXL/UCX printed is through the tap (and C's buffers
    // flushed) before the report: no half line of theirs can prefix it.
    if let Some(t) = &tap {
        t.settle();
    }
    if options.json {
        println!("{}", serde_json::to_string_pretty(&report).expect("report serializes"));
    } else {
        print!("{}", render_human(&report, std::io::stdout().is_terminal()));
    }
    use std::io::Write;
    let _ = std::io::stdout().flush();
    if let Some(t) = tap {
        t.flush();
    }
    report.ok
}

/// What `check --json` prints when the config or plan is invalid, so that
/// stdout is a JSON document whatever happened: `ok` false, the version,
/// and the error with the step it came from (`config`).
pub fn config_error_document(message: &str) -> String {
    let doc = serde_json::json!({
        "ok": false,
        "version": env!("CARGO_PKG_VERSION"),
        "error": { "step": "config", "message": message },
    });
    serde_json::to_string_pretty(&doc).expect("a JSON value serializes")
}

fn worst(outcomes: impl Iterator<Item = CheckOutcome>) -> CheckOutcome {
    outcomes.fold(CheckOutcome::Ok, |acc, o| match (acc, o) {
        (CheckOutcome::Fail, _) | (_, CheckOutcome::Fail) => CheckOutcome::Fail,
        (CheckOutcome::Warn, _) | (_, CheckOutcome::Warn) => CheckOutcome::Warn,
        (CheckOutcome::Skip, _) | (_, CheckOutcome::Skip) => CheckOutcome::Skip,
        _ => CheckOutcome::Ok,
    })
}

fn ucx_check(ucx_up: bool, plan: &Plan) -> UcxCheck {
    let env = ["UCX_TLS", "UCX_NET_DEVICES", "UCX_MODULE_DIR"]
        .into_iter()
        .filter_map(|k| std::env::var(k).ok().map(|v| (k.to_string(), v)))
        .collect();
    if !ucx_up {
        return UcxCheck {
            outcome: CheckOutcome::Skip,
            facts: UcxFacts::default(),
            env,
            note: None,
        };
    }
    let facts = facts::ucx();
    let vram = plan.groups.iter().any(|g| g.mem_type == MemType::Vram);
    let cuda_ok = !facts.cuda_modules.is_empty() && facts.cuda_modules.iter().all(|(_, r)| r.is_ok());
    let (outcome, note) = match (vram, cuda_ok) {
        (_, true) => (CheckOutcome::Ok, None),
        (true, false) => (
            CheckOutcome::Fail,
            Some("UCX's CUDA modules do not load: VRAM would be seen as host memory (libcudart.so.12 and libcuda.so.1 must be loadable)".to_string()),
        ),
        (false, false) => (CheckOutcome::Ok, Some("UCX's CUDA modules do not load here (no VRAM groups, so not needed)".to_string())),
    };
    UcxCheck {
        outcome,
        facts,
        env,
        note,
    }
}

fn memlock_check(plan: &Plan, cap_ipc_lock: bool, non_root: bool) -> MemlockCheck {
    let (soft, hard) = facts::memlock_limits();
    let plan_dram_bytes: u64 = plan
        .groups
        .iter()
        .filter(|g| g.mem_type == MemType::Dram)
        .map(|g| page_rounded(&g.source))
        .sum();
    let too_low = soft.is_some_and(|s| s < plan_dram_bytes) && !cap_ipc_lock;
    let fix = too_low.then(|| {
        format!(
            "raise RLIMIT_MEMLOCK to at least {} (or unlimited): `ulimit -l unlimited` in the entrypoint, `docker run --ulimit memlock=-1`, systemd `LimitMEMLOCK=infinity`, or in Kubernetes a container runtime default of memlock=unlimited (containerd/CRI-O `LimitMEMLOCK`){}",
            crate::units::format_size(plan_dram_bytes),
            if non_root {
                "; adding CAP_IPC_LOCK does not help this non-root process (its effective capabilities are cleared on exec, container-toolkit#2037)"
            } else {
                " or CAP_IPC_LOCK"
            }
        )
    });
    MemlockCheck {
        outcome: if too_low { CheckOutcome::Fail } else { CheckOutcome::Ok },
        soft_bytes: soft,
        hard_bytes: hard,
        plan_dram_bytes,
        cap_ipc_lock,
        fix,
    }
}

fn page_rounded(source: &RegionSource) -> u64 {
    match source {
        RegionSource::Provided(r) => r.iter().fold(0u64, |a, r| a.saturating_add(r.len as u64)),
        RegionSource::Allocate { count, size } => {
            let page = 4096u64;
            *count as u64 * (*size as u64).div_ceil(page) * page
        }
    }
}

fn cuda_check(plan: &Plan) -> CudaCheck {
    let required = plan.groups.iter().any(|g| g.mem_type == MemType::Vram);
    let driver = crate::cuda_driver_present();
    let (devices, error) = match facts::cuda_devices() {
        Ok(d) => (d, None),
        Err(e) => (vec![], Some(e)),
    };
    let outcome = match (error.is_none() && !devices.is_empty(), required) {
        (true, _) => CheckOutcome::Ok,
        (false, true) => CheckOutcome::Fail,
        (false, false) => CheckOutcome::Skip,
    };
    let dmabuf = (!devices.is_empty()).then(|| devices.iter().all(|d| d.dmabuf == Some(true)));
    CudaCheck {
        outcome,
        driver,
        required,
        devices,
        error,
        dmabuf,
    }
}

/// Registers and deregisters one group once.
/// `nixl`: `Err(reason)` when NIXL is down, and why.
fn smoke(registrar: &mut NixlRegistrar, spec: &crate::plan::GroupSpec, nixl: Result<(), Reason>) -> GroupCheck {
    let (descriptors, bytes) = spec.totals();
    let mut g = GroupCheck {
        name: spec.name.clone(),
        kind: spec.kind.as_str().to_string(),
        mem_type: spec.mem_type.as_str(),
        required: spec.required,
        outcome: CheckOutcome::Ok,
        descriptors,
        bytes,
        seconds: 0.0,
        reason: None,
        error: None,
        diagnostics: vec![],
        advice: None,
    };
    if let Err(reason) = nixl {
        g.outcome = CheckOutcome::Skip;
        g.reason = Some(reason);
        return g;
    }
    // The very attempt the lifecycle makes, recorded into a registry
    // nobody serves: check reports from the result.
    let rec = Recorder::new(&BuildInfo::current(None), NixlStatus::default(), Instant::now());
    let mut registration = Registration::new(spec);
    let t0 = Instant::now();
    let result = registration
        .attempt(registrar, &rec, spec, 1, &mut CreatedBackends::default(), 0)
        .and_then(
            |()| match registration.deregister(registrar, &rec, crate::event::CallKind::Deregister) {
                (_, 0) => Ok(()),
                (_, failed) => Err(GroupFailure::whole(Failure::new(
                    Reason::Unknown,
                    format!("{failed} deregistrations failed"),
                ))),
            },
        );
    registration.free();
    g.seconds = t0.elapsed().as_secs_f64();
    if let Err(f) = result {
        g.outcome = if spec.required {
            CheckOutcome::Fail
        } else {
            CheckOutcome::Warn
        };
        g.reason = Some(f.reason);
        g.error = Some(f.message);
        g.diagnostics = f.diagnostics;
        g.advice = Some(f.reason.advice());
    }
    g
}
