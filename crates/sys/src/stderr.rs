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
//! a host program's ([`StderrTap::install_in_host`]). A child a host
//! program forks has its fds 1 and 2 pointed back at the real streams at
//! the fork (`crate::interpose::fork`): the pipes' readers are the parent's
//! threads, and the child's output must not depend on the parent living.

use crate::diagnose;
use crate::diagnose::proto::UcxPrefix;
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

mod exit;
use exit::{arm_exit_paths, drain, Exit, PumpCtl};

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

/// What the capture windows and the stream readers share.
#[derive(Default)]
struct CaptureState {
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

impl CaptureState {
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
    state: Mutex<CaptureState>,
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
            state: Mutex::new(CaptureState::default()),
            cv: Condvar::new(),
            proto: AtomicU8::new(PROTO_PASS),
            pid: std::process::id(),
            owns_stdio,
            dying: AtomicBool::new(false),
        }
    }
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
    #[doc(hidden)]
    pub fn install_in_host() -> std::io::Result<StderrTap> {
        Self::install_owned(false)
    }

    fn install_owned(owns_stdio: bool) -> std::io::Result<StderrTap> {
        let tap = install_on(
            [1, 2],
            &|name, f| std::thread::Builder::new().name(name.into()).spawn(f).map(drop),
            owns_stdio,
        )?;
        arm_exit_paths(&tap.exit);
        if !owns_stdio {
            // A child the host forks points fds 1 and 2 back at the real
            // streams at the fork (kept open for good by the exit paths).
            for (fd, original) in tap.originals.iter() {
                crate::interpose::fork::tapped(*fd, original.as_raw_fd());
            }
        }
        Ok(tap)
    }

    /// Writes out what is in the pipes now and points fds 1 and 2 back at
    /// the real streams, for good: for an exit path of the front-end's own
    /// (Python's `os._exit`) just before the process ends. Waits at most
    /// [`DRAIN_WAIT`].
    pub fn drain(&self) {
        drain(&self.exit);
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
    #[doc(hidden)]
    pub fn protocol_tables(&self) -> Vec<String> {
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

impl crate::diagnose::Capture for StderrTap {
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
mod tests;
