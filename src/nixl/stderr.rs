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
//! through, so its report (JSON on stdout) is what the operator sees.

use crate::diagnose;
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::FromRawFd;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Condvar, Mutex};
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
}

/// The installed tap. Cheap to clone.
#[derive(Clone)]
pub struct StderrTap {
    shared: Arc<Shared>,
    original: Arc<File>,
    /// Each tapped fd and the real stream it pointed at.
    originals: Arc<[(i32, Arc<File>)]>,
    seq: Arc<Mutex<u64>>,
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
    pub fn install() -> std::io::Result<StderrTap> {
        install_on([1, 2], &|name, f| {
            std::thread::Builder::new().name(name.into()).spawn(f).map(drop)
        })
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
        if self.shared.proto.load(Ordering::Relaxed) != PROTO_PASS {
            // UCX prints its tables through C's stdio, block-buffered on a
            // pipe: flushed first, so the marker never lands inside a line
            // half in the pipe and half in the buffer. Only in check, which
            // owns the process (a host program's buffers are left alone).
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

/// [`StderrTap::install`] for the given fds (stdout-like, stderr-like).
fn install_on(fds: [i32; 2], spawn: Spawn<'_>) -> std::io::Result<StderrTap> {
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
    let shared = Arc::new(Shared {
        state: Mutex::new(State::default()),
        cv: Condvar::new(),
        proto: AtomicU8::new(PROTO_PASS),
    });
    let originals: Vec<(i32, Arc<File>)> = redirected.iter().map(|(fd, o, _)| (*fd, o.clone())).collect();
    for (stream, (fd, original, read)) in redirected.into_iter().enumerate() {
        let s = shared.clone();
        let pump_and_restore = Box::new(move || {
            // However the pump ends (a read error, a panic), the host's fd
            // goes back to the real stream before the pipe's read end
            // closes (locals drop in reverse order): the program never
            // writes into a pipe nobody reads (EPIPE, a BrokenPipeError).
            let read = read;
            let _restore = Restore {
                fd,
                original: &original,
            };
            pump(&read, &original, &s, stream);
        });
        if let Err(e) = spawn(["stdout-tap", "stderr-tap"][stream], pump_and_restore) {
            for (fd, original) in &originals {
                restore(*fd, original);
            }
            return Err(e);
        }
    }
    Ok(StderrTap {
        shared,
        original: originals[1].1.clone(),
        originals: originals.into(),
        seq: Arc::new(Mutex::new(0)),
    })
}

/// Points `fd` back at `original` when dropped.
struct Restore<'a> {
    fd: i32,
    original: &'a File,
}

impl Drop for Restore<'_> {
    fn drop(&mut self) {
        restore(self.fd, self.original);
    }
}

/// Points `fd` back at `original`.
fn restore(fd: i32, original: &File) {
    use std::os::fd::AsRawFd;
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
/// a read fails.
fn pump(mut read: &File, out: &File, shared: &Shared, stream: usize) {
    let mut chunk = vec![0u8; CHUNK];
    let mut line = Line::default();
    loop {
        let n = match read.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
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

    /// What the program wrote of a line it has not finished goes out now,
    /// but for what may be nixl-agent's own: from a byte that may start an
    /// end marker, or, while UCX's tables are kept from stdout, a line that
    /// may be one of them (it starts with `[`). Past [`LINE_CAP`] the line
    /// goes out whole and is forgotten (but for a marker's worth).
    fn forward_unfinished(&mut self, out: &File, shared: &Shared, stream: usize) {
        let quiet = stream == 0 && shared.proto.load(Ordering::Relaxed) == PROTO_KEEP_QUIET;
        let hold_from = if quiet && self.bytes.first() == Some(&b'[') {
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
                && diagnose::proto::table_line(&String::from_utf8_lossy(content)).is_some();
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
            if let Some(table) = diagnose::proto::table_line(&line) {
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
        let tap = install_on([out_fd, err_fd], &|_, f| {
            std::thread::spawn(f);
            Ok(())
        })
        .unwrap();
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
        let tap = install_on([out_fd, err_fd], &|_, f| {
            std::thread::spawn(f);
            Ok(())
        })
        .unwrap();
        tap.keep_protocol_tables(true);
        // Another thread's stdio flushed half a table line; a marker came
        // between the halves.
        write_fd(out_fd, b"[1.2] [vm:1 :0]   +------");
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
        let _tap = install_on([out_fd, err_fd], &|_, f| {
            std::thread::spawn(f);
            Ok(())
        })
        .unwrap();
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
        let shared = Shared {
            state: Mutex::new(State::default()),
            cv: Condvar::new(),
            proto: AtomicU8::new(PROTO_PASS),
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
            };
            pump(&read, &original, &shared, 1);
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
        assert!(install_on([out_fd, err_fd], &failing_second).is_err());
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
