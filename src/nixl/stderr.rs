//! Capturing what NIXL and UCX print during a failed call. NIXL (glog)
//! writes to stderr; UCX logs to stdout by default. Both are tapped.
//!
//! [`StderrTap::install`] points file descriptors 1 and 2 at pipes. A reader
//! thread per stream copies every line through to the real stream,
//! unchanged, and while a capture window is open it also keeps the lines for
//! attribution.
//!
//! How misattribution is bounded: a window is open only while a thread is
//! inside a NIXL call for one attempt, and each thread has its own: calls
//! on several threads at once never clear or read each other's lines.
//! glog lines (NIXL's own) carry a thread id and go to that thread's window
//! only; UCX lines carry none and are kept only while exactly one window is
//! open (with two open, nobody can say whose they are). A window that is
//! wanted (the call failed) is closed by an in-band marker written through
//! the same pipes, so every line printed before the marker is in it; one
//! that is not wanted (the call succeeded) is dropped at once, with no
//! marker and no wait. At most `diagnose::MAX_LINES` lines of
//! `diagnose::MAX_LINE` bytes are kept per window. The agent's own log
//! lines go to the real stderr directly, never through the pipe.
//!
//! `nixl-agent check` also asks the tap to keep UCX's protocol tables
//! (`UCX_PROTO_INFO=y`, printed on stdout) to read which transport UCX
//! picked; when check itself turned them on, they are kept and not passed
//! through, so its report (JSON on stdout) is what the operator sees. Only
//! UCX's own lines are kept: a table line behind UCX's `[time] [host:pid`
//! prefix with this process's pid. Anything else, a prompt included, goes
//! out as it comes.
//!
//! What is still in the pipes when the process ends is written out on
//! every exit path ([`drain`]): `exit` (a C `atexit` handler), the fatal
//! signals (SIGABRT, SIGSEGV, SIGBUS, SIGILL, SIGFPE, and SIGTERM while it
//! would kill: a handler that drains, then hands the signal to the handler
//! that was there before), and any
//! front-end's own path (the Python package wraps `os._exit`). Draining
//! points fds 1 and 2 back at the real streams and waits (at most
//! [`DRAIN_WAIT`]) until the pipes are empty and their readers idle.
//!
//! C's stdio buffers (`fflush(NULL)`) are flushed only in a process
//! nixl-agent owns ([`StderrTap::install`]: the binary, `check`), never in
//! a host program's ([`StderrTap::install_in_host`]).

use crate::diagnose;
use crate::diagnose::proto::UcxPrefix;
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd};
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::Duration;

const MARKER: &str = "\u{1e}nixl-agent-capture-end ";
/// How long closing a window waits for the reader to see its marker.
const CLOSE_WAIT: Duration = Duration::from_millis(200);
/// The most of an unfinished line a reader keeps (for attribution and to
/// find a marker): a line that never ends (a progress bar's `\r` updates)
/// is forwarded as it comes and forgotten past this.
const LINE_CAP: usize = 16 * 1024;
/// Bytes read from a pipe at once.
const CHUNK: usize = 64 * 1024;
/// How long an exit path waits for the pipes to be written out.
pub const DRAIN_WAIT: Duration = Duration::from_secs(1);

/// One thread's capture window.
struct Window {
    tid: u64,
    lines: Vec<String>,
    /// [`StderrTap::settle`] ran on this thread since the window opened.
    settled: bool,
}

#[derive(Default)]
struct State {
    /// The open windows, one per thread inside a NIXL call (a few at most).
    windows: Vec<Window>,
    /// The last marker each stream's reader has seen: [stdout, stderr].
    closed: [u64; 2],
    /// UCX protocol table lines kept (see [`StderrTap::keep_protocol_tables`]).
    proto: Vec<String>,
}

/// What the stdout reader does with UCX's protocol tables.
const PROTO_PASS: u8 = 0;
const PROTO_KEEP: u8 = 1;
const PROTO_KEEP_QUIET: u8 = 2;

impl State {
    fn take(&mut self, tid: u64) -> Vec<String> {
        match self.windows.iter().position(|w| w.tid == tid) {
            Some(i) => self.windows.swap_remove(i).lines,
            None => Vec::new(),
        }
    }

    /// The window a line belongs to: its glog thread's, or the only one.
    fn window_for(&mut self, line: &str) -> Option<&mut Window> {
        match diagnose::glog_thread(line) {
            Some(tid) => self.windows.iter_mut().find(|w| w.tid == tid),
            None if self.windows.len() == 1 => self.windows.first_mut(),
            None => None,
        }
    }
}

struct Shared {
    state: Mutex<State>,
    cv: Condvar,
    /// `PROTO_*`: read without the lock on every line.
    proto: AtomicU8,
    /// This process's pid: UCX's own lines carry it.
    pid: u32,
    /// The process is nixl-agent's own (the binary, `check`): C's stdio
    /// may be flushed when settling. Never in a host program.
    owns_stdio: bool,
    /// An exit path is draining: the readers hold nothing back.
    dying: AtomicBool,
}

