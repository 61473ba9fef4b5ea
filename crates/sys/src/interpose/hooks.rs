//! The hooks the table's exported functions call ([`super::methods`]): each
//! is handed NIXL's own definition applied to the caller's arguments
//! ([`Nixl`]) and the arguments it reads. Every call but the data path's
//! two takes one path, [`hooked`]: the gate's verdict told once, NIXL's
//! definition found, a straight pass when the gate refused or the thread is
//! already inside a hook, else the hook's reading of its arguments handed
//! to [`HookedCall::record`] (the sink told before and after, `errno` kept, a
//! definition that throws ending the call through [`CallSink::unwound`]).
//! A plain method's hook is its reading only; `postXferReq` and
//! `getXferStatus` ([`post`], [`poll`]) spell their cheaper path out.
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

/// Tells the sink the call ended with `status` and what `out` reads of
/// what NIXL handed back (errno kept around both).
fn end<'o, S: CallSink>(sink: &S, token: Unwinding<'_, S>, status: c_int, out: impl FnOnce(c_int) -> Out<'o>) {
    let Some(token) = token.returned() else { return };
    let e = Errno::save();
    sink.end(token, status, &out(status));
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

pub type Ptr = *mut c_void;
pub type CPtr = *const c_void;

/// NIXL's own definition of one method applied to its caller's arguments
/// untouched, as the table's exported function hands it to the hook: `F`
/// is the method's function type (the table's signature), `call` calls
/// one of that type with the caller's arguments.
pub struct Nixl<F, C> {
    sym: Sym,
    call: C,
    _f: std::marker::PhantomData<F>,
}

impl<F: Copy, C> Nixl<F, C> {
    /// # Safety
    /// `F` is the function type of `sym`'s C++ signature, and `call` calls
    /// the function it is given with the arguments of a caller of `sym`.
    pub unsafe fn new(sym: Sym, call: C) -> Self {
        Nixl {
            sym,
            call,
            _f: std::marker::PhantomData,
        }
    }

    /// NIXL's definition of the method ([`real`]).
    fn definition(&self, g: &Gate) -> F {
        // Safety: `F` is the method's function type, as `new` was promised.
        unsafe { real::<F>(g, self.sym) }
    }
}

/// What a method returns: its status, or nothing (the constructor and the
/// destructor, `SUCCESS` to the sink).
pub trait Returned: Copy {
    fn status(self) -> c_int;
}

impl Returned for c_int {
    fn status(self) -> c_int {
        self
    }
}

impl Returned for () {
    fn status(self) -> c_int {
        super::status::SUCCESS
    }
}

/// The path of every hooked call but the data path's two: the gate's
/// verdict told once, NIXL's definition found; passed straight through
/// when the gate refused this build or the thread is already inside a
/// hook, else `read` reads the call's arguments (on the gate's proof) and
/// records it ([`HookedCall::record`]).
fn hooked<'s, S, F, R, C>(
    sink: &'s S,
    nixl: Nixl<F, C>,
    this: Ptr,
    read: impl FnOnce(&'static Gate, HookedCall<'s, S, F, C>) -> R,
) -> R
where
    S: CallSink,
    F: Copy,
    R: Returned,
    C: FnOnce(F) -> R,
{
    let (g, inside) = enter(sink);
    let f = nixl.definition(g);
    let Some(_inside) = inside else {
        return (nixl.call)(f);
    };
    read(
        g,
        HookedCall {
            sink,
            this,
            f,
            call: nixl.call,
        },
    )
}

/// A call being recorded, its arguments read.
pub struct HookedCall<'s, S, F, C> {
    sink: &'s S,
    this: Ptr,
    f: F,
    call: C,
}

impl<S: CallSink, F: Copy, R: Returned, C: FnOnce(F) -> R> HookedCall<'_, S, F, C> {
    /// Tells the sink the call begins with `facts`, runs NIXL's definition
    /// and tells the sink it ended: its status and what `out` reads of what
    /// NIXL handed back (or, when the definition throws, that it ended
    /// without one). Returns what NIXL returned.
    fn record<'o>(self, facts: &Facts<'_>, out: impl FnOnce(c_int) -> Out<'o>) -> R {
        let t = begin(self.sink, self.this, facts);
        let r = (self.call)(self.f);
        end(self.sink, t, r.status(), out);
        r
    }
}

/// Nothing handed back besides the status.
fn nothing<'o>(_: c_int) -> Out<'o> {
    Out::default()
}

