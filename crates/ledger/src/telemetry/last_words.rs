//! The one line a process that dies of a NIXL failure leaves where
//! Kubernetes looks: the container's termination-message file
//! (`/dev/termination-log`), which `kubectl describe pod` and
//! kube-state-metrics' last-terminated reason show after the container
//! ended. The seed failure kills the serving process; this line outlives
//! it.
//!
//! Written when the failure is recorded, not at exit: a process that ends
//! by `os._exit` or `kill -9` runs no exit code of ours. A failure resolved
//! later (its group registers, a transfer completes) takes the line back,
//! so a process that drains cleanly leaves nothing. Only a line of ours is
//! ever taken back: a file the program wrote itself is left as it is. At
//! most [`MAX_BYTES`], what Kubernetes reads.

use crate::event::{Event, XferEnd};
use crate::model::{Failure, GroupFailure, Reason};
use std::fs::File;
use std::io;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

/// `off`, or the path of the termination-message file (by default
/// [`DEFAULT_PATH`] when it exists and can be written).
pub const ENV_TERMINATION_LOG: &str = "NIXL_AGENT_TERMINATION_LOG";
/// Kubernetes' default `terminationMessagePath`.
pub const DEFAULT_PATH: &str = "/dev/termination-log";
/// Kubernetes reads at most this much of the file.
pub const MAX_BYTES: usize = 4096;

/// Where the line goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// [`DEFAULT_PATH`] if it exists and can be written; nowhere otherwise.
    Default,
    /// A path the operator set (created if missing).
    Path(PathBuf),
    Off,
}

impl Target {
    /// `NIXL_AGENT_TERMINATION_LOG`'s value: unset, `off`, or an absolute
    /// path.
    pub fn parse(v: Option<&str>) -> Result<Target, String> {
        match v.map(str::trim) {
            None | Some("") => Ok(Target::Default),
            Some(w) if ["off", "0", "false"].contains(&w.to_ascii_lowercase().as_str()) => Ok(Target::Off),
            Some(p) if Path::new(p).is_absolute() => Ok(Target::Path(PathBuf::from(p))),
            Some(p) => Err(format!("`{p}` is neither off nor an absolute path")),
        }
    }
}

/// What the line written is about: what resolves it.
#[derive(Debug, Clone, PartialEq, Eq)]
enum About {
    /// A group's registration: its next success takes it back.
    Group(String),
    /// A transfer: the next one that completes takes it back.
    Transfers,
}

/// The termination-message file, held open, and the line of ours in it.
pub struct LastWords {
    file: File,
    said: Mutex<Option<(About, String)>>,
    /// A transfer failure is the line now (read without the lock on every
    /// completed transfer).
    transfer_said: AtomicBool,
    /// When a transfer failure last wrote the line: transfer failures come
    /// by the thousand when a peer goes, and one line a
    /// [`TRANSFER_EVERY`] says it.
    transfer_written: Mutex<Option<std::time::Instant>>,
}

/// The least time between two writes of a transfer failure's line.
const TRANSFER_EVERY: std::time::Duration = std::time::Duration::from_millis(250);

impl LastWords {
    /// Opens the file `target` names; `Ok(None)` when off, or when the
    /// default file is absent or cannot be written (not in a container).
    pub fn open(target: &Target) -> io::Result<Option<LastWords>> {
        let (path, create) = match target {
            Target::Off => return Ok(None),
            Target::Default => (Path::new(DEFAULT_PATH), false),
            Target::Path(p) => (p.as_path(), true),
        };
        let opened = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(create)
            .truncate(false)
            .mode(0o644)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
            .open(path);
        let file = match opened {
            Ok(f) => f,
            Err(_) if *target == Target::Default => return Ok(None),
            Err(e) => return Err(e),
        };
        if !file.metadata()?.file_type().is_file() {
            if *target == Target::Default {
                return Ok(None);
            }
            return Err(io::Error::other(format!("{} is not a regular file", path.display())));
        }
        Ok(Some(LastWords {
            file,
            said: Mutex::new(None),
            transfer_said: AtomicBool::new(false),
            transfer_written: Mutex::new(None),
        }))
    }

    /// Writes `line` (cut to [`MAX_BYTES`]) in place of what is there,
    /// unless it is said already.
    fn say(&self, about: About, line: String) {
        let line = cut(line);
        let mut said = self.said.lock().unwrap_or_else(|e| e.into_inner());
        if said.as_ref().is_some_and(|(a, l)| *a == about && *l == line) {
            return;
        }
        // The program's own message is never overwritten by ours.
        let ours = said.as_ref().map(|(_, l)| l.as_str());
        if !self.holds_only(ours) {
            return;
        }
        if self.file.set_len(0).is_ok() && self.file.write_all_at(line.as_bytes(), 0).is_ok() {
            self.transfer_said.store(about == About::Transfers, Ordering::Release);
            *said = Some((about, line));
        }
    }