impl Shared {
    fn new(owns_stdio: bool) -> Shared {
        Shared {
            state: Mutex::new(State::default()),
            cv: Condvar::new(),
            proto: AtomicU8::new(PROTO_PASS),
            pid: std::process::id(),
            owns_stdio,
            dying: AtomicBool::new(false),
        }
    }
}

/// What an exit path needs of one reader, read without a lock.
struct PumpCtl {
    /// The reader's thread id once it runs (an exit path on it drains nothing).
    tid: AtomicU64,
    /// Set before each read; cleared once what was read (and, dying, what
    /// was held back) is written out. Stays set while bytes are held.
    busy: AtomicBool,
    /// Cleared when the reader has ended.
    alive: AtomicBool,
    /// An eventfd that wakes the reader's `poll`.
    wake: i32,
    /// The pipe's read end (for `FIONREAD`).
    read: i32,
}

/// What [`drain`] needs of an installed tap: raw descriptors and atomics,
/// so that a signal handler can use it.
pub(crate) struct Exit {
    pid: u32,
    /// Each tapped fd and the real stream's descriptor.
    fds: [(i32, i32); 2],
    pumps: [Arc<PumpCtl>; 2],
    shared: Arc<Shared>,
    /// Keeps the real streams' descriptors open for as long as this lives.
    _originals: [Arc<File>; 2],
}

/// The installed tap. Cheap to clone.
#[derive(Clone)]
pub struct StderrTap {
    shared: Arc<Shared>,
    original: Arc<File>,
    /// Each tapped fd and the real stream it pointed at.
    originals: Arc<[(i32, Arc<File>)]>,
    seq: Arc<Mutex<u64>>,
    exit: Arc<Exit>,
}

/// The id of the calling thread, as glog prints it.
pub fn thread_id() -> u64 {
    // Safety: gettid has no preconditions and cannot fail.
    (unsafe { libc::gettid() }) as u64
}

impl StderrTap {
    /// Redirects fds 1 and 2 through the tap. Call once, early in `main`,
    /// before other threads start. The agent's logger should write to
    /// [`Self::original`]. All or nothing: when any step fails, both fds
    /// point where they did before and the error is returned.
    ///
    /// For a process nixl-agent owns (its binary, `check`, an embedder's
    /// `main`): settling while UCX's tables are kept flushes C's stdio
    /// buffers first. A host program's tap is [`Self::install_in_host`].
    /// The exit paths are armed: what is in the pipes is written out at
    /// `exit` and on a fatal signal ([`drain`]).
    pub fn install() -> std::io::Result<StderrTap> {
        Self::install_owned(true)
    }

    /// [`Self::install`] inside a host program (the Python front-end):
    /// C's stdio is never flushed, locked or touched by settling.
    pub(crate) fn install_in_host() -> std::io::Result<StderrTap> {
        Self::install_owned(false)
    }

    fn install_owned(owns_stdio: bool) -> std::io::Result<StderrTap> {
        let tap = install_on(
            [1, 2],
            &|name, f| std::thread::Builder::new().name(name.into()).spawn(f).map(drop),
            owns_stdio,
        )?;
        arm_exit_paths(&tap.exit);
        Ok(tap)
    }

    /// Writes out what is in the pipes now and points fds 1 and 2 back at
    /// the real streams, for good: for an exit path of the front-end's own
    /// (Python's `os._exit`) just before the process ends. Waits at most
    /// [`DRAIN_WAIT`].
    pub fn drain(&self) {
        drain(&self.exit);
    }

    /// In a forked child: points fds 1 and 2 back at the real streams. The
    /// pipes' readers are the parent's threads; the child's output must not
    /// depend on the parent living (a pipe with no reader is EPIPE).
    pub fn restore_in_child(&self) {
        for (fd, original) in self.originals.iter() {
            restore(*fd, original);
        }
    }

    /// The real stderr, for the agent's own log lines.
    pub fn original(&self) -> Arc<File> {
        self.original.clone()
    }

    /// Opens a capture window for the calling thread (a window it had open
    /// starts again empty).
    pub fn open(&self) {
        let tid = thread_id();
        let mut st = self.shared.state.lock().unwrap_or_else(|e| e.into_inner());
        let _ = st.take(tid);
        st.windows.push(Window {
            tid,
            lines: Vec::new(),
            settled: false,
        });
    }

    /// Closes the calling thread's window and returns what it caught,
    /// waiting (at most [`CLOSE_WAIT`]) until the readers have copied
    /// everything printed before now.
    pub fn close(&self) -> Vec<String> {
        let tid = thread_id();
        let settled = {
            let st = self.shared.state.lock().unwrap_or_else(|e| e.into_inner());
            st.windows.iter().any(|w| w.tid == tid && w.settled)
        };
        if !settled {
            self.settle();
        }
        let mut st = self.shared.state.lock().unwrap_or_else(|e| e.into_inner());
        st.take(tid)
    }

