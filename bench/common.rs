//! Shared pieces: where things are, loading NIXL, memory arenas, statistics,
//! /proc readers and the description of the machine.

use nixl_agent::Region;
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The repository root (where Cargo.toml is).
pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The NIXL runtime folder: `NIXL_LIB_DIR`, else what scripts/setup.sh unpacks.
pub fn nixl_lib_dir() -> PathBuf {
    std::env::var_os("NIXL_LIB_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo().join(".deps/nixl/.nixl_cu12.mesonpy.libs"))
}

/// Loads libnixl_capi.so by full path the way the agent does (nixl-sys's stub
/// aborts when its own dlopen finds nothing) and points NIXL at its plugins.
/// Call before any thread exists (it sets an environment variable).
pub fn load_nixl() -> Result<(), String> {
    let dir = nixl_lib_dir();
    if std::env::var_os("NIXL_PLUGIN_DIR").is_none() {
        std::env::set_var("NIXL_PLUGIN_DIR", dir.join("plugins"));
    }
    let found = nixl_agent_sys::discover(Some(&dir), &nixl_agent::config::ProcessEnv);
    nixl_agent_sys::load(found)
        .map(|_| ())
        .map_err(|e| format!("loading NIXL from {}: {}", dir.display(), e.message))
}

/// Alignment of every benchmark region's start: the region size. UCX
/// registers regions that are only page-aligned 1.5–1.9× slower (measured),
/// and where a fresh mapping lands is luck, so every contender (the Python
/// worker too) aligns its first region to this.
pub const ALIGN: usize = 64 << 10;

/// An anonymous private mapping, populated (the agent's own allocation,
/// `nixl_agent_sys::memory`), unmapped on drop; regions start at its first
/// `ALIGN`ed address.
pub struct Arena {
    _mapping: nixl_agent_sys::Backing,
    end: usize,
    start: usize,
}

impl Arena {
    pub fn new(len: usize) -> Arena {
        Arena::map(len, ALIGN)
    }

    /// Exactly `len` bytes, page-aligned: what the agent binary allocates
    /// for a group (for the bare process that mirrors it).
    pub fn exact(len: usize) -> Arena {
        Arena::map(len, 1)
    }

    fn map(len: usize, align: usize) -> Arena {
        let len = if align > 1 { len + align } else { len };
        let (mapped, mapping) = nixl_agent_sys::memory::allocate(nixl_agent::MemType::Dram, 0, 1, len)
            .unwrap_or_else(|f| panic!("mmap of {len} bytes failed: {}", f.message));
        let start = mapped[0].addr.next_multiple_of(align);
        Arena {
            _mapping: mapping,
            end: mapped[0].addr + mapped[0].len,
            start,
        }
    }

    /// `count` consecutive regions of `size` bytes from the aligned start.
    pub fn regions(&self, count: usize, size: usize) -> Vec<Region> {
        assert!(self.start + count * size <= self.end);
        (0..count)
            .map(|i| Region::new(self.start + i * size, size, 0))
            .collect()
    }
}

/// Milliseconds as f64.
pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// Median of the samples (mean of the two middle ones when even).
pub fn median(samples: &[f64]) -> f64 {
    if samples.is_empty() {
        return f64::NAN;
    }
    let mut v = samples.to_vec();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// Nearest-rank percentile (`q` in 0..=1) of sorted samples.
pub fn percentile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = (q * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// Least-squares slope of log(y) against log(x): the exponent k in y ~ x^k.
pub fn exponent(points: &[(f64, f64)]) -> f64 {
    let pts: Vec<(f64, f64)> = points
        .iter()
        .filter(|(x, y)| *x > 0.0 && *y > 0.0)
        .map(|(x, y)| (x.ln(), y.ln()))
        .collect();
    if pts.len() < 2 {
        return f64::NAN;
    }
    let n = pts.len() as f64;
    let mx = pts.iter().map(|p| p.0).sum::<f64>() / n;
    let my = pts.iter().map(|p| p.1).sum::<f64>() / n;
    let sxy: f64 = pts.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
    let sxx: f64 = pts.iter().map(|p| (p.0 - mx).powi(2)).sum();
    sxy / sxx
}

/// A value of /proc/PID/status in KiB (e.g. "VmRSS").
pub fn proc_status_kib(pid: u32, key: &str) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    field_kib(&text, key)
}

/// A value of /proc/PID/smaps_rollup in KiB (e.g. "Pss").
pub fn smaps_rollup_kib(pid: u32, key: &str) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup")).ok()?;
    field_kib(&text, key)
}

fn field_kib(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        (k.trim() == key).then(|| v.split_whitespace().next()?.parse().ok())?
    })
}

/// User + system CPU time of a process so far.
pub fn cpu_time(pid: u32) -> Option<Duration> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name (which may hold spaces) start at ')'.
    let rest = text.rsplit_once(')')?.1;
    let f: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 (1-based); f[0] is field 3.
    let ticks: u64 = f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
    // Safety: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    Some(Duration::from_secs_f64(ticks as f64 / hz))
}

/// The machine the run happened on.
#[derive(Debug, Clone, Serialize)]
pub struct Machine {
    pub cpu: String,
    pub cores: usize,
    pub memory_gib: f64,
    pub kernel: String,
    pub os: String,
    pub gpu: bool,
    pub nixl_version: String,
}

impl Machine {
    pub fn describe() -> Machine {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let cpu = cpuinfo
            .lines()
            .find_map(|l| {
                l.strip_prefix("model name")
                    .map(|v| v.trim_start_matches([' ', '\t', ':']).to_string())
            })
            .unwrap_or_else(|| "unknown".into());
        let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
        let memory_gib = field_kib(&meminfo, "MemTotal").unwrap_or(0) as f64 / (1024.0 * 1024.0);
        let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .unwrap_or_default()
            .trim()
            .to_string();
        let os = std::fs::read_to_string("/etc/os-release")
            .unwrap_or_default()
            .lines()
            .find_map(|l| l.strip_prefix("PRETTY_NAME=").map(|v| v.trim_matches('"').to_string()))
            .unwrap_or_else(|| "unknown".into());
        let nixl_version = nixl_version(&nixl_lib_dir()).unwrap_or_else(|| "unknown".into());
        Machine {
            cpu,
            cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
            memory_gib: (memory_gib * 10.0).round() / 10.0,
            kernel,
            os,
            gpu: Path::new("/dev/nvidia0").exists(),
            nixl_version,
        }
    }
}

/// The NIXL version from the wheel's dist-info beside the library folder.
fn nixl_version(lib_dir: &Path) -> Option<String> {
    let parent = lib_dir.parent()?;
    std::fs::read_dir(parent).ok()?.flatten().find_map(|e| {
        let name = e.file_name().into_string().ok()?;
        let stem = name.strip_suffix(".dist-info")?;
        Some(stem.rsplit_once('-')?.1.to_string())
    })
}

/// Median ns of one call of `f`, over 7 batches of 10,000 calls.
pub fn per_call_ns(mut f: impl FnMut()) -> f64 {
    let batch = 10_000;
    let v: Vec<f64> = (0..7)
        .map(|_| {
            let t = std::time::Instant::now();
            for _ in 0..batch {
                f();
            }
            t.elapsed().as_nanos() as f64 / batch as f64
        })
        .collect();
    median(&v)
}
