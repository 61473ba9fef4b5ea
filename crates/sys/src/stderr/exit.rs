//! The tap's exit paths: what is still in its pipes when the process ends
//! is written out ([`drain`]) from a C `atexit` handler and from the fatal
//! signals' handlers, and by a front-end's own exit path
//! ([`super::StderrTap::drain`]). Everything a handler touches is a raw
//! descriptor or an atomic: no lock, no allocation.

use super::{thread_id, Shared, DRAIN_WAIT};
use std::fs::File;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

/// What an exit path needs of one reader, read without a lock.
pub(super) struct PumpCtl {
    /// The reader's thread id once it runs (an exit path on it drains nothing).
    pub(super) tid: AtomicU64,
    /// Set before each read; cleared once what was read (and, dying, what
    /// was held back) is written out. Stays set while bytes are held.
    pub(super) busy: AtomicBool,
    /// Cleared when the reader has ended.
    pub(super) alive: AtomicBool,
    /// An eventfd that wakes the reader's `poll`.
    pub(super) wake: i32,
    /// The pipe's read end (for `FIONREAD`).
    pub(super) read: i32,
}

/// What [`drain`] needs of an installed tap: raw descriptors and atomics,
/// so that a signal handler can use it.
pub struct Exit {
    pub(super) pid: u32,
    /// Each tapped fd and the real stream's descriptor.
    pub(super) fds: [(i32, i32); 2],
    pub(super) pumps: [Arc<PumpCtl>; 2],
    pub(super) shared: Arc<Shared>,
    /// Keeps the real streams' descriptors open for as long as this lives.
    pub(super) _originals: [Arc<File>; 2],
}

/// The installed tap's [`Exit`], for the exit paths (`atexit`, the fatal
/// signal handlers): the latest tap of this process (a forked child that
/// installs its own replaces its parent's; the one replaced is leaked).
static EXIT: AtomicPtr<Exit> = AtomicPtr::new(std::ptr::null_mut());

/// The signals after which a process dies, drained before it does. SIGTERM
/// (how Kubernetes stops a container) only while its disposition is the
/// default: a program with a handler of its own ends by its own path (exit,
/// drained there), and one that ignores it is left alone. No signal a
/// program ignores gets a handler (an ignored signal stays ignored across
/// `exec`; a handled one would not).
const FATAL: [libc::c_int; 6] = [
    libc::SIGABRT,
    libc::SIGSEGV,
    libc::SIGBUS,
    libc::SIGILL,
    libc::SIGFPE,
    libc::SIGTERM,
];

/// The disposition each of [`FATAL`] had before the tap's handler.
static PREVIOUS: [OnceLock<libc::sigaction>; 6] = [const { OnceLock::new() }; 6];

/// Makes `exit` the one the exit paths drain, and arms them once a process
/// (a forked child inherits both the handlers and the registration).
pub(super) fn arm_exit_paths(exit: &Arc<Exit>) {
    let old = EXIT.swap(Arc::into_raw(exit.clone()).cast_mut(), Ordering::AcqRel);
    // The one replaced may still be read by a handler running now: leaked.
    let _ = old;
    static ARMED: std::sync::Once = std::sync::Once::new();
    ARMED.call_once(|| {
        // Safety: `at_exit` is an `extern "C" fn()` that lives for the
        // process; atexit only records it.
        if unsafe { libc::atexit(at_exit) } != 0 {
            tracing::debug!("cannot register the tap's exit handler");
        }
        for (i, sig) in FATAL.into_iter().enumerate() {
            // Safety: sigaction with a zeroed struct filled below (handler,
            // flags, an empty mask) and a valid out-pointer for the
            // previous disposition; the handler is an `extern "C" fn` that
            // lives for the process. The previous disposition is stored
            // before ours is installed, so the handler always finds it.
            unsafe {
                let mut prev: libc::sigaction = std::mem::zeroed();
                if libc::sigaction(sig, std::ptr::null(), &mut prev) != 0
                    || prev.sa_sigaction == libc::SIG_IGN
                    || (sig == libc::SIGTERM && prev.sa_sigaction != libc::SIG_DFL)
                {
                    continue;
                }
                let _ = PREVIOUS[i].set(prev);
                let mut act: libc::sigaction = std::mem::zeroed();
                act.sa_sigaction = on_fatal_signal as *const () as usize;
                act.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK;
                libc::sigemptyset(&mut act.sa_mask);
                libc::sigaction(sig, &act, std::ptr::null_mut());
            }
        }
    });
}

/// The C `atexit` handler: the pipes are written out before the process
/// ends (C's own stdio buffers, flushed after this, go straight to the
/// real streams).
extern "C" fn at_exit() {
    drain_installed();
}

/// Drains the tap [`EXIT`] holds, if any. Async-signal-safe.
fn drain_installed() {
    let exit = EXIT.load(Ordering::Acquire);
    if !exit.is_null() {
        // Safety: the pointer came from `Arc::into_raw` and is never
        // released (a replaced one is leaked), so it is valid for the life
        // of the process.
        drain(unsafe { &*exit });
    }
}

