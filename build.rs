//! Records the git revision for `nixl_agent_build_info{revision}`, and
//! whether this machine has a CUDA driver: `cfg(nixl_agent_cuda)` gates the
//! GPU-only tests, which the test runner then reports as skipped (ignored)
//! on CPU-only machines instead of passing without running; and whether it
//! may make network namespaces (root and iproute2): `cfg(nixl_agent_netns)`
//! gates the two-node peer test and the pod test that needs a mount
//! namespace of its own the same way.

/// Where distributions and the NVIDIA container toolkit put the driver's
/// libcuda (never the toolkit's stubs, which are no driver).
const LIBCUDA: &[&str] = &[
    "/usr/lib/x86_64-linux-gnu/libcuda.so.1",
    "/usr/lib/aarch64-linux-gnu/libcuda.so.1",
    "/usr/lib64/libcuda.so.1",
    "/usr/lib/libcuda.so.1",
    "/usr/local/nvidia/lib64/libcuda.so.1",
];

fn cuda_driver() -> bool {
    match std::env::var("NIXL_AGENT_CUDA").as_deref() {
        Ok("0") => return false,
        Ok("1") => return true,
        _ => {}
    }
    LIBCUDA.iter().any(|p| std::path::Path::new(p).exists())
        || std::process::Command::new("ldconfig")
            .arg("-p")
            .output()
            .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("libcuda.so.1 "))
}

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

/// The nixl-sys version Cargo.lock pins: the binding, reported beside the
/// NIXL runtime's own version.
fn nixl_sys_version() -> String {
    let lock = std::fs::read_to_string("Cargo.lock").unwrap_or_default();
    lock.split("[[package]]")
        .find(|p| p.contains("name = \"nixl-sys\""))
        .and_then(|p| p.lines().find_map(|l| l.strip_prefix("version = \"")))
        .map(|v| v.trim_end_matches('"').to_string())
        .unwrap_or_else(|| "unknown".to_string())
}

fn main() {
    println!("cargo:rustc-env=NIXL_AGENT_NIXL_SYS_VERSION={}", nixl_sys_version());
    println!("cargo:rerun-if-changed=Cargo.lock");
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
    let rev = std::process::Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "unknown".to_string());
    println!("cargo:rustc-env=NIXL_AGENT_REVISION={rev}");
    println!("cargo:rerun-if-changed=.git/HEAD");
    println!("cargo:rerun-if-changed=.git/refs/heads");
}
