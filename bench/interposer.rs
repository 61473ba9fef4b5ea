//! The interposer's section: plain NIXL programs with no nixl-agent code
//! (bench/cpp/interpose_bench.cpp, bench/py/interpose_bench.py) run bare and
//! under `nixl-agent instrument --` (the release binary, which preloads
//! `libnixl_agent_interpose.so` beside it), each run a fresh process.
//!
//! Paired and interleaved: each sample runs three processes of the same
//! program and mode, bare A, instrumented and bare B, in an order that
//! turns through all six permutations from one sample to the next. A row's
//! figure is the median over samples of instrumented / bare A (registration)
//! or instrumented − bare A (a call's ns); its spread is NIXL's own
//! run-to-run noise measured the same way, bare B against bare A: the width
//! from the 25th to the 75th percentile of those bare/bare ratios or deltas.
//! A row whose spread is wider than what its target allows is not judged
//! (unless the figure misses the target by more than the spread).

use crate::common::{median, nixl_lib_dir, percentile, repo};
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

pub struct Config {
    pub samples: usize,
    /// Regions in the one registerMem list.
    pub regions: usize,
    /// Warm register/deregister pairs in each registration process.
    pub reg_reps: usize,
    /// getXferStatus calls in the timed loop of each transfer process.
    pub status_reps: usize,
    pub agent_bin: PathBuf,
    pub python: PathBuf,
}

#[derive(Debug, Clone, Serialize)]
pub struct Row {
    pub id: String,
    pub what: String,
    /// "ratio" (instrumented / bare) or "ns" (instrumented − bare).
    pub unit: String,
    /// ≤ this ratio, or ≤ this many ns added; None: shown, not judged.
    pub target: Option<f64>,
    /// Medians over samples of each process's own figure, ns.
    pub bare_ns: f64,
    pub instrumented_ns: f64,
    /// Median of the paired ratios or deltas: the row's figure.
    pub measured: f64,
    pub pair_min: f64,
    pub pair_max: f64,
    /// Bare B against bare A, same statistic: NIXL's own noise.
    pub noise_median: f64,
    pub noise_p25: f64,
    pub noise_p75: f64,
    /// noise_p75 − noise_p25.
    pub spread: f64,
    /// "met", "missed", "spread wider than target — not judged", or "–".
    pub verdict: String,
    pub pairs: Vec<f64>,
    pub noise: Vec<f64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub samples: usize,
    pub regions: usize,
    pub region_bytes: usize,
    pub reg_reps: usize,
    pub status_reps: usize,
    /// The instrumented command line of each program (bare: the same
    /// without the `nixl-agent instrument --` prefix).
    pub commands: Vec<String>,
    pub rows: Vec<Row>,
}

/// g++ -O2 of bench/cpp/interpose_bench.cpp into target/programs/, as the
/// tests build tests/programs/cpp (rebuilt when a source is newer).
fn cpp_program() -> Result<PathBuf, String> {
    let src = repo().join("bench/cpp");
    let decls = repo().join("tests/programs/cpp");
    let key = [src.join("interpose_bench.cpp"), decls.join("nixl_decls.h")]
        .iter()
        .map(|f| {
            std::fs::metadata(f)
                .and_then(|m| m.modified())
                .map_err(|e| format!("{}: {e}", f.display()))
                .map(|t| t.duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos()))
        })
        .collect::<Result<Vec<_>, _>>()?
        .into_iter()
        .max()
        .unwrap_or(0);
    let out_dir = repo().join("target/programs");
    std::fs::create_dir_all(&out_dir).map_err(|e| format!("{}: {e}", out_dir.display()))?;
    let exe = out_dir.join(format!("interpose_bench-{key}"));
    if exe.exists() {
        return Ok(exe);
    }
    let lib = nixl_lib_dir();
    let tmp = out_dir.join(format!("interpose_bench-{key}.{}", std::process::id()));
    let status = Command::new("g++")
        .args(["-std=c++20", "-O2", "interpose_bench.cpp"])
        .arg(format!("-I{}", decls.display()))
        .arg(format!("-L{}", lib.display()))
        .args(["-lnixl", "-lnixl_build"])
        .arg(format!("-Wl,-rpath,{}", lib.display()))
        .arg("-o")
        .arg(&tmp)
        .current_dir(&src)
        .status()
        .map_err(|e| format!("g++: {e}"))?;
    if !status.success() {
        return Err(format!("g++ bench/cpp/interpose_bench.cpp failed: {status}"));
    }
    std::fs::rename(&tmp, &exe).map_err(|e| e.to_string())?;
    Ok(exe)
}

#[derive(Clone, Copy, PartialEq)]
enum Who {
    BareA,
    Instrumented,
    BareB,
}

