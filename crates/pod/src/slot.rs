//! A rank slot's lock file, `rank-N.lock`, and the two byte-range locks on
//! it. They are open-file-description locks (`F_OFD_SETLK`): like `flock`
//! they belong to the descriptor, so a forked child that closes its copy
//! keeps nothing and a process that dies (even by SIGKILL) frees them; unlike
//! `flock` they can be *tested* without being taken (`F_OFD_GETLK`), from any
//! container of the pod, so nobody ever holds a slot for a moment only to
//! look at it.
//!
//! - byte 0, [`HELD`]: the slot itself, held by its rank for its whole life.
//!   Only a claimer ever takes it, so a claimer that finds it taken has met
//!   a live rank, never a passer-by.
//! - byte 1, [`TIDY`]: held for an instant by whoever touches the slot's
//!   files on its behalf: a sweeper removing a dead rank's file (only while
//!   byte 0 tests free), and a claimer, once, between taking byte 0 and
//!   writing its first file. A file is therefore removed only under the
//!   slot's own lock, and never after its new holder wrote it.
//!
//! Every open here is `O_NOFOLLOW | O_NONBLOCK` and keeps regular files only:
//! a link or a FIFO planted at a lock's path is refused, never followed or
//! waited on.

use nix::fcntl::{fcntl, FcntlArg};
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::time::{Duration, Instant};

/// The byte whose lock is the slot.
pub const HELD: i64 = 0;
/// The byte whose lock guards the slot's files while they are tidied.
pub const TIDY: i64 = 1;
/// The longest a claimer waits for a sweeper to finish with its slot (a
/// sweeper holds [`TIDY`] for one `unlink`): past this, it goes ahead.
const TIDY_WAIT: Duration = Duration::from_millis(100);

/// The lock file of slot `rank`.
pub fn lock_name(rank: u32) -> String {
    format!("rank-{rank}.lock")
}

/// Flags of every open in a pod directory: no link followed, no FIFO
/// waited on, nothing inherited by an `exec`.
pub const OPEN_FLAGS: i32 = libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC;

/// `f` if it is a regular file, else an error naming what it is.
pub fn regular(f: File) -> io::Result<File> {
    let t = f.metadata()?.file_type();
    if t.is_file() {
        Ok(f)
    } else {
        Err(io::Error::other(format!("not a regular file ({t:?})")))
    }
}

/// Opens (creating it 0644 when `create`) slot `rank`'s lock file.
pub fn open(dir: &Path, rank: u32, create: bool) -> io::Result<File> {
    let mut o = OpenOptions::new();
    o.read(true).custom_flags(OPEN_FLAGS);
    if create {
        o.write(true).create(true).truncate(false).mode(0o644);
    }
    regular(o.open(dir.join(lock_name(rank)))?)
}

fn range(kind: libc::c_int, byte: i64) -> libc::flock {
    libc::flock {
        l_type: kind as libc::c_short,
        l_whence: libc::SEEK_SET as libc::c_short,
        l_start: byte,
        l_len: 1,
        l_pid: 0,
    }
}

/// Takes the exclusive lock on `byte` of `f` without waiting: `Ok(false)`
/// when another open file description holds it.
pub fn try_take(f: &File, byte: i64) -> io::Result<bool> {
    match fcntl(f, FcntlArg::F_OFD_SETLK(&range(libc::F_WRLCK, byte))) {
        Ok(_) => Ok(true),
        Err(nix::errno::Errno::EAGAIN | nix::errno::Errno::EACCES) => Ok(false),
        Err(e) => Err(e.into()),
    }
}

/// Releases this description's lock on `byte` of `f`.
pub fn release(f: &File, byte: i64) {
    let _ = fcntl(f, FcntlArg::F_OFD_SETLK(&range(libc::F_UNLCK, byte)));
}

