//! Whether a pod directory may be written: checked when a rank claims a
//! slot in it. Its owner is this process's user or root, it is no link, and
//! nobody else may write it unless it is sticky (as `/tmp` is: then nobody
//! else can remove or rename a rank's files). A directory of this user's own
//! that anyone may write (a Kubernetes `emptyDir` is 0777, a `/tmp/pod` made
//! 0777) is given the sticky bit rather than refused. Refused otherwise, with
//! a closed reason ([`DirRefusal`]): the process then runs alone and says so
//! (`/readyz?verbose`, `nixl_agent_pod_dir_refused`); it never blocks.

pub use crate::model::DirRefusal;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

/// This process's user id, from /proc/self/status.
pub fn uid() -> Option<u32> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("Uid:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// Why a directory is not written to, and what was seen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirRefused {
    pub reason: DirRefusal,
    pub detail: String,
}

impl std::fmt::Display for DirRefused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.reason.as_str(), self.detail)
    }
}

impl std::error::Error for DirRefused {}

fn refused(reason: DirRefusal, detail: String) -> DirRefused {
    DirRefused { reason, detail }
}

/// Checks `dir` (creating it 0755 if missing) for a process of user `uid`;
/// gives a directory of `uid`'s own that others may write the sticky bit.
pub fn check(dir: &Path, uid: u32) -> Result<(), DirRefused> {
    let shown = dir.display();
    let created = std::fs::create_dir_all(dir);
    let meta = std::fs::symlink_metadata(dir).map_err(|e| {
        let e = created.err().unwrap_or(e);
        refused(DirRefusal::Unusable, format!("{shown}: {e}"))
    })?;
    if meta.file_type().is_symlink() {
        return Err(refused(DirRefusal::Link, format!("{shown} is a symbolic link")));
    }
    if !meta.file_type().is_dir() {
        return Err(refused(
            DirRefusal::NotADirectory,
            format!("{shown} is not a directory"),
        ));
    }
    if meta.uid() != uid && meta.uid() != 0 {
        return Err(refused(
            DirRefusal::NotOwner,
            format!("{shown} belongs to uid {}, not to uid {uid} or root", meta.uid()),
        ));
    }
    let mode = meta.permissions().mode();
    if mode & 0o022 != 0 && mode & 0o1000 == 0 {
        if meta.uid() == uid {
            let sticky = std::fs::Permissions::from_mode((mode | 0o1000) & 0o7777);
            if std::fs::set_permissions(dir, sticky).is_ok() {
                tracing::info!(dir = %shown, mode = format!("{:o}", mode & 0o7777), "the pod directory may be written by others: gave it the sticky bit");
                return Ok(());
            }
        }
        return Err(refused(
            DirRefusal::WritableByOthers,
            format!(
                "{shown} (mode {:o}) may be written by others and is not sticky",
                mode & 0o7777
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chown(path: &Path, uid: u32) {
        let ok = std::process::Command::new("chown")
            .arg(uid.to_string())
            .arg(path)
            .status()
            .unwrap()
            .success();
        assert!(ok);
    }

    #[test]
    fn a_directory_is_refused_unless_owned_unlinked_and_not_open_to_others() {
        let me = uid().unwrap();
        let base = tempfile::tempdir().unwrap();
        let d = base.path().join("pod");
        assert_eq!(check(&d, me), Ok(()), "created");
        let link = base.path().join("link");
        std::os::unix::fs::symlink(&d, &link).unwrap();
        assert_eq!(check(&link, me).unwrap_err().reason, DirRefusal::Link);
        let file = base.path().join("file");
        std::fs::write(&file, "").unwrap();
        assert_eq!(check(&file, me).unwrap_err().reason, DirRefusal::NotADirectory);
        let missing = file.join("below");
        assert_eq!(check(&missing, me).unwrap_err().reason, DirRefusal::Unusable);
        // Open to anyone and ours: made sticky, then taken.
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o777)).unwrap();
        assert_eq!(check(&d, me), Ok(()));
        let mode = std::fs::metadata(&d).unwrap().permissions().mode();
        assert_eq!(mode & 0o1777, 0o1777);
        // Another user's (only root can make one here).
        if me == 0 {
            let theirs = base.path().join("theirs");
            std::fs::create_dir(&theirs).unwrap();
            chown(&theirs, 4321);
            let e = check(&theirs, me).unwrap_err();
            assert_eq!(e.reason, DirRefusal::NotOwner, "{e}");
            // Root's, open to anyone, checked for another user: not theirs
            // to make sticky.
            let open = base.path().join("open");
            std::fs::create_dir(&open).unwrap();
            std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
            assert_eq!(check(&open, 4321).unwrap_err().reason, DirRefusal::WritableByOthers);
            std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o1777)).unwrap();
            assert_eq!(check(&open, 4321), Ok(()), "sticky: as /tmp");
        }
    }
}
