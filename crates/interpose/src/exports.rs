//! The symbols this library defines ahead of `libnixl.so`: NIXL's mangled
//! names (`Sym::mangled` spells each, and the gate refuses a copy of NIXL
//! that does not define them, or one of a pair `Sym::instead` names), each
//! a call of its hook.
//!
//! The one place outside nixl-agent-sys that holds `unsafe`: naming an
//! exported symbol is unsafe by nature (whoever resolves it calls it with
//! that method's arguments), and each body hands those arguments, unread,
//! to the sys crate's hook. Nothing else belongs here.
#![allow(unsafe_code)]

use crate::translator;
use nixl_agent_sys::interpose::hooks::{self, Span};
use nixl_agent_sys::interpose::Sym;
use std::ffi::{c_int, c_void};

type Ptr = *mut c_void;
type CPtr = *const c_void;

// Safety (every function below): the symbol is NIXL's method of that
// name, so its callers pass that method's arguments, which is what each
// hook requires.

#[unsafe(export_name = "_ZN9nixlAgentC1ERKNSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEERK15nixlAgentConfig")]
extern "C-unwind" fn agent_new(this: Ptr, name: CPtr, cfg: CPtr) {
    // SAFETY: see above.
    unsafe { hooks::agent_new(crate::translator(), this, name, cfg) }
}

#[unsafe(export_name = "_ZN9nixlAgentD1Ev")]
extern "C-unwind" fn agent_drop(this: Ptr) {
    // SAFETY: see above.
    unsafe { hooks::agent_drop(crate::translator(), this) }
}

#[unsafe(export_name = "_ZN9nixlAgent13createBackendERKNSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEERKSt13unordered_mapIS5_S5_St4hashIS5_ESt8equal_toIS5_ESaISt4pairIS6_S5_EEERP12nixlBackendH")]
extern "C-unwind" fn create_backend(this: Ptr, plugin: CPtr, params: CPtr, out: *mut Ptr) -> c_int {
    // SAFETY: see above.
    unsafe { hooks::create_backend(crate::translator(), this, plugin, params, out) }
}

#[unsafe(export_name = "_ZN9nixlAgent11registerMemERK12nixlDescListI12nixlBlobDescEPK21nixlAgentOptionalArgs")]
extern "C-unwind" fn register_mem(this: Ptr, descs: CPtr, opt: CPtr) -> c_int {
    // SAFETY: see above.
    unsafe { hooks::registration(crate::translator(), Sym::RegisterMem, this, descs, opt) }
}

#[unsafe(export_name = "_ZN9nixlAgent13deregisterMemERK12nixlDescListI12nixlBlobDescEPK21nixlAgentOptionalArgs")]
extern "C-unwind" fn deregister_mem(this: Ptr, descs: CPtr, opt: CPtr) -> c_int {
    // SAFETY: see above.
    unsafe { hooks::registration(crate::translator(), Sym::DeregisterMem, this, descs, opt) }
}

#[unsafe(export_name = "_ZNK9nixlAgent13createXferReqERK14nixl_xfer_op_tRK12nixlDescListI13nixlBasicDescES7_RKNSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEERP12nixlXferReqHPK21nixlAgentOptionalArgs")]
extern "C-unwind" fn create_xfer(
    this: Ptr,
    op: *const c_int,
    local: CPtr,
    remote: CPtr,
    peer: CPtr,
    req: *mut Ptr,
    opt: CPtr,
) -> c_int {
    // SAFETY: see above.
    unsafe { hooks::create_xfer(crate::translator(), this, op, local, remote, peer, req, opt) }
}

#[unsafe(export_name = "_ZNK9nixlAgent13prepXferDlistERKNSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEERK12nixlDescListI13nixlBasicDescERP10nixlDlistHPK21nixlAgentOptionalArgs")]
extern "C-unwind" fn prep_dlist(this: Ptr, peer: CPtr, descs: CPtr, out: *mut Ptr, opt: CPtr) -> c_int {
    // SAFETY: see above.
    unsafe { hooks::prep_dlist(crate::translator(), this, peer, descs, out, opt) }
}

#[unsafe(export_name = "_ZNK9nixlAgent13prepXferDlistERKNSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEERK12nixlDescListI14nixlStrideDescERP10nixlDlistHPK21nixlAgentOptionalArgs")]
extern "C-unwind" fn prep_dlist_strided(this: Ptr, peer: CPtr, descs: CPtr, out: *mut Ptr, opt: CPtr) -> c_int {
    // SAFETY: see above.
    unsafe { hooks::prep_dlist_strided(crate::translator(), this, peer, descs, out, opt) }
}

#[unsafe(export_name = "_ZNK9nixlAgent14releasedDlistHEP10nixlDlistH")]
extern "C-unwind" fn released_dlist(this: Ptr, dlist: Ptr) -> c_int {
    // SAFETY: see above.
    unsafe { hooks::on_handle(crate::translator(), Sym::ReleasedDlistH, this, dlist) }
}

#[unsafe(export_name = "_ZNK9nixlAgent11makeXferReqE14nixl_xfer_op_tRK10nixlDlistHSt4spanIKiLm18446744073709551615EES3_S6_RP12nixlXferReqHPK21nixlAgentOptionalArgs")]
#[allow(clippy::too_many_arguments)]
extern "C-unwind" fn make_xfer(
    this: Ptr,
    op: c_int,
    local: CPtr,
    local_idx: Span,
    remote: CPtr,
    remote_idx: Span,
    req: *mut Ptr,
    opt: CPtr,
) -> c_int {
    // SAFETY: see above.
    unsafe {
        hooks::make_xfer(
            crate::translator(),
            this,
            op,
            local,
            local_idx,
            remote,
            remote_idx,
            req,
            opt,
        )
    }
}

