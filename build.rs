//! Records the git revision for `nixl_agent_build_info{revision}`, and
//! whether this machine has a CUDA driver: `cfg(nixl_agent_cuda)` gates the
//! GPU-only tests, which the test runner then reports as skipped (ignored)
//! on CPU-only machines instead of passing without running.

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
