//! One hook per exported method: NIXL's own definition called with the
//! caller's arguments, the [`CallSink`] told before and after. Each hook's
//! function type spells the method's C++ signature in the Itanium ABI
//! (`this` first, references as pointers, a `std::string` taken by value as
//! a pointer to the caller's temporary, `std::span` as its two words).
//!
//! # Safety (every hook)
//! Called only through the exported symbol of the method it names, by a
//! caller of that method, with its arguments.

use super::layout;
use super::real::{gate, Gate};
use super::{CallSink, Facts, Out, Sym};
use std::cell::Cell;
use std::ffi::{c_int, c_void};

thread_local! {
    /// This thread is inside a hook's recording: a NIXL call made from
    /// there (none is made today) passes through.
    static INSIDE: Cell<bool> = const { Cell::new(false) };
}

static ANNOUNCED: std::sync::Once = std::sync::Once::new();

/// Sets whether this thread's calls pass through unrecorded (nixl-agent's
/// own calls, which its own recording makes); returns what it was.
pub fn set_quiet(on: bool) -> bool {
    INSIDE.with(|i| i.replace(on))
}

/// The thread is recording; dropped when the hook is done.
struct Inside;

impl Drop for Inside {
    fn drop(&mut self) {
        INSIDE.with(|i| i.set(false));
    }
}

/// The gate, its verdict told to the sink before any call is.
fn announced<S: CallSink>(sink: &S) -> &'static Gate {
    let g = gate();
    ANNOUNCED.call_once(|| {
        let e = Errno::save();
        sink.decided(&g.verdict);
        e.restore();
    });
    g
}

/// The gate, and whether this call is recorded.
fn enter<S: CallSink>(sink: &S) -> (&'static Gate, Option<Inside>) {
    let g = announced(sink);
    if !g.active() || INSIDE.with(|i| i.replace(true)) {
        return (g, None);
    }
    (g, Some(Inside))
}

/// The same for a hook whose recording never calls NIXL (the post): the
/// quiet switch is read, not set.
fn enter_quick<S: CallSink>(sink: &S) -> (&'static Gate, bool) {
    let g = announced(sink);
    (g, g.active() && !INSIDE.with(Cell::get))
}

/// `errno` as the host left it, put back before NIXL or the host sees it.
struct Errno(c_int);

impl Errno {
    fn save() -> Errno {
        Errno(ErrnoAt::here().get())
    }

    fn restore(self) {
        ErrnoAt::here().set(self.0);
    }
}

/// This thread's `errno`, its location asked for once per hook.
#[derive(Clone, Copy)]
struct ErrnoAt(*mut c_int);

impl ErrnoAt {
    fn here() -> ErrnoAt {
        // Safety: libc's location of this thread's errno, always valid.
        ErrnoAt(unsafe { libc::__errno_location() })
    }

    fn get(self) -> c_int {
        // Safety: the location above, valid for as long as the thread.
        unsafe { *self.0 }
    }

    fn set(self, v: c_int) {
        // Safety: as above.
        unsafe { *self.0 = v };
    }
}

/// NIXL's own definition of `sym` as `F`: the gate's copy's, else the
/// first loaded copy's that defines it ([`super::real::late`]).
///
/// # Safety
/// `F` is the function type of `sym`'s C++ signature.
unsafe fn real<F: Copy>(g: &Gate, sym: Sym) -> F {
    let mut addr = g.real(sym);
    if addr == 0 {
        addr = super::real::late(sym);
    }
    if addr == 0 {
        undefined(sym);
    }
    debug_assert_eq!(std::mem::size_of::<F>(), std::mem::size_of::<usize>());
    // Safety: a function address; `F` is its type, as the caller promises.
    unsafe { std::mem::transmute_copy::<usize, F>(&addr) }
}