/// A fatal signal: drains, then hands the signal to whatever handled it
/// before — its handler is called; a default disposition is restored and
/// the signal raised again (it is delivered, and the process ends as it
/// would have, once this returns); an ignored signal is left ignored.
/// `errno` is as it was.
extern "C" fn on_fatal_signal(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    // A SIGTERM handler installed after ours that calls ours as "the
    // previous one" (signal-hook, tokio's signals) means to live on: a
    // default disposition would have done nothing there, so neither do we.
    if sig == libc::SIGTERM && !is_ours(sig) {
        return;
    }
    // Safety: errno is this thread's; read and written back unchanged.
    let errno = unsafe { *libc::__errno_location() };
    drain_installed();
    let prev = FATAL.iter().position(|s| *s == sig).and_then(|i| PREVIOUS[i].get());
    // Safety: only async-signal-safe calls (sigaction, raise), and the
    // previous handler is called as the kernel would have called it, with
    // the same arguments, per its SA_SIGINFO flag.
    unsafe {
        *libc::__errno_location() = errno;
        match prev.map(|p| (p.sa_sigaction, p.sa_flags)) {
            Some((libc::SIG_IGN, _)) => {}
            Some((handler, flags)) if handler != libc::SIG_DFL => {
                if flags & libc::SA_RESETHAND != 0 {
                    default_and_raise(sig, false);
                }
                if flags & libc::SA_SIGINFO != 0 {
                    let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) =
                        std::mem::transmute(handler);
                    f(sig, info, ctx);
                } else {
                    let f: extern "C" fn(libc::c_int) = std::mem::transmute(handler);
                    f(sig);
                }
            }
            _ => default_and_raise(sig, true),
        }
    }
}

/// Whether the tap's handler is `sig`'s disposition now (not only called
/// by another handler that replaced it). Async-signal-safe.
fn is_ours(sig: libc::c_int) -> bool {
    // Safety: sigaction only reads the disposition into a zeroed local.
    unsafe {
        let mut now: libc::sigaction = std::mem::zeroed();
        libc::sigaction(sig, std::ptr::null(), &mut now) == 0
            && now.sa_sigaction == on_fatal_signal as *const () as usize
    }
}

/// Puts `sig` back to its default disposition and, with `raise`, raises
/// it (blocked while its handler runs: delivered when it returns).
///
/// # Safety
/// Async-signal-safe; call only from the handler of `sig`.
unsafe fn default_and_raise(sig: libc::c_int, raise: bool) {
    let mut act: libc::sigaction = std::mem::zeroed();
    act.sa_sigaction = libc::SIG_DFL;
    libc::sigemptyset(&mut act.sa_mask);
    libc::sigaction(sig, &act, std::ptr::null_mut());
    if raise {
        libc::raise(sig);
    }
}

/// Writes out what is in the tap's pipes: points the tapped fds back at the
/// real streams (what is written from now on goes there directly), tells
/// the readers to hold nothing back, and waits (at most [`DRAIN_WAIT`])
/// until both pipes are empty and both readers idle. Async-signal-safe (no
/// lock, no allocation); does nothing in another process than the tap's
/// (a forked child) or on a reader thread itself.
pub(super) fn drain(exit: &Exit) {
    // Safety: getpid has no preconditions.
    if unsafe { libc::getpid() } as u32 != exit.pid {
        return;
    }
    let me = thread_id();
    if exit.pumps.iter().any(|p| p.tid.load(Ordering::SeqCst) == me) {
        return;
    }
    exit.shared.dying.store(true, Ordering::SeqCst);
    for ((fd, real), p) in exit.fds.iter().zip(&exit.pumps) {
        let one = 1u64.to_ne_bytes();
        // Safety: dup2 between descriptors this tap holds open for the
        // life of the process; write of 8 bytes from a local to an eventfd.
        unsafe {
            libc::dup2(*real, *fd);
            libc::write(p.wake, one.as_ptr().cast(), one.len());
        }
    }
    let deadline = now_ns().saturating_add(DRAIN_WAIT.as_nanos() as u64);
    loop {
        // The pipe first, then the flag: a reader sets it before it reads,
        // so an empty pipe and an idle reader mean it is all written.
        let quiet = exit
            .pumps
            .iter()
            .all(|p| !p.alive.load(Ordering::SeqCst) || (unread(p.read) == 0 && !p.busy.load(Ordering::SeqCst)));
        if quiet || now_ns() >= deadline {
            return;
        }
        let ms = libc::timespec {
            tv_sec: 0,
            tv_nsec: 1_000_000,
        };
        // Safety: nanosleep with a valid timespec and no remainder wanted.
        unsafe { libc::nanosleep(&ms, std::ptr::null_mut()) };
    }
}

/// Bytes waiting in the pipe `fd` (0 when it cannot be told).
fn unread(fd: i32) -> libc::c_int {
    let mut n: libc::c_int = 0;
    // Safety: FIONREAD writes one int into `n`.
    if unsafe { libc::ioctl(fd, libc::FIONREAD, &mut n) } < 0 {
        return 0;
    }
    n
}

/// CLOCK_MONOTONIC in nanoseconds (async-signal-safe).
fn now_ns() -> u64 {
    let mut t = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // Safety: clock_gettime writes one timespec into `t`.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut t) };
    (t.tv_sec as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(t.tv_nsec as u64)
}
