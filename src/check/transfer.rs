//! `check`'s data-path sections: a loopback round per memory pairing of
//! the plan (two NIXL agents in this process), and which transport UCX
//! picked for each operation, with a finding when it fell back.

use super::CheckOutcome;
use crate::datapath::{Loopback, Measured, Round, Side};
use crate::diagnose::proto::{self, ProtoTable};
use crate::model::{MemType, Reason, XferOp};
use crate::observe::{ObserveSettings, Observer};
use serde::{Deserialize, Serialize};
use std::time::Instant;

/// The transport UCX picked for one operation of one transfer check.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TransportSeen {
    pub op: XferOp,
    /// UCX's word for the endpoint: "self", "intra-node", "inter-node".
    pub scope: String,
    /// Transports, e.g. `["cma"]`, `["rc_mlx5"]`, `["tcp"]`.
    pub transports: Vec<String>,
    /// `transport/device` lanes, e.g. `["rc_mlx5/mlx5_0:1"]`.
    pub lanes: Vec<String>,
}

/// One pairing's round.
#[derive(Debug, Clone, Serialize)]
pub struct TransferCheck {
    /// "DRAM → DRAM", "VRAM#0 → VRAM#1".
    pub name: String,
    pub backend: String,
    pub from: Side,
    pub to: Side,
    pub outcome: CheckOutcome,
    pub seconds: f64,
    pub measured: Vec<Measured>,
    /// What UCX picked (empty when UCX did not print its tables).
    pub transports: Vec<TransportSeen>,
    pub finding: Option<String>,
    pub reason: Option<Reason>,
    pub error: Option<String>,
    /// The initiating NIXL agent (UCX names its worker after it).
    #[serde(skip)]
    pub worker: String,
}

/// "DRAM → DRAM", "VRAM#0 → VRAM#1".
pub fn pairing_name(from: Side, to: Side) -> String {
    let one = |s: Side| match s.mem_type {
        MemType::Vram => format!("VRAM#{}", s.device),
        MemType::Dram => "DRAM".to_string(),
    };
    format!("{} → {}", one(from), one(to))
}

/// The pairings to prove: DRAM → DRAM when the plan has DRAM groups; VRAM
/// on one device, and across devices when there are several, when it has
/// VRAM groups.
pub fn pairings(dram: bool, vram: bool, cuda_devices: u32) -> Vec<(Side, Side)> {
    let d = |mem_type, device| Side { mem_type, device };
    let mut out = Vec::new();
    if dram {
        out.push((d(MemType::Dram, 0), d(MemType::Dram, 0)));
    }
    if vram && cuda_devices > 0 {
        out.push((d(MemType::Vram, 0), d(MemType::Vram, 0)));
        if cuda_devices > 1 {
            out.push((d(MemType::Vram, 0), d(MemType::Vram, 1)));
        }
    }
    out
}

impl TransferCheck {
    /// A check of `from → to` whose transfers `worker` initiates, not run yet.
    pub fn blank(worker: &str, from: Side, to: Side) -> TransferCheck {
        TransferCheck {
            name: pairing_name(from, to),
            backend: "UCX".to_string(),
            from,
            to,
            outcome: CheckOutcome::Ok,
            seconds: 0.0,
            measured: vec![],
            transports: vec![],
            finding: None,
            reason: None,
            error: None,
            worker: worker.to_string(),
        }
    }
}

/// Runs one loopback round of `from → to` on `backend`.
pub fn loopback(backend: &str, index: usize, from: Side, to: Side) -> TransferCheck {
    let prefix = format!("nixl-check-{}-{index}", std::process::id());
    let mut c = TransferCheck::blank(&format!("{prefix}-a"), from, to);
    c.backend = backend.to_string();
    let t0 = Instant::now();
    // A recording nobody serves: the transfers go through the same path as
    // a serving process's.
    let observer = Observer::new(ObserveSettings::default());
    let result =
        Loopback::open(&observer, &prefix, backend, from, to, &Round::CHECK).map(|mut lb| lb.round(&Round::CHECK));
    c.seconds = t0.elapsed().as_secs_f64();
    let failure = match result {
        Ok(r) => {
            c.measured = r.measured;
            r.failure
        }
        Err(f) => Some(f),
    };
    if let Some(f) = failure {
        c.outcome = CheckOutcome::Fail;
        c.reason = Some(f.reason);
        c.error = Some(f.message);
    }
    c
}

/// Transports that carry GPU memory without staging it through the host
/// (or RDMA NICs that can read it).
const GPU_CAPABLE: &[&str] = &[
    "cuda_ipc", "gdr_copy", "rc", "rc_mlx5", "rc_verbs", "dc", "dc_mlx5", "ud", "ud_mlx5", "ud_verbs", "srd",
];

/// Attaches what UCX picked (from its protocol tables) to each check, and
/// the finding when a pairing fell back. `rdma_devices`: whether the host
/// has RDMA NICs (then TCP between nodes is a fall-back too).
pub fn attribute(checks: &mut [TransferCheck], tables: &[ProtoTable], rdma_devices: bool) {
    for c in checks.iter_mut() {
        let (from, to) = (
            proto::ucx_mem(c.from.mem_type == MemType::Vram),
            proto::ucx_mem(c.to.mem_type == MemType::Vram),
        );
        for (op, word) in [(XferOp::Write, "put"), (XferOp::Read, "get")] {
            // A READ moves bytes from the peer's memory into ours, but
            // UCX titles it by the initiator's side: "from <local> memory".
            let found = tables
                .iter()
                .rev()
                .find(|t| t.worker == c.worker && t.scope != "self" && t.is(word, from, to));
            if let Some(t) = found {
                c.transports.push(TransportSeen {
                    op,
                    scope: t.scope.clone(),
                    transports: t.transports(),
                    lanes: t.lanes(),
                });
            }
        }
        if c.outcome == CheckOutcome::Ok {
            if let Some(f) = fallback(c, rdma_devices) {
                c.finding = Some(f);
                c.outcome = CheckOutcome::Warn;
            }
        }
    }
}