/// One fresh process of `argv`; its one JSON line.
fn run_once(who: Who, agent_bin: &Path, argv: &[String]) -> Result<serde_json::Value, String> {
    let mut cmd = if who == Who::Instrumented {
        let mut c = Command::new(agent_bin);
        c.arg("instrument").arg("--").args(argv);
        c
    } else {
        let mut c = Command::new(&argv[0]);
        c.args(&argv[1..]);
        c
    };
    let lib = nixl_lib_dir();
    // The interposer measured: the one NIXL_AGENT_INTERPOSER names
    // (scripts/bench.sh: the whole-program build), for the instrumented
    // run only; the bare runs preload nothing.
    cmd.env_remove("NIXL_AGENT_INTERPOSER");
    if let (Who::Instrumented, Some(so)) = (who, std::env::var_os("NIXL_AGENT_INTERPOSER")) {
        cmd.env("NIXL_AGENT_INTERPOSER", so);
    }
    cmd.env("NIXL_PLUGIN_DIR", lib.join("plugins"))
        .env("PYTHONPATH", lib.parent().unwrap_or(&lib))
        .env("NIXL_AGENT_LISTEN", "off")
        .env_remove("LD_PRELOAD")
        .stdin(Stdio::null())
        .stderr(Stdio::null());
    let out = cmd.output().map_err(|e| format!("{}: {e}", argv.join(" ")))?;
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text
        .lines()
        .rev()
        .find(|l| l.starts_with('{'))
        .ok_or_else(|| format!("{} printed no result ({})", argv.join(" "), out.status))?;
    let v: serde_json::Value = serde_json::from_str(line).map_err(|e| format!("{line}: {e}"))?;
    if let Some(e) = v.get("error") {
        return Err(format!("{}: {e}", argv.join(" ")));
    }
    if !out.status.success() {
        return Err(format!("{} exited {}", argv.join(" "), out.status));
    }
    Ok(v)
}

fn list_median(v: &serde_json::Value, key: &str) -> f64 {
    let xs: Vec<f64> = v[key]
        .as_array()
        .map(|a| a.iter().filter_map(serde_json::Value::as_f64).collect())
        .unwrap_or_default();
    median(&xs)
}

/// A figure each process reports, as a function of its JSON line.
type Extract = fn(&serde_json::Value) -> f64;

struct RowSpec {
    id: &'static str,
    what: String,
    ratio: bool,
    target: Option<f64>,
    extract: Extract,
}

/// The six orders of three, one per sample in turn.
const ORDERS: [[Who; 3]; 6] = {
    use Who::*;
    [
        [BareA, Instrumented, BareB],
        [Instrumented, BareB, BareA],
        [BareB, BareA, Instrumented],
        [BareA, BareB, Instrumented],
        [BareB, Instrumented, BareA],
        [Instrumented, BareA, BareB],
    ]
};

fn verdict(ratio: bool, target: Option<f64>, measured: f64, spread: f64, samples: usize) -> String {
    let Some(t) = target else { return "–".into() };
    if samples < 3 {
        return "too few samples for a spread — not judged".into();
    }
    let allowed = if ratio { t - 1.0 } else { t };
    let over = if ratio { measured - 1.0 } else { measured };
    if !measured.is_finite() {
        "not measured".into()
    } else if spread <= allowed {
        if over <= allowed { "met" } else { "missed" }.into()
    } else if over > allowed + spread {
        "missed (by more than the spread)".into()
    } else {
        "spread wider than target — not judged".into()
    }
}

fn make_row(spec: &RowSpec, runs: &[[serde_json::Value; 3]]) -> Row {
    let get = |w: usize| runs.iter().map(|r| (spec.extract)(&r[w])).collect::<Vec<f64>>();
    let (a, i, b) = (get(0), get(1), get(2));
    let stat = |x: f64, base: f64| if spec.ratio { x / base } else { x - base };
    let pairs: Vec<f64> = i.iter().zip(&a).map(|(x, y)| stat(*x, *y)).collect();
    let noise: Vec<f64> = b.iter().zip(&a).map(|(x, y)| stat(*x, *y)).collect();
    let mut sorted = noise.clone();
    sorted.sort_by(f64::total_cmp);
    let (p25, p75) = (percentile(&sorted, 0.25), percentile(&sorted, 0.75));
    let measured = median(&pairs);
    let spread = p75 - p25;
    Row {
        id: spec.id.into(),
        what: spec.what.clone(),
        unit: if spec.ratio { "ratio" } else { "ns" }.into(),
        target: spec.target,
        bare_ns: median(&a),
        instrumented_ns: median(&i),
        measured,
        pair_min: pairs.iter().copied().fold(f64::INFINITY, f64::min),
        pair_max: pairs.iter().copied().fold(f64::NEG_INFINITY, f64::max),
        noise_median: median(&noise),
        noise_p25: p25,
        noise_p75: p75,
        spread,
        verdict: verdict(spec.ratio, spec.target, measured, spread, runs.len()),
        pairs,
        noise,
    }
}

