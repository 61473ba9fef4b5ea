//! Facts about the loaded runtime for `nixl-agent check`: the UCX version,
//! whether UCX's CUDA modules load, CUDA devices, and RLIMIT_MEMLOCK.

use super::cuda;
use std::ffi::{CStr, CString};
use std::path::{Path, PathBuf};

/// What UCX looks like inside this process (after a UCX backend was created).
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct UcxFacts {
    /// `ucp_get_version_string()` of the loaded libucp.
    pub version: Option<String>,
    /// Where UCX's transport modules are (the `ucx` folder beside libucs).
    pub module_dir: Option<String>,
    /// UCX's CUDA modules: path and whether they load (`Err` holds dlerror,
    /// e.g. a missing libcuda.so.1 or libcudart.so.12).
    pub cuda_modules: Vec<(String, Result<(), String>)>,
}

use super::loader::loaded;

/// Inspects the UCX that NIXL's UCX plugin loaded.
pub fn ucx() -> UcxFacts {
    let mut facts = UcxFacts::default();
    if let Some(ucp) = loaded("libucp").first() {
        facts.version = ucp_version(ucp);
    }
    if let Some(ucs) = loaded("libucs").first() {
        let dir = ucs.parent().unwrap_or(Path::new("/")).join("ucx");
        if dir.is_dir() {
            let mut mods: Vec<PathBuf> = std::fs::read_dir(&dir)
                .map(|rd| rd.filter_map(|e| e.ok().map(|e| e.path())).collect())
                .unwrap_or_default();
            mods.retain(|p| {
                let n = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
                n.contains("_cuda") && n.contains(".so") && !n.contains("perftest")
            });
            mods.sort();
            facts.cuda_modules = mods.iter().map(|m| (m.display().to_string(), try_load(m))).collect();
            facts.module_dir = Some(dir.display().to_string());
        }
    }
    facts
}

fn dlerror_string() -> String {
    // Safety: dlerror returns NULL or a NUL-terminated string owned by libc,
    // valid until the next dl* call on this thread; copied at once.
    let e = unsafe { libc::dlerror() };
    if e.is_null() {
        "unknown dlopen error".into()
    } else {
        // Safety: non-null, NUL-terminated (see above).
        unsafe { CStr::from_ptr(e) }.to_string_lossy().into_owned()
    }
}

fn try_load(path: &Path) -> Result<(), String> {
    let c = CString::new(path.display().to_string()).map_err(|_| "path contains NUL".to_string())?;
    // Safety: valid C string; the module is loaded lazily and locally, as UCX
    // itself would load it; the handle is kept (UCX may use the module).
    let h = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_LAZY | libc::RTLD_LOCAL) };
    if h.is_null() {
        Err(dlerror_string())
    } else {
        Ok(())
    }
}

fn ucp_version(lib: &Path) -> Option<String> {
    let c = CString::new(lib.display().to_string()).ok()?;
    // Safety: RTLD_NOLOAD only returns a handle to an already loaded object.
    let h = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_NOLOAD) };
    if h.is_null() {
        return None;
    }
    let sym = CString::new("ucp_get_version_string").ok()?;
    // Safety: `h` is a live handle; dlsym returns NULL when absent.
    let f = unsafe { libc::dlsym(h, sym.as_ptr()) };
    if f.is_null() {
        return None;
    }
    // Safety: ucp_get_version_string has the C signature
    // `const char *ucp_get_version_string(void)` and returns a static string.
    let s = unsafe {
        let f: extern "C" fn() -> *const libc::c_char = std::mem::transmute(f);
        let p = f();
        if p.is_null() {
            return None;
        }
        CStr::from_ptr(p).to_string_lossy().into_owned()
    };
    Some(s)
}

/// One CUDA device.
#[derive(Debug, Clone, serde::Serialize)]
pub struct CudaDevice {
    pub ordinal: u32,
    pub name: String,
    pub memory_bytes: u64,
    pub compute_capability: String,
    /// Whether the device exports memory as DMA-BUF (RDMA of GPU memory
    /// without nvidia_peermem).
    pub dmabuf: Option<bool>,
}

/// CUDA devices, or why there are none.
pub fn cuda_devices() -> Result<Vec<CudaDevice>, String> {
    if !cuda::driver_present() {
        return Err("no CUDA driver (libcuda.so.1) could be loaded".into());
    }
    let n = cudarc::driver::CudaContext::device_count().map_err(|e| format!("cuDeviceGetCount: {e}"))?;
    (0..n.max(0) as usize)
        .map(|i| {
            let ctx = cuda::context(i as u32).map_err(|(_, e)| e)?;
            let (major, minor) = ctx.compute_capability().map_err(|e| format!("device {i}: {e}"))?;
            Ok(CudaDevice {
                ordinal: i as u32,
                name: ctx.name().map_err(|e| format!("device {i}: {e}"))?,
                memory_bytes: ctx.total_mem().map_err(|e| format!("device {i}: {e}"))? as u64,
                compute_capability: format!("{major}.{minor}"),
                dmabuf: ctx
                    .attribute(cudarc::driver::sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED)
                    .ok()
                    .map(|v| v != 0),
            })
        })
        .collect()
}

/// Soft and hard RLIMIT_MEMLOCK (`None` = unlimited).
pub fn memlock_limits() -> (Option<u64>, Option<u64>) {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // Safety: getrlimit writes into the live `lim` struct only.
    if unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut lim) } != 0 {
        return (None, None);
    }
    let f = |v: libc::rlim_t| (v != libc::RLIM_INFINITY).then_some(v);
    (f(lim.rlim_cur), f(lim.rlim_max))
}
