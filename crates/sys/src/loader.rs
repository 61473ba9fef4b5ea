//! Loading libnixl_capi.so by full path before any nixl-sys call.
//!
//! nixl-sys (feature `stub-api`) resolves every NIXL function through a
//! one-shot `dlopen("libnixl_capi.so")` and aborts the process when that
//! fails. Loading the library here first, by the path discovery found, makes
//! that dlopen find the already-loaded object by its soname; and checking
//! `nixl_sys::is_stub()` only after it means a missing library is a reason
//! (`nixl_unavailable`), never an abort.

use super::discover::{Discovery, FoundBy, NotFound, CAPI_LIB};
use std::ffi::{CStr, CString};
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

/// NIXL's plugin directory variable.
pub const PLUGIN_DIR_ENV: &str = "NIXL_PLUGIN_DIR";

/// A loaded NIXL runtime.
#[derive(Debug, Clone)]
pub struct Loaded {
    pub discovery: Discovery,
    /// The `plugins` folder beside the library, when there is one.
    pub plugin_dir: Option<PathBuf>,
    /// The CUDA runtime preloaded for UCX's CUDA transports, if any.
    pub cudart: Option<PathBuf>,
}

/// The CUDA runtime that the wheel's UCX CUDA modules (libucm_cuda) need.
pub const CUDART_LIB: &str = "libcudart.so.12";

/// Why the runtime could not be loaded, with every place that was tried
/// and what the operator does about it.
#[derive(Debug, Clone)]
pub struct LoadError {
    pub message: String,
    pub searched: Vec<String>,
    /// The fix, in words: which variable or flag names the library's folder,
    /// and where the NIXL wheel puts it.
    pub fix: String,
}

/// What to do when `libnixl_capi.so` was not found: `configured` when a
/// directory was given (`--nixl-lib-dir`, `NIXL_LIB_DIR`, `nixl_lib_dir`)
/// and did not hold it.
pub fn not_found_fix(configured: bool) -> String {
    let wheel = "the nixl-cu12 wheel (pip install nixl-cu12) puts it in \
                 <venv>/lib/python3.X/site-packages/.nixl_cu12.mesonpy.libs";
    if configured {
        format!(
            "point NIXL_LIB_DIR (or --nixl-lib-dir, or nixl_lib_dir in the config) at the folder that holds \
             {CAPI_LIB}; {wheel}"
        )
    } else {
        format!(
            "set NIXL_LIB_DIR (or --nixl-lib-dir) to the folder that holds {CAPI_LIB}, or activate the \
             virtualenv that has NIXL installed (VIRTUAL_ENV); {wheel}"
        )
    }
}

/// What to do when the library was found but does not load.
fn load_fix(library: &std::path::Path) -> String {
    format!(
        "{} is not a usable NIXL runtime: reinstall the NIXL wheel (pip install --force-reinstall nixl-cu12) or \
         point NIXL_LIB_DIR (or --nixl-lib-dir) at another one",
        library.display()
    )
}

/// Loads the library found by discovery, or falls back to the dynamic
/// loader's search path when discovery found nothing and no directory was
/// configured. Safe to call more than once: dlopen reference-counts.
pub fn load(found: Result<Discovery, NotFound>) -> Result<Loaded, LoadError> {
    let discovery = match found {
        Ok(d) => d,
        Err(nf) if nf.configured => {
            return Err(LoadError {
                message: format!("{} not found in the configured NIXL library directory", CAPI_LIB),
                searched: nf.searched,
                fix: not_found_fix(true),
            })
        }
        Err(mut nf) => {
            nf.searched.push(format!("{CAPI_LIB} (dynamic loader search path)"));
            match dlopen(CAPI_LIB) {
                Ok(()) => Discovery {
                    library: PathBuf::from(CAPI_LIB),
                    found_by: FoundBy::Loader,
                    version: None,
                },
                Err(e) => {
                    return Err(LoadError {
                        message: format!("{CAPI_LIB} not found (last dlopen error: {e})"),
                        searched: nf.searched,
                        fix: not_found_fix(false),
                    })
                }
            }
        }
    };
    if discovery.found_by != FoundBy::Loader {
        dlopen(&discovery.library.display().to_string()).map_err(|e| LoadError {
            message: format!("cannot load {}: {e}", discovery.library.display()),
            searched: vec![discovery.library.display().to_string()],
            fix: load_fix(&discovery.library),
        })?;
    }
    // The stub's own dlopen now resolves to the object loaded above.
    if nixl_sys::is_stub() {
        return Err(LoadError {
            message: format!(
                "{} was loaded but nixl-sys still sees no NIXL runtime",
                discovery.library.display()
            ),
            searched: vec![discovery.library.display().to_string()],
            fix: load_fix(&discovery.library),
        });
    }
    let plugin_dir = discovery.lib_dir().map(|d| d.join("plugins")).filter(|p| p.is_dir());
    let cudart = preload_cudart(discovery.lib_dir());
    Ok(Loaded {
        discovery,
        plugin_dir,
        cudart,
    })
}