/// The handle NIXL wrote to an out-reference, as NIXL's out: 0 unless
/// the call succeeded.
fn handle<'o>(out: *mut Ptr) -> impl FnOnce(c_int) -> Out<'o> {
    move |st| Out {
        handle: written(st, out),
        ..Out::default()
    }
}

/// The handle NIXL wrote to an out-reference on success, else 0.
fn written(st: c_int, out: *mut Ptr) -> usize {
    if st != super::status::SUCCESS || out.is_null() {
        return 0;
    }
    // Safety: the caller's out-reference, written by NIXL on success.
    unsafe { *out as usize }
}

/// A method with no meaning of its own to the recording, any row's hook:
/// nothing of its arguments is read, and its call is told to the sink as
/// [`Facts::Plain`] (counted by method and status).
///
/// # Safety
/// See the module.
pub unsafe fn plain<S: CallSink, F: Copy, R: Returned>(sink: &S, nixl: Nixl<F, impl FnOnce(F) -> R>, this: Ptr) -> R {
    let method = nixl.sym;
    hooked(sink, nixl, this, |_, call| {
        call.record(&Facts::Plain { method }, nothing)
    })
}

/// The constructor (`name`: its `const std::string&`).
///
/// # Safety
/// See the module.
pub unsafe fn agent_new<S: CallSink, F: Copy>(sink: &S, nixl: Nixl<F, impl FnOnce(F)>, this: Ptr, name: CPtr) {
    hooked(sink, nixl, this, |_, call| {
        // Safety: the caller's name, live for the call.
        let n = unsafe { layout::string(name) };
        // NIXL throws when it cannot make the agent (its configuration
        // file, its listener's port).
        call.record(&Facts::AgentNew { name: &n }, nothing)
    })
}

/// The destructor.
///
/// # Safety
/// See the module.
pub unsafe fn agent_drop<S: CallSink, F: Copy>(sink: &S, nixl: Nixl<F, impl FnOnce(F)>, this: Ptr) {
    hooked(sink, nixl, this, |_, call| call.record(&Facts::AgentDrop, nothing))
}

/// `createBackend`: the plugin's name; out, the backend handle.
///
/// # Safety
/// See the module.
pub unsafe fn create_backend<S: CallSink, F: Copy>(
    sink: &S,
    nixl: Nixl<F, impl FnOnce(F) -> c_int>,
    this: Ptr,
    plugin: CPtr,
    out: *mut Ptr,
) -> c_int {
    hooked(sink, nixl, this, |_, call| {
        // Safety: the caller's string, live for the call.
        let p = unsafe { layout::string(plugin) };
        call.record(&Facts::Backend { plugin: &p }, handle(out))
    })
}

/// `registerMem` / `deregisterMem`: the list.
///
/// # Safety
/// See the module.
pub unsafe fn registration<S: CallSink, F: Copy>(
    sink: &S,
    nixl: Nixl<F, impl FnOnce(F) -> c_int>,
    this: Ptr,
    descs: CPtr,
) -> c_int {
    let register = nixl.sym == Sym::RegisterMem;
    hooked(sink, nixl, this, |_, call| {
        // Safety: the caller's list, live for the call (layout proven).
        let list = unsafe { layout::blob_list(descs) };
        let facts = if register {
            Facts::Register { list }
        } else {
            Facts::Deregister { list }
        };
        call.record(&facts, nothing)
    })
}

/// `createXferReq`: the operation, both lists and the peer; out, the
/// request handle.
///
/// # Safety
/// See the module.
#[allow(clippy::too_many_arguments)]
pub unsafe fn create_xfer<S: CallSink, F: Copy>(
    sink: &S,
    nixl: Nixl<F, impl FnOnce(F) -> c_int>,
    this: Ptr,
    op: *const c_int,
    local: CPtr,
    remote: CPtr,
    peer: CPtr,
    req: *mut Ptr,
) -> c_int {
    hooked(sink, nixl, this, |_, call| {
        // Safety: the caller's arguments, live for the call.
        let (o, l, r, p) = unsafe {
            (
                if op.is_null() { -1 } else { *op },
                layout::basic_list(local),
                layout::basic_list(remote),
                layout::string(peer),
            )
        };
        let facts = Facts::CreateXfer {
            op: o,
            local: l,
            remote: r,
            peer: &p,
        };
        call.record(&facts, handle(req))
    })
}

