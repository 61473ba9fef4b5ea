//! Records whether this machine has a CUDA driver: `cfg(nixl_agent_cuda)` gates the
//! GPU-only tests, which the test runner then reports as skipped (ignored)
//! on CPU-only machines instead of passing without running; and whether it
//! may make network namespaces (root and iproute2): `cfg(nixl_agent_netns)`
//! gates the two-node peer test and the pod test that needs a mount
//! namespace of its own the same way.

include!("build/cuda.rs");

/// Root (effective uid 0) with `ip` on the PATH: the peer test can make
/// two network namespaces and a veth pair. `NIXL_AGENT_NETNS=0|1` forces it.
fn netns() -> bool {
    match std::env::var("NIXL_AGENT_NETNS").as_deref() {
        Ok("0") => return false,
        Ok("1") => return true,
        _ => {}
    }
    let root = std::fs::read_to_string("/proc/self/status").is_ok_and(|s| {
        s.lines()
            .find_map(|l| l.strip_prefix("Uid:"))
            .and_then(|l| l.split_whitespace().nth(1))
            == Some("0")
    });
    root && std::process::Command::new("ip")
        .arg("-V")
        .output()
        .is_ok_and(|o| o.status.success())
}

fn main() {
    println!("cargo:rustc-check-cfg=cfg(nixl_agent_cuda)");
    println!("cargo:rerun-if-env-changed=NIXL_AGENT_CUDA");
    if cuda_driver() {
        println!("cargo:rustc-cfg=nixl_agent_cuda");
    }
    println!("cargo:rustc-check-cfg=cfg(nixl_agent_netns)");
    println!("cargo:rerun-if-env-changed=NIXL_AGENT_NETNS");
    if netns() {
        println!("cargo:rustc-cfg=nixl_agent_netns");
    }
}
