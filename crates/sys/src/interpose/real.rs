//! Finding NIXL's own definitions of what the interposer exports, and the
//! gate: whether this process's NIXL is a build the interposer reads
//! (`PROVEN`), decided once, before the first call is recorded.
//!
//! A preloaded definition wins every lookup, so `dlsym(RTLD_NEXT)` is tried
//! first (a program linked against `libnixl.so`), then the loaded
//! `libnixl.so` itself by path (`dlopen(RTLD_NOLOAD)`: NIXL's Python
//! bindings load it `RTLD_LOCAL`, where `RTLD_NEXT` finds nothing).

use super::layout::{self, Builders, BUILDER_SYMBOLS};
use super::Sym;
use std::ffi::{c_void, CString};
use std::path::{Path, PathBuf};

/// NIXL versions the interposer was proven against: the one list,
/// `crate::capi`'s, which its batched-list assumptions are gated on too.
pub use crate::capi::PROVEN;

/// The operator's word on a build's version; the layout self-test still
/// decides.
pub use crate::capi::ENV_NIXL_VERSION;

/// What the gate decided.
#[derive(Debug, Clone)]
pub enum Verdict {
    /// Calls are recorded: the library, its version.
    Active { library: String, version: String },
    /// Calls pass through unrecorded: why, and the library when found.
    Refused { library: Option<String>, why: String },
}

/// The gate's outcome and NIXL's own functions, by [`Sym`].
pub struct Gate {
    pub verdict: Verdict,
    real: [usize; Sym::COUNT],
}

impl Gate {
    pub fn active(&self) -> bool {
        matches!(self.verdict, Verdict::Active { .. })
    }

    /// NIXL's own definition of `sym` (0 when none was found).
    pub fn real(&self, sym: Sym) -> usize {
        self.real[sym as usize]
    }
}

static GATE: std::sync::OnceLock<Gate> = std::sync::OnceLock::new();

/// The gate, decided on first use.
pub fn gate() -> &'static Gate {
    GATE.get_or_init(decide)
}

/// The gate if it was decided.
pub fn decided() -> Option<&'static Gate> {
    GATE.get()
}

/// Forks since the gate was decided: 0 in the process that decided it, one
/// more in each forked child (a `pthread_atfork` child handler).
static FORKS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

extern "C" fn forked_child() {
    FORKS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
}

/// How many forks separate this process from the one that decided the
/// gate (what it started there belongs to an ancestor when not 0).
pub fn forks() -> u64 {
    FORKS.load(std::sync::atomic::Ordering::Relaxed)
}

fn decide() -> Gate {
    // Safety: registers a handler that only increments an atomic, which is
    // async-signal-safe as a child handler must be.
    unsafe { libc::pthread_atfork(None, None, Some(forked_child)) };
    let library = crate::loader::loaded("libnixl.so")
        .into_iter()
        .find(|p| p.file_name().is_some_and(|n| n == "libnixl.so"));
    let handle = library.as_deref().and_then(open_loaded);
    let mut real = [0usize; Sym::COUNT];
    for sym in Sym::ALL {
        real[sym as usize] = find(sym.mangled(), handle);
    }
    let verdict = judge(library.as_deref(), handle, &real);
    Gate { verdict, real }
}

fn judge(library: Option<&Path>, handle: Option<*mut c_void>, real: &[usize]) -> Verdict {
    let Some(library) = library else {
        return Verdict::Refused {
            library: None,
            why: "no libnixl.so is mapped in this process".into(),
        };
    };
    let shown = Some(library.display().to_string());
    let refuse = |why: String| Verdict::Refused {
        library: shown.clone(),
        why,
    };
    let version = crate::capi::version_of(library.parent().and_then(crate::discover::wheel_version).as_deref());
    let Some(version) = version else {
        return refuse(format!(
            "the NIXL version of {} is unknown (no nixl*.dist-info beside it; set {ENV_NIXL_VERSION} for a build from source)",
            library.display()
        ));
    };
    if !crate::capi::proven(Some(&version)) {
        return refuse(format!(
            "NIXL {version} is not a version the interposer was proven against ({})",
            PROVEN.join(", ")
        ));
    }
    if let Some(missing) = Sym::ALL.iter().find(|s| real[**s as usize] == 0) {
        return refuse(format!(
            "NIXL {version} does not export {} as 1.5.1 does",
            missing.mangled()
        ));
    }
    let builders = handle.and_then(|h| {
        let f: Vec<usize> = BUILDER_SYMBOLS.iter().map(|s| lookup(h, s)).collect();
        (!f.contains(&0)).then(|| Builders {
            blob_list_new: f[0],
            blob_list_add: f[1],
            blob_list_drop: f[2],
            basic_new: f[3],
            blob_new: f[4],
        })
    });
    let Some(builders) = builders else {
        return refuse(
            "NIXL's descriptor-list constructors (libnixl_build.so) are not exported: the layout self-test cannot run"
                .into(),
        );
    };
    // Safety: `builders` are those functions of the libnixl_build.so this
    // libnixl.so loaded, found by their mangled names.
    if let Err(why) = unsafe { layout::self_test(&builders) } {
        return refuse(format!("layout self-test failed: {why}"));
    }
    Verdict::Active {
        library: library.display().to_string(),
        version,
    }
}

