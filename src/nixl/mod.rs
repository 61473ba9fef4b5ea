//! The only room with FFI: loading the NIXL runtime, the NIXL agent and its
//! backends, CUDA through cudarc, and the memory the binary allocates.
//!
//! `unsafe` is allowed here and nowhere else in the crate (the crate root
//! denies it). It is needed for `dlopen`, for NIXL's C API where nixl-sys
//! falls short (`capi.rs`: an agent of our own that registers a group in
//! one call), for describing raw regions to
//! nixl-sys (its `MemoryRegion::as_ptr` is an `unsafe fn`), for `mmap`,
//! `getrlimit` and CUDA pointer queries, and for filling and reading the
//! buffers `check` and the canary move bytes between (`loopback.rs`). Each
//! block carries a `// Safety:` comment. The rest of the crate sees only
//! [`NixlRegistrar`], which implements the safe
//! [`crate::lifecycle::Registrar`] trait, the data-path [`Endpoint`], and
//! plain data.
#![allow(unsafe_code)]

mod capi;
mod cuda;
mod descriptor;
pub mod discover;
#[cfg(feature = "cli")]
pub mod facts;
mod loader;
mod loopback;
mod memory;
mod observed_agent;
mod observed_xfer;
mod probe;
mod registrar;
mod stderr;

pub use descriptor::Descriptor;
pub use discover::{discover, Discovery, NotFound};
#[cfg(feature = "cli")]
pub use loader::PLUGIN_DIR_ENV;
pub use loader::{load, status_in_process, status_of, LoadError, Loaded};
pub use loopback::{Endpoint, RemoteBuffer};
#[cfg(feature = "bench")]
pub use memory::Backing;
pub use observed_agent::{ObservedAgent, ObservedRegistration};
pub use observed_xfer::ObservedXfer;
pub use probe::SystemProbe;
#[cfg(any(test, feature = "bench"))]
pub use registrar::Held;
pub use registrar::NixlRegistrar;
pub use stderr::StderrTap;

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
    load(discover(lib_dir, &crate::config::ProcessEnv))
}

/// In a forked child: closes a descriptor it inherited from its parent's
/// instrumentation (the listening socket), whose owner — a runtime whose
/// threads did not survive the fork — is never dropped here. The parent's
/// socket stays open in the parent.
pub fn close_inherited(fd: std::os::fd::RawFd) {
    // Safety: `close` takes no pointers; `fd` is the descriptor the
    // parent's listener held, which nothing in this child uses (its owner
    // is leaked, never read or dropped). A failure leaves it as it was.
    let _ = unsafe { libc::close(fd) };
}

/// Ends the process now, without atexit handlers or C++ static destructors:
/// for when a drain did not finish and the lifecycle thread may still be
/// inside NIXL/UCX, whose destructors would then run under it. Rust's stdout
/// is flushed first; the kernel releases what stayed registered.
#[cfg(feature = "cli")]
pub fn exit_now(code: u8) -> ! {
    let _ = std::io::Write::flush(&mut std::io::stdout());
    let _ = std::io::Write::flush(&mut std::io::stderr());
    // Safety: `_exit` takes no pointers and never returns; skipping
    // destructors is the point (nothing of ours needs them: spans and the
    // tap were flushed by the caller).
    unsafe { libc::_exit(i32::from(code)) }
}