    /// Drops the calling thread's window unread: no marker, no wait.
    pub fn discard(&self) {
        let mut st = self.shared.state.lock().unwrap_or_else(|e| e.into_inner());
        let _ = st.take(thread_id());
    }

    /// Waits (at most [`CLOSE_WAIT`]) until the readers have copied
    /// everything printed so far; the windows stay open. A front-end that
    /// holds an interpreter lock calls this without it, then closes.
    pub fn settle(&self) {
        if self.shared.owns_stdio && self.shared.proto.load(Ordering::Relaxed) != PROTO_PASS {
            // UCX prints its tables through C's stdio, block-buffered on a
            // pipe: flushed first, so the marker never lands inside a line
            // half in the pipe and half in the buffer. Only in a process
            // nixl-agent owns (check): fflush(NULL) takes every FILE's
            // lock, and a host program's buffers are its own (its C stdout
            // is line-buffered instead, `line_buffer_c_stdout`).
            // Safety: fflush(NULL) flushes every C output stream; it takes
            // no pointer of ours and changes nothing but buffer contents.
            unsafe { libc::fflush(std::ptr::null_mut()) };
        }
        let seq = {
            let mut s = self.seq.lock().unwrap_or_else(|e| e.into_inner());
            *s += 1;
            *s
        };
        // Through the same pipes: std's stderr is unbuffered, its stdout
        // line-buffered (the marker ends in a newline and is flushed).
        let marker = format!("{MARKER}{seq}\n");
        let _ = std::io::stderr().write_all(marker.as_bytes());
        let mut out = std::io::stdout().lock();
        let _ = out.write_all(marker.as_bytes()).and_then(|()| out.flush());
        drop(out);
        let st = self.shared.state.lock().unwrap_or_else(|e| e.into_inner());
        let (mut st, _) = self
            .shared
            .cv
            .wait_timeout_while(st, CLOSE_WAIT, |st| st.closed.iter().any(|c| *c < seq))
            .unwrap_or_else(|e| e.into_inner());
        let tid = thread_id();
        if let Some(w) = st.windows.iter_mut().find(|w| w.tid == tid) {
            w.settled = true;
        }
    }

    /// From now on, keeps the UCX protocol tables printed on stdout (at
    /// most `diagnose::proto::MAX_TABLE_LINES` lines not taken yet);
    /// `quiet` also keeps them from the real stdout (for when nixl-agent
    /// turned them on: `check`, `NIXL_AGENT_TRANSPORTS=1`).
    pub fn keep_protocol_tables(&self, quiet: bool) {
        let mode = if quiet { PROTO_KEEP_QUIET } else { PROTO_KEEP };
        self.shared.proto.store(mode, Ordering::Relaxed);
    }

    /// Makes C's `stdout` line-buffered (as it is on a terminal), for a
    /// host process whose UCX tables nixl-agent asked for: on a pipe, C's
    /// stdio flushes 4 KiB blocks that cut UCX's lines in two, and the
    /// program's own writes to fd 1 then land between the halves. Line
    /// buffering writes the same bytes, each line at once.
    pub fn line_buffer_c_stdout(&self) {
        extern "C" {
            static mut stdout: *mut libc::FILE;
        }
        // Safety: `stdout` is glibc's own stream, valid for the life of the
        // process; it is flushed first, and setvbuf with a null buffer lets
        // the library allocate its own. Nothing of ours is handed over.
        unsafe {
            let out = stdout;
            if !out.is_null() {
                libc::fflush(out);
                libc::setvbuf(out, std::ptr::null_mut(), libc::_IOLBF, 0);
            }
        }
    }

    /// The protocol table lines kept so far (everything printed before
    /// now is in), without their `[time] [host:pid]` prefix; taken.
    pub(crate) fn protocol_tables(&self) -> Vec<String> {
        self.settle();
        let mut st = self.shared.state.lock().unwrap_or_else(|e| e.into_inner());
        std::mem::take(&mut st.proto)
    }

    /// Waits until everything written to stderr so far is copied through.
    pub fn flush(&self) {
        self.settle();
    }
}

/// Starts a reader thread (a seam, so a test can make it fail).
type Spawn<'a> = &'a dyn Fn(&str, Box<dyn FnOnce() + Send>) -> std::io::Result<()>;

