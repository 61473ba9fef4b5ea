//! Forks: a child forked from an instrumented process lets go of what it
//! inherited of ours at the fork itself, in a `pthread_atfork` child
//! handler, before the program's own code runs in it.
//!
//! What it lets go of is published here, as descriptor numbers in atomics,
//! by whoever opens it: the rank slot's lock ([`Held::RankLock`]: an
//! open-file-description lock a child holding the inherited fd would share,
//! so a dead parent's slot would never be free), the listening socket
//! ([`Held::Listener`]) and the fd tap's real streams (fds 1 and 2 are
//! pointed back at them: the tap's readers are the parent's threads). The
//! handler swaps each to -1 and closes (or `dup2`s) what it found, so each
//! is done once, and nothing is ever closed later by number: by then the
//! child may have closed it and reused the number for a file of its own.
//! The handler is async-signal-safe, as a child handler of a
//! multi-threaded process must be: atomics, `close`, `dup2`, no allocation,
//! no lock.
//!
//! It also counts the forks ([`forks`]): what a recording started belongs
//! to an ancestor when the count moved since.

use std::os::fd::RawFd;
use std::sync::atomic::{AtomicI32, AtomicU64, Ordering};
use std::sync::Once;

/// A descriptor of ours that a forked child must not keep.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Held {
    /// The rank slot's lock (`crates/pod/src/claim.rs`).
    RankLock,
    /// The HTTP server's listening socket.
    Listener,
}

/// Each [`Held`]'s descriptor, or -1.
static HELD: [AtomicI32; 2] = [AtomicI32::new(-1), AtomicI32::new(-1)];

/// The real stdout and stderr behind a host program's fd tap (what fds 1
/// and 2 get back in a child), or -1.
static TAPPED: [AtomicI32; 2] = [AtomicI32::new(-1), AtomicI32::new(-1)];

/// Forks since the handler was registered: 0 in the process that
/// registered it, one more in each forked child.
static FORKS: AtomicU64 = AtomicU64::new(0);

static REGISTERED: Once = Once::new();

/// Registers the child handler, once per process (and inherited by its
/// children): before anything of ours is opened, so that no fork can come
/// between.
pub fn register() {
    REGISTERED.call_once(|| {
        // Safety: registers a child handler that is async-signal-safe (see
        // `forked_child`); the interposer and the extension are never
        // unloaded, so the function outlives every fork.
        unsafe { libc::pthread_atfork(None, None, Some(forked_child)) };
    });
}

/// How many forks separate this process from the one that registered the
/// handler (what it started there belongs to an ancestor when not 0).
pub fn forks() -> u64 {
    FORKS.load(Ordering::Acquire)
}

/// Publishes `fd` as `what`, for a forked child to close at the fork.
pub fn hold(what: Held, fd: RawFd) {
    register();
    HELD[what as usize].store(fd, Ordering::Release);
}

/// `fd` is about to be closed by its owner: a child forked from now on
/// keeps nothing of it (it never closes the number, which may be reused).
pub fn let_go_of(what: Held, fd: RawFd) {
    let _ = HELD[what as usize].compare_exchange(fd, -1, Ordering::AcqRel, Ordering::Acquire);
}

/// The fd tap is on in a host program: `original` is the real stream that
/// `fd` (1 or 2) pointed at, which a forked child points it back at (the
/// tap's exit paths keep it open for the life of the process).
pub(crate) fn tapped(fd: i32, original: RawFd) {
    if let Some(slot) = usize::try_from(fd - 1).ok().and_then(|i| TAPPED.get(i)) {
        register();
        slot.store(original, Ordering::Release);
    }
}

/// The child handler: counts the fork, closes what was held, points fds 1
/// and 2 back at the real streams. Only atomics and `close`/`dup2`;
/// `errno` as it found it.
extern "C" fn forked_child() {
    // Safety: `__errno_location` returns this thread's errno, always valid.
    let errno = unsafe { *libc::__errno_location() };
    FORKS.fetch_add(1, Ordering::AcqRel);
    for slot in &HELD {
        let fd = slot.swap(-1, Ordering::AcqRel);
        if fd >= 0 {
            // Safety: `close` takes no pointer; `fd` is the child's copy of
            // a descriptor of ours, inherited a moment ago, which nothing
            // in the child has had a chance to use or close (its owner,
            // in the parent's threads, is never run here).
            unsafe { libc::close(fd) };
        }
    }
    for (i, slot) in TAPPED.iter().enumerate() {
        let original = slot.swap(-1, Ordering::AcqRel);
        if original >= 0 {
            // Safety: `dup2` takes no pointer; `original` is the child's
            // copy of the real stream, inherited a moment ago, and fds 1
            // and 2 are the tap's pipes, which the tap alone put there.
            unsafe { libc::dup2(original, i as i32 + 1) };
        }
    }
    // Safety: as above; restores what the program's own code may read.
    unsafe { *libc::__errno_location() = errno };
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A child forked while a descriptor is held finds it closed at once;
    /// one let go of before the fork is left alone, however reused; the
    /// fork is counted.
    #[test]
    fn a_forked_child_closes_what_is_held_and_nothing_else() {
        use std::os::fd::AsRawFd;
        let held = std::fs::File::open("/dev/null").unwrap();
        let released = std::fs::File::open("/dev/null").unwrap();
        hold(Held::Listener, held.as_raw_fd());
        hold(Held::RankLock, released.as_raw_fd());
        let_go_of(Held::RankLock, released.as_raw_fd());
        let before = forks();
        // Safety: the child calls only async-signal-safe functions
        // (fcntl, _exit) before it exits.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0);
        if pid == 0 {
            // Safety: fcntl(F_GETFD) takes no pointer; _exit never returns.
            unsafe {
                let closed = libc::fcntl(held.as_raw_fd(), libc::F_GETFD) < 0;
                let kept = libc::fcntl(released.as_raw_fd(), libc::F_GETFD) >= 0;
                let counted = forks() == before + 1;
                libc::_exit(if closed && kept && counted { 0 } else { 1 });
            }
        }
        let mut status = 0;
        // Safety: waits for the child forked above; `status` is ours.
        assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
        assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0, "{status}");
        // The parent keeps its own.
        // Safety: fcntl(F_GETFD) takes no pointer.
        assert!(unsafe { libc::fcntl(held.as_raw_fd(), libc::F_GETFD) } >= 0);
        let_go_of(Held::Listener, held.as_raw_fd());
        assert_eq!(forks(), before);
    }
}
