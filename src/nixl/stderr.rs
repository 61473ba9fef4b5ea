//! Capturing what NIXL and UCX print during a failed call. NIXL (glog)
//! writes to stderr; UCX logs to stdout by default. Both are tapped.
//!
//! [`StderrTap::install`] points file descriptors 1 and 2 at pipes. A reader
//! thread per stream copies every line through to the real stream,
//! unchanged, and while a capture window is open it also keeps the lines for
//! attribution.
//!
//! How misattribution is bounded: a window is open only while the lifecycle
//! thread is inside a NIXL call for one group attempt; it is closed by an
//! in-band marker written through the same pipes, so every line that thread
//! printed before the marker is in the window and nothing after it. glog
//! lines (NIXL's own) carry a thread id and are kept only when it is the
//! lifecycle thread's; UCX lines carry none, so a UCX line printed by another
//! thread during the same window could be attributed. At most
//! `diagnose::MAX_LINES` lines of `diagnose::MAX_LINE` bytes are kept.
//! The agent's own log lines go to the real stderr directly, never through
//! the pipe.

use crate::diagnose;
use std::fs::File;
use std::io::{BufRead, BufReader, Write};
use std::os::fd::FromRawFd;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

const MARKER: &str = "\u{1e}nixl-agent-capture-end ";
/// How long closing a window waits for the reader to see its marker.
const CLOSE_WAIT: Duration = Duration::from_millis(200);

#[derive(Default)]
struct State {
    open: bool,
    tid: u64,
    lines: Vec<String>,
    /// The last marker each stream's reader has seen: [stdout, stderr].
    closed: [u64; 2],
}

struct Shared {
    state: Mutex<State>,
    cv: Condvar,
}

/// The installed tap. Cheap to clone.
#[derive(Clone)]
pub struct StderrTap {
    shared: Arc<Shared>,
    original: Arc<File>,
    seq: Arc<Mutex<u64>>,
}

/// The id of the calling thread, as glog prints it.
pub fn thread_id() -> u64 {
    // Safety: gettid has no preconditions and cannot fail.
    (unsafe { libc::gettid() }) as u64
}

impl StderrTap {
    /// Redirects fd 2 through the tap. Call once, early in `main`, before
    /// other threads start. The agent's logger should write to [`Self::original`].
    pub fn install() -> std::io::Result<StderrTap> {
        let (_stdout, out_read) = redirect(1)?;
        let (stderr, err_read) = redirect(2)?;
        let shared = Arc::new(Shared {
            state: Mutex::new(State::default()),
            cv: Condvar::new(),
        });
        for (stream, read, through) in [(0usize, out_read, _stdout.clone()), (1, err_read, stderr.clone())] {
            let s = shared.clone();
            std::thread::Builder::new()
                .name(["stdout-tap", "stderr-tap"][stream].into())
                .spawn(move || pump(read, &through, &s, stream))?;
        }
        Ok(StderrTap {
            shared,
            original: stderr,
            seq: Arc::new(Mutex::new(0)),
        })
    }

    /// The real stderr, for the agent's own log lines.
    pub fn original(&self) -> Arc<File> {
        self.original.clone()
    }

    /// Opens a capture window for the calling thread.
    pub fn open(&self) {
        let mut st = self.shared.state.lock().unwrap_or_else(|e| e.into_inner());
        st.open = true;
        st.tid = thread_id();
        st.lines.clear();
    }

    /// Closes the window and returns what it caught.
    pub fn close(&self) -> Vec<String> {
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
        st.open = false;
        std::mem::take(&mut st.lines)
    }

    /// Waits until everything written to stderr so far is copied through.
    pub fn flush(&self) {
        self.open();
        let _ = self.close();
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

fn pump(read: File, out: &File, shared: &Shared, stream: usize) {
    let mut reader = BufReader::new(read);
    let mut buf = Vec::with_capacity(1024);
    let mut out = out;
    loop {
        buf.clear();
        match reader.read_until(b'\n', &mut buf) {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        let line = String::from_utf8_lossy(&buf);
        if let Some(seq) = line.strip_prefix(MARKER).and_then(|r| r.trim().parse::<u64>().ok()) {
            let mut st = shared.state.lock().unwrap_or_else(|e| e.into_inner());
            st.closed[stream] = st.closed[stream].max(seq);
            shared.cv.notify_all();
            continue;
        }
        let _ = out.write_all(&buf);
        let mut st = shared.state.lock().unwrap_or_else(|e| e.into_inner());
        if st.open && st.lines.len() < diagnose::MAX_LINES {
            let tid = st.tid;
            if let Some(l) = diagnose::keep(&line, tid) {
                st.lines.push(l);
            }
        }
    }
}

impl crate::record::Capture for StderrTap {
    fn begin(&self) {
        self.open();
    }

    fn end(&self) -> Vec<String> {
        self.close()
    }
}