/// [`StderrTap::install`] for the given fds (stdout-like, stderr-like),
/// without arming the exit paths.
fn install_on(fds: [i32; 2], spawn: Spawn<'_>, owns_stdio: bool) -> std::io::Result<StderrTap> {
    let mut redirected: Vec<(i32, Arc<File>, File)> = Vec::new();
    for fd in fds {
        match redirect(fd) {
            Ok((original, read)) => redirected.push((fd, original, read)),
            Err(e) => {
                for (fd, original, _) in &redirected {
                    restore(*fd, original);
                }
                return Err(e);
            }
        }
    }
    let shared = Arc::new(Shared::new(owns_stdio));
    let originals: Vec<(i32, Arc<File>)> = redirected.iter().map(|(fd, o, _)| (*fd, o.clone())).collect();
    let undo = |e: std::io::Error| {
        for (fd, original) in &originals {
            restore(*fd, original);
        }
        e
    };
    let mut pumps = Vec::new();
    for (_, _, read) in &redirected {
        let wake = eventfd().map_err(undo)?;
        pumps.push(Arc::new(PumpCtl {
            tid: AtomicU64::new(0),
            busy: AtomicBool::new(false),
            alive: AtomicBool::new(true),
            wake,
            read: read.as_raw_fd(),
        }));
    }
    let exit = Arc::new(Exit {
        pid: shared.pid,
        fds: [
            (originals[0].0, originals[0].1.as_raw_fd()),
            (originals[1].0, originals[1].1.as_raw_fd()),
        ],
        pumps: [pumps[0].clone(), pumps[1].clone()],
        shared: shared.clone(),
        _originals: [originals[0].1.clone(), originals[1].1.clone()],
    });
    for (stream, (fd, original, read)) in redirected.into_iter().enumerate() {
        let s = shared.clone();
        let ctl = pumps[stream].clone();
        let pump_and_restore = Box::new(move || {
            // However the pump ends (a read error, a panic), the host's fd
            // goes back to the real stream before the pipe's read end
            // closes (locals drop in reverse order): the program never
            // writes into a pipe nobody reads (EPIPE, a BrokenPipeError).
            let read = read;
            let _restore = Restore {
                fd,
                original: &original,
                ctl: &ctl,
            };
            pump(&read, &original, &s, stream, &ctl);
        });
        if let Err(e) = spawn(["stdout-tap", "stderr-tap"][stream], pump_and_restore) {
            return Err(undo(e));
        }
    }
    Ok(StderrTap {
        shared,
        original: originals[1].1.clone(),
        originals: originals.into(),
        seq: Arc::new(Mutex::new(0)),
        exit,
    })
}

/// A non-blocking eventfd (closed on exec), to wake a reader's `poll`.
fn eventfd() -> std::io::Result<i32> {
    // Safety: eventfd takes no pointer; the result is checked.
    let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(fd)
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
fn arm_exit_paths(exit: &Arc<Exit>) {
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
fn drain(exit: &Exit) {
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

/// Points `fd` back at `original` when dropped, and says the reader ended.
struct Restore<'a> {
    fd: i32,
    original: &'a File,
    ctl: &'a PumpCtl,
}

impl Drop for Restore<'_> {
    fn drop(&mut self) {
        restore(self.fd, self.original);
        self.ctl.busy.store(false, Ordering::SeqCst);
        self.ctl.alive.store(false, Ordering::SeqCst);
    }
}

/// Points `fd` back at `original`.
fn restore(fd: i32, original: &File) {
    // Safety: dup2 on two descriptors this process holds open (`original`
    // is owned by the caller); the result is only logged.
    if unsafe { libc::dup2(original.as_raw_fd(), fd) } < 0 {
        let e = std::io::Error::last_os_error();
        let _ = writeln!(&mut &*original, "nixl-agent: cannot restore fd {fd}: {e}");
    }
}

/// Points `fd` at a new pipe; returns the original (dup'ed) and the read end.
fn redirect(fd: i32) -> std::io::Result<(Arc<File>, File)> {
    // Safety: dup/pipe2/dup2/close on descriptors this function owns; every
    // return value is checked before use, and on error what was opened is
    // closed again.
    unsafe {
        let orig = libc::dup(fd);
        if orig < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let mut fds = [0i32; 2];
        if libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) != 0 {
            let e = std::io::Error::last_os_error();
            libc::close(orig);
            return Err(e);
        }
        if libc::dup2(fds[1], fd) < 0 {
            let e = std::io::Error::last_os_error();
            libc::close(orig);
            libc::close(fds[0]);
            libc::close(fds[1]);
            return Err(e);
        }
        libc::close(fds[1]);
        Ok((Arc::new(File::from_raw_fd(orig)), File::from_raw_fd(fds[0])))
    }
}

/// Copies what the program writes to `stream` through to `out` as it
/// comes (a line without its newline too), keeping each line for the
/// windows, UCX's tables and the end markers. Returns when the pipe ends or
/// a read fails. `ctl` tells an exit path ([`drain`]) whether it is busy;
/// its wake fd ends a wait in `poll` so that held bytes go out.
fn pump(mut read: &File, out: &File, shared: &Shared, stream: usize, ctl: &PumpCtl) {
    ctl.tid.store(thread_id(), Ordering::SeqCst);
    let mut chunk = vec![0u8; CHUNK];
    let mut line = Line::default();
    let mut fds = [
        libc::pollfd {
            fd: read.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        },
        libc::pollfd {
            fd: ctl.wake,
            events: libc::POLLIN,
            revents: 0,
        },
    ];
    loop {
        // Safety: `fds` is a valid array of two pollfd for its length.
        let r = unsafe { libc::poll(fds.as_mut_ptr(), 2, -1) };
        if r < 0 {
            if std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            break;
        }
        if fds[1].revents != 0 {
            let mut n = [0u8; 8];
            // Safety: reads at most 8 bytes into `n`, the eventfd's counter
            // (non-blocking: nothing to read is EAGAIN, ignored).
            let _ = unsafe { libc::read(ctl.wake, n.as_mut_ptr().cast(), n.len()) };
        }
        if fds[0].revents != 0 {
            ctl.busy.store(true, Ordering::SeqCst);
            let n = match read.read(&mut chunk) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => 0,
                Err(_) => break,
            };
            let mut rest = &chunk[..n];
            while let Some(i) = rest.iter().position(|&b| b == b'\n') {
                line.bytes.extend_from_slice(&rest[..=i]);
                rest = &rest[i + 1..];
                line.end(out, shared, stream);
            }
            line.bytes.extend_from_slice(rest);
            line.forward_unfinished(out, shared, stream);
        }
        if shared.dying.load(Ordering::SeqCst) {
            line.forward_held(out);
        }
        // Idle only with nothing held back: an exit path waits for that.
        ctl.busy.store(line.holds(), Ordering::SeqCst);
    }
    line.forward_rest(out);
}

