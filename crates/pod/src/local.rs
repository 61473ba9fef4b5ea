//! Zero configuration: several processes of one container that share an
//! address (the scheduler processes SGLang or vLLM start for tensor
//! parallelism, with the launcher's one environment) are one pod without a
//! pod directory or a sidecar. Each claims a rank slot in a directory of
//! that address's own — under `/dev/shm` (else `$TMPDIR`, else `/tmp`), in
//! a folder private to the user — and publishes there. When another user
//! took that folder (created `/dev/shm/nixl-agent-<uid>` first), every
//! process of the address takes the same fallback of the user's own:
//! `$XDG_RUNTIME_DIR/nixl-agent/<address>`, else a folder whose name is
//! unique to the address and user; the directory used is said in a warning,
//! in `/v1/status` (`pod.dir`) and in the port holder's pod view. The process that
//! holds the port serves the merged view of all of them, exactly as
//! `nixl-agent pod` serves a pod directory; the others try the port twice a
//! second, so when the holder exits another live rank serves within a
//! second or so. With one process only, what is served is that process's
//! own recording, unchanged.

use std::net::SocketAddr;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// How often a rank that does not hold the port tries to take it.
pub const TAKEOVER_EVERY: std::time::Duration = std::time::Duration::from_millis(500);
/// How many names made unique to the address and user are tried when
/// neither the usual directory nor `$XDG_RUNTIME_DIR` can be had.
const UNIQUE_NAMES: u32 = 8;

/// A folder only this user can enter: created 0700 if missing; an existing
/// one must be a real directory of this user that nobody else can write.
fn private(dir: &Path, uid: u32, create: bool) -> std::io::Result<()> {
    if create {
        match std::fs::DirBuilder::new().mode(0o700).create(dir) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(e),
        }
    }
    let meta = std::fs::symlink_metadata(dir)?;
    if !meta.file_type().is_dir() || meta.uid() != uid || meta.permissions().mode() & 0o077 != 0 {
        return Err(std::io::Error::other(format!(
            "{} is not a directory private to uid {uid}",
            dir.display()
        )));
    }
    Ok(())
}

/// Where the processes sharing an address look for their directory, in
/// order; every process of the address walks the same list (one user, one
/// environment) and takes the first that is private to the user, so they
/// meet in one directory even when another user took the usual one.
#[derive(Debug, Clone)]
pub struct Places {
    /// `/dev/shm`, else `$TMPDIR`, else `/tmp`.
    pub base: PathBuf,
    /// `$XDG_RUNTIME_DIR` (the user's own, 0700, by its specification).
    pub runtime: Option<PathBuf>,
    pub uid: u32,
}

impl Places {
    /// This process's places.
    fn here() -> std::io::Result<Places> {
        let uid = super::dir::uid().ok_or_else(|| std::io::Error::other("no Uid in /proc/self/status"))?;
        let shm = Path::new("/dev/shm");
        let base = if shm.is_dir() {
            shm.to_path_buf()
        } else {
            std::env::var_os("TMPDIR")
                .map(PathBuf::from)
                .unwrap_or_else(|| PathBuf::from("/tmp"))
        };
        let runtime = std::env::var_os("XDG_RUNTIME_DIR")
            .map(PathBuf::from)
            .filter(|p| p.is_absolute());
        Ok(Places { base, runtime, uid })
    }

