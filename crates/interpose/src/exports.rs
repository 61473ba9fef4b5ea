//! The symbols this library defines ahead of `libnixl.so`: NIXL's
//! `nixlAgent` methods, expanded from the sys crate's one table (its rows
//! spell each mangled name and signature, and the gate refuses a copy of
//! NIXL that does not define them, or one of a pair `Sym::instead` names),
//! each a call of its hook; and the interposer's own word to a front-end in
//! the same process.
//!
//! The one place outside nixl-agent-sys that holds `unsafe`: naming an
//! exported symbol is unsafe by nature (whoever resolves it calls it with
//! that method's arguments), and each body hands those arguments, unread,
//! to the sys crate's hook. Nothing else belongs here.
#![allow(unsafe_code)]

use crate::translator;
use std::ffi::c_int;

// NIXL's `nixlAgent` methods: one exported function a row of the sys
// crate's table, each handing its hook NIXL's definition applied to the
// caller's arguments (`nixl_agent_sys::interpose::methods`).
nixl_agent_sys::nixl_agent_methods!(nixl_agent_sys::export_nixl_agent_methods, crate::translator);

/// The group and kind (UTF-8, not NUL-terminated) of this thread's next
/// registration call, handed down by a front-end that knows them (the
/// Python extension: the framework's own names). 1 when taken. An empty
/// group takes back what was handed down.
#[unsafe(no_mangle)]
extern "C" fn nixl_agent_interposer_hand_down(
    group: *const u8,
    group_len: usize,
    kind: *const u8,
    kind_len: usize,
) -> c_int {
    if group.is_null() || kind.is_null() {
        return 0;
    }
    // SAFETY: the caller's two byte strings, live for the call; copied.
    let (g, k) = unsafe {
        (
            std::slice::from_raw_parts(group, group_len),
            std::slice::from_raw_parts(kind, kind_len),
        )
    };
    c_int::from(translator::hand_down(g, k))
}

/// What a front-end knows of the process, for the instrumentation the
/// next call starts: its serving frameworks (UTF-8, comma-separated) and
/// the framework's rank (negative: none). 1 when taken.
#[unsafe(no_mangle)]
extern "C" fn nixl_agent_interposer_hand_down_process(frameworks: *const u8, len: usize, rank: i64) -> c_int {
    if frameworks.is_null() {
        return 0;
    }
    // SAFETY: the caller's byte string, live for the call; copied.
    let f = unsafe { std::slice::from_raw_parts(frameworks, len) };
    c_int::from(translator::hand_down_process(f, u32::try_from(rank).ok()))
}

/// Sets whether this thread's NIXL calls pass through unrecorded (`on` not
/// 0): nixl-agent's own calls in this process, which its own recording
/// makes (an embedder's `ObservedAgent`, the lifecycle's thread). Returns
/// what it was.
#[unsafe(no_mangle)]
extern "C" fn nixl_agent_interposer_quiet(on: c_int) -> c_int {
    c_int::from(nixl_agent_sys::interpose::hooks::set_quiet(on != 0))
}

/// The interposer's word on this process, for a front-end in the same
/// process (the Python extension): 1 when it records NIXL's calls, 0 when
/// the gate refused (then `*why`, if given, is a static NUL-terminated
/// reason), deciding the gate now if no call has.
#[unsafe(no_mangle)]
extern "C" fn nixl_agent_interposer_state(why: *mut *const std::ffi::c_char) -> c_int {
    let (active, reason) = translator::state();
    if !why.is_null() {
        // SAFETY: the caller's out-pointer, checked non-null.
        unsafe { *why = reason.map_or(std::ptr::null(), |r| r.as_ptr()) };
    }
    c_int::from(active)
}