/// UCX's CUDA modules need libcudart.so.12, which a Python serving process
/// has loaded through torch but a standalone agent has not: without it UCX
/// sees VRAM as host memory ("VRAM memory is detected as host by UCX").
/// On a machine with a CUDA driver, load it first from beside the wheel
/// (`site-packages/nvidia/cuda_runtime/lib`), the CUDA toolkit, or the loader
/// path. Best effort: absent, VRAM registration reports the UCX error.
fn preload_cudart(lib_dir: Option<&std::path::Path>) -> Option<PathBuf> {
    if !super::cuda::driver_present() {
        return None;
    }
    let mut candidates: Vec<PathBuf> = Vec::new();
    if let Some(site) = lib_dir.and_then(|d| d.parent()) {
        candidates.push(site.join("nvidia/cuda_runtime/lib").join(CUDART_LIB));
    }
    for var in ["CUDA_HOME", "CUDA_PATH"] {
        if let Some(root) = std::env::var_os(var) {
            candidates.push(PathBuf::from(root).join("lib64").join(CUDART_LIB));
        }
    }
    candidates.push(PathBuf::from("/usr/local/cuda/lib64").join(CUDART_LIB));
    for c in candidates.into_iter().filter(|c| c.is_file()) {
        if dlopen(&c.display().to_string()).is_ok() {
            return Some(c);
        }
    }
    dlopen(CUDART_LIB).ok().map(|()| PathBuf::from(CUDART_LIB))
}

fn dlopen(path: &str) -> Result<(), String> {
    let c = CString::new(std::ffi::OsStr::new(path).as_bytes()).map_err(|_| "path contains NUL".to_string())?;
    // Safety: `c` is a valid NUL-terminated string that outlives the call.
    // The handle is deliberately never closed: NIXL stays loaded for the
    // life of the process, as nixl-sys expects.
    let handle = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_GLOBAL) };
    if handle.is_null() {
        // Safety: dlerror returns NULL or a NUL-terminated string owned by
        // libc, valid until the next dl* call on this thread; copied at once.
        let err = unsafe { libc::dlerror() };
        let msg = if err.is_null() {
            "unknown dlopen error".to_string()
        } else {
            // Safety: non-null, NUL-terminated (see above).
            unsafe { CStr::from_ptr(err) }.to_string_lossy().into_owned()
        };
        return Err(msg);
    }
    Ok(())
}

/// What loading told, for /v1/status: the library and which step found it,
/// or the error and every place searched (`searched` when loading had none).
pub fn status_of(loaded: &Result<Loaded, LoadError>, searched: Vec<String>) -> crate::model::NixlStatus {
    use crate::model::NixlStatus;
    let path = |p: &std::path::Path| p.display().to_string();
    match loaded {
        Ok(l) => NixlStatus {
            library: Some(path(&l.discovery.library)),
            found_by: Some(l.discovery.found_by.as_str().to_string()),
            version: l.discovery.version.clone(),
            plugin_dir: l.plugin_dir.as_deref().map(path),
            cudart: l.cudart.as_deref().map(path),
            binding_version: crate::model::NIXL_SYS_VERSION,
            ..NixlStatus::default()
        },
        Err(e) => NixlStatus {
            searched: if e.searched.is_empty() {
                searched
            } else {
                e.searched.clone()
            },
            error: Some(e.message.clone()),
            fix: Some(e.fix.clone()),
            binding_version: crate::model::NIXL_SYS_VERSION,
            ..NixlStatus::default()
        },
    }
}