    /// The directory of the processes sharing `listen`, and why each place
    /// before it was passed over (empty: the usual one).
    pub fn choose(&self, listen: SocketAddr) -> std::io::Result<(PathBuf, Vec<String>)> {
        let uid = self.uid;
        let name: String = listen
            .to_string()
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() || c == '.' { c } else { '_' })
            .collect();
        let mut passed = Vec::new();
        let mut nested = |parent: PathBuf, create_parent: bool| -> Option<PathBuf> {
            let dir = parent.join(&name);
            match private(&parent, uid, create_parent).and_then(|()| private(&dir, uid, true)) {
                Ok(()) => Some(dir),
                Err(e) => {
                    passed.push(e.to_string());
                    None
                }
            }
        };
        if let Some(d) = nested(self.base.join(format!("nixl-agent-{uid}")), true) {
            return Ok((d, passed));
        }
        if let Some(rt) = &self.runtime {
            if private(rt, uid, false).is_ok() {
                if let Some(d) = nested(rt.join("nixl-agent"), true) {
                    return Ok((d, passed));
                }
            }
        }
        for i in 0..UNIQUE_NAMES {
            let dir = self.base.join(format!("nixl-agent-{uid}-{name}-{i}"));
            match private(&dir, uid, true) {
                Ok(()) => return Ok((dir, passed)),
                Err(e) => passed.push(e.to_string()),
            }
        }
        Err(std::io::Error::other(format!(
            "no directory private to uid {uid} for {listen}: {}",
            passed.join("; ")
        )))
    }
}

/// The directory of the processes sharing `listen`; `None` for an address
/// no two processes share (port 0: each gets a port of its own). When the
/// usual one (`/dev/shm/nixl-agent-<uid>/<address>`) is not the user's
/// own, a fallback of the user's own, said in a warning.
pub fn dir_for(listen: SocketAddr) -> std::io::Result<Option<PathBuf>> {
    if listen.port() == 0 {
        return Ok(None);
    }
    let (dir, passed) = Places::here()?.choose(listen)?;
    if !passed.is_empty() {
        tracing::warn!(
            target: crate::telemetry::names::INSTRUMENT_LOG_TARGET,
            dir = %dir.display(),
            passed = %passed.join("; "),
            "the usual directory of this address's ranks is not this user's own: using another of its own"
        );
    }
    Ok(Some(dir))
}

