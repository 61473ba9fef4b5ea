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
fn until(tap: &StderrTap, f: impl Fn(&CaptureState) -> bool) {
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
    crate::diagnose::Capture::end(&tap, false);
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
