//! Whether this machine has a CUDA driver: `cfg(nixl_agent_cuda)` gates the
//! GPU-only test here, which the test runner then reports as skipped
//! (ignored) on CPU-only machines instead of passing without running.

include!("../../build/cuda.rs");

fn main() {
    println!("cargo:rustc-check-cfg=cfg(nixl_agent_cuda)");
    println!("cargo:rerun-if-env-changed=NIXL_AGENT_CUDA");
    if cuda_driver() {
        println!("cargo:rustc-cfg=nixl_agent_cuda");
    }
}
