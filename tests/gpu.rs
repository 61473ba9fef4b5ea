//! VRAM registration on a machine with a CUDA GPU. Gated on a CUDA driver
//! detected at build time (`cfg(nixl_agent_cuda)`, build.rs): on CPU-only
//! machines (CI) the runner reports each test as skipped. Run on a GPU host
//! with `scripts/gpu-check.sh`.

use crate::support::{self, AgentProcess, Spawn};
use nixl_agent::config::Config;
use nixl_agent::{GroupSpec, Kind, Lifecycle, MemType, Plan, Region};
use std::time::Duration;

/// Built for a GPU host but running without a driver is a broken setup,
/// not a pass.
fn gpu() {
    assert!(
        nixl_agent::cuda_driver_present(),
        "built with a CUDA driver present, but none loads now"
    );
}

#[cfg_attr(
    not(nixl_agent_cuda),
    ignore = "GPU-only: no CUDA driver on this machine (run scripts/gpu-check.sh on a GPU host)"
)]
#[test]
fn vram_group_registers_and_drains_on_a_gpu() {
    gpu();
    let cfg = "[[group]]\nname='kv'\nkind='kv'\nmem_type='VRAM'\ndevice=0\ncount=4\nsize='2MiB'\n\
               [[group]]\nname='aux'\nkind='aux'\nmem_type='DRAM'\ncount=2\nsize='64KiB'\n";
    let mut agent = AgentProcess::spawn(Spawn {
        config: Some(cfg),
        ..Default::default()
    });
    let s = agent.wait_metrics("kv registered or failed", Duration::from_secs(60), |s| {
        s.metric("nixl_agent_registration_attempts_total")
            .label("group", "kv")
            .value()
            >= 1.0
    });
    let st = agent.status();
    assert_eq!(
        s.metric("nixl_agent_registered_descriptors")
            .label("group", "kv")
            .label("mem_type", "VRAM")
            .value(),
        4.0,
        "status: {st:#}\nlog:\n{}",
        agent.log().join("\n")
    );
    assert_eq!(
        s.metric("nixl_agent_registered_bytes").label("group", "kv").value(),
        (8 << 20) as f64
    );
    agent.wait_ready(Duration::from_secs(30));
    agent.signal("TERM");
    assert_eq!(agent.wait_exit(Duration::from_secs(30)).code(), Some(0));
    let total: u64 = agent
        .events("group deregistered")
        .iter()
        .map(|e| e["descriptors"].as_u64().unwrap())
        .sum();
    assert_eq!(total, 6);
}

#[cfg_attr(
    not(nixl_agent_cuda),
    ignore = "GPU-only: no CUDA driver on this machine (run scripts/gpu-check.sh on a GPU host)"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn host_pointer_in_a_vram_group_is_mem_type_mismatch() {
    gpu();
    let host = vec![0u8; 1 << 16];
    let plan = Plan {
        groups: vec![GroupSpec::provided(
            "state",
            Kind::State,
            MemType::Vram,
            vec![Region::new(host.as_ptr() as usize, host.len(), 0)],
        )],
    };
    let config = Config {
        listen: "127.0.0.1:0".parse().unwrap(),
        nixl_lib_dir: Some(support::nixl_lib_dir()),
        groups: vec![],
        ..Config::default()
    };
    let agent = Lifecycle::start(config, plan).await.unwrap();
    let mut reason = None;
    for _ in 0..500 {
        reason = agent.status().groups[0].last_reason;
        if reason.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        reason.map(|r| r.as_str()),
        Some("mem_type_mismatch"),
        "{:#?}",
        agent.status().groups[0]
    );
    agent.shutdown().await.unwrap();
    drop(host);
}

/// `check`'s loopback on a GPU: VRAM → VRAM on device 0 (and across
/// devices when there are several) moves verified bytes, and UCX says which
/// transport it picked (cuda_ipc within a node, unless it fell back — then
/// the finding says so and the outcome is a warning).
#[cfg_attr(
    not(nixl_agent_cuda),
    ignore = "GPU-only: no CUDA driver on this machine (run scripts/gpu-check.sh on a GPU host)"
)]
#[test]
fn check_moves_verified_vram_bytes_and_names_the_transport() {
    gpu();
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("vram.toml");
    std::fs::write(
        &cfg,
        "[[group]]\nname='kv'\nkind='kv'\nmem_type='VRAM'\ndevice=0\ncount=2\nsize='2MiB'\n\
         [[group]]\nname='aux'\nkind='aux'\nmem_type='DRAM'\ncount=2\nsize='64KiB'\n",
    )
    .unwrap();
    let out = support::binary()
        .env("NIXL_LIB_DIR", support::nixl_lib_dir())
        .args(["check", "--json", "--config"])
        .arg(&cfg)
        .output()
        .unwrap();
    let r: serde_json::Value =
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stdout)));
    let transfers = r["transfers"].as_array().unwrap();
    eprintln!("{}", serde_json::to_string_pretty(transfers).unwrap());
    let vram = transfers
        .iter()
        .find(|t| t["name"] == "VRAM#0 → VRAM#0")
        .expect("a VRAM pairing");
    assert_ne!(vram["outcome"], "fail", "{vram}");
    for m in vram["measured"].as_array().unwrap() {
        assert_eq!(m["verified"], true, "{m}");
    }
    assert!(!vram["transports"].as_array().unwrap().is_empty(), "{vram}");
    if r["cuda"]["devices"].as_array().unwrap().len() > 1 {
        assert!(
            transfers.iter().any(|t| t["name"] == "VRAM#0 → VRAM#1"),
            "{transfers:?}"
        );
    }
}