    /// A transfer failed: its line, unless one was written within
    /// [`TRANSFER_EVERY`] (the line is not even made then).
    fn transfer_failed(&self, line: impl FnOnce() -> String) {
        {
            let mut at = self.transfer_written.lock().unwrap_or_else(|e| e.into_inner());
            let recent = at.is_some_and(|t| t.elapsed() < TRANSFER_EVERY);
            if recent && self.transfer_said.load(Ordering::Acquire) {
                return;
            }
            *at = Some(std::time::Instant::now());
        }
        self.say(About::Transfers, line());
    }

    /// Takes the line back when `is_about` says it is about that, and it
    /// is still ours.
    fn take_back(&self, is_about: impl Fn(&About) -> bool) {
        let mut said = self.said.lock().unwrap_or_else(|e| e.into_inner());
        let Some((a, line)) = said.as_ref() else { return };
        if !is_about(a) {
            return;
        }
        if self.holds_only(Some(line)) {
            let _ = self.file.set_len(0);
        }
        self.transfer_said.store(false, Ordering::Release);
        *said = None;
    }

    /// Whether the file holds nothing, or exactly `ours`.
    fn holds_only(&self, ours: Option<&str>) -> bool {
        let mut buf = vec![0u8; MAX_BYTES + 1];
        let Ok(n) = self.file.read_at(&mut buf, 0) else {
            return false;
        };
        n == 0 || ours.is_some_and(|l| &buf[..n] == l.as_bytes())
    }

    /// The line now written, if any.
    #[cfg(any(test, feature = "testing"))]
    pub fn said(&self) -> Option<String> {
        self.said
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .map(|(_, l)| l.clone())
    }
}

impl crate::event::Sink for LastWords {
    fn on(&self, e: &Event<'_>) {
        match e {
            Event::Attempted(a) => match a.outcome {
                Err(f) => self.say(
                    About::Group(a.labels.group.clone()),
                    registration_line(&a.labels.group, a.labels.mem_type.as_str(), f, a.blamed),
                ),
                Ok(()) => self.take_back(|about| matches!(about, About::Group(g) if *g == a.labels.group)),
            },
            Event::XferCreateFailed(crate::event::XferCreateFailed {
                op,
                peer,
                failure,
                pending: false,
                ..
            }) => self.transfer_failed(|| transfer_line(op.as_str(), Some(peer), failure)),
            Event::XferPosted(crate::event::XferPosted {
                ended: Some((_, end)), ..
            })
            | Event::XferEnded(crate::event::XferEnded { end, .. }) => match end {
                XferEnd::Failed(f) => self.transfer_failed(|| transfer_line("transfer", None, f)),
                XferEnd::Done if self.transfer_said.load(Ordering::Acquire) => {
                    self.take_back(|about| *about == About::Transfers)
                }
                _ => {}
            },
            _ => {}
        }
    }
}

/// `line` cut to [`MAX_BYTES`] at a character boundary.
fn cut(mut line: String) -> String {
    if line.len() > MAX_BYTES {
        let mut at = MAX_BYTES;
        while !line.is_char_boundary(at) {
            at -= 1;
        }
        line.truncate(at);
    }
    line
}

/// NIXL's status as its message names it (`NIXL_ERR_BACKEND`), else the
/// one the reason stands for, else none (the call was refused before NIXL).
fn nixl_status(reason: Reason, message: &str) -> &str {
    if let Some(at) = message.find("NIXL_ERR_") {
        let rest = &message[at..];
        let end = rest
            .find(|c: char| !(c.is_ascii_uppercase() || c == '_'))
            .unwrap_or(rest.len());
        return &rest[..end];
    }
    match reason {
        Reason::NixlBackendError => "NIXL_ERR_BACKEND",
        Reason::NixlInvalidParam => "NIXL_ERR_INVALID_PARAM",
        Reason::NixlNotFound => "NIXL_ERR_NOT_FOUND",
        _ => "none reported",
    }
}

/// One line, no line breaks: the message's own are spaces.
fn one_line(s: &str) -> String {
    s.split(['\n', '\r'])
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
}

fn registration_line(group: &str, mem_type: &str, f: &GroupFailure, region: Option<crate::model::Region>) -> String {
    let region = match (f.region, region) {
        (Some(i), Some(r)) => format!(
            "region {i} (addr {:#x}, {} bytes, {mem_type} device {})",
            r.addr, r.len, r.device
        ),
        (Some(i), None) => format!("region {i}"),
        (None, Some(r)) => format!(
            "region at {:#x} ({} bytes, {mem_type} device {})",
            r.addr, r.len, r.device
        ),
        (None, None) => "no one region to blame".to_string(),
    };
    format!(
        "nixl-agent: NIXL memory registration failed for group {group}: reason {}, NIXL status {}, {region}: {}",
        f.reason.as_str(),
        nixl_status(f.reason, &f.message),
        one_line(&f.message)
    )
}

