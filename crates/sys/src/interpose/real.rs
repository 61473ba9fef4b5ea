//! Finding NIXL's own definitions of what the interposer exports, and the
//! gate: whether this process's NIXL is a build the interposer reads,
//! proven on the loaded copy itself (what it defines, how the layout
//! self-test reads what NIXL's own code built) whatever its version says,
//! decided once, before the first call is recorded.
//!
//! A copy of NIXL is any loaded object that defines `nixlAgent`'s
//! constructor itself, whatever its file is called (`libnixl.so`,
//! auditwheel's `libnixl-<hash>.so`, a library NIXL is linked into) and
//! wherever it lies: the loader's own list of objects is walked
//! (`dl_iterate_phdr`), nothing is parsed from text. Each is opened by the
//! loader's own name for it (`dlopen(RTLD_NOLOAD)`: NIXL's Python bindings
//! load it `RTLD_LOCAL`, where `RTLD_NEXT` finds nothing) and asked by
//! handle. Calls go to one copy: the one the loader would have bound a
//! caller to without the interposer (`RTLD_NEXT`), else the first loaded;
//! every definition forwarded to, the descriptor-list builders the
//! self-test runs and the version read all come from that copy.

use super::layout::{self, Builders, StrideBuilders, BUILDER_SYMBOLS, STRIDE_SYMBOLS};
use super::Sym;
use std::ffi::{c_void, CString};
use std::path::{Path, PathBuf};

/// The operator's word on the version of a build without wheel metadata:
/// a label only; the loaded copy's symbols and layouts decide.
pub use crate::capi::ENV_NIXL_VERSION;

/// What the gate decided.
#[derive(Debug, Clone)]
pub enum Verdict {
    /// Calls are recorded: the library, its version where known.
    Active { library: String, version: Option<String> },
    /// Calls pass through unrecorded: why (in words and as a closed
    /// word), and the library when found.
    Refused {
        library: Option<String>,
        why: String,
        blind: crate::model::Blind,
    },
}

