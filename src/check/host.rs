//! Host facts that bite containers, for `nixl-agent check`: CAP_IPC_LOCK that
//! a non-root container was "given" but does not have, GPU memory over RDMA
//! without nvidia_peermem or DMA-BUF, GPUs whose nearest RDMA NIC is on the
//! other socket, and a small /dev/shm. Pure functions over a root directory
//! ("/" in production, a fake sysfs/procfs tree in tests); every outcome is
//! advice (ok, warn or skip, never fail): the caller decides what is fatal.

use super::CheckOutcome;
use crate::units::{format_size, parse_size};
use serde::Serialize;
use std::cmp::Reverse;
use std::fs;
use std::path::{Path, PathBuf};

mod links;
#[cfg(test)]
mod tests;

pub use links::LinkCheck;

const CAP_IPC_LOCK: u32 = 14;
/// Below this /dev/shm is too small for UCX's shared-memory transports and NCCL.
const SHM_MIN_BYTES: u64 = 1 << 30;

/// All host checks of one run.
#[derive(Debug, Clone, Serialize)]
pub struct HostCheck {
    pub capabilities: CapCheck,
    pub gpu_rdma: GpuRdmaCheck,
    pub affinity: AffinityCheck,
    /// RDMA ports and whether they are ACTIVE.
    pub links: LinkCheck,
    pub shm: ShmCheck,
}

/// Whether CAP_IPC_LOCK lifts the memlock limit, and the non-root trap.
#[derive(Debug, Clone, Serialize)]
pub struct CapCheck {
    pub outcome: CheckOutcome,
    /// Effective uid (`Uid:` of /proc/self/status).
    pub uid: Option<u32>,
    pub ipc_lock_effective: bool,
    pub ipc_lock_bounding: bool,
    pub ipc_lock_ambient: bool,
    /// One line of what was found.
    pub finding: String,
    pub advice: Option<String>,
}

/// Whether GPU memory can go over RDMA (nvidia_peermem or DMA-BUF).
#[derive(Debug, Clone, Serialize)]
pub struct GpuRdmaCheck {
    pub outcome: CheckOutcome,
    /// Whether the plan has VRAM groups; without them this check is skipped.
    pub vram: bool,
    /// RDMA devices in /sys/class/infiniband.
    pub rdma_devices: Vec<String>,
    /// The peer-memory module that is loaded (`nvidia_peermem`, legacy `nv_peer_mem`).
    pub peermem: Option<String>,
    /// DMA-BUF support of the GPU, as CUDA reports it. Not read from the host:
    /// `None` until the caller sets it with [`GpuRdmaCheck::with_dmabuf`].
    pub dmabuf: Option<bool>,
    pub finding: String,
    pub advice: Option<String>,
}

/// How close each GPU is to its nearest RDMA NIC.
#[derive(Debug, Clone, Serialize)]
pub struct AffinityCheck {
    pub outcome: CheckOutcome,
    pub gpus: Vec<GpuAffinity>,
    pub nics: Vec<Nic>,
    pub finding: String,
    pub advice: Option<String>,
}

/// An RDMA device on a PCI function.
#[derive(Debug, Clone, Serialize)]
pub struct Nic {
    pub name: String,
    pub pci: String,
    pub numa_node: Option<u32>,
    pub ports: Vec<u32>,
    #[serde(skip)]
    path: Vec<String>,
}

/// One GPU (by PCI address: CUDA's order when `CUDA_DEVICE_ORDER=PCI_BUS_ID`).
#[derive(Debug, Clone, Serialize)]
pub struct GpuAffinity {
    pub pci: String,
    pub numa_node: Option<u32>,
    /// The equally nearest NICs.
    pub closest: Vec<NicDistance>,
    /// What to set `UCX_NET_DEVICES` to for a rank on this GPU, e.g. "mlx5_0:1".
    pub ucx_net_devices: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct NicDistance {
    pub nic: String,
    pub distance: Distance,
}

/// How far a NIC is from a GPU, nearest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Distance {
    SamePcieSwitch,
    SameRootComplex,
    SameNumaNode,
    OtherNumaNode,
    /// Different root complexes and a NUMA node that sysfs does not report.
    Unknown,
}

impl Distance {
    pub fn word(self) -> &'static str {
        match self {
            Distance::SamePcieSwitch => "same PCIe switch",
            Distance::SameRootComplex => "same root complex",
            Distance::SameNumaNode => "same NUMA node",
            Distance::OtherNumaNode => "other NUMA node",
            Distance::Unknown => "NUMA node unknown",
        }
    }
}