/// The caller reached a method no loaded object but the interposer
/// defines: without the interposer the loader would have failed the same
/// call (a lazily bound symbol that is nowhere), and it ends the process
/// as the loader does then: its message on stderr, exit status 127, no
/// exit handlers run. Nothing of the interposer's own ends a process:
/// this is the program's missing symbol.
fn undefined(sym: Sym) -> ! {
    let line = format!("symbol lookup error: undefined symbol: {}\n", sym.mangled());
    // Safety: writes the caller's bytes to fd 2, then ends the process
    // without running anything of the program's (as the loader does).
    unsafe {
        libc::write(2, line.as_ptr().cast(), line.len());
        libc::_exit(127)
    }
}

/// Tells the sink a call begins (errno kept): its token, held while
/// NIXL's definition runs, so that a definition that throws ends the call
/// too ([`Unwinding`]).
fn begin<'s, S: CallSink>(sink: &'s S, agent: *const c_void, facts: &Facts<'_>) -> Unwinding<'s, S> {
    let e = Errno::save();
    let t = sink.begin(agent as usize, facts);
    e.restore();
    Unwinding::new(sink, t)
}

/// Tells the sink the call ended (errno kept).
fn end<S: CallSink>(sink: &S, token: Unwinding<'_, S>, status: c_int, out: &Out<'_>) {
    let Some(token) = token.returned() else { return };
    let e = Errno::save();
    sink.end(token, status, out);
    e.restore();
}

/// A begun call's token while NIXL's definition runs: when the definition
/// throws, the C++ exception unwinds through the hook (`C-unwind` runs this
/// drop, and catches nothing) and the sink hears that the call ended
/// without a status ([`CallSink::unwound`]), whichever hook it was; when it
/// returns, [`end`] hands the token back to the sink.
struct Unwinding<'s, S: CallSink> {
    sink: &'s S,
    token: Option<S::Token>,
}

impl<'s, S: CallSink> Unwinding<'s, S> {
    fn new(sink: &'s S, token: S::Token) -> Self {
        Unwinding {
            sink,
            token: Some(token),
        }
    }

    fn returned(mut self) -> Option<S::Token> {
        self.token.take()
    }
}

impl<S: CallSink> Drop for Unwinding<'_, S> {
    fn drop(&mut self) {
        if let Some(t) = self.token.take() {
            let e = Errno::save();
            self.sink.unwound(t);
            e.restore();
        }
    }
}

type Ptr = *mut c_void;
type CPtr = *const c_void;

/// `nixlAgent::nixlAgent(const std::string& name, const nixlAgentConfig&)`.
///
/// # Safety
/// See the module.
pub unsafe fn agent_new<S: CallSink>(sink: &S, this: Ptr, name: CPtr, cfg: CPtr) {
    type F = unsafe extern "C-unwind" fn(Ptr, CPtr, CPtr);
    let (g, inside) = enter(sink);
    // Safety: F is the constructor's signature.
    let f: F = unsafe { real(g, Sym::AgentNew) };
    let Some(_inside) = inside else {
        // Safety: the caller's arguments, untouched.
        return unsafe { f(this, name, cfg) };
    };
    // Safety: the caller's name, live for the call.
    let n = unsafe { layout::string(name) };
    let t = begin(sink, this, &Facts::AgentNew { name: &n });
    // Safety: the caller's arguments, untouched. NIXL throws when it cannot
    // make the agent (its configuration file, its listener's port).
    unsafe { f(this, name, cfg) };
    end(sink, t, super::status::SUCCESS, &Out::default());
}

/// `nixlAgent::~nixlAgent()`.
///
/// # Safety
/// See the module.
pub unsafe fn agent_drop<S: CallSink>(sink: &S, this: Ptr) {
    type F = unsafe extern "C-unwind" fn(Ptr);
    let (g, inside) = enter(sink);
    // Safety: F is the destructor's signature.
    let f: F = unsafe { real(g, Sym::AgentDrop) };
    let Some(_inside) = inside else {
        // Safety: the caller's arguments, untouched.
        return unsafe { f(this) };
    };
    let t = begin(sink, this, &Facts::AgentDrop);
    // Safety: the caller's arguments, untouched.
    unsafe { f(this) };
    end(sink, t, super::status::SUCCESS, &Out::default());
}