/// The gate's outcome and NIXL's own functions, by [`Sym`].
pub struct Gate {
    pub verdict: Verdict,
    real: [usize; Sym::COUNT],
    /// Strided lists are read: the copy's `nixlStrideDesc` passed
    /// [`layout::stride_test`] (else a strided `prepXferDlist` passes
    /// through unread, its transfers counted without their bytes).
    pub strided: bool,
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

/// Forks since the gate was decided (its child handler is registered
/// first): [`super::fork`].
pub use super::fork::forks;

fn decide() -> Gate {
    super::fork::register();
    let copies = copies();
    let chosen = chosen(&copies);
    let mut real = [0usize; Sym::COUNT];
    if let Some(c) = chosen {
        for sym in Sym::ALL {
            real[sym as usize] = defined_in(c, sym.mangled());
        }
    }
    let verdict = judge(chosen, &copies, &real);
    let strided = matches!(verdict, Verdict::Active { .. })
        && real[Sym::PrepXferDlistStrided as usize] != 0
        && chosen.is_some_and(strides_read);
    Gate { verdict, real, strided }
}

/// Whether `copy`'s strided descriptors read as [`layout::stride_test`]
/// proves them.
fn strides_read(copy: &Copy) -> bool {
    let f: Vec<usize> = STRIDE_SYMBOLS.iter().map(|s| lookup(copy.handle, s)).collect();
    if f.contains(&0) {
        return false;
    }
    let b = StrideBuilders {
        list_new: f[0],
        list_add: f[1],
        list_drop: f[2],
    };
    // Safety: those functions of the libnixl_build.so this copy loaded.
    unsafe { layout::stride_test(&b) }.is_ok()
}

/// A loaded copy of NIXL: an object that defines [`ANCHOR`] itself.
struct Copy {
    path: PathBuf,
    base: usize,
    handle: *mut c_void,
}

/// The method every NIXL release defines under the same name, by which a
/// copy is known.
const ANCHOR: Sym = Sym::AgentNew;

/// Every loaded copy of NIXL, in the loader's order (never the
/// interposer, which defines the same names).
fn copies() -> Vec<Copy> {
    // The interposer: the object this code is in.
    let ours = base_of(base_of as *const () as usize);
    crate::loader::objects()
        .into_iter()
        .filter(|o| !o.path.as_os_str().is_empty() && Some(o.base) != ours)
        .filter_map(|o| {
            let handle = open_loaded(&o.path)?;
            let copy = Copy {
                path: o.path,
                base: o.base,
                handle,
            };
            (defined_in(&copy, ANCHOR.mangled()) != 0).then_some(copy)
        })
        .collect()
}

/// The copy calls go to: the one the loader binds a caller to past the
/// interposer, else the first loaded.
fn chosen(copies: &[Copy]) -> Option<&Copy> {
    let next = lookup(libc::RTLD_NEXT, ANCHOR.mangled());
    let bound = (next != 0).then(|| base_of(next)).flatten();
    copies.iter().find(|c| Some(c.base) == bound).or_else(|| copies.first())
}

/// `name` as `copy` itself defines it (0 when it does not: a name it
/// neither defines nor takes from elsewhere).
fn defined_in(copy: &Copy, name: &str) -> usize {
    let a = lookup(copy.handle, name);
    if a != 0 && base_of(a) == Some(copy.base) {
        a
    } else {
        0
    }
}

fn judge(chosen: Option<&Copy>, copies: &[Copy], real: &[usize]) -> Verdict {
    let Some(copy) = chosen else {
        return Verdict::Refused {
            blind: crate::model::Blind::NoNixl,
            library: None,
            why: "no loaded object defines NIXL's nixlAgent".into(),
        };
    };
    let library = copy.path.as_path();
    let mut shown = library.display().to_string();
    let others: Vec<String> = copies
        .iter()
        .filter(|c| c.base != copy.base)
        .map(|c| c.path.display().to_string())
        .collect();
    if !others.is_empty() {
        shown = format!("{shown} (calls go to this copy; also loaded: {})", others.join(", "));
    }
    use crate::model::Blind;
    let refuse = |blind: Blind, why: String| Verdict::Refused {
        blind,
        library: Some(shown.clone()),
        why,
    };
    // The version is a label, where known: what is read is proven on the
    // loaded copy itself, below, whatever its version string says.
    let version = crate::capi::version_of(library.parent().and_then(crate::discover::wheel_version).as_deref());
    let shown_version = version.as_deref().unwrap_or("of unknown version");
    let missing: Vec<&str> = Sym::ALL
        .iter()
        .filter(|s| !s.optional() && real[**s as usize] == 0 && s.instead().is_none_or(|i| real[i as usize] == 0))
        .map(|s| s.mangled())
        .collect();
    if !missing.is_empty() {
        return refuse(
            Blind::UndefinedMethods,
            format!(
                "NIXL {shown_version} at {} does not define what the interposer hooks: {}",
                library.display(),
                missing.join(", ")
            ),
        );
    }
    // The builders this copy uses: its own dependency (`libnixl_build.so`),
    // asked through its handle.
    let f: Vec<usize> = BUILDER_SYMBOLS.iter().map(|s| lookup(copy.handle, s)).collect();
    let Some(builders) = (!f.contains(&0)).then(|| Builders {
        blob_list_new: f[0],
        blob_list_add: f[1],
        blob_list_drop: f[2],
        basic_new: f[3],
        blob_new: f[4],
        notifs_index: f[5],
        delete: f[6],
    }) else {
        let missing: Vec<&str> = BUILDER_SYMBOLS
            .iter()
            .zip(&f)
            .filter(|(_, a)| **a == 0)
            .map(|(s, _)| *s)
            .collect();
        return refuse(
            Blind::NoSelfTest,
            format!(
                "what the layout self-test builds with is not exported by this NIXL ({}): it cannot run",
                missing.join(", ")
            ),
        );
    };
    // Safety: `builders` are those functions of the libnixl_build.so this
    // copy of NIXL loaded, found by their mangled names.
    if let Err(why) = unsafe { layout::self_test(&builders) } {
        return refuse(Blind::LayoutMismatch, format!("layout self-test failed: {why}"));
    }
    Verdict::Active {
        library: shown,
        version,
    }
}

/// A handle on the already loaded object at `path` (never loads it).
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

/// NIXL's definition of `sym` where the gate found none: asked again of
/// every copy loaded now (the gate was decided before NIXL was loaded, or
/// the copy it chose lacks the name), the first that defines it; cached.
/// 0 when no loaded object but the interposer defines it.
pub fn late(sym: Sym) -> usize {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static LATE: [AtomicUsize; Sym::COUNT] = [const { AtomicUsize::new(0) }; Sym::COUNT];
    let cached = LATE[sym as usize].load(Ordering::Relaxed);
    if cached != 0 {
        return cached;
    }
    let found = copies()
        .iter()
        .map(|c| defined_in(c, sym.mangled()))
        .find(|a| *a != 0)
        .unwrap_or(0);
    LATE[sym as usize].store(found, Ordering::Relaxed);
    found
}

/// The load base of the object holding `addr` (`dladdr`'s `dli_fbase`).
fn base_of(addr: usize) -> Option<usize> {
    let mut info = std::mem::MaybeUninit::<libc::Dl_info>::zeroed();
    // Safety: dladdr fills `info` for any address; a zeroed one is valid.
    let ok = unsafe { libc::dladdr(addr as *const c_void, info.as_mut_ptr()) };
    // Safety: zeroed, then filled by dladdr when it succeeded.
    let info = unsafe { info.assume_init() };
    (ok != 0 && !info.dli_fbase.is_null()).then_some(info.dli_fbase as usize)
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Two copies of NIXL in one process (the set-up's `libnixl.so` and a
    /// copy of it at another path, each loaded `RTLD_LOCAL`): both are
    /// found by what they define, one is chosen, every definition calls go
    /// to is that copy's own, the proof runs on it, and the verdict names
    /// the other.
    #[test]
    fn with_two_copies_loaded_calls_and_the_proof_go_to_one_and_the_other_is_named() {
        let dir = std::env::var("NIXL_LIB_DIR").unwrap_or_else(|_| {
            concat!(env!("CARGO_MANIFEST_DIR"), "/../../.deps/nixl/.nixl_cu12.mesonpy.libs").into()
        });
        let first = Path::new(&dir).join("libnixl.so");
        let tmp = std::env::temp_dir().join(format!("nixl-agent-two-copies-{}", std::process::id()));
        std::fs::create_dir_all(&tmp).unwrap();
        let second = tmp.join("libnixl-copy.so");
        std::fs::copy(&first, &second).unwrap();
        for p in [&first, &second] {
            let c = CString::new(p.to_str().unwrap()).unwrap();
            // Safety: loads NIXL's library (and, for the copy, its
            // dependencies already loaded by the first); its constructors
            // only set up NIXL's own statics.
            let h = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
            assert!(!h.is_null(), "dlopen {}", p.display());
        }
        let copies = copies();
        let paths: Vec<String> = copies.iter().map(|c| c.path.display().to_string()).collect();
        assert!(
            paths.iter().any(|p| p.ends_with("/libnixl.so")) && paths.iter().any(|p| p.ends_with("/libnixl-copy.so")),
            "{paths:?}"
        );
        let chosen = chosen(&copies).expect("a copy is chosen");
        let mut real = [0usize; Sym::COUNT];
        for sym in Sym::ALL {
            real[sym as usize] = defined_in(chosen, sym.mangled());
            if real[sym as usize] != 0 {
                assert_eq!(
                    base_of(real[sym as usize]),
                    Some(chosen.base),
                    "{sym:?} is the chosen copy's own"
                );
            }
        }
        match judge(Some(chosen), &copies, &real) {
            Verdict::Active { library, .. } => {
                assert!(library.contains("calls go to this copy; also loaded: "), "{library}");
            }
            other => panic!("{other:?}"),
        }
        let _ = std::fs::remove_dir_all(&tmp);
    }
}