/// Size of /dev/shm.
#[derive(Debug, Clone, Serialize)]
pub struct ShmCheck {
    pub outcome: CheckOutcome,
    pub mounted: bool,
    /// The tmpfs `size=` option; `None` = not given (half of RAM, the tmpfs default).
    pub size_bytes: Option<u64>,
    pub finding: String,
    pub advice: Option<String>,
}

/// Runs every host check against `root` ("/" in production).
/// `memlock_soft` is the soft RLIMIT_MEMLOCK (`None` = unlimited).
pub fn host_check(root: &Path, vram: bool, plan_dram_bytes: u64, memlock_soft: Option<u64>) -> HostCheck {
    HostCheck {
        capabilities: cap_check(root, plan_dram_bytes, memlock_soft),
        gpu_rdma: gpu_rdma_check(root, vram),
        affinity: affinity_check(root),
        links: links::link_check(root),
        shm: shm_check(root),
    }
}

/// One row per check for people: name, outcome, and a line that ends in
/// " — fix: …" when there is advice.
pub fn summary(host: &HostCheck) -> Vec<(&'static str, CheckOutcome, String)> {
    let row = |name, outcome, finding: &str, advice: &Option<String>| match advice {
        Some(a) => (name, outcome, format!("{finding} — fix: {a}")),
        None => (name, outcome, finding.to_string()),
    };
    let (c, g, a, s, l) = (
        &host.capabilities,
        &host.gpu_rdma,
        &host.affinity,
        &host.shm,
        &host.links,
    );
    vec![
        row("Capabilities", c.outcome, &c.finding, &c.advice),
        row("GPU RDMA", g.outcome, &g.finding, &g.advice),
        row("GPU-NIC", a.outcome, &a.finding, &a.advice),
        row("RDMA links", l.outcome, &l.finding, &l.advice),
        row("/dev/shm", s.outcome, &s.finding, &s.advice),
    ]
}

fn read(root: &Path, rel: &str) -> Option<String> {
    fs::read_to_string(root.join(rel)).ok()
}

fn caps_have(status: &str, key: &str, bit: u32) -> bool {
    status
        .lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
        .is_some_and(|caps| caps & (1 << bit) != 0)
}

pub fn cap_check(root: &Path, plan_dram_bytes: u64, memlock_soft: Option<u64>) -> CapCheck {
    let status = read(root, "proc/self/status").unwrap_or_default();
    let uid = status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|v| v.split_whitespace().nth(1)?.parse().ok());
    let mut c = CapCheck {
        outcome: CheckOutcome::Ok,
        uid,
        ipc_lock_effective: caps_have(&status, "CapEff:", CAP_IPC_LOCK),
        ipc_lock_bounding: caps_have(&status, "CapBnd:", CAP_IPC_LOCK),
        ipc_lock_ambient: caps_have(&status, "CapAmb:", CAP_IPC_LOCK),
        finding: String::new(),
        advice: None,
    };
    let enough = memlock_soft.is_none_or(|soft| soft >= plan_dram_bytes);
    c.finding = if status.is_empty() {
        c.outcome = CheckOutcome::Skip;
        "cannot read /proc/self/status".into()
    } else if c.ipc_lock_effective {
        "CAP_IPC_LOCK is effective: the memlock limit does not bind".into()
    } else if c.ipc_lock_bounding && uid != Some(0) {
        let trap = format!(
            "uid {} has CAP_IPC_LOCK in its bounding set but not effective (a non-root container's added \
             capabilities are cleared on exec, container-toolkit#2037)",
            uid.map_or("?".into(), |u| u.to_string())
        );
        if enough {
            format!("{trap}; the memlock limit is high enough anyway")
        } else {
            c.outcome = CheckOutcome::Warn;
            c.advice = Some(
                "raise the memlock ulimit in the runtime (containerd/CRI-O default `LimitMEMLOCK=infinity`, \
                 `docker run --ulimit memlock=-1`), or `setcap cap_ipc_lock+ep` on the binary or grant it as \
                 an ambient capability, or run as root"
                    .into(),
            );
            format!("{trap}, and the memlock limit is below the plan's DRAM: registration will fail")
        }
    } else {
        "no CAP_IPC_LOCK: the memlock limit applies".into()
    };
    c
}

pub fn gpu_rdma_check(root: &Path, vram: bool) -> GpuRdmaCheck {
    let peermem = ["nvidia_peermem", "nv_peer_mem"]
        .into_iter()
        .find(|m| root.join("sys/module").join(m).exists())
        .map(String::from);
    GpuRdmaCheck {
        outcome: CheckOutcome::Skip,
        vram,
        rdma_devices: dir_names(&root.join("sys/class/infiniband")),
        peermem,
        dmabuf: None,
        finding: String::new(),
        advice: None,
    }
    .with_dmabuf(None)
}