#[unsafe(export_name = "_ZNK9nixlAgent11makeXferReqERK14nixl_xfer_op_tPK10nixlDlistHRKSt6vectorIiSaIiEES5_SA_RP12nixlXferReqHPK21nixlAgentOptionalArgs")]
#[allow(clippy::too_many_arguments)]
extern "C-unwind" fn make_xfer_vec(
    this: Ptr,
    op: *const c_int,
    local: CPtr,
    local_idx: CPtr,
    remote: CPtr,
    remote_idx: CPtr,
    req: *mut Ptr,
    opt: CPtr,
) -> c_int {
    // SAFETY: see above.
    unsafe {
        hooks::make_xfer_vec(
            crate::translator(),
            this,
            op,
            local,
            local_idx,
            remote,
            remote_idx,
            req,
            opt,
        )
    }
}

#[unsafe(export_name = "_ZNK9nixlAgent11postXferReqEP12nixlXferReqHPK21nixlAgentOptionalArgs")]
extern "C-unwind" fn post_xfer(this: Ptr, req: Ptr, opt: CPtr) -> c_int {
    // SAFETY: see above.
    unsafe { hooks::post(crate::translator(), this, req, opt) }
}

#[unsafe(export_name = "_ZNK9nixlAgent13getXferStatusEP12nixlXferReqH")]
extern "C-unwind" fn xfer_status(this: Ptr, req: Ptr) -> c_int {
    // SAFETY: see above.
    unsafe { hooks::on_handle(crate::translator(), Sym::GetXferStatus, this, req) }
}

#[unsafe(export_name = "_ZNK9nixlAgent14releaseXferReqEP12nixlXferReqH")]
extern "C-unwind" fn release_xfer(this: Ptr, req: Ptr) -> c_int {
    // SAFETY: see above.
    unsafe { hooks::on_handle(crate::translator(), Sym::ReleaseXferReq, this, req) }
}

#[unsafe(export_name = "_ZN9nixlAgent12loadRemoteMDERKNSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEERS5_")]
extern "C-unwind" fn load_md(this: Ptr, md: CPtr, name: Ptr) -> c_int {
    // SAFETY: see above.
    unsafe { hooks::load_md(crate::translator(), this, md, name) }
}

#[unsafe(export_name = "_ZN9nixlAgent18invalidateRemoteMDERKNSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEE")]
extern "C-unwind" fn invalidate_md(this: Ptr, peer: CPtr) -> c_int {
    // SAFETY: see above.
    unsafe {
        hooks::on_peer(
            crate::translator(),
            Sym::InvalidateRemoteMd,
            this,
            peer,
            std::ptr::null(),
        )
    }
}

#[unsafe(export_name = "_ZN9nixlAgent14makeConnectionERKNSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEEPK21nixlAgentOptionalArgs")]
extern "C-unwind" fn make_connection(this: Ptr, peer: CPtr, opt: CPtr) -> c_int {
    // SAFETY: see above.
    unsafe { hooks::on_peer(crate::translator(), Sym::MakeConnection, this, peer, opt) }
}

#[unsafe(export_name = "_ZN9nixlAgent13fetchRemoteMDENSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEEPK21nixlAgentOptionalArgs")]
extern "C-unwind" fn fetch_md(this: Ptr, peer: CPtr, opt: CPtr) -> c_int {
    // SAFETY: see above.
    unsafe { hooks::on_peer(crate::translator(), Sym::FetchRemoteMd, this, peer, opt) }
}

// `checkRemoteMD(std::string, const nixl_xfer_dlist_t&) const`: the name
// passed by value is, in the Itanium ABI, a pointer to the caller's copy.
#[unsafe(export_name = "_ZNK9nixlAgent13checkRemoteMDENSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEERK12nixlDescListI13nixlBasicDescE")]
extern "C-unwind" fn check_md(this: Ptr, peer: CPtr, descs: CPtr) -> c_int {
    // SAFETY: see above.
    unsafe { hooks::on_peer(crate::translator(), Sym::CheckRemoteMd, this, peer, descs) }
}

#[unsafe(export_name = "_ZNK9nixlAgent8genNotifERKNSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEES7_PK21nixlAgentOptionalArgs")]
extern "C-unwind" fn gen_notif(this: Ptr, peer: CPtr, msg: CPtr, opt: CPtr) -> c_int {
    // SAFETY: see above.
    unsafe { hooks::gen_notif(crate::translator(), this, peer, msg, opt) }
}

#[unsafe(export_name = "_ZN9nixlAgent9getNotifsERSt13unordered_mapINSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEESt6vectorIS6_SaIS6_EESt4hashIS6_ESt8equal_toIS6_ESaISt4pairIKS6_S9_EEEPK21nixlAgentOptionalArgs")]
extern "C-unwind" fn get_notifs(this: Ptr, map: Ptr, opt: CPtr) -> c_int {
    // SAFETY: see above.
    unsafe { hooks::get_notifs(crate::translator(), this, map, opt) }
}

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