fn transfer_line(op: &str, peer: Option<&str>, f: &Failure) -> String {
    let peer = peer.map(|p| format!(" to peer {}", one_line(p))).unwrap_or_default();
    format!(
        "nixl-agent: NIXL {op}{peer} failed: reason {}, NIXL status {}: {}",
        f.reason.as_str(),
        nixl_status(f.reason, &f.message),
        one_line(&f.message)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::Sink;
    use crate::model::{GroupLabels, Kind, MemType, Region};

    fn attempted(labels: &GroupLabels, outcome: Result<(), &GroupFailure>) -> crate::event::Attempt<'static> {
        // Leaked for the test's 'static borrow: a few bytes.
        let labels: &'static GroupLabels = Box::leak(Box::new(labels.clone()));
        let outcome = outcome.map_err(|f| &*Box::leak(Box::new(f.clone())));
        crate::event::Attempt {
            group: None,
            agent: crate::model::AgentId(1),
            labels,
            attempt: 1,
            descriptors: 1,
            bytes: 4096,
            elapsed: None,
            outcome,
            leaves: crate::event::Leaves::Call { first: None },
            blamed: Some(Region::new(0, 4096, 0)),
        }
    }

    fn open(path: &Path) -> LastWords {
        LastWords::open(&Target::Path(path.to_path_buf())).unwrap().unwrap()
    }

    #[test]
    fn a_failure_is_one_line_taken_back_when_its_group_registers() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("termination-log");
        let w = open(&path);
        let aux = GroupLabels::new("aux", &Kind::Aux, MemType::Dram, &["UCX".into()], 0);
        let f = GroupFailure {
            reason: Reason::InvalidAddress,
            region: Some(0),
            message: "nixlBackendError: NIXL_ERR_BACKEND\nregion 0 starts at address 0".into(),
            rolled_back: 0,
            diagnostics: Vec::new(),
        };
        w.on(&Event::Attempted(&attempted(&aux, Err(&f))));
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text.lines().count(), 1, "{text}");
        for part in [
            "group aux",
            "reason invalid_address",
            "NIXL status NIXL_ERR_BACKEND",
            "region 0 (addr 0x0",
        ] {
            assert!(text.contains(part), "{part}: {text}");
        }
        // Another group's success takes nothing back; its own does.
        let kv = GroupLabels::new("kv", &Kind::Kv, MemType::Dram, &["UCX".into()], 0);
        w.on(&Event::Attempted(&attempted(&kv, Ok(()))));
        assert_eq!(std::fs::read_to_string(&path).unwrap(), text);
        w.on(&Event::Attempted(&attempted(&aux, Ok(()))));
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "");
        assert_eq!(w.said(), None);
    }

    #[test]
    fn the_programs_own_message_is_never_overwritten_and_a_line_is_at_most_4_kib() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("termination-log");
        std::fs::write(&path, "the program's own last words").unwrap();
        let w = open(&path);
        let aux = GroupLabels::new("aux", &Kind::Aux, MemType::Dram, &["UCX".into()], 0);
        let f = GroupFailure::whole(Failure::new(Reason::NixlBackendError, "x".repeat(10_000)));
        w.on(&Event::Attempted(&attempted(&aux, Err(&f))));
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "the program's own last words");
        std::fs::write(&path, "").unwrap();
        w.on(&Event::Attempted(&attempted(&aux, Err(&f))));
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text.len(), MAX_BYTES);
        // The program wrote over ours: taking ours back leaves its own.
        std::fs::write(&path, "program").unwrap();
        w.on(&Event::Attempted(&attempted(&aux, Ok(()))));
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "program");
    }

    #[test]
    fn a_transfer_failure_is_said_once_a_burst_and_taken_back_by_a_completed_transfer() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("termination-log");
        let w = open(&path);
        let ended = |end| {
            Event::XferEnded(crate::event::XferEnded {
                handle: 1,
                at: std::time::Instant::now(),
                end,
                measured: None,
                sampled: false,
            })
        };
        let first = Failure::new(Reason::NixlBackendError, "NIXL_ERR_REMOTE_DISCONNECT peer gone");
        w.on(&ended(XferEnd::Failed(&first)));
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(
            text.starts_with(
                "nixl-agent: NIXL transfer failed: reason nixl_backend_error, NIXL status NIXL_ERR_REMOTE_DISCONNECT"
            ),
            "{text}"
        );
        // A burst: the line is not rewritten for each.
        let other = Failure::new(Reason::NixlBackendError, "another");
        for _ in 0..1000 {
            w.on(&ended(XferEnd::Failed(&other)));
        }
        assert_eq!(std::fs::read_to_string(&path).unwrap(), text);
        w.on(&ended(XferEnd::Done));
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "");
    }

    #[test]
    fn the_setting_is_off_a_path_or_the_default_and_the_default_may_be_absent() {
        assert_eq!(Target::parse(None), Ok(Target::Default));
        assert_eq!(Target::parse(Some("off")), Ok(Target::Off));
        assert_eq!(Target::parse(Some("/x/y")), Ok(Target::Path("/x/y".into())));
        assert!(Target::parse(Some("relative")).unwrap_err().contains("relative"));
        assert!(LastWords::open(&Target::Off).unwrap().is_none());
        let missing = Target::Path("/nonexistent-dir-of-nixl-agent/log".into());
        assert!(LastWords::open(&missing).is_err());
    }
}
