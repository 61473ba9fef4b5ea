//! RDMA port state for `nixl-agent check`: a port that is not ACTIVE is one
//! UCX will not use, so transfers between nodes fall back to TCP or fail.
//! Read from `sys/class/infiniband/<dev>/ports/<n>/{state,phys_state,
//! link_layer,rate}` under a root directory, like the other host checks.

use super::{dir_names, read, CheckOutcome};
use serde::Serialize;
use std::path::Path;

/// One RDMA port as sysfs reports it.
#[derive(Debug, Clone, Serialize)]
pub struct Port {
    /// `mlx5_0:1`: what `UCX_NET_DEVICES` names.
    pub name: String,
    /// `ACTIVE`, `DOWN`, `INIT`, `ARMED` (the word after "4: ").
    pub state: String,
    /// `LinkUp`, `Disabled`, `Polling`...
    pub phys_state: String,
    /// `InfiniBand` or `Ethernet` (RoCE).
    pub link_layer: String,
    /// `200 Gb/sec (4X HDR)`.
    pub rate: String,
}

/// Whether every RDMA port is up.
#[derive(Debug, Clone, Serialize)]
pub struct LinkCheck {
    pub outcome: CheckOutcome,
    pub ports: Vec<Port>,
    pub finding: String,
    pub advice: Option<String>,
}

/// The word of a sysfs state file: "4: ACTIVE" → "ACTIVE".
fn word(text: Option<String>) -> String {
    let t = text.unwrap_or_default();
    let t = t.trim();
    t.split_once(':').map_or(t, |(_, w)| w.trim()).to_string()
}

pub fn link_check(root: &Path) -> LinkCheck {
    let class = "sys/class/infiniband";
    let mut ports = Vec::new();
    for dev in dir_names(&root.join(class)) {
        for n in dir_names(&root.join(format!("{class}/{dev}/ports"))) {
            let f = |file: &str| read(root, &format!("{class}/{dev}/ports/{n}/{file}"));
            ports.push(Port {
                name: format!("{dev}:{n}"),
                state: word(f("state")),
                phys_state: word(f("phys_state")),
                link_layer: f("link_layer").unwrap_or_default().trim().to_string(),
                rate: f("rate").unwrap_or_default().trim().to_string(),
            });
        }
    }
    let down: Vec<&Port> = ports.iter().filter(|p| p.state != "ACTIVE").collect();
    let (outcome, finding, advice) = if ports.is_empty() {
        (CheckOutcome::Skip, "no RDMA ports".to_string(), None)
    } else if down.is_empty() {
        let all = ports
            .iter()
            .map(|p| format!("{} ACTIVE {} {}", p.name, p.link_layer, p.rate))
            .collect::<Vec<_>>()
            .join("; ");
        (CheckOutcome::Ok, all, None)
    } else {
        let names = down
            .iter()
            .map(|p| format!("{} {} ({})", p.name, p.state, p.phys_state))
            .collect::<Vec<_>>()
            .join(", ");
        (
            CheckOutcome::Warn,
            format!("{} of {} RDMA ports not ACTIVE: {names}", down.len(), ports.len()),
            Some(
                "UCX will not use a port that is not ACTIVE: check the cable and switch port (`ibstat`, \
                 `ibv_devinfo`), the subnet manager for InfiniBand, or leave the port out of UCX_NET_DEVICES"
                    .to_string(),
            ),
        )
    };
    LinkCheck {
        outcome,
        ports,
        finding,
        advice,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn port(root: &Path, dev: &str, n: u32, state: &str, phys: &str) {
        let dir = root.join(format!("sys/class/infiniband/{dev}/ports/{n}"));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("state"), format!("{state}\n")).unwrap();
        std::fs::write(dir.join("phys_state"), format!("{phys}\n")).unwrap();
        std::fs::write(dir.join("link_layer"), "InfiniBand\n").unwrap();
        std::fs::write(dir.join("rate"), "200 Gb/sec (4X HDR)\n").unwrap();
    }

    #[test]
    fn a_port_that_is_not_active_is_named_with_the_fix() {
        let t = tempfile::tempdir().unwrap();
        port(t.path(), "mlx5_0", 1, "4: ACTIVE", "5: LinkUp");
        port(t.path(), "mlx5_1", 1, "1: DOWN", "3: Disabled");
        let c = link_check(t.path());
        assert_eq!(c.outcome, CheckOutcome::Warn);
        assert!(
            c.finding
                .contains("1 of 2 RDMA ports not ACTIVE: mlx5_1:1 DOWN (Disabled)"),
            "{}",
            c.finding
        );
        assert!(c.advice.unwrap().contains("ibstat"));
    }

    #[test]
    fn active_ports_are_listed_and_no_ports_is_a_skip() {
        let t = tempfile::tempdir().unwrap();
        assert_eq!(link_check(t.path()).outcome, CheckOutcome::Skip);
        port(t.path(), "mlx5_0", 1, "4: ACTIVE", "5: LinkUp");
        let c = link_check(t.path());
        assert_eq!(c.outcome, CheckOutcome::Ok);
        assert_eq!(c.finding, "mlx5_0:1 ACTIVE InfiniBand 200 Gb/sec (4X HDR)");
        assert_eq!(c.ports[0].state, "ACTIVE");
    }
}