/// The line a reader is in: its bytes so far, of which `sent` went out.
#[derive(Default)]
struct Line {
    bytes: Vec<u8>,
    sent: usize,
}

impl Line {
    fn write(&mut self, out: &File, to: usize) {
        if to > self.sent {
            let mut out = out;
            let _ = out.write_all(&self.bytes[self.sent..to]);
            self.sent = to;
        }
    }

    fn clear(&mut self) {
        self.bytes.clear();
        self.sent = 0;
    }

    /// Bytes of the line not written out yet.
    fn holds(&self) -> bool {
        self.bytes.len() > self.sent
    }

    /// The process is ending: what is held back goes out as it is.
    fn forward_held(&mut self, out: &File) {
        let end = self.bytes.len();
        self.write(out, end);
    }

    /// What the program wrote of a line it has not finished goes out now,
    /// but for what may be nixl-agent's own: from a byte that may start an
    /// end marker, or, while UCX's tables are kept from stdout, a line that
    /// may be one of them (so far it reads as UCX's prefix with this
    /// process's pid; a prompt such as `[y/N] ` is told apart at its second
    /// byte). Past [`LINE_CAP`] the line goes out whole and is forgotten
    /// (but for a marker's worth). While dying, nothing is held.
    fn forward_unfinished(&mut self, out: &File, shared: &Shared, stream: usize) {
        let quiet = stream == 0 && shared.proto.load(Ordering::Relaxed) == PROTO_KEEP_QUIET;
        let ucx = || match diagnose::proto::ucx_prefix(&self.bytes) {
            UcxPrefix::Partial => true,
            UcxPrefix::Pid(p) => p == shared.pid,
            UcxPrefix::Not => false,
        };
        let hold_from = if shared.dying.load(Ordering::Relaxed) {
            self.bytes.len()
        } else if quiet && self.sent == 0 && ucx() {
            0
        } else {
            let m = MARKER.as_bytes()[0];
            self.bytes[self.sent..]
                .iter()
                .position(|&b| b == m)
                .map_or(self.bytes.len(), |p| self.sent + p)
        };
        self.write(out, hold_from);
        if self.bytes.len() > LINE_CAP {
            // A marker in the making is short: kept; anything else goes.
            let held = self.bytes.len() - self.sent;
            if held > MARKER.len() + 24 {
                let end = self.bytes.len();
                self.write(out, end);
            }
            self.bytes.drain(..self.sent);
            self.sent = 0;
        }
    }

    /// A whole line (ending in a newline) is in.
    fn end(&mut self, out: &File, shared: &Shared, stream: usize) {
        // The marker may follow a line the program left unfinished (a
        // progress bar's `\r`): what precedes it is the program's, byte for
        // byte, and goes through as it is — but for half a UCX table line
        // while the tables are kept, which waits for its other half.
        let (content, seq) = split_marker(&self.bytes);
        if let Some(seq) = seq {
            let at = content.len();
            let half_table = stream == 0
                && shared.proto.load(Ordering::Relaxed) != PROTO_PASS
                && diagnose::proto::own_table_line(&String::from_utf8_lossy(content), shared.pid).is_some();
            if half_table {
                self.bytes.truncate(at);
                self.sent = self.sent.min(at);
            } else {
                self.write(out, at);
                self.clear();
            }
            let mut st = shared.state.lock().unwrap_or_else(|e| e.into_inner());
            st.closed[stream] = st.closed[stream].max(seq);
            shared.cv.notify_all();
            return;
        }
        let line = String::from_utf8_lossy(&self.bytes).into_owned();
        let proto = shared.proto.load(Ordering::Relaxed);
        if proto != PROTO_PASS && stream == 0 {
            if let Some(table) = diagnose::proto::own_table_line(&line, shared.pid) {
                let mut st = shared.state.lock().unwrap_or_else(|e| e.into_inner());
                if st.proto.len() < diagnose::proto::MAX_TABLE_LINES {
                    st.proto.push(table.to_string());
                }
                drop(st);
                if proto == PROTO_KEEP_QUIET {
                    self.clear();
                    return;
                }
            }
        }
        let end = self.bytes.len();
        self.write(out, end);
        self.clear();
        let mut st = shared.state.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(w) = st.window_for(&line) {
            if w.lines.len() < diagnose::MAX_LINES {
                if let Some(l) = diagnose::keep(&line, w.tid) {
                    w.lines.push(l);
                }
            }
        }
    }