/// `createBackend(const std::string& type, const nixl_b_params_t&, nixlBackendH*&)`.
///
/// # Safety
/// See the module.
pub unsafe fn create_backend<S: CallSink>(sink: &S, this: Ptr, plugin: CPtr, params: CPtr, out: *mut Ptr) -> c_int {
    type F = unsafe extern "C-unwind" fn(Ptr, CPtr, CPtr, *mut Ptr) -> c_int;
    let (g, inside) = enter(sink);
    // Safety: F is the method's signature.
    let f: F = unsafe { real(g, Sym::CreateBackend) };
    let Some(_inside) = inside else {
        // Safety: the caller's arguments, untouched.
        return unsafe { f(this, plugin, params, out) };
    };
    // Safety: the caller's string, live for the call.
    let p = unsafe { layout::string(plugin) };
    let t = begin(sink, this, &Facts::Backend { plugin: &p });
    // Safety: the caller's arguments, untouched.
    let st = unsafe { f(this, plugin, params, out) };
    let handle = written(st, out);
    end(
        sink,
        t,
        st,
        &Out {
            handle,
            ..Out::default()
        },
    );
    st
}

/// `registerMem` / `deregisterMem(const nixl_reg_dlist_t&, const nixl_opt_args_t*)`.
///
/// # Safety
/// See the module; `sym` is one of the two.
pub unsafe fn registration<S: CallSink>(sink: &S, sym: Sym, this: Ptr, descs: CPtr, opt: CPtr) -> c_int {
    type F = unsafe extern "C-unwind" fn(Ptr, CPtr, CPtr) -> c_int;
    let (g, inside) = enter(sink);
    // Safety: F is both methods' signature.
    let f: F = unsafe { real(g, sym) };
    let Some(_inside) = inside else {
        // Safety: the caller's arguments, untouched.
        return unsafe { f(this, descs, opt) };
    };
    // Safety: the caller's list, live for the call (layout proven).
    let list = unsafe { layout::blob_list(descs) };
    let facts = if sym == Sym::RegisterMem {
        Facts::Register { list }
    } else {
        Facts::Deregister { list }
    };
    let t = begin(sink, this, &facts);
    // Safety: the caller's arguments, untouched.
    let st = unsafe { f(this, descs, opt) };
    end(sink, t, st, &Out::default());
    st
}

/// `createXferReq(const nixl_xfer_op_t&, local, remote, const std::string&
/// remote_agent, nixlXferReqH*&, const nixl_opt_args_t*)`.
///
/// # Safety
/// See the module.
#[allow(clippy::too_many_arguments)]
pub unsafe fn create_xfer<S: CallSink>(
    sink: &S,
    this: Ptr,
    op: *const c_int,
    local: CPtr,
    remote: CPtr,
    peer: CPtr,
    req: *mut Ptr,
    opt: CPtr,
) -> c_int {
    type F = unsafe extern "C-unwind" fn(Ptr, *const c_int, CPtr, CPtr, CPtr, *mut Ptr, CPtr) -> c_int;
    let (g, inside) = enter(sink);
    // Safety: F is the method's signature.
    let f: F = unsafe { real(g, Sym::CreateXferReq) };
    let Some(_inside) = inside else {
        // Safety: the caller's arguments, untouched.
        return unsafe { f(this, op, local, remote, peer, req, opt) };
    };
    // Safety: the caller's arguments, live for the call.
    let (o, l, r, p) = unsafe {
        (
            if op.is_null() { -1 } else { *op },
            layout::basic_list(local),
            layout::basic_list(remote),
            layout::string(peer),
        )
    };
    let t = begin(
        sink,
        this,
        &Facts::CreateXfer {
            op: o,
            local: l,
            remote: r,
            peer: &p,
        },
    );
    // Safety: the caller's arguments, untouched.
    let st = unsafe { f(this, op, local, remote, peer, req, opt) };
    end(
        sink,
        t,
        st,
        &Out {
            handle: written(st, req),
            ..Out::default()
        },
    );
    st
}

