//! Host checks against fake sysfs/procfs trees built like the real ones.

use super::*;
use std::os::unix::fs::symlink;

struct Tree(tempfile::TempDir);

impl Tree {
    fn new() -> Tree {
        Tree(tempfile::tempdir().unwrap())
    }
    fn root(&self) -> &Path {
        self.0.path()
    }
    fn file(&self, rel: &str, text: &str) {
        let p = self.root().join(rel);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(p, text).unwrap();
    }
    fn status(&self, uid: u32, eff: &str, bnd: &str) {
        let text = format!("Name:\tx\nUid:\t{uid}\t{uid}\t{uid}\t{uid}\nCapEff:\t{eff}\nCapBnd:\t{bnd}\nCapAmb:\t0\n");
        self.file("proc/self/status", &text);
    }
    /// A PCI function at sys/devices/<path> with its sys/bus/pci/devices link.
    fn pci(&self, path: &str, vendor: &str, class: &str, numa: i32) {
        let addr = path.rsplit('/').next().unwrap();
        self.file(&format!("sys/devices/{path}/vendor"), &format!("{vendor}\n"));
        self.file(&format!("sys/devices/{path}/class"), &format!("{class}\n"));
        self.file(&format!("sys/devices/{path}/numa_node"), &format!("{numa}\n"));
        fs::create_dir_all(self.root().join("sys/bus/pci/devices")).unwrap();
        symlink(
            format!("../../../devices/{path}"),
            self.root().join("sys/bus/pci/devices").join(addr),
        )
        .unwrap();
    }
    fn gpu(&self, path: &str, numa: i32) {
        self.pci(path, "0x10de", "0x030200", numa);
    }
    /// A Mellanox function at `path` with RDMA device `name` (port 1).
    fn nic(&self, path: &str, name: &str, numa: i32) {
        self.pci(path, "0x15b3", "0x020700", numa);
        let dev = format!("sys/class/infiniband/{name}");
        self.file(&format!("{dev}/ports/1/state"), "4: ACTIVE\n");
        symlink(format!("../../../devices/{path}"), self.root().join(dev).join("device")).unwrap();
    }
}

const IPC_LOCK: &str = "0000000000004000";
const NONE: &str = "0000000000000000";
const GIB: u64 = 1 << 30;

#[test]
fn non_root_with_bounding_but_not_effective_and_low_memlock_warns() {
    let t = Tree::new();
    t.status(1000, NONE, "00000000a80465fb"); // Docker defaults + IPC_LOCK
    let c = cap_check(t.root(), 4 * GIB, Some(8 << 20));
    assert_eq!(c.uid, Some(1000));
    assert!(c.ipc_lock_bounding && !c.ipc_lock_effective);
    assert_eq!(c.outcome, CheckOutcome::Warn);
    assert!(c.finding.contains("container-toolkit#2037"), "{}", c.finding);
    let advice = c.advice.unwrap();
    assert!(advice.contains("LimitMEMLOCK=infinity") && advice.contains("setcap cap_ipc_lock+ep"));
    // Same trap, but an unlimited memlock limit makes it harmless.
    let c = cap_check(t.root(), 4 * GIB, None);
    assert_eq!(c.outcome, CheckOutcome::Ok);
    assert!(c.finding.contains("high enough"));
}

#[test]
fn root_with_effective_ipc_lock_is_ok() {
    let t = Tree::new();
    t.status(0, "000001fffeffffff", "000001fffeffffff");
    let c = cap_check(t.root(), 4 * GIB, Some(0));
    assert_eq!(
        (c.uid, c.ipc_lock_effective, c.outcome),
        (Some(0), true, CheckOutcome::Ok)
    );
    assert!(c.advice.is_none());
    t.status(1000, IPC_LOCK, IPC_LOCK);
    assert_eq!(cap_check(t.root(), GIB, Some(0)).outcome, CheckOutcome::Ok);
}

