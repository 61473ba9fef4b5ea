// Whether this machine has a CUDA driver, for `cfg(nixl_agent_cuda)`: the
// build scripts of the root crate and of nixl-agent-sys include this file.

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
