//! Claiming a rank: a slot of the pod directory that no other live process
//! can hold. The slot is an exclusive open-file-description lock on byte 0
//! of `rank-N.lock` ([`super::slot`]), taken without waiting; the kernel
//! drops it when the process dies (even by SIGKILL), so a restarted rank
//! reclaims a slot and a dead one never keeps it. Only the holder of slot N
//! writes `rank-N.json`: the file name is the rank's identity. Nobody else
//! ever takes that byte (a sweeper only tests it), so a claimer that finds a
//! slot taken has met a live rank: a conflict is never false.
//!
//! Which slot: the one a process is told (an explicit rank), else the one
//! it would like (what its framework knows: SGLang's engine rank, vLLM's
//! tp rank, a torchrun `LOCAL_RANK`) if free, else the lowest free one. A
//! process told a rank another live process holds does not take it: it
//! takes the lowest free slot and publishes the conflict there, so nothing
//! is overwritten and the pod's agent can count and name it.
//!
//! The directory is checked first ([`super::dir::check`]): a refused one
//! is an error carrying [`super::dir::DirRefused`], and nothing is written.

use super::slot::{self, HELD};
use std::fs::File;
use std::io;
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

impl std::fmt::Display for Wish {
    /// In words, for log lines.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Wish::Explicit(r) => write!(f, "rank {r} (told)"),
            Wish::Preferred(r) => write!(f, "rank {r} if free, else the lowest free"),
            Wish::Any => f.write_str("the lowest free rank"),
        }
    }
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

/// Takes slot `rank` if no live process holds it. A lock that cannot be
/// opened as a regular file (a symlink or FIFO planted there, a file of
/// another user) is a slot not to be had, and says why in `last`. Once
/// taken, the claimer passes through the slot's tidy lock, so a sweeper
/// that judged the slot dead a moment before has finished removing its old
/// file before this one writes.
fn try_slot(dir: &Path, rank: u32, last: &mut Option<io::Error>) -> Option<File> {
    let taken = slot::open(dir, rank, true).and_then(|f| Ok(slot::try_take(&f, HELD)?.then_some(f)));
    match taken {
        Ok(Some(f)) => {
            slot::pass_tidy(&f);
            Some(f)
        }
        Ok(None) => None,
        Err(e) => {
            *last = Some(e);
            None
        }
    }
}

/// Claims a slot of `dir` as `wish` asks, after checking the directory for
/// this process's user (`uid`).
pub fn claim(dir: &Path, wish: Wish, uid: u32) -> io::Result<Claim> {
    super::dir::check(dir, uid).map_err(|r| io::Error::new(io::ErrorKind::PermissionDenied, r))?;
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

/// The refusal inside an error of [`claim`], when the directory was refused.
pub fn refusal(e: &io::Error) -> Option<&super::dir::DirRefused> {
    e.get_ref().and_then(|inner| inner.downcast_ref())
}

#[cfg(test)]
mod tests {
    use super::super::slot::lock_name;
    use super::*;

    fn me() -> u32 {
        super::super::dir::uid().unwrap()
    }

    #[test]
    fn slots_are_exclusive_and_freed_with_their_holder() {
        let dir = tempfile::tempdir().unwrap();
        let a = claim(dir.path(), Wish::Any, me()).unwrap();
        let b = claim(dir.path(), Wish::Any, me()).unwrap();
        assert_eq!((a.rank, b.rank), (0, 1));
        // What the framework would like, if free; else the lowest free.
        let c = claim(dir.path(), Wish::Preferred(5), me()).unwrap();
        assert_eq!((c.rank, c.conflict.clone()), (5, None));
        let d = claim(dir.path(), Wish::Preferred(1), me()).unwrap();
        assert_eq!((d.rank, d.conflict.clone()), (2, None));
        // Told a held rank: never that slot, a conflict in another.
        let e = claim(dir.path(), Wish::Explicit(0), me()).unwrap();
        assert_eq!((e.rank, e.conflict.clone()), (3, Some(Conflict { wanted: 0 })));
        // A dead holder's slot (here: dropped) is free again.
        drop(a);
        let f = claim(dir.path(), Wish::Explicit(0), me()).unwrap();
        assert_eq!((f.rank, f.conflict), (0, None));
    }

    #[test]
    fn a_symlinked_lock_is_not_followed() {
        let dir = tempfile::tempdir().unwrap();
        let elsewhere = tempfile::NamedTempFile::new().unwrap();
        std::os::unix::fs::symlink(elsewhere.path(), dir.path().join(lock_name(0))).unwrap();
        // O_NOFOLLOW: slot 0 is not to be had, the next one is.
        let c = claim(dir.path(), Wish::Explicit(0), me()).unwrap();
        assert_eq!((c.rank, c.conflict), (1, Some(Conflict { wanted: 0 })));
    }

    #[test]
    fn a_refused_directory_is_said_and_nothing_is_written() {
        let base = tempfile::tempdir().unwrap();
        let real = base.path().join("real");
        std::fs::create_dir(&real).unwrap();
        let link = base.path().join("pod");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        let e = claim(&link, Wish::Any, me()).unwrap_err();
        assert_eq!(
            refusal(&e).map(|r| r.reason),
            Some(super::super::dir::DirRefusal::Link),
            "{e}"
        );
        assert_eq!(std::fs::read_dir(&real).unwrap().count(), 0);
    }
}