/// A handle on the already loaded library at `path` (never loads it).
fn open_loaded(path: &Path) -> Option<*mut c_void> {
    use std::os::unix::ffi::OsStrExt;
    let c = CString::new(path.as_os_str().as_bytes()).ok()?;
    // Safety: NOLOAD only returns a handle on an object already mapped
    // (a reference the process keeps for its life).
    let h = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOLOAD | libc::RTLD_LAZY) };
    (!h.is_null()).then_some(h)
}

fn lookup(handle: *mut c_void, name: &str) -> usize {
    let Ok(c) = CString::new(name) else { return 0 };
    // Safety: a valid handle (or RTLD_NEXT) and a NUL-terminated name.
    unsafe { libc::dlsym(handle, c.as_ptr()) as usize }
}

/// NIXL's definition of `name`: the next one after the interposer's, else
/// the one in the loaded `libnixl.so`. Never the interposer's own.
fn find(name: &str, handle: Option<*mut c_void>) -> usize {
    let next = lookup(libc::RTLD_NEXT, name);
    if next != 0 && !is_ours(next) {
        return next;
    }
    handle
        .map(|h| lookup(h, name))
        .filter(|a| *a != 0 && !is_ours(*a))
        .unwrap_or(0)
}

/// Whether `addr` is in the object this code is in (the interposer).
fn is_ours(addr: usize) -> bool {
    let here = object_of(is_ours as *const () as usize);
    here.is_some() && object_of(addr) == here
}

/// The path of the object holding `addr`.
fn object_of(addr: usize) -> Option<PathBuf> {
    let mut info = std::mem::MaybeUninit::<libc::Dl_info>::zeroed();
    // Safety: dladdr fills `info` for any address; a zeroed one is valid.
    let ok = unsafe { libc::dladdr(addr as *const c_void, info.as_mut_ptr()) };
    if ok == 0 {
        return None;
    }
    // Safety: filled by dladdr.
    let info = unsafe { info.assume_init() };
    if info.dli_fname.is_null() {
        return None;
    }
    // Safety: dladdr's file name is a NUL-terminated string of the loader's.
    let name = unsafe { std::ffi::CStr::from_ptr(info.dli_fname) };
    use std::os::unix::ffi::OsStrExt;
    Some(PathBuf::from(std::ffi::OsStr::from_bytes(name.to_bytes())))
}

/// The interposer's exported word on the process (`exports.rs` of
/// nixl-agent-interpose), for a front-end in the same process.
const STATE_SYMBOL: &str = "nixl_agent_interposer_state";
const HAND_DOWN_SYMBOL: &str = "nixl_agent_interposer_hand_down";

/// Whether an interposer is preloaded into this process, and what it
/// decided: `None` without one, `Some(Ok(()))` recording, `Some(Err(why))`
/// refusing this NIXL build. Asking decides its gate if no call has.
pub fn in_process() -> Option<Result<(), String>> {
    type State = unsafe extern "C" fn(*mut *const std::ffi::c_char) -> std::ffi::c_int;
    let addr = lookup(libc::RTLD_DEFAULT, STATE_SYMBOL);
    if addr == 0 {
        return None;
    }
    // Safety: the interposer's exported function of that name and type.
    let f = unsafe { std::mem::transmute::<usize, State>(addr) };
    let mut why: *const std::ffi::c_char = std::ptr::null();
    // Safety: `why` is a valid out-pointer; the function fills it with a
    // static string or leaves it null.
    let recording = unsafe { f(&mut why) } != 0;
    if recording {
        return Some(Ok(()));
    }
    let why = if why.is_null() {
        "refused".to_string()
    } else {
        // Safety: a NUL-terminated string the interposer keeps for ever.
        unsafe { std::ffi::CStr::from_ptr(why) }.to_string_lossy().into_owned()
    };
    Some(Err(why))
}

