//! Claiming a rank: a slot of the pod directory that no other live process
//! can hold. The slot is an exclusive `flock` on `rank-N.lock`, taken
//! without waiting; the kernel drops it when the process dies (even by
//! SIGKILL), so a restarted rank reclaims a slot and a dead one never keeps
//! it. Only the holder of slot N writes `rank-N.json`: the file name is the
//! rank's identity.
//!
//! Which slot: the one a process is told (an explicit rank), else the one
//! it would like (what its framework knows: SGLang's engine rank, vLLM's
//! tp rank, a torchrun `LOCAL_RANK`) if free, else the lowest free one. A
//! process told a rank another live process holds does not take it: it
//! takes the lowest free slot and publishes the conflict there, so nothing
//! is overwritten and the pod's agent can count and name it.

use std::fs::{File, OpenOptions, TryLockError};
use std::io;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// Which slot a process asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wish {
    /// Told (`NIXL_AGENT_RANK_ENV`, or a Rust embedder's rank): this one or
    /// a conflict.
    Explicit(u32),
    /// Would like (the framework's own rank): this one if it is free.
    Preferred(u32),
    /// The lowest free slot.
    Any,
}

/// A process told a rank that another live process holds.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Conflict {
    /// The rank it was told.
    pub wanted: u32,
}

/// A held slot; the lock is released when this is dropped (or the
/// process dies).
#[derive(Debug)]
pub struct Claim {
    pub rank: u32,
    /// Set when the process was told a rank it could not have.
    pub conflict: Option<Conflict>,
    lock: File,
}

impl Claim {
    /// The lock's descriptor (a forked child closes its copy).
    pub fn lock_fd(&self) -> std::os::fd::RawFd {
        std::os::fd::AsRawFd::as_raw_fd(&self.lock)
    }
}

/// The lock file of slot `rank`.
pub fn lock_name(rank: u32) -> String {
    format!("rank-{rank}.lock")
}

/// Takes slot `rank` if no live process holds it. A lock that cannot be
/// opened (a symlink planted there, a file of another user) is a slot not
/// to be had, and says why in `last`.
fn try_slot(dir: &Path, rank: u32, last: &mut Option<io::Error>) -> Option<File> {
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o644)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(dir.join(lock_name(rank)));
    let f = match f {
        Ok(f) => f,
        Err(e) => {
            *last = Some(e);
            return None;
        }
    };
    match f.try_lock() {
        Ok(()) => Some(f),
        Err(TryLockError::WouldBlock) => None,
        Err(TryLockError::Error(e)) => {
            *last = Some(e);
            None
        }
    }
}

/// Whether no live process holds slot `rank` (a lock file that cannot be
/// opened counts as held: nothing is done on its account).
pub fn is_free(dir: &Path, rank: u32) -> bool {
    let mut last = None;
    // Taken and released at once.
    try_slot(dir, rank, &mut last).is_some()
}

/// Claims a slot of `dir` (created if missing) as `wish` asks.
pub fn claim(dir: &Path, wish: Wish) -> io::Result<Claim> {
    std::fs::create_dir_all(dir)?;
    let (first, explicit) = match wish {
        Wish::Explicit(r) => (Some(r), true),
        Wish::Preferred(r) => (Some(r), false),
        Wish::Any => (None, false),
    };
    let mut last = None;
    if let Some(r) = first.filter(|r| (*r as usize) < super::MAX_RANKS) {
        if let Some(f) = try_slot(dir, r, &mut last) {
            return Ok(Claim {
                rank: r,
                conflict: None,
                lock: f,
            });
        }
    }
    let conflict = first.filter(|_| explicit).map(|wanted| Conflict { wanted });
    for rank in 0..super::MAX_RANKS as u32 {
        if let Some(f) = try_slot(dir, rank, &mut last) {
            return Ok(Claim {
                rank,
                conflict,
                lock: f,
            });
        }
    }
    Err(io::Error::other(format!(
        "no rank slot of {} could be claimed (all {} held, or: {})",
        dir.display(),
        super::MAX_RANKS,
        last.map_or_else(|| "none failed".to_string(), |e| e.to_string())
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_exclusive_and_freed_with_their_holder() {
        let dir = tempfile::tempdir().unwrap();
        let a = claim(dir.path(), Wish::Any).unwrap();
        let b = claim(dir.path(), Wish::Any).unwrap();
        assert_eq!((a.rank, b.rank), (0, 1));
        // What the framework would like, if free; else the lowest free.
        let c = claim(dir.path(), Wish::Preferred(5)).unwrap();
        assert_eq!((c.rank, c.conflict.clone()), (5, None));
        let d = claim(dir.path(), Wish::Preferred(1)).unwrap();
        assert_eq!((d.rank, d.conflict.clone()), (2, None));
        // Told a held rank: never that slot, a conflict in another.
        let e = claim(dir.path(), Wish::Explicit(0)).unwrap();
        assert_eq!((e.rank, e.conflict.clone()), (3, Some(Conflict { wanted: 0 })));
        // A dead holder's slot (here: dropped) is free again.
        drop(a);
        let f = claim(dir.path(), Wish::Explicit(0)).unwrap();
        assert_eq!((f.rank, f.conflict), (0, None));
    }

    #[test]
    fn a_symlinked_lock_is_not_followed() {
        let dir = tempfile::tempdir().unwrap();
        let elsewhere = tempfile::NamedTempFile::new().unwrap();
        std::os::unix::fs::symlink(elsewhere.path(), dir.path().join(lock_name(0))).unwrap();
        // O_NOFOLLOW: slot 0 is not to be had, the next one is.
        let c = claim(dir.path(), Wish::Explicit(0)).unwrap();
        assert_eq!((c.rank, c.conflict), (1, Some(Conflict { wanted: 0 })));
    }
}