/// The handle NIXL wrote to an out-reference on success, else 0.
fn written(st: c_int, out: *mut Ptr) -> usize {
    if st != super::status::SUCCESS || out.is_null() {
        return 0;
    }
    // Safety: the caller's out-reference, written by NIXL on success.
    unsafe { *out as usize }
}

/// `prepXferDlist(const std::string& agent, const nixl_xfer_dlist_t&,
/// nixlDlistH*&, const nixl_opt_args_t*)`.
///
/// # Safety
/// See the module.
pub unsafe fn prep_dlist<S: CallSink>(sink: &S, this: Ptr, peer: CPtr, descs: CPtr, out: *mut Ptr, opt: CPtr) -> c_int {
    fn facts<'a>(_: &Gate, p: &'a str, descs: CPtr) -> Facts<'a> {
        Facts::PrepDlist {
            peer: p,
            // Safety: the caller's list, live for the call.
            list: unsafe { layout::basic_list(descs) },
        }
    }
    let args = [this, peer.cast_mut(), descs.cast_mut(), opt.cast_mut()];
    // Safety: the caller's arguments, as the module says.
    unsafe { prep(sink, Sym::PrepXferDlist, args, out, facts) }
}

/// `prepXferDlist(const std::string& agent, const nixl_stride_dlist_t&,
/// nixlDlistH*&, const nixl_opt_args_t*)`: NIXL 1.5's strided form, read
/// only where the self-test proved its descriptors ([`Gate::strided`]).
///
/// # Safety
/// See the module.
pub unsafe fn prep_dlist_strided<S: CallSink>(
    sink: &S,
    this: Ptr,
    peer: CPtr,
    descs: CPtr,
    out: *mut Ptr,
    opt: CPtr,
) -> c_int {
    fn facts<'a>(g: &Gate, p: &'a str, descs: CPtr) -> Facts<'a> {
        Facts::PrepStrided {
            peer: p,
            list: if g.strided {
                // Safety: the caller's list, live for the call, read only on
                // a NIXL whose strided descriptors the self-test proved.
                unsafe { layout::stride_list(descs) }
            } else {
                None
            },
        }
    }
    let args = [this, peer.cast_mut(), descs.cast_mut(), opt.cast_mut()];
    // Safety: the caller's arguments, as the module says.
    unsafe { prep(sink, Sym::PrepXferDlistStrided, args, out, facts) }
}

/// Either `prepXferDlist` form (`args`: this, the peer's name, the list,
/// the optional arguments), its list described by `facts`.
///
/// # Safety
/// `sym` is a `prepXferDlist` form, called through its exported symbol
/// with its caller's arguments.
unsafe fn prep<S: CallSink>(
    sink: &S,
    sym: Sym,
    [this, peer, descs, opt]: [Ptr; 4],
    out: *mut Ptr,
    facts: impl for<'a> FnOnce(&Gate, &'a str, CPtr) -> Facts<'a>,
) -> c_int {
    type F = unsafe extern "C-unwind" fn(Ptr, CPtr, CPtr, *mut Ptr, CPtr) -> c_int;
    let (g, inside) = enter(sink);
    // Safety: F is both forms' signature.
    let f: F = unsafe { real(g, sym) };
    // Safety: the caller's arguments, untouched.
    let call = || unsafe { f(this, peer, descs, out, opt) };
    let Some(_inside) = inside else { return call() };
    // Safety: the caller's name, live for the call.
    let p = unsafe { layout::string(peer) };
    let t = begin(sink, this, &facts(g, &p, descs));
    let st = call();
    end(
        sink,
        t,
        st,
        &Out {
            handle: written(st, out),
            ..Out::default()
        },
    );
    st
}

