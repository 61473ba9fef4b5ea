//! Every `unsafe` of nixl-agent but the interposer's exported symbols, and
//! nothing that needs none: loading the
//! NIXL runtime (`loader`, `discover`), NIXL's C API where nixl-sys falls
//! short (`capi`: an agent of our own that registers a group in one call),
//! describing raw regions to nixl-sys (`Descriptor`, [`addr_of`]), CUDA
//! through cudarc (`cuda`), `mmap`'d memory and its bytes (`memory`),
//! `getrlimit`/`msync` probes (`probe`), the host facts `check` reads with
//! `dlopen` (`facts`), the stdout/stderr tap's fd core (`stderr`), and the
//! interposer's hooks under `libnixl.so`'s `nixlAgent` methods (`interpose`).
//!
//! Every other crate of the workspace denies `unsafe_code` (ARCHITECTURE.md
//! names the exceptions); here each block
//! carries a `// Safety:` comment, which clippy's
//! `undocumented_unsafe_blocks` holds (workspace lints). The crates above
//! see plain data and safe functions.
#![allow(unsafe_code)]

pub mod capi;
pub mod clock;
pub mod cuda;
mod descriptor;
pub mod discover;
pub mod facts;
pub mod interpose;
pub mod loader;
pub mod memory;
pub mod probe;
pub mod stderr;

pub use descriptor::{addr_of, Descriptor};
pub use discover::{discover, Discovery, NotFound};
pub use loader::{load, status_in_process, status_of, LoadError, Loaded, PLUGIN_DIR_ENV};
pub use memory::Backing;
pub use probe::SystemProbe;
pub use stderr::StderrTap;

/// The closed reason a NIXL error stands for.
pub fn reason_of(e: &nixl_sys::NixlError) -> Reason {
    use nixl_sys::NixlError;
    match e {
        NixlError::InvalidParam | NixlError::StringConversionError(_) => Reason::NixlInvalidParam,
        NixlError::BackendError => Reason::NixlBackendError,
        NixlError::NotFound => Reason::NixlNotFound,
        NixlError::InvalidDataPointer => Reason::InvalidAddress,
        NixlError::FailedToCreateBackend => Reason::BackendInitFailed,
        NixlError::RegDescListCreationFailed | NixlError::RegDescAddFailed | NixlError::IndexOutOfBounds => {
            Reason::NixlInvalidParam
        }
        // NIXL refused a transfer request; nixl-sys keeps no cause.
        NixlError::FailedToCreateXferRequest | NixlError::FailedToCreateXferDlistHandle => Reason::NixlError,
        NixlError::NoTelemetry => Reason::Unknown,
    }
}

// The layers below, under the names this crate's modules use.
use model::Reason;
pub(crate) use nixl_agent_core::{config, diagnose, model, validate};

/// Whether a CUDA driver library can be loaded in this process.
pub fn cuda_driver_present() -> bool {
    cuda::driver_present()
}

/// Loads the NIXL runtime for an embedding process, before it creates its
/// own `nixl_sys::Agent`: finds `libnixl_capi.so` (in `lib_dir`, else
/// `NIXL_LIB_DIR`, the NIXL wheel, /opt/nvidia/nvda_nixl, the loader path)
/// and loads it by full path, so that nixl-sys never aborts on a missing
/// library. `Loaded::plugin_dir` is what `NIXL_PLUGIN_DIR` should say.
pub fn load_nixl(lib_dir: Option<&std::path::Path>) -> Result<Loaded, LoadError> {
    load(discover(lib_dir, &config::ProcessEnv))
}

/// Ends the process now, without atexit handlers or C++ static destructors:
/// for when a drain did not finish and the lifecycle thread may still be
/// inside NIXL/UCX, whose destructors would then run under it. Rust's stdout
/// is flushed first; the kernel releases what stayed registered.
pub fn exit_now(code: u8) -> ! {
    let _ = std::io::Write::flush(&mut std::io::stdout());
    let _ = std::io::Write::flush(&mut std::io::stderr());
    // Safety: `_exit` takes no pointers and never returns; skipping
    // destructors is the point (nothing of ours needs them: spans and the
    // tap were flushed by the caller).
    unsafe { libc::_exit(i32::from(code)) }
}
