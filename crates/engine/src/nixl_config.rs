//! NIXL's configuration file looked at on this machine, as this process's
//! user: the real [`ConfigWorld`] behind `diagnose::nixl_config`, and the
//! one failure every front-end reports when creating a NIXL agent fails.
//! Asked only after NIXL failed; it reads, never writes.

use crate::diagnose::nixl_config::{diagnose, ConfigWorld};
use crate::model::{Failure, Reason};
use std::io;
use std::path::Path;

/// The process's own environment and file system.
pub struct System;

impl ConfigWorld for System {
    fn var(&self, key: &str) -> Option<String> {
        std::env::var_os(key).map(|v| v.to_string_lossy().into_owned())
    }

    fn exists(&self, path: &Path) -> io::Result<bool> {
        match std::fs::metadata(path) {
            Ok(_) => Ok(true),
            Err(e) if e.kind() == io::ErrorKind::NotFound || e.kind() == io::ErrorKind::NotADirectory => Ok(false),
            Err(e) => Err(e),
        }
    }

    fn read(&self, path: &Path) -> io::Result<Vec<u8>> {
        std::fs::read(path)
    }

    fn is_dir(&self, path: &Path) -> io::Result<bool> {
        std::fs::metadata(path).map(|m| m.is_dir())
    }

    fn uid(&self) -> Option<u32> {
        // `Uid:` real, effective, saved, file system: the effective one
        // decides what the process may open.
        let status = std::fs::read_to_string("/proc/self/status").ok()?;
        let line = status.lines().find(|l| l.starts_with("Uid:"))?;
        line.split_whitespace().nth(2)?.parse().ok()
    }
}

/// Why creating a NIXL agent failed (`during` names the step, `error` is
/// what NIXL said): `nixl_config` with the file and the fix when NIXL's
/// configuration file is the cause, else `nixl_unavailable`.
pub fn agent_creation_failed(during: &str, error: &dyn std::fmt::Display) -> Failure {
    explain(Failure::new(Reason::NixlUnavailable, format!("{during}: {error}")))
}

/// A failed agent creation told by a front-end (the Python API's
/// exception, the interposer's unwound constructor): refined to
/// `nixl_config` when NIXL's configuration file is the cause. Any other
/// reason (a wrong argument) is kept as it is.
pub fn explain(failure: Failure) -> Failure {
    if !matches!(failure.reason, Reason::NixlUnavailable | Reason::Unknown) {
        return failure;
    }
    match diagnose(&System) {
        Some(finding) => finding.failure(&failure.message),
        None => failure,
    }
}