/// The span `makeXferReq`'s indices (`std::span<const int>`: pointer, length).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct Span {
    pub ptr: *const c_int,
    pub len: usize,
}

impl Span {
    fn indices<'a>(self) -> &'a [i32] {
        if self.ptr.is_null() || self.len == 0 || self.len > (1 << 24) {
            return &[];
        }
        // Safety: the caller's span, live for the call.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

/// `makeXferReq(nixl_xfer_op_t, const nixlDlistH& local, span<const int>,
/// const nixlDlistH& remote, span<const int>, nixlXferReqH*&, const
/// nixl_opt_args_t*)`, NIXL 1.5's.
///
/// # Safety
/// See the module.
#[allow(clippy::too_many_arguments)]
pub unsafe fn make_xfer<S: CallSink>(
    sink: &S,
    this: Ptr,
    op: c_int,
    local: CPtr,
    local_idx: Span,
    remote: CPtr,
    remote_idx: Span,
    req: *mut Ptr,
    opt: CPtr,
) -> c_int {
    type F = unsafe extern "C-unwind" fn(Ptr, c_int, CPtr, Span, CPtr, Span, *mut Ptr, CPtr) -> c_int;
    let (g, inside) = enter(sink);
    // Safety: F is the method's signature.
    let f: F = unsafe { real(g, Sym::MakeXferReq) };
    // Safety: the caller's arguments, untouched.
    let call = || unsafe { f(this, op, local, local_idx, remote, remote_idx, req, opt) };
    let Some(_inside) = inside else { return call() };
    let made = Made {
        op,
        local,
        local_idx: local_idx.indices(),
        remote,
        remote_idx: remote_idx.indices(),
        req,
    };
    made.record(sink, this, call)
}

/// `makeXferReq(const nixl_xfer_op_t&, const nixlDlistH* local, const
/// std::vector<int>&, const nixlDlistH* remote, const std::vector<int>&,
/// nixlXferReqH*&, const nixl_opt_args_t*)`: the form releases before 1.5.0
/// have only (a vector's begin and end pointers at 0 and 8, libstdc++'s
/// layout the self-test proves on the descriptor lists' vectors).
///
/// # Safety
/// See the module.
#[allow(clippy::too_many_arguments)]
pub unsafe fn make_xfer_vec<S: CallSink>(
    sink: &S,
    this: Ptr,
    op: *const c_int,
    local: CPtr,
    local_idx: CPtr,
    remote: CPtr,
    remote_idx: CPtr,
    req: *mut Ptr,
    opt: CPtr,
) -> c_int {
    type F = unsafe extern "C-unwind" fn(Ptr, *const c_int, CPtr, CPtr, CPtr, CPtr, *mut Ptr, CPtr) -> c_int;
    let (g, inside) = enter(sink);
    // Safety: F is the method's signature.
    let f: F = unsafe { real(g, Sym::MakeXferReqVec) };
    // Safety: the caller's arguments, untouched.
    let call = || unsafe { f(this, op, local, local_idx, remote, remote_idx, req, opt) };
    let Some(_inside) = inside else { return call() };
    // Safety: the caller's arguments, live for the call.
    let made = unsafe {
        Made {
            op: if op.is_null() { -1 } else { *op },
            local,
            local_idx: layout::ints(local_idx),
            remote,
            remote_idx: layout::ints(remote_idx),
            req,
        }
    };
    made.record(sink, this, call)
}

/// What either `makeXferReq` form was given.
struct Made<'a> {
    op: c_int,
    local: CPtr,
    local_idx: &'a [i32],
    remote: CPtr,
    remote_idx: &'a [i32],
    req: *mut Ptr,
}

impl Made<'_> {
    /// The call `call`, recorded as a transfer request made.
    fn record<S: CallSink>(self, sink: &S, this: Ptr, call: impl FnOnce() -> c_int) -> c_int {
        let t = begin(
            sink,
            this,
            &Facts::MakeXfer {
                op: self.op,
                local: self.local as usize,
                local_idx: self.local_idx,
                remote: self.remote as usize,
                remote_idx: self.remote_idx,
            },
        );
        let st = call();
        end(
            sink,
            t,
            st,
            &Out {
                handle: written(st, self.req),
                ..Out::default()
            },
        );
        st
    }
}