/// `prepXferDlist` with an agent name: the peer and the list; out, the
/// list handle.
///
/// # Safety
/// See the module.
pub unsafe fn prep_dlist<S: CallSink, F: Copy>(
    sink: &S,
    nixl: Nixl<F, impl FnOnce(F) -> c_int>,
    this: Ptr,
    peer: CPtr,
    descs: CPtr,
    out: *mut Ptr,
) -> c_int {
    hooked(sink, nixl, this, |_, call| {
        // Safety: the caller's name and list, live for the call.
        let (p, list) = unsafe { (layout::string(peer), layout::basic_list(descs)) };
        call.record(&Facts::PrepDlist { peer: &p, list }, handle(out))
    })
}

/// The strided `prepXferDlist`: its list read only where the self-test
/// proved its descriptors ([`Gate::strided`]).
///
/// # Safety
/// See the module.
pub unsafe fn prep_dlist_strided<S: CallSink, F: Copy>(
    sink: &S,
    nixl: Nixl<F, impl FnOnce(F) -> c_int>,
    this: Ptr,
    peer: CPtr,
    descs: CPtr,
    out: *mut Ptr,
) -> c_int {
    hooked(sink, nixl, this, |g, call| {
        // Safety: the caller's name, live for the call.
        let p = unsafe { layout::string(peer) };
        let list = if g.strided {
            // Safety: the caller's list, live for the call, read only on a
            // NIXL whose strided descriptors the self-test proved.
            unsafe { layout::stride_list(descs) }
        } else {
            None
        };
        call.record(&Facts::PrepStrided { peer: &p, list }, handle(out))
    })
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

/// `makeXferReq`, NIXL 1.5's span form: the operation, both prepared lists
/// and their indices; out, the request handle.
///
/// # Safety
/// See the module.
#[allow(clippy::too_many_arguments)]
pub unsafe fn make_xfer<S: CallSink, F: Copy>(
    sink: &S,
    nixl: Nixl<F, impl FnOnce(F) -> c_int>,
    this: Ptr,
    op: c_int,
    local: CPtr,
    local_idx: Span,
    remote: CPtr,
    remote_idx: Span,
    req: *mut Ptr,
) -> c_int {
    hooked(sink, nixl, this, |_, call| {
        let facts = Facts::MakeXfer {
            op,
            local: local as usize,
            local_idx: local_idx.indices(),
            remote: remote as usize,
            remote_idx: remote_idx.indices(),
        };
        call.record(&facts, handle(req))
    })
}

/// `makeXferReq`'s vector form, the one releases before 1.5.0 have only (a
/// vector's begin and end pointers at 0 and 8, libstdc++'s layout the
/// self-test proves on the descriptor lists' vectors).
///
/// # Safety
/// See the module.
#[allow(clippy::too_many_arguments)]
pub unsafe fn make_xfer_vec<S: CallSink, F: Copy>(
    sink: &S,
    nixl: Nixl<F, impl FnOnce(F) -> c_int>,
    this: Ptr,
    op: *const c_int,
    local: CPtr,
    local_idx: CPtr,
    remote: CPtr,
    remote_idx: CPtr,
    req: *mut Ptr,
) -> c_int {
    hooked(sink, nixl, this, |_, call| {
        // Safety: the caller's arguments, live for the call.
        let facts = unsafe {
            Facts::MakeXfer {
                op: if op.is_null() { -1 } else { *op },
                local: local as usize,
                local_idx: layout::ints(local_idx),
                remote: remote as usize,
                remote_idx: layout::ints(remote_idx),
            }
        };
        call.record(&facts, handle(req))
    })
}

/// `postXferReq(req, opt)`, on the sink's narrow pair.
///
/// # Safety
/// See the module.
pub unsafe fn post<S: CallSink, F: Copy>(
    sink: &'static S,
    nixl: Nixl<F, impl FnOnce(F) -> c_int>,
    _this: Ptr,
    req: Ptr,
) -> c_int {
    let (g, recorded) = enter_quick(sink);
    let f = nixl.definition(g);
    if !recorded {
        return (nixl.call)(f);
    }
    let errno = ErrnoAt::here();
    let host = errno.get();
    let p = sink.post_begin(req as usize);
    errno.set(host);
    let st = (nixl.call)(f);
    let theirs = errno.get();
    sink.post_end(p, st);
    errno.set(theirs);
    st
}

/// `getXferStatus(req)`, the poll loop's call, the hottest after the post:
/// its token holds nothing a throwing definition would leave open, so it
/// goes without the unwinding guard.
///
/// # Safety
/// See the module.
pub unsafe fn poll<S: CallSink, F: Copy>(
    sink: &S,
    nixl: Nixl<F, impl FnOnce(F) -> c_int>,
    this: Ptr,
    req: Ptr,
) -> c_int {
    let (g, inside) = enter(sink);
    let f = nixl.definition(g);
    let Some(_inside) = inside else {
        return (nixl.call)(f);
    };
    let e = Errno::save();
    let t = sink.begin(this as usize, &Facts::Status { req: req as usize });
    e.restore();
    let st = (nixl.call)(f);
    let e = Errno::save();
    sink.end(t, st, &Out::default());
    e.restore();
    st
}

/// Methods on one handle: `releaseXferReq(req)`, `releasedDlistH(dlist)`.
///
/// # Safety
/// See the module.
pub unsafe fn on_handle<S: CallSink, F: Copy>(
    sink: &S,
    nixl: Nixl<F, impl FnOnce(F) -> c_int>,
    this: Ptr,
    handle: Ptr,
) -> c_int {
    let h = handle as usize;
    let facts = match nixl.sym {
        Sym::ReleaseXferReq => Facts::Release { req: h },
        _ => Facts::ReleaseDlist { dlist: h },
    };
    hooked(sink, nixl, this, |_, call| call.record(&facts, nothing))
}

/// Methods about a peer by name: `invalidateRemoteMD`, `makeConnection`,
/// `fetchRemoteMD`, `checkRemoteMD`.
///
/// # Safety
/// See the module.
pub unsafe fn on_peer<S: CallSink, F: Copy>(
    sink: &S,
    nixl: Nixl<F, impl FnOnce(F) -> c_int>,
    this: Ptr,
    peer: CPtr,
) -> c_int {
    let sym = nixl.sym;
    hooked(sink, nixl, this, |_, call| {
        // Safety: the caller's string, live for the call.
        let p = unsafe { layout::string(peer) };
        let facts = match sym {
            Sym::InvalidateRemoteMd => Facts::Invalidate { peer: &p },
            Sym::MakeConnection => Facts::Connect { peer: &p },
            Sym::CheckRemoteMd => Facts::Check { peer: &p },
            _ => Facts::Fetch { peer: &p },
        };
        call.record(&facts, nothing)
    })
}

/// `loadRemoteMD`: out, the name of the agent loaded (its out-string).
///
/// # Safety
/// See the module.
pub unsafe fn load_md<S: CallSink, F: Copy>(
    sink: &S,
    nixl: Nixl<F, impl FnOnce(F) -> c_int>,
    this: Ptr,
    name: Ptr,
) -> c_int {
    hooked(sink, nixl, this, |_, call| {
        let loaded = std::cell::OnceCell::new();
        call.record(&Facts::LoadMd, |st| {
            let n = loaded.get_or_init(|| {
                if st == super::status::SUCCESS {
                    // Safety: the caller's out-string, live for the call.
                    unsafe { layout::string(name) }
                } else {
                    std::borrow::Cow::Borrowed("")
                }
            });
            Out {
                name: n,
                ..Out::default()
            }
        })
    })
}

/// `genNotif`: the peer and the message.
///
/// # Safety
/// See the module.
pub unsafe fn gen_notif<S: CallSink, F: Copy>(
    sink: &S,
    nixl: Nixl<F, impl FnOnce(F) -> c_int>,
    this: Ptr,
    peer: CPtr,
    msg: CPtr,
) -> c_int {
    hooked(sink, nixl, this, |_, call| {
        // Safety: the caller's strings, live for the call.
        let (p, m) = unsafe { (layout::string(peer), layout::string(msg)) };
        let facts = Facts::Notify {
            peer: &p,
            message: m.as_bytes(),
        };
        call.record(&facts, nothing)
    })
}

/// `getNotifs`: what the call added to the map (libstdc++'s
/// `unordered_map<string, vector<string>>`, read by
/// `layout::notifs_since`).
///
/// # Safety
/// See the module.
pub unsafe fn get_notifs<S: CallSink, F: Copy>(
    sink: &S,
    nixl: Nixl<F, impl FnOnce(F) -> c_int>,
    this: Ptr,
    map: Ptr,
) -> c_int {
    hooked(sink, nixl, this, |_, call| {
        // Safety: the caller's map, live for the call.
        let before = unsafe { layout::notif_counts(map) };
        let fresh = std::cell::OnceCell::new();
        call.record(&Facts::GetNotifs, |_| Out {
            // Safety: as above.
            fresh: fresh.get_or_init(|| unsafe { layout::notifs_since(map, &before) }),
            ..Out::default()
        })
    })
}