/// Removes the rank files (and temporary files) of slots no live process
/// holds whose file was last touched longer ago than `retention`: ranks of
/// an earlier run that are not coming back, before this process claims
/// one. A rank that ended within the retention keeps its file: the
/// address's server serves its counters, and its next process reads it.
/// Each slot is tested without taking it, and a file is removed only under
/// the slot's own tidy lock ([`super::slot`]), so a process claiming the
/// slot meanwhile neither meets a false conflict nor loses the file it
/// writes. Only in a directory of this user's own: a pod directory keeps
/// its dead ranks until they are claimed again.
pub fn sweep(dir: &Path, retention: std::time::Duration) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for e in entries.filter_map(Result::ok) {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(rank) = super::rank_of_file(&name)
            .ok()
            .flatten()
            .or_else(|| super::publish::temp_rank(&name))
        else {
            continue;
        };
        let old = e
            .metadata()
            .ok()
            .and_then(|m| m.modified().ok())
            .and_then(|m| m.elapsed().ok())
            .is_none_or(|age| age > retention);
        if old && !super::slot::is_held(dir, rank) {
            super::slot::remove_if_dead(dir, rank, &e.path());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn one_private_directory_per_address_and_none_for_port_zero() {
        assert_eq!(dir_for("127.0.0.1:0".parse().unwrap()).unwrap(), None);
        let a = dir_for("127.0.0.1:10915".parse().unwrap()).unwrap().unwrap();
        let b = dir_for("127.0.0.1:10916".parse().unwrap()).unwrap().unwrap();
        assert_ne!(a, b);
        let mode = std::fs::metadata(a.parent().unwrap()).unwrap().permissions().mode();
        assert_eq!(mode & 0o077, 0, "private to the user");
    }

    /// Another user took the usual place (here: it is not a directory
    /// private to this user): every process of the address takes the same
    /// fallback of the user's own, `$XDG_RUNTIME_DIR` first.
    #[test]
    fn a_usual_directory_taken_by_another_user_falls_back_to_one_of_our_own() {
        let base = tempfile::tempdir().unwrap();
        let uid = super::super::dir::uid().unwrap();
        let listen: SocketAddr = "127.0.0.1:10915".parse().unwrap();
        let places = Places {
            base: base.path().to_path_buf(),
            runtime: None,
            uid,
        };
        let (usual, passed) = places.choose(listen).unwrap();
        assert!(passed.is_empty());
        assert_eq!(usual, base.path().join(format!("nixl-agent-{uid}/127.0.0.1_10915")));
        std::fs::remove_dir(&usual).unwrap();
        std::fs::set_permissions(usual.parent().unwrap(), std::fs::Permissions::from_mode(0o777)).unwrap();
        let (a, passed) = places.choose(listen).unwrap();
        assert_eq!(a, base.path().join(format!("nixl-agent-{uid}-127.0.0.1_10915-0")));
        assert_eq!(passed.len(), 1, "{passed:?}");
        assert_eq!(places.choose(listen).unwrap().0, a, "every rank meets there");
        // The next unique name when that one is taken too.
        std::fs::set_permissions(&a, std::fs::Permissions::from_mode(0o755)).unwrap();
        assert_eq!(
            places.choose(listen).unwrap().0,
            base.path().join(format!("nixl-agent-{uid}-127.0.0.1_10915-1"))
        );
        // $XDG_RUNTIME_DIR, the user's own, before any unique name.
        let rt = tempfile::tempdir().unwrap();
        std::fs::set_permissions(rt.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
        let with_rt = Places {
            runtime: Some(rt.path().to_path_buf()),
            ..places.clone()
        };
        let (d, _) = with_rt.choose(listen).unwrap();
        assert_eq!(d, rt.path().join("nixl-agent/127.0.0.1_10915"));
    }

    #[test]
    fn a_dead_ranks_file_is_swept_a_live_ones_is_not() {
        let dir = tempfile::tempdir().unwrap();
        let me = super::super::dir::uid().unwrap();
        let live = super::super::claim::claim(dir.path(), super::super::claim::Wish::Any, me).unwrap();
        std::fs::write(dir.path().join("rank-0.json"), "{}").unwrap();
        std::fs::write(dir.path().join("rank-5.json"), "{}").unwrap();
        sweep(dir.path(), Duration::from_secs(60));
        assert!(
            dir.path().join("rank-5.json").exists(),
            "ended within the retention: kept"
        );
        sweep(dir.path(), Duration::ZERO);
        assert!(dir.path().join("rank-0.json").exists(), "its slot is held");
        assert!(!dir.path().join("rank-5.json").exists(), "nobody holds slot 5");
        drop(live);
    }

    /// A sweeper looking at every slot while ranks claim and release them:
    /// a claim never meets a slot held by anything but a live rank, so no
    /// explicit rank records a false conflict (the old sweep took each lock
    /// for a moment), and a file written by a new holder is never removed.
    #[test]
    fn a_sweep_never_makes_a_false_conflict_or_removes_a_fresh_file() {
        use super::super::claim::{claim, Wish};
        use std::sync::atomic::{AtomicBool, Ordering};
        let me = super::super::dir::uid().unwrap();
        let dir = tempfile::tempdir().unwrap();
        let stop = AtomicBool::new(false);
        let tries = 10_000u32;
        std::thread::scope(|s| {
            for _ in 0..2 {
                s.spawn(|| {
                    while !stop.load(Ordering::Relaxed) {
                        sweep(dir.path(), Duration::ZERO);
                    }
                });
            }
            for i in 0..tries {
                let c = claim(dir.path(), Wish::Explicit(0), me).unwrap();
                assert_eq!((c.rank, c.conflict.clone()), (0, None), "try {i}: a false conflict");
                let file = dir.path().join(super::super::file_name(0));
                std::fs::write(&file, "{}").unwrap();
                assert!(file.exists(), "try {i}: a sweep removed the holder's fresh file");
                // The next holder finds the file of a dead rank: sweepable.
                drop(c);
            }
            stop.store(true, Ordering::Relaxed);
        });
    }
}