#[test]
fn rdma_without_peermem_warns_only_with_vram() {
    let t = Tree::new();
    t.file("sys/class/infiniband/mlx5_0/ports/1/state", "4: ACTIVE\n");
    let g = gpu_rdma_check(t.root(), true);
    assert_eq!(g.rdma_devices, ["mlx5_0"]);
    assert_eq!(g.outcome, CheckOutcome::Warn);
    assert!(g.finding.contains("dynamo#10671"));
    assert!(g.advice.as_deref().unwrap().contains("modprobe nvidia_peermem"));
    // DMA-BUF from CUDA fixes it; unknown does not.
    assert_eq!(g.clone().with_dmabuf(Some(true)).outcome, CheckOutcome::Ok);
    assert_eq!(g.clone().with_dmabuf(Some(true)).advice, None);
    assert_eq!(g.with_dmabuf(Some(false)).outcome, CheckOutcome::Warn);
    assert_eq!(gpu_rdma_check(t.root(), false).outcome, CheckOutcome::Skip);

    fs::create_dir_all(t.root().join("sys/module/nvidia_peermem")).unwrap();
    let g = gpu_rdma_check(t.root(), true);
    assert_eq!(
        (g.outcome, g.peermem.as_deref()),
        (CheckOutcome::Ok, Some("nvidia_peermem"))
    );
}

#[test]
fn no_rdma_devices_is_ok_with_a_note() {
    let t = Tree::new();
    let g = gpu_rdma_check(t.root(), true);
    assert_eq!(g.outcome, CheckOutcome::Ok);
    assert!(g.finding.contains("cuda_ipc"));
}

#[test]
fn gpu_and_nic_on_one_switch() {
    let t = Tree::new();
    t.gpu("pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:00.0/0000:03:00.0", 0);
    t.nic(
        "pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:01.0/0000:04:00.0",
        "mlx5_0",
        0,
    );
    t.nic("pci0000:00/0000:00:02.0/0000:05:00.0", "mlx5_1", 0);
    t.nic("pci0000:80/0000:80:01.0/0000:81:00.0", "mlx5_2", 1);
    t.pci("pci0000:00/0000:00:03.0", "0x8086", "0x060400", 0); // not a GPU
    let a = affinity_check(t.root());
    assert_eq!(a.outcome, CheckOutcome::Ok, "{a:?}");
    assert_eq!(a.nics.len(), 3);
    assert_eq!(a.gpus.len(), 1);
    let g = &a.gpus[0];
    assert_eq!((g.pci.as_str(), g.numa_node), ("0000:03:00.0", Some(0)));
    assert_eq!(g.closest.len(), 1);
    assert_eq!(g.closest[0].distance, Distance::SamePcieSwitch);
    assert_eq!(g.ucx_net_devices, "mlx5_0:1");
    assert_eq!(affinity_line(&a), "0000:03:00.0 → mlx5_0:1 (same PCIe switch)");
}

#[test]
fn equally_close_nics_are_joined_and_numa_breaks_ties() {
    let t = Tree::new();
    t.gpu("pci0000:00/0000:00:01.0/0000:01:00.0", 0);
    t.nic("pci0000:00/0000:00:02.0/0000:02:00.0", "mlx5_0", 0);
    t.nic("pci0000:00/0000:00:03.0/0000:03:00.0", "mlx5_1", 0);
    t.nic("pci0000:40/0000:40:01.0/0000:41:00.0", "mlx5_2", 0);
    t.nic("pci0000:80/0000:80:01.0/0000:81:00.0", "mlx5_3", 1);
    let a = affinity_check(t.root());
    assert_eq!(a.gpus[0].ucx_net_devices, "mlx5_0:1,mlx5_1:1");
    assert_eq!(a.gpus[0].closest[0].distance, Distance::SameRootComplex);

    let t = Tree::new();
    t.gpu("pci0000:00/0000:00:01.0/0000:01:00.0", 0);
    t.nic("pci0000:80/0000:80:01.0/0000:81:00.0", "mlx5_1", 1);
    t.nic("pci0000:40/0000:40:01.0/0000:41:00.0", "mlx5_0", 0);
    let a = affinity_check(t.root());
    assert_eq!(a.gpus[0].ucx_net_devices, "mlx5_0:1");
    assert_eq!(a.gpus[0].closest[0].distance, Distance::SameNumaNode);
    assert_eq!(a.outcome, CheckOutcome::Ok);
}

