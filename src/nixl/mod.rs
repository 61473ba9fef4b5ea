//! The only room with FFI: loading the NIXL runtime, the NIXL agent and its
//! backends, CUDA through cudarc, and the memory the binary allocates.
//!
//! `unsafe` is allowed here and nowhere else in the crate (the crate root
//! denies it). It is needed for `dlopen`, for describing raw regions to
//! nixl-sys (its `MemoryRegion::as_ptr` is an `unsafe fn`), for `mmap`,
//! `getrlimit` and CUDA pointer queries. Each block carries a `// Safety:`
//! comment. The rest of the crate sees only [`NixlRegistrar`], which
//! implements the safe [`crate::lifecycle::Registrar`] trait, and plain data.
#![allow(unsafe_code)]

mod cuda;
pub mod discover;
pub mod facts;
mod loader;
mod memory;
mod observe;
mod probe;
mod registrar;
mod stderr;

pub use discover::{discover, Discovery, FoundBy, NotFound};
pub use loader::{load, status_of, LoadError, Loaded, PLUGIN_DIR_ENV};
pub use memory::Backing;
pub use probe::SystemProbe;
pub use registrar::NixlRegistrar;
pub use stderr::StderrTap;

/// Whether a CUDA driver library can be loaded in this process.
pub fn cuda_driver_present() -> bool {
    cuda::driver_present()
}