/// The NIXL runtime the program itself loaded (observe mode: NIXL's Python
/// API loads `libnixl.so` from its wheel, an embedder `libnixl_capi.so`),
/// found among the objects mapped in this process: its path, its version
/// from the wheel's dist-info, and the plugin folder (`NIXL_PLUGIN_DIR`, else
/// `plugins` beside the library). Nothing when no NIXL library is mapped.
pub fn status_in_process() -> crate::model::NixlStatus {
    use crate::model::NixlStatus;
    let mapped = [CAPI_LIB, "libnixl.so"].iter().find_map(|name| {
        loaded(name)
            .into_iter()
            .find(|p| p.file_name().is_some_and(|n| n == std::ffi::OsStr::new(name)))
    });
    let Some(library) = mapped else {
        return NixlStatus::default();
    };
    let dir = library.parent().map(std::path::Path::to_path_buf).unwrap_or_default();
    let plugin_dir = std::env::var_os(PLUGIN_DIR_ENV)
        .map(PathBuf::from)
        .or_else(|| Some(dir.join("plugins")).filter(|p| p.is_dir()));
    NixlStatus {
        library: Some(library.display().to_string()),
        found_by: Some(FoundBy::Process.as_str().to_string()),
        version: super::discover::wheel_version(&dir),
        plugin_dir: plugin_dir.map(|p| p.display().to_string()),
        binding_version: crate::model::NIXL_SYS_VERSION,
        ..NixlStatus::default()
    }
}

/// A shared object the dynamic loader has mapped into this process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Object {
    /// Its path as the loader knows it (empty for the main program).
    pub path: PathBuf,
    /// Its load base (`dlpi_addr`; `dladdr`'s `dli_fbase` names the same
    /// object by its first mapping).
    pub base: usize,
}

/// Every object the loader has mapped, in its own order (the main program,
/// then preloads and dependencies, then what `dlopen` added), read from its
/// list (`dl_iterate_phdr`): a path holding a space or a renamed library
/// reads as well as any other, and nothing is parsed from text.
pub fn objects() -> Vec<Object> {
    unsafe extern "C" fn each(
        info: *mut libc::dl_phdr_info,
        _size: libc::size_t,
        out: *mut libc::c_void,
    ) -> libc::c_int {
        // Safety: the loader hands a valid entry, and `out` is the vector
        // passed below, for the duration of the walk.
        let (info, out) = unsafe { (&*info, &mut *(out as *mut Vec<Object>)) };
        let path = if info.dlpi_name.is_null() {
            PathBuf::new()
        } else {
            // Safety: the loader's NUL-terminated name of the object.
            let name = unsafe { CStr::from_ptr(info.dlpi_name) };
            PathBuf::from(std::ffi::OsStr::from_bytes(name.to_bytes()))
        };
        // The first program header that loads sets the object's lowest
        // address; `dli_fbase` is that address.
        let mut base = info.dlpi_addr as usize;
        if !info.dlpi_phdr.is_null() {
            // Safety: `dlpi_phnum` headers at `dlpi_phdr`, the loader's.
            let headers = unsafe { std::slice::from_raw_parts(info.dlpi_phdr, usize::from(info.dlpi_phnum)) };
            if let Some(first) = headers
                .iter()
                .filter(|h| h.p_type == libc::PT_LOAD)
                .map(|h| h.p_vaddr)
                .min()
            {
                base = (info.dlpi_addr as usize).wrapping_add(first as usize & !0xfff);
            }
        }
        out.push(Object { path, base });
        0
    }
    let mut out: Vec<Object> = Vec::new();
    // Safety: `each` only reads the entries and pushes to `out`, which
    // outlives the walk; it never unwinds (no panicking call in it).
    unsafe { libc::dl_iterate_phdr(Some(each), &mut out as *mut Vec<Object> as *mut libc::c_void) };
    out
}

/// Paths of loaded shared objects whose file name starts with `prefix`,
/// in the loader's order.
pub(super) fn loaded(prefix: &str) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = objects()
        .into_iter()
        .map(|o| o.path)
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(prefix))
        })
        .collect();
    out.dedup();
    out
}
