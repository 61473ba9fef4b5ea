//! Zero configuration: several processes of one container that share an
//! address (the scheduler processes SGLang or vLLM start for tensor
//! parallelism, with the launcher's one environment) are one pod without a
//! pod directory or a sidecar. Each claims a rank slot in a directory of
//! that address's own — under `/dev/shm` (else `$TMPDIR`, else `/tmp`), in
//! a folder private to the user — and publishes there. The process that
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

/// This process's user id, from /proc/self/status.
fn uid() -> Option<u32> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("Uid:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// A folder only this user can enter: created 0700 if missing; an existing
/// one must be a real directory of this user that nobody else can write.
fn private(dir: &Path, uid: u32) -> std::io::Result<()> {
    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e),
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

/// The directory of the processes sharing `listen`; `None` for an address
/// no two processes share (port 0: each gets a port of its own).
pub fn dir_for(listen: SocketAddr) -> std::io::Result<Option<PathBuf>> {
    if listen.port() == 0 {
        return Ok(None);
    }
    let uid = uid().ok_or_else(|| std::io::Error::other("no Uid in /proc/self/status"))?;
    let shm = Path::new("/dev/shm");
    let base = if shm.is_dir() {
        shm.to_path_buf()
    } else {
        std::env::var_os("TMPDIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from("/tmp"))
    };
    let mine = base.join(format!("nixl-agent-{uid}"));
    private(&mine, uid)?;
    let name: String = listen
        .to_string()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || c == '.' { c } else { '_' })
        .collect();
    let dir = mine.join(name);
    private(&dir, uid)?;
    Ok(Some(dir))
}

/// Removes the rank files of slots no live process holds (ranks of an
/// earlier run that are not coming back), before this process claims one.
/// Only in a directory of this user's own: a pod directory keeps its dead
/// ranks until they are claimed again.
pub fn sweep(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for e in entries.filter_map(Result::ok) {
        let Ok(Some(rank)) = super::rank_of_file(&e.file_name().to_string_lossy()) else {
            continue;
        };
        if super::claim::is_free(dir, rank) {
            let _ = std::fs::remove_file(e.path());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_private_directory_per_address_and_none_for_port_zero() {
        assert_eq!(dir_for("127.0.0.1:0".parse().unwrap()).unwrap(), None);
        let a = dir_for("127.0.0.1:10915".parse().unwrap()).unwrap().unwrap();
        let b = dir_for("127.0.0.1:10916".parse().unwrap()).unwrap().unwrap();
        assert_ne!(a, b);
        let mode = std::fs::metadata(a.parent().unwrap()).unwrap().permissions().mode();
        assert_eq!(mode & 0o077, 0, "private to the user");
    }

    #[test]
    fn a_dead_ranks_file_is_swept_a_live_ones_is_not() {
        let dir = tempfile::tempdir().unwrap();
        let live = super::super::claim::claim(dir.path(), super::super::claim::Wish::Any).unwrap();
        std::fs::write(dir.path().join("rank-0.json"), "{}").unwrap();
        std::fs::write(dir.path().join("rank-5.json"), "{}").unwrap();
        sweep(dir.path());
        assert!(dir.path().join("rank-0.json").exists(), "its slot is held");
        assert!(!dir.path().join("rank-5.json").exists(), "nobody holds slot 5");
        drop(live);
    }
}