/// `postXferReq(req, opt)`, on the sink's narrow pair.
///
/// # Safety
/// See the module.
pub unsafe fn post<S: CallSink>(sink: &'static S, this: Ptr, req: Ptr, opt: CPtr) -> c_int {
    type F = unsafe extern "C-unwind" fn(Ptr, Ptr, CPtr) -> c_int;
    let (g, recorded) = enter_quick(sink);
    // Safety: F is the method's signature.
    let f: F = unsafe { real(g, Sym::PostXferReq) };
    if !recorded {
        // Safety: the caller's arguments, untouched.
        return unsafe { f(this, req, opt) };
    }
    let errno = ErrnoAt::here();
    let host = errno.get();
    let p = sink.post_begin(req as usize);
    errno.set(host);
    // Safety: the caller's arguments, untouched.
    let st = unsafe { f(this, req, opt) };
    let nixl = errno.get();
    sink.post_end(p, st);
    errno.set(nixl);
    st
}

/// Methods on one handle: `getXferStatus(req)`, `releaseXferReq(req)`,
/// `releasedDlistH(dlist)`.
///
/// # Safety
/// See the module; `sym` is one of those.
pub unsafe fn on_handle<S: CallSink>(sink: &S, sym: Sym, this: Ptr, handle: Ptr) -> c_int {
    type F = unsafe extern "C-unwind" fn(Ptr, Ptr) -> c_int;
    let (g, inside) = enter(sink);
    // Safety: F is the signature of each; the caller's arguments.
    let call = || unsafe { real::<F>(g, sym)(this, handle) };
    let Some(_inside) = inside else {
        return call();
    };
    let h = handle as usize;
    if sym == Sym::GetXferStatus {
        // The poll loop's call, the hottest after the post: its token
        // holds nothing a throwing definition would leave open, so it
        // goes without the unwinding guard.
        let e = Errno::save();
        let t = sink.begin(this as usize, &Facts::Status { req: h });
        e.restore();
        let st = call();
        let e = Errno::save();
        sink.end(t, st, &Out::default());
        e.restore();
        return st;
    }
    let facts = match sym {
        Sym::ReleaseXferReq => Facts::Release { req: h },
        _ => Facts::ReleaseDlist { dlist: h },
    };
    let t = begin(sink, this, &facts);
    let st = call();
    end(sink, t, st, &Out::default());
    st
}

/// Methods about a peer by name: `invalidateRemoteMD(name)`,
/// `makeConnection(name, opt)`, `fetchRemoteMD(name by value, opt)`.
///
/// # Safety
/// See the module; `sym` is one of those, `opt` null for the first.
pub unsafe fn on_peer<S: CallSink>(sink: &S, sym: Sym, this: Ptr, peer: CPtr, opt: CPtr) -> c_int {
    type WithOpt = unsafe extern "C-unwind" fn(Ptr, CPtr, CPtr) -> c_int;
    type One = unsafe extern "C-unwind" fn(Ptr, CPtr) -> c_int;
    let (g, inside) = enter(sink);
    let call = || {
        if sym == Sym::InvalidateRemoteMd {
            // Safety: One is invalidateRemoteMD's signature.
            unsafe { real::<One>(g, sym)(this, peer) }
        } else {
            // Safety: WithOpt is the others' signature.
            unsafe { real::<WithOpt>(g, sym)(this, peer, opt) }
        }
    };
    let Some(_inside) = inside else {
        return call();
    };
    // Safety: the caller's string, live for the call.
    let p = unsafe { layout::string(peer) };
    let facts = match sym {
        Sym::InvalidateRemoteMd => Facts::Invalidate { peer: &p },
        Sym::MakeConnection => Facts::Connect { peer: &p },
        Sym::CheckRemoteMd => Facts::Check { peer: &p },
        _ => Facts::Fetch { peer: &p },
    };
    let t = begin(sink, this, &facts);
    let st = call();
    end(sink, t, st, &Out::default());
    st
}