/// Whether some open file description (another process's, or another of
/// this one's) holds a lock on `byte` of `f`. Takes nothing.
pub fn held_on(f: &File, byte: i64) -> io::Result<bool> {
    let mut probe = range(libc::F_WRLCK, byte);
    fcntl(f, FcntlArg::F_OFD_GETLK(&mut probe))?;
    Ok(i32::from(probe.l_type) != libc::F_UNLCK)
}

/// Whether a live process holds slot `rank` of `dir`, tested without taking
/// anything. A missing lock file is a free slot; one that cannot be opened
/// as a regular file (a link, a FIFO) is held by nobody.
pub fn is_held(dir: &Path, rank: u32) -> bool {
    open(dir, rank, false).and_then(|f| held_on(&f, HELD)).unwrap_or(false)
}

/// Waits (a bounded while, never blocking in the kernel) until nobody tidies
/// the slot of `f`, passing through [`TIDY`] once: whatever a sweeper was
/// removing is gone before the caller writes.
pub fn pass_tidy(f: &File) {
    let deadline = Instant::now() + TIDY_WAIT;
    loop {
        match try_take(f, TIDY) {
            Ok(true) => {
                release(f, TIDY);
                return;
            }
            Ok(false) if Instant::now() < deadline => std::thread::sleep(Duration::from_micros(200)),
            _ => return,
        }
    }
}

/// Removes `file` (a rank file of slot `rank`) if no live process holds the
/// slot, deciding and removing under the slot's [`TIDY`] lock: a claimer
/// that took the slot meanwhile is seen, and its file is left alone.
/// Returns whether it was removed.
pub fn remove_if_dead(dir: &Path, rank: u32, file: &Path) -> bool {
    let Ok(f) = open(dir, rank, true) else { return false };
    if !matches!(try_take(&f, TIDY), Ok(true)) {
        return false;
    }
    let removed = matches!(held_on(&f, HELD), Ok(false)) && std::fs::remove_file(file).is_ok();
    release(&f, TIDY);
    removed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lock_is_seen_without_being_taken_and_freed_with_its_descriptor() {
        let dir = tempfile::tempdir().unwrap();
        assert!(!is_held(dir.path(), 0), "no lock file: free");
        let a = open(dir.path(), 0, true).unwrap();
        assert!(try_take(&a, HELD).unwrap());
        assert!(is_held(dir.path(), 0));
        // Looking took nothing: the holder still has it, a second cannot.
        let b = open(dir.path(), 0, true).unwrap();
        assert!(!try_take(&b, HELD).unwrap());
        // The tidy byte is apart from the slot.
        assert!(try_take(&b, TIDY).unwrap());
        release(&b, TIDY);
        drop(a);
        assert!(!is_held(dir.path(), 0));
        assert!(try_take(&b, HELD).unwrap());
    }

    #[test]
    fn links_and_fifos_at_a_lock_path_are_refused_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("elsewhere");
        std::fs::write(&target, "keep").unwrap();
        std::os::unix::fs::symlink(&target, dir.path().join(lock_name(0))).unwrap();
        assert!(open(dir.path(), 0, true).is_err());
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "keep");
        assert!(std::process::Command::new("mkfifo")
            .arg(dir.path().join(lock_name(1)))
            .status()
            .unwrap()
            .success());
        let t0 = Instant::now();
        assert!(open(dir.path(), 1, true).is_err() && open(dir.path(), 1, false).is_err());
        assert!(!is_held(dir.path(), 1));
        assert!(t0.elapsed() < Duration::from_secs(1), "no wait on the FIFO");
    }

    #[test]
    fn a_dead_slots_file_is_removed_a_held_ones_is_not() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("rank-0.json");
        std::fs::write(&file, "{}").unwrap();
        let holder = open(dir.path(), 0, true).unwrap();
        assert!(try_take(&holder, HELD).unwrap());
        assert!(!remove_if_dead(dir.path(), 0, &file));
        assert!(file.exists());
        drop(holder);
        assert!(remove_if_dead(dir.path(), 0, &file));
        assert!(!file.exists());
    }
}