/// The finding for a pairing whose transports are a fall-back.
pub fn fallback(c: &TransferCheck, rdma_devices: bool) -> Option<String> {
    let used: Vec<&str> = c
        .transports
        .iter()
        .flat_map(|t| t.transports.iter().map(String::as_str))
        .collect();
    if used.is_empty() {
        return None;
    }
    let only_tcp = used.iter().all(|t| *t == "tcp");
    let vram = c.from.mem_type == MemType::Vram || c.to.mem_type == MemType::Vram;
    let inter = c.transports.iter().any(|t| t.scope == "inter-node");
    if vram && !used.iter().any(|t| GPU_CAPABLE.contains(t)) {
        return Some(format!(
            "{} went over `{}`: no `cuda_ipc`/RDMA transport available — check that UCX's CUDA modules load (UCX row), UCX_TLS includes cuda_ipc (or is unset), and nvidia_peermem or DMA-BUF for RDMA",
            c.name,
            used.join(",")
        ));
    }
    if only_tcp && inter && rdma_devices {
        return Some(format!(
            "{} between nodes went over `tcp` although this host has RDMA devices — check the links (`ibv_devinfo`: PORT_ACTIVE), UCX_NET_DEVICES and UCX_TLS",
            c.name
        ));
    }
    if only_tcp && !inter {
        return Some(format!(
            "{} within this node went over `tcp`: UCX's shared-memory transports (cma, posix, sysv) are unavailable — check UCX_TLS, the size of /dev/shm, and ptrace permissions for cma (CAP_SYS_PTRACE or kernel.yama.ptrace_scope=0)",
            c.name
        ));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(from: MemType, to: MemType, scope: &str, transports: &[&str]) -> TransferCheck {
        let side = |mem_type| Side { mem_type, device: 0 };
        let mut c = TransferCheck::blank("w", side(from), side(to));
        c.transports = vec![TransportSeen {
            op: XferOp::Write,
            scope: scope.into(),
            transports: transports.iter().map(|s| s.to_string()).collect(),
            lanes: vec![],
        }];
        c
    }

    #[test]
    fn vram_over_tcp_is_a_fallback_and_over_cuda_ipc_is_not() {
        let c = check(MemType::Vram, MemType::Vram, "intra-node", &["tcp"]);
        let f = fallback(&c, false).expect("a finding");
        assert!(f.contains("went over `tcp`") && f.contains("cuda_ipc"), "{f}");
        assert!(fallback(&check(MemType::Vram, MemType::Vram, "intra-node", &["cuda_ipc"]), false).is_none());
        assert!(fallback(&check(MemType::Vram, MemType::Vram, "inter-node", &["rc_mlx5"]), true).is_none());
    }

    #[test]
    fn dram_over_tcp_is_a_fallback_within_a_node_or_beside_rdma_nics() {
        assert!(fallback(&check(MemType::Dram, MemType::Dram, "intra-node", &["cma"]), false).is_none());
        assert!(
            fallback(&check(MemType::Dram, MemType::Dram, "intra-node", &["tcp"]), false)
                .unwrap()
                .contains("shared-memory")
        );
        assert!(
            fallback(&check(MemType::Dram, MemType::Dram, "inter-node", &["tcp"]), false).is_none(),
            "no RDMA NICs: TCP is all there is"
        );
        assert!(
            fallback(&check(MemType::Dram, MemType::Dram, "inter-node", &["tcp"]), true)
                .unwrap()
                .contains("RDMA devices")
        );
    }

    #[test]
    fn pairings_follow_the_plan_and_the_devices() {
        assert_eq!(pairings(true, false, 0).len(), 1);
        assert_eq!(
            pairings(false, true, 0).len(),
            0,
            "no device: the CUDA row fails instead"
        );
        assert_eq!(pairings(true, true, 1).len(), 2);
        let p = pairings(false, true, 2);
        assert_eq!(p[1].1.device, 1, "across devices when there are several");
    }

    #[test]
    fn tables_are_matched_to_the_initiating_worker() {
        let lines: Vec<String> = "\
+---+---+---+
| nixl-check-1-0-a intra-node cfg#1 |
| remote memory write by ucp_put* from host memory to host |
+---+---+---+
| Range | Description | Config |
+---+---+---+
| 0..inf | zero-copy | cma/memory |
+---+---+---+
+---+---+---+
| nixl-check-1-0-b intra-node cfg#1 |
| remote memory write by ucp_put* from host memory to host |
+---+---+---+
| Range | Description | Config |
+---+---+---+
| 0..inf | zero-copy | tcp/lo |
+---+---+---+"
            .lines()
            .map(String::from)
            .collect();
        let tables = proto::parse(&lines);
        let mut c = check(MemType::Dram, MemType::Dram, "", &[]);
        c.transports.clear();
        c.worker = "nixl-check-1-0-a".into();
        let mut all = [c];
        attribute(&mut all, &tables, false);
        assert_eq!(all[0].transports.len(), 1, "{:?}", all[0].transports);
        assert_eq!(all[0].transports[0].transports, ["cma"]);
        assert_eq!(all[0].outcome, CheckOutcome::Ok);
    }
}
