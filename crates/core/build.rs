//! The build's identity for `nixl_agent_build_info` and `/v1/status`: the
//! nixl-sys version the workspace's Cargo.lock pins, and the git revision.

use std::path::Path;

fn main() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let lock = std::fs::read_to_string(root.join("Cargo.lock")).unwrap_or_default();
    let nixl_sys = lock
        .split("[[package]]")
        .find(|p| p.contains("name = \"nixl-sys\""))
        .and_then(|p| p.lines().find_map(|l| l.strip_prefix("version = \"")))
        .map(|v| v.trim_end_matches('"').to_string())
        .unwrap_or_else(|| "unknown".to_string());
    println!("cargo:rustc-env=NIXL_AGENT_NIXL_SYS_VERSION={nixl_sys}");
    println!("cargo:rerun-if-changed={}", root.join("Cargo.lock").display());
    let rev = std::process::Command::new("git")
        .current_dir(&root)
        .args(["rev-parse", "--short=12", "HEAD"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "unknown".to_string());
    println!("cargo:rustc-env=NIXL_AGENT_REVISION={rev}");
    println!("cargo:rerun-if-changed={}", root.join(".git/HEAD").display());
    println!("cargo:rerun-if-changed={}", root.join(".git/refs/heads").display());
}