/// Hands the group and kind of this thread's next registration call down
/// to the interposer (what only a front-end knows: the framework's names).
/// `false` when there is no interposer to take it.
pub fn hand_down(group: &str, kind: &str) -> bool {
    type HandDown = unsafe extern "C" fn(*const u8, usize, *const u8, usize) -> std::ffi::c_int;
    let addr = lookup(libc::RTLD_DEFAULT, HAND_DOWN_SYMBOL);
    if addr == 0 {
        return false;
    }
    // Safety: the interposer's exported function of that name and type.
    let f = unsafe { std::mem::transmute::<usize, HandDown>(addr) };
    // Safety: both slices are live for the call; it copies them.
    unsafe { f(group.as_ptr(), group.len(), kind.as_ptr(), kind.len()) != 0 }
}

const QUIET_SYMBOL: &str = "nixl_agent_interposer_quiet";

/// The interposer's `quiet` switch, if one is preloaded (looked up once).
fn quiet_switch() -> Option<unsafe extern "C" fn(std::ffi::c_int) -> std::ffi::c_int> {
    static ADDR: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    let addr = *ADDR.get_or_init(|| lookup(libc::RTLD_DEFAULT, QUIET_SYMBOL));
    // Safety: the interposer's exported function of that name and type.
    (addr != 0).then(|| unsafe {
        std::mem::transmute::<usize, unsafe extern "C" fn(std::ffi::c_int) -> std::ffi::c_int>(addr)
    })
}

/// Runs `f`, a NIXL call nixl-agent records itself (an `ObservedAgent`'s),
/// with an interposer in the process passing it through: counted once.
pub fn quiet<T>(f: impl FnOnce() -> T) -> T {
    let Some(set) = quiet_switch() else { return f() };
    struct Restore(
        unsafe extern "C" fn(std::ffi::c_int) -> std::ffi::c_int,
        std::ffi::c_int,
    );
    impl Drop for Restore {
        fn drop(&mut self) {
            // Safety: the interposer's switch, with the value it returned.
            unsafe { (self.0)(self.1) };
        }
    }
    // Safety: the interposer's switch; it only sets a thread-local flag.
    let _restore = Restore(set, unsafe { set(1) });
    f()
}

/// Marks this thread, one of nixl-agent's own that records its NIXL calls
/// itself (the lifecycle's, the canary's), as passing through an
/// interposer in the process for good.
pub fn quiet_thread() {
    if let Some(set) = quiet_switch() {
        // Safety: the interposer's switch; it only sets a thread-local flag.
        unsafe { set(1) };
    }
}

const PROCESS_SYMBOL: &str = "nixl_agent_interposer_hand_down_process";

/// Hands the interposer what a front-end knows of the process before its
/// instrumentation starts: the serving frameworks loaded (comma-separated;
/// they choose the groups readiness waits for) and the framework's rank
/// (its pod slot preference; negative: none). `false` without one.
pub fn hand_down_process(frameworks: &str, rank: Option<u32>) -> bool {
    type HandDown = unsafe extern "C" fn(*const u8, usize, i64) -> std::ffi::c_int;
    let addr = lookup(libc::RTLD_DEFAULT, PROCESS_SYMBOL);
    if addr == 0 {
        return false;
    }
    // Safety: the interposer's exported function of that name and type.
    let f = unsafe { std::mem::transmute::<usize, HandDown>(addr) };
    let rank = rank.map_or(-1, i64::from);
    // Safety: the slice is live for the call; it copies it.
    unsafe { f(frameworks.as_ptr(), frameworks.len(), rank) != 0 }
}

/// Runs `f` when the process exits through `exit` (its `atexit` handlers);
/// not on `_exit`, a signal or an abort.
pub fn at_exit(f: extern "C" fn()) -> bool {
    // Safety: registers a function of the process's life (the interposer is
    // never unloaded).
    unsafe { libc::atexit(f) == 0 }
}

/// Whether this process runs a Python interpreter.
pub fn python_in_process() -> bool {
    lookup(libc::RTLD_DEFAULT, "Py_IsInitialized") != 0
}