impl GpuRdmaCheck {
    /// Sets what CUDA says about DMA-BUF (`CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED`)
    /// and recomputes the outcome.
    pub fn with_dmabuf(mut self, supported: Option<bool>) -> Self {
        self.dmabuf = supported;
        self.advice = None;
        self.outcome = CheckOutcome::Ok;
        self.finding = if !self.vram {
            self.outcome = CheckOutcome::Skip;
            "no VRAM in the plan".into()
        } else if self.rdma_devices.is_empty() {
            "no RDMA devices: GPU memory moves over cuda_ipc within a node or TCP across nodes".into()
        } else if let Some(m) = &self.peermem {
            format!("{m} is loaded: RDMA devices can reach GPU memory")
        } else if supported == Some(true) {
            "DMA-BUF is supported: RDMA devices can reach GPU memory without nvidia_peermem".into()
        } else {
            self.outcome = CheckOutcome::Warn;
            self.advice = Some(
                "`modprobe nvidia_peermem` on the host (from the NVIDIA driver package), or a kernel ≥ 5.12 and \
                 driver ≥ 515 with DMA-BUF (UCX picks it up itself)"
                    .into(),
            );
            "no nvidia_peermem and no DMA-BUF: VRAM registration succeeds but RDMA of GPU memory fails or falls \
             back (ibv_reg_mr … Bad address, dynamo#10671)"
                .into()
        };
        self
    }
}

fn dir_names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .map(|rd| rd.filter_map(|e| e.ok()?.file_name().into_string().ok()).collect())
        .unwrap_or_default();
    names.sort();
    names
}

/// A PCI device's canonical path below sys/devices, as components
/// (["pci0000:00", "0000:00:01.0", "0000:01:00.0"]).
fn pci_path(devices: &Path, link: &Path) -> Option<Vec<String>> {
    let real = fs::canonicalize(link).ok()?;
    let rel = real.strip_prefix(devices).ok()?;
    let parts: Vec<String> = rel.iter().filter_map(|c| c.to_str().map(String::from)).collect();
    parts.first()?.starts_with("pci").then_some(parts)
}

fn numa_node(dev: &Path) -> Option<u32> {
    fs::read_to_string(dev.join("numa_node")).ok()?.trim().parse().ok()
}

fn gpus(root: &Path, devices: &Path) -> Vec<(String, Option<u32>, Vec<String>)> {
    let bus = root.join("sys/bus/pci/devices");
    let mut out = Vec::new();
    for name in dir_names(&bus) {
        let dev = bus.join(&name);
        let attr = |f: &str| fs::read_to_string(dev.join(f)).unwrap_or_default();
        let class = attr("class");
        let display = class.starts_with("0x0302") || class.starts_with("0x0300");
        if attr("vendor").trim() == "0x10de" && display {
            if let Some(path) = pci_path(devices, &dev) {
                out.push((name, numa_node(&dev), path));
            }
        }
    }
    out
}

fn nics(root: &Path, devices: &Path) -> Vec<Nic> {
    let class = root.join("sys/class/infiniband");
    let mut out = Vec::new();
    for name in dir_names(&class) {
        let dev = class.join(&name);
        let Some(path) = pci_path(devices, &dev.join("device")) else {
            continue; // software RDMA (rxe, siw): no PCI function
        };
        let mut ports: Vec<u32> = dir_names(&dev.join("ports"))
            .iter()
            .filter_map(|p| p.parse().ok())
            .collect();
        ports.sort_unstable();
        if ports.is_empty() {
            ports.push(1);
        }
        let pci = path.last().cloned().unwrap_or_default();
        out.push(Nic {
            numa_node: numa_node(&dev.join("device")),
            name,
            pci,
            ports,
            path,
        });
    }
    out
}

/// Ranks a NIC for a GPU: more shared PCIe path first, then the nearer NUMA word.
fn distance(gpu_numa: Option<u32>, gpu_path: &[String], nic: &Nic) -> (Reverse<usize>, Distance) {
    let common = gpu_path.iter().zip(&nic.path).take_while(|(a, b)| a == b).count();
    let d = match (common, gpu_numa, nic.numa_node) {
        (2.., _, _) => Distance::SamePcieSwitch,
        (1, _, _) => Distance::SameRootComplex,
        (_, Some(g), Some(n)) if g == n => Distance::SameNumaNode,
        (_, Some(_), Some(_)) => Distance::OtherNumaNode,
        _ => Distance::Unknown,
    };
    (Reverse(common), d)
}