#[test]
fn gpu_whose_only_nic_is_on_the_other_socket_warns() {
    let t = Tree::new();
    t.gpu("pci0000:00/0000:00:01.0/0000:01:00.0", 0);
    t.nic("pci0000:80/0000:80:01.0/0000:81:00.0", "mlx5_0", 1);
    let a = affinity_check(t.root());
    assert_eq!(a.outcome, CheckOutcome::Warn);
    assert_eq!(a.gpus[0].closest[0].distance, Distance::OtherNumaNode);
    assert!(a.advice.as_deref().unwrap().contains("UCX_NET_DEVICES"));
}

#[test]
fn affinity_skips_without_gpus_or_nics() {
    let t = Tree::new();
    t.nic("pci0000:00/0000:00:02.0/0000:02:00.0", "mlx5_0", 0);
    let a = affinity_check(t.root());
    assert_eq!(
        (a.outcome, a.finding.as_str()),
        (CheckOutcome::Skip, "no NVIDIA GPUs on PCI")
    );
    let t = Tree::new();
    t.gpu("pci0000:00/0000:00:01.0/0000:01:00.0", 0);
    t.file("sys/class/infiniband/rxe0/ports/1/state", "4: ACTIVE\n"); // soft RoCE: no PCI device
    let a = affinity_check(t.root());
    assert_eq!(
        (a.outcome, a.finding.as_str()),
        (CheckOutcome::Skip, "no RDMA NICs on PCI")
    );
}

#[test]
fn small_dev_shm_warns() {
    let t = Tree::new();
    t.file(
        "proc/mounts",
        "proc /proc proc rw 0 0\nshm /dev/shm tmpfs rw,nosuid,nodev,noexec,relatime,size=65536k 0 0\n",
    );
    let s = shm_check(t.root());
    assert_eq!((s.outcome, s.size_bytes), (CheckOutcome::Warn, Some(64 << 20)));
    assert!(s.finding.starts_with("64MiB"), "{}", s.finding);
    assert!(s.advice.as_deref().unwrap().contains("--shm-size"));
}

#[test]
fn dev_shm_without_size_is_ok_and_missing_is_skipped() {
    let t = Tree::new();
    t.file("proc/mounts", "tmpfs /dev/shm tmpfs rw,nosuid,nodev 0 0\n");
    let s = shm_check(t.root());
    assert_eq!((s.outcome, s.size_bytes, s.mounted), (CheckOutcome::Ok, None, true));
    t.file(
        "proc/mounts",
        "tmpfs /dev/shm tmpfs rw,size=65536k 0 0\ntmpfs /dev/shm tmpfs rw,size=16g 0 0\n",
    );
    assert_eq!(shm_check(t.root()).size_bytes, Some(16 * GIB));
    t.file("proc/mounts", "proc /proc proc rw 0 0\n");
    assert_eq!(shm_check(t.root()).outcome, CheckOutcome::Skip);
}

#[test]
fn summary_rows_carry_the_fix_and_never_fail() {
    let t = Tree::new();
    t.status(1000, NONE, IPC_LOCK);
    t.file("proc/mounts", "shm /dev/shm tmpfs rw,size=65536k 0 0\n");
    let rows = summary(&host_check(t.root(), true, GIB, Some(64 << 10)));
    let names: Vec<&str> = rows.iter().map(|r| r.0).collect();
    assert_eq!(names, ["Capabilities", "GPU RDMA", "GPU-NIC", "RDMA links", "/dev/shm"]);
    assert_eq!(rows[0].1, CheckOutcome::Warn);
    assert!(rows[0].2.contains(" — fix: raise the memlock ulimit"));
    assert!(rows[4].2.contains(" — fix: `docker run --shm-size=16g`"));
    assert!(rows.iter().all(|r| r.1 != CheckOutcome::Fail));
}

#[test]
fn this_machine_does_not_panic() {
    let h = host_check(Path::new("/"), true, GIB, None);
    for (name, outcome, line) in summary(&h) {
        assert_ne!(outcome, CheckOutcome::Fail, "{name}: {line}");
    }
    serde_json::to_string(&h).unwrap();
}