    /// The pipe ended: what is left of the line goes out.
    fn forward_rest(&mut self, out: &File) {
        let end = self.bytes.len();
        self.write(out, end);
        self.clear();
    }
}

/// Splits a line read from the pipe into the program's bytes before an
/// in-band end marker and the marker's sequence number, if it holds one.
fn split_marker(buf: &[u8]) -> (&[u8], Option<u64>) {
    let m = MARKER.as_bytes();
    let Some(at) = buf.windows(m.len()).position(|w| w == m) else {
        return (buf, None);
    };
    let seq = std::str::from_utf8(&buf[at + m.len()..])
        .ok()
        .and_then(|r| r.trim().parse::<u64>().ok());
    match seq {
        Some(seq) => (&buf[..at], Some(seq)),
        None => (buf, None),
    }
}

impl crate::record::Capture for StderrTap {
    fn begin(&self) {
        self.open();
    }

    fn end(&self, wanted: bool) -> Vec<String> {
        if wanted {
            self.close()
        } else {
            self.discard();
            Vec::new()
        }
    }

    fn settle(&self) {
        StderrTap::settle(self)
    }

    fn protocol_tables(&self) -> Vec<String> {
        StderrTap::protocol_tables(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    /// A pipe standing for the host's real stdout or stderr, and an fd that
    /// points at its write end (standing for fd 1 or 2).
    fn fake_stream() -> (File, i32) {
        let mut fds = [0i32; 2];
        // Safety: pipe2 fills two fds on success (checked); dup on the write
        // end this test owns; the write end itself is closed after the dup.
        unsafe {
            assert_eq!(libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC), 0);
            let target = libc::dup(fds[1]);
            assert!(target >= 0);
            libc::close(fds[1]);
            (File::from_raw_fd(fds[0]), target)
        }
    }

    fn write_fd(fd: i32, bytes: &[u8]) {
        // Safety: `bytes` is valid for its length; fd is open in this test.
        let n = unsafe { libc::write(fd, bytes.as_ptr().cast(), bytes.len()) };
        assert_eq!(n, bytes.len() as isize);
    }

    #[test]
    fn an_end_marker_after_an_unfinished_line_leaves_the_line_as_it_was() {
        let marker = format!("{MARKER}7\n");
        assert_eq!(split_marker(marker.as_bytes()), (&b""[..], Some(7)));
        let after_progress = format!("progress 50%\r{MARKER}8\n");
        assert_eq!(
            split_marker(after_progress.as_bytes()),
            (&b"progress 50%\r"[..], Some(8))
        );
        assert_eq!(split_marker(b"an ordinary line\n"), (&b"an ordinary line\n"[..], None));
        // A look-alike without a sequence number is the program's.
        let fake = format!("{MARKER}x\n");
        assert_eq!(split_marker(fake.as_bytes()).1, None);
    }

    /// Polls until `f` holds (the reader threads copy asynchronously).
    fn until(tap: &StderrTap, f: impl Fn(&State) -> bool) {
        let t0 = std::time::Instant::now();
        while !f(&tap.shared.state.lock().unwrap()) {
            assert!(t0.elapsed() < Duration::from_secs(5), "the reader never got there");
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    fn glog(tid: u64, text: &str) -> String {
        format!("E1130 15:17:19.574804 {tid:>8} ucx_utils.cpp:659] {text}\n")
    }

    #[test]
    fn each_thread_has_its_own_window() {
        let (_out_real, out_fd) = fake_stream();
        let (_err_real, err_fd) = fake_stream();
        let tap = tap_on(out_fd, err_fd);
        let (to_b, b_rx) = std::sync::mpsc::channel::<()>();
        let (to_a, a_rx) = std::sync::mpsc::channel::<u64>();
        let b_tap = tap.clone();
        let b = std::thread::spawn(move || {
            b_tap.open();
            to_a.send(thread_id()).unwrap();
            b_rx.recv().unwrap();
            b_tap.close()
        });
        tap.open();
        let b_tid = a_rx.recv().unwrap();
        let a_tid = thread_id();
        // Two windows open: a line with no thread id is nobody's. (One
        // pipe, read in order: once the glog lines are in, so is this.)
        write_fd(
            err_fd,
            b"[1796051839.574782] [vm:4699 :0] ucp_mm.c:1221 UCX  ERROR whose\n",
        );
        write_fd(err_fd, glog(a_tid, "a's line").as_bytes());
        write_fd(err_fd, glog(b_tid, "b's line").as_bytes());
        until(&tap, |st| st.windows.iter().all(|w| w.lines.len() == 1));
        // b closes first: a's window is neither cleared nor read.
        to_b.send(()).unwrap();
        let b_lines = b.join().unwrap();
        assert_eq!(b_lines.len(), 1, "{b_lines:?}");
        assert!(b_lines[0].ends_with("b's line"));
        // Now a's is the only window: an id-less line is a's.
        write_fd(out_fd, b"UCX  ERROR mine now\n");
        until(&tap, |st| st.windows[0].lines.len() == 2);
        let a_lines = tap.close();
        assert!(
            a_lines[0].ends_with("a's line") && a_lines[1].ends_with("mine now"),
            "{a_lines:?}"
        );
        // A window not wanted is dropped at once, unread.
        tap.open();
        write_fd(err_fd, glog(a_tid, "not wanted").as_bytes());
        crate::record::Capture::end(&tap, false);
        assert!(tap.shared.state.lock().unwrap().windows.is_empty());
    }

    #[test]
    fn half_a_ucx_table_line_cut_by_a_marker_is_joined_and_kept_off_stdout() {
        let (mut out_real, out_fd) = fake_stream();
        let (_err_real, err_fd) = fake_stream();
        let tap = tap_on(out_fd, err_fd);
        tap.keep_protocol_tables(true);
        // Another thread's stdio flushed half a table line; a marker came
        // between the halves.
        let ucx = format!("[1.2] [vm:{:<5}:0]   +------", std::process::id());
        write_fd(out_fd, ucx.as_bytes());
        write_fd(out_fd, format!("{MARKER}1\n").as_bytes());
        write_fd(out_fd, b"------+\nthe program's own line\n");
        until(&tap, |st| st.proto.len() == 1);
        assert_eq!(tap.shared.state.lock().unwrap().proto, ["+------------+"]);
        let mut buf = [0u8; 23];
        out_real.read_exact(&mut buf).unwrap();
        assert_eq!(
            &buf, b"the program's own line\n",
            "only the program's line went through"
        );
    }

    fn tap_on(out_fd: i32, err_fd: i32) -> StderrTap {
        install_on(
            [out_fd, err_fd],
            &|_, f| {
                std::thread::spawn(f);
                Ok(())
            },
            false,
        )
        .unwrap()
    }

    /// A tap on two fake streams that keeps UCX's tables off stdout.
    struct Quiet {
        out_real: File,
        out_fd: i32,
        err_real: File,
        err_fd: i32,
        tap: StderrTap,
    }

    fn quiet() -> Quiet {
        let (out_real, out_fd) = fake_stream();
        let (err_real, err_fd) = fake_stream();
        let tap = tap_on(out_fd, err_fd);
        tap.keep_protocol_tables(true);
        Quiet {
            out_real,
            out_fd,
            err_real,
            err_fd,
            tap,
        }
    }

    /// With UCX's tables kept off stdout, only this process's UCX lines are
    /// kept: another process's (or a program's look-alike) passes, and an
    /// unfinished line starting with `[` (a prompt) goes out as it comes.
    #[test]
    fn only_ucxs_own_lines_are_kept_and_a_prompt_goes_out_as_it_comes() {
        let Quiet {
            out_real, out_fd, tap, ..
        } = quiet();
        write_fd(out_fd, b"[y/N] ");
        assert_eq!(read_within(&out_real, 6).as_deref(), Some(&b"[y/N] "[..]), "the prompt");
        write_fd(out_fd, b"y\n");
        let mine = format!("[1796185907.212271] [vm:{:<5}:0]   | mine |\n", std::process::id());
        let other = "[1796185907.212271] [vm:1    :0]   | not mine |\n";
        // This process's UCX line is held while it comes, and kept.
        let (head, tail) = mine.split_at(30);
        write_fd(out_fd, head.as_bytes());
        write_fd(out_fd, tail.as_bytes());
        write_fd(out_fd, other.as_bytes());
        assert_eq!(
            read_within(&out_real, 2 + other.len()).as_deref(),
            Some(format!("y\n{other}").as_bytes()),
            "another process's table line passes; this one's does not"
        );
        until(&tap, |st| st.proto.len() == 1);
        assert_eq!(tap.shared.state.lock().unwrap().proto, ["| mine |"]);
    }

    /// Draining (an exit path) writes out what is in the pipe and what a
    /// reader holds back (half a line that may be UCX's, the start of what
    /// may be a marker), and points the fds back at the real streams.
    #[test]
    fn a_drain_writes_out_the_pipes_and_what_is_held_back() {
        let Quiet {
            out_real,
            out_fd,
            err_real,
            err_fd,
            tap,
        } = quiet();
        let held = format!("[1796185907.212271] [vm:{:<5}:0]   | half", std::process::id());
        write_fd(out_fd, held.as_bytes());
        write_fd(err_fd, b"last words\n\x1e");
        assert_eq!(read_within(&err_real, 11).as_deref(), Some(&b"last words\n"[..]));
        tap.drain();
        assert_eq!(read_within(&out_real, held.len()).as_deref(), Some(held.as_bytes()));
        assert_eq!(read_within(&err_real, 1).as_deref(), Some(&b"\x1e"[..]));
        // From now on the fds write to the real streams directly.
        write_fd(out_fd, b"direct\n");
        assert_eq!(read_within(&out_real, 7).as_deref(), Some(&b"direct\n"[..]));
        // A drain from another process (a forked child's copy) does nothing.
        let mut other = Exit {
            pid: 1,
            ..clone_exit(&tap.exit)
        };
        other.fds = [(-1, -1), (-1, -1)];
        drain(&other);
    }

    fn clone_exit(e: &Exit) -> Exit {
        Exit {
            pid: e.pid,
            fds: e.fds,
            pumps: e.pumps.clone(),
            shared: e.shared.clone(),
            _originals: e._originals.clone(),
        }
    }

    /// Reads `n` bytes from `from` on a thread; `None` when they do not
    /// all come within 5 s.
    fn read_within(from: &File, n: usize) -> Option<Vec<u8>> {
        let mut from = from.try_clone().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut buf = vec![0u8; n];
            if from.read_exact(&mut buf).is_ok() {
                let _ = tx.send(buf);
            }
        });
        rx.recv_timeout(Duration::from_secs(5)).ok()
    }

    #[test]
    fn a_line_without_its_newline_goes_through_as_it_comes() {
        let (out_real, out_fd) = fake_stream();
        let (err_real, err_fd) = fake_stream();
        let _tap = tap_on(out_fd, err_fd);
        // A progress bar's update: no newline, ever.
        write_fd(err_fd, b"progress 50%\r");
        assert_eq!(read_within(&err_real, 13).as_deref(), Some(&b"progress 50%\r"[..]));
        // Far more than a line's cap, still without a newline: all of it,
        // in order, at once.
        let long: Vec<u8> = (0..(2 * LINE_CAP + 100)).map(|i| b'a' + (i % 26) as u8).collect();
        write_fd(out_fd, &long);
        assert!(
            read_within(&out_real, long.len()) == Some(long),
            "the unfinished line came through whole"
        );
        // A marker still never reaches the program's stream, even after an
        // unfinished line.
        write_fd(out_fd, format!("50%\r{MARKER}3\nnext\n").as_bytes());
        assert_eq!(read_within(&out_real, 8).as_deref(), Some(&b"50%\rnext"[..]));
    }

    #[test]
    fn a_reader_that_fails_gives_the_fd_back_before_its_pipe_closes() {
        let (mut real, target) = fake_stream();
        // Safety: dup of an fd this test owns.
        let original = Arc::new(unsafe { File::from_raw_fd(libc::dup(target)) });
        let (read, _) = redirect_pipe_into(target);
        let shared = Shared::new(false);
        let ctl = PumpCtl {
            tid: AtomicU64::new(0),
            busy: AtomicBool::new(false),
            alive: AtomicBool::new(true),
            wake: eventfd().unwrap(),
            read: read.as_raw_fd(),
        };
        // The pipe's read end, made unreadable: the reader's next read fails.
        let dev_null = std::fs::OpenOptions::new().write(true).open("/dev/null").unwrap();
        use std::os::fd::AsRawFd;
        // Safety: dup2 between two fds this test owns.
        assert!(unsafe { libc::dup2(dev_null.as_raw_fd(), read.as_raw_fd()) } >= 0);
        {
            let read = read;
            let _restore = Restore {
                fd: target,
                original: &original,
                ctl: &ctl,
            };
            pump(&read, &original, &shared, 1, &ctl);
        }
        write_fd(target, b"after\n");
        let mut buf = [0u8; 6];
        real.read_exact(&mut buf).unwrap();
        assert_eq!(&buf, b"after\n");
        // Safety: closing the fd this test made.
        unsafe { libc::close(target) };
    }

    /// Points `fd` at a new pipe (as `redirect` does); the read end.
    fn redirect_pipe_into(fd: i32) -> (File, ()) {
        let (_, read) = redirect(fd).unwrap();
        (read, ())
    }

    #[test]
    fn a_failed_install_leaves_both_streams_as_they_were() {
        let (mut out_real, out_fd) = fake_stream();
        let (mut err_real, err_fd) = fake_stream();
        let calls = std::sync::atomic::AtomicUsize::new(0);
        let failing_second = |_: &str, f: Box<dyn FnOnce() + Send>| {
            if calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst) == 1 {
                return Err(std::io::Error::other("no more threads"));
            }
            std::thread::spawn(f);
            Ok(())
        };
        assert!(install_on([out_fd, err_fd], &failing_second, false).is_err());
        // Both fds write straight to the real streams again.
        write_fd(out_fd, b"to stdout\n");
        write_fd(err_fd, b"to stderr\n");
        let mut buf = [0u8; 10];
        out_real.read_exact(&mut buf).unwrap();
        assert_eq!(&buf, b"to stdout\n");
        err_real.read_exact(&mut buf).unwrap();
        assert_eq!(&buf, b"to stderr\n");
        // Safety: closing the fds this test made.
        unsafe {
            libc::close(out_fd);
            libc::close(err_fd);
        }
    }
}