/// The equally nearest NICs of one GPU (`nics` is not empty).
fn nearest(pci: String, numa_node: Option<u32>, path: &[String], nics: &[Nic]) -> GpuAffinity {
    let best = nics.iter().map(|n| distance(numa_node, path, n)).min();
    let closest: Vec<(&Nic, Distance)> = nics
        .iter()
        .map(|n| (n, distance(numa_node, path, n)))
        .filter(|(_, key)| Some(*key) == best)
        .map(|(n, (_, d))| (n, d))
        .collect();
    let ucx: Vec<String> = closest
        .iter()
        .flat_map(|(n, _)| n.ports.iter().map(move |p| format!("{}:{p}", n.name)))
        .collect();
    GpuAffinity {
        pci,
        numa_node,
        closest: closest
            .iter()
            .map(|(n, d)| NicDistance {
                nic: n.name.clone(),
                distance: *d,
            })
            .collect(),
        ucx_net_devices: ucx.join(","),
    }
}

pub fn affinity_check(root: &Path) -> AffinityCheck {
    let devices = fs::canonicalize(root.join("sys/devices")).unwrap_or_else(|_| PathBuf::from("/sys/devices"));
    let nics = nics(root, &devices);
    let mut gpus = gpus(root, &devices);
    if nics.is_empty() {
        gpus.clear();
    }
    let gpus: Vec<GpuAffinity> = gpus
        .into_iter()
        .map(|(pci, numa, path)| nearest(pci, numa, &path, &nics))
        .collect();
    let mut c = AffinityCheck {
        outcome: CheckOutcome::Ok,
        gpus,
        nics,
        finding: String::new(),
        advice: None,
    };
    c.finding = if c.nics.is_empty() {
        c.outcome = CheckOutcome::Skip;
        "no RDMA NICs on PCI".into()
    } else if c.gpus.is_empty() {
        c.outcome = CheckOutcome::Skip;
        "no NVIDIA GPUs on PCI".into()
    } else {
        affinity_line(&c)
    };
    let far = |g: &GpuAffinity| g.closest.iter().all(|n| n.distance == Distance::OtherNumaNode);
    if c.gpus.iter().any(far) {
        c.outcome = CheckOutcome::Warn;
        c.advice = Some(
            "some GPU's nearest NIC is on another NUMA node (cross-socket traffic halves bandwidth): set \
             UCX_NET_DEVICES per rank to its GPU's suggestion"
                .into(),
        );
    }
    c
}

/// Every GPU's nearest NICs on one line:
/// "0000:01:00.0 → mlx5_0:1 (same PCIe switch); 0000:41:00.0 → …".
pub fn affinity_line(c: &AffinityCheck) -> String {
    c.gpus
        .iter()
        .map(|g| {
            let word = g.closest.first().map_or("no NIC", |n| n.distance.word());
            format!("{} → {} ({word})", g.pci, g.ucx_net_devices)
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// A size for people: exact units when they divide it, else GiB to a tenth.
fn approx_size(bytes: u64) -> String {
    if bytes >= 1 << 30 && !bytes.is_multiple_of(1 << 20) {
        format!("{:.1}GiB", bytes as f64 / (1u64 << 30) as f64)
    } else {
        format_size(bytes)
    }
}

pub fn shm_check(root: &Path) -> ShmCheck {
    let mounts = read(root, "proc/mounts").unwrap_or_default();
    // The last mount on /dev/shm is the one that shows.
    let mount = mounts.lines().rev().find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        (f.len() >= 4 && f[1] == "/dev/shm").then(|| (f[2].to_string(), f[3].to_string()))
    });
    let mut c = ShmCheck {
        outcome: CheckOutcome::Ok,
        mounted: mount.is_some(),
        size_bytes: None,
        finding: String::new(),
        advice: None,
    };
    let Some((fstype, opts)) = mount else {
        c.outcome = CheckOutcome::Skip;
        c.finding = "/dev/shm is not mounted".into();
        return c;
    };
    c.size_bytes = opts.split(',').find_map(|o| parse_size(o.strip_prefix("size=")?).ok());
    c.finding = match c.size_bytes {
        Some(b) if b < SHM_MIN_BYTES => {
            c.outcome = CheckOutcome::Warn;
            c.advice = Some(
                "`docker run --shm-size=16g`, or in Kubernetes mount an `emptyDir: {medium: Memory, sizeLimit: \
                 16Gi}` at /dev/shm"
                    .into(),
            );
            format!(
                "{} ({fstype}): UCX's shared-memory transports (posix/sysv, used by sm and within a node for \
                 cuda_ipc's staging) and NCCL need a large /dev/shm",
                approx_size(b)
            )
        }
        Some(b) => format!("{} ({fstype})", approx_size(b)),
        None if fstype == "tmpfs" => "no size limit given: half of RAM, the tmpfs default".into(),
        None => format!("{fstype}, size unknown"),
    };
    c
}
