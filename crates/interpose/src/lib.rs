//! `libnixl_agent_interpose.so`: preloaded into any process (`nixl-agent
//! instrument -- CMD`, or `LD_PRELOAD`), it defines NIXL's exported
//! `nixlAgent` methods ahead of `libnixl.so`, so that every caller — NIXL's
//! Python bindings, `libnixl_capi.so` under nixl-sys, a C++ program — calls
//! through it. Each call goes to NIXL's own definition unchanged and is
//! recorded on the process's one recording path (the same observer,
//! endpoints and pod publishing an instrumented Python process has).
//!
//! - `exports` the exported symbols: the table of NIXL's methods of
//!   `nixl_agent_sys::interpose` expanded, a function a row into its hook
//!   (where reading NIXL's objects, finding its definitions and the version
//!   and layout gate live), and what a front-end in the process calls,
//! - `translator` what a call means for the recording: NIXL's pointers and
//!   lists translated into the observer's words (the hooks' `CallSink`),
//! - `naming` the group of a registration nobody named.

mod exports;
mod naming;
mod translator;

/// The process's one translator of hooked calls.
fn translator() -> &'static translator::Translator {
    static TRANSLATOR: std::sync::OnceLock<translator::Translator> = std::sync::OnceLock::new();
    TRANSLATOR.get_or_init(translator::Translator::default)
}