pub fn run(cfg: &Config) -> Result<Report, String> {
    let cpp = cpp_program()?.display().to_string();
    let py = repo().join("bench/py/interpose_bench.py").display().to_string();
    let python = cfg.python.display().to_string();
    let (n, reps) = (cfg.regions.to_string(), cfg.reg_reps.to_string());
    let programs: Vec<(&str, Vec<String>)> = vec![
        ("cpp_reg", vec![cpp.clone(), "reg".into(), n.clone(), reps.clone()]),
        (
            "cpp_xfer",
            vec![cpp.clone(), "xfer".into(), cfg.status_reps.to_string()],
        ),
        ("py_reg", vec![python, py, "reg".into(), n, reps]),
    ];
    let mut runs: Vec<Vec<[serde_json::Value; 3]>> = vec![Vec::new(); programs.len()];
    for s in 0..cfg.samples {
        for (p, (_, argv)) in programs.iter().enumerate() {
            let mut got: [serde_json::Value; 3] = Default::default();
            for who in ORDERS[s % ORDERS.len()] {
                got[who as usize] = run_once(who, &cfg.agent_bin, argv)?;
            }
            runs[p].push(got);
        }
    }
    let regions = cfg.regions;
    let reg = |lang: &str, call: &str, t: Option<f64>, id: &'static str, extract: Extract| RowSpec {
        id,
        what: format!("{lang}: {call}, {regions} × 4 KiB in one list"),
        ratio: true,
        target: t,
        extract,
    };
    let cold: Extract = |v| v["cold_ns"].as_f64().unwrap_or(f64::NAN);
    let warm: Extract = |v| list_median(v, "reg_ns");
    let dereg: Extract = |v| list_median(v, "dereg_ns");
    let cpp_rows = [
        reg(
            "C++",
            "cold registerMem (first of the process)",
            Some(1.02),
            "cpp.reg_cold",
            cold,
        ),
        reg(
            "C++",
            "warm registerMem (median of the process)",
            Some(1.02),
            "cpp.reg_warm",
            warm,
        ),
        reg(
            "C++",
            "warm deregisterMem (median of the process)",
            None,
            "cpp.dereg_warm",
            dereg,
        ),
    ];
    let py_rows = [
        reg(
            "Python",
            "cold register_memory (first of the process)",
            Some(1.05),
            "py.reg_cold",
            cold,
        ),
        reg(
            "Python",
            "warm register_memory (median of the process)",
            Some(1.05),
            "py.reg_warm",
            warm,
        ),
        reg(
            "Python",
            "warm deregister_memory (median of the process)",
            None,
            "py.dereg_warm",
            dereg,
        ),
    ];
    let xfer_rows = [
        RowSpec {
            id: "cpp.post",
            what: "C++: postXferReq, 1 × 64 B WRITE reposted (median of 2,000 in the process)".into(),
            ratio: false,
            target: Some(100.0),
            extract: |v| v["post_median_ns"].as_f64().unwrap_or(f64::NAN),
        },
        RowSpec {
            id: "cpp.status",
            what: format!(
                "C++: getXferStatus of a done request (mean of {} in one loop)",
                cfg.status_reps
            ),
            ratio: false,
            target: Some(100.0),
            extract: |v| v["status_done_ns"].as_f64().unwrap_or(f64::NAN),
        },
    ];
    let mut rows = Vec::new();
    rows.extend(xfer_rows.iter().map(|s| make_row(s, &runs[1])));
    rows.extend(cpp_rows.iter().map(|s| make_row(s, &runs[0])));
    rows.extend(py_rows.iter().map(|s| make_row(s, &runs[2])));
    // Paths relative to the repository, as the docs show them.
    let root = format!("{}/", repo().display());
    // The interposer measured, when it is not the one beside the binary.
    let named = std::env::var("NIXL_AGENT_INTERPOSER")
        .map(|p| format!("NIXL_AGENT_INTERPOSER={p} "))
        .unwrap_or_default();
    let commands = programs
        .iter()
        .map(|(_, argv)| {
            format!("{named}{} instrument -- {}", cfg.agent_bin.display(), argv.join(" ")).replace(&root, "")
        })
        .collect();
    Ok(Report {
        samples: cfg.samples,
        regions: cfg.regions,
        region_bytes: 4096,
        reg_reps: cfg.reg_reps,
        status_reps: cfg.status_reps,
        commands,
        rows,
    })
}