/// `loadRemoteMD(const std::string& md, std::string& agent_name)`.
///
/// # Safety
/// See the module.
pub unsafe fn load_md<S: CallSink>(sink: &S, this: Ptr, md: CPtr, name: Ptr) -> c_int {
    type F = unsafe extern "C-unwind" fn(Ptr, CPtr, Ptr) -> c_int;
    let (g, inside) = enter(sink);
    // Safety: F is the method's signature.
    let f: F = unsafe { real(g, Sym::LoadRemoteMd) };
    let Some(_inside) = inside else {
        // Safety: the caller's arguments, untouched.
        return unsafe { f(this, md, name) };
    };
    let t = begin(sink, this, &Facts::LoadMd);
    // Safety: the caller's arguments, untouched.
    let st = unsafe { f(this, md, name) };
    let n = if st == super::status::SUCCESS {
        // Safety: the caller's out-string, live for the call.
        unsafe { layout::string(name) }
    } else {
        std::borrow::Cow::Borrowed("")
    };
    end(
        sink,
        t,
        st,
        &Out {
            name: &n,
            ..Out::default()
        },
    );
    st
}

/// `genNotif(const std::string& remote, const nixl_blob_t& msg, opt)`.
///
/// # Safety
/// See the module.
pub unsafe fn gen_notif<S: CallSink>(sink: &S, this: Ptr, peer: CPtr, msg: CPtr, opt: CPtr) -> c_int {
    type F = unsafe extern "C-unwind" fn(Ptr, CPtr, CPtr, CPtr) -> c_int;
    let (g, inside) = enter(sink);
    // Safety: F is the method's signature.
    let f: F = unsafe { real(g, Sym::GenNotif) };
    let Some(_inside) = inside else {
        // Safety: the caller's arguments, untouched.
        return unsafe { f(this, peer, msg, opt) };
    };
    // Safety: the caller's strings, live for the call.
    let (p, m) = unsafe { (layout::string(peer), layout::string(msg)) };
    let t = begin(
        sink,
        this,
        &Facts::Notify {
            peer: &p,
            message: m.as_bytes(),
        },
    );
    // Safety: the caller's arguments, untouched.
    let st = unsafe { f(this, peer, msg, opt) };
    end(sink, t, st, &Out::default());
    st
}

/// `getNotifs(nixl_notifs_t&, opt)`: what the call added to the map
/// (libstdc++'s `unordered_map<string, vector<string>>`, read by
/// `layout::notifs_since`).
///
/// # Safety
/// See the module.
pub unsafe fn get_notifs<S: CallSink>(sink: &S, this: Ptr, map: Ptr, opt: CPtr) -> c_int {
    type F = unsafe extern "C-unwind" fn(Ptr, Ptr, CPtr) -> c_int;
    let (g, inside) = enter(sink);
    // Safety: F is the method's signature.
    let f: F = unsafe { real(g, Sym::GetNotifs) };
    let Some(_inside) = inside else {
        // Safety: the caller's arguments, untouched.
        return unsafe { f(this, map, opt) };
    };
    // Safety: the caller's map, live for the call.
    let before = unsafe { layout::notif_counts(map) };
    let t = begin(sink, this, &Facts::GetNotifs);
    // Safety: the caller's arguments, untouched.
    let st = unsafe { f(this, map, opt) };
    // Safety: as above.
    let fresh = unsafe { layout::notifs_since(map, &before) };
    end(
        sink,
        t,
        st,
        &Out {
            fresh: &fresh,
            ..Out::default()
        },
    );
    st
}
