//! Reading a pod directory, distrusting it, and cheaply: what the pod's
//! watcher does at every pass.
//!
//! - Regular files named `rank-<N>.json` only (never a symlink, FIFO or
//!   device; opened without following links and without blocking), at most
//!   [`MAX_FILE_BYTES`], the rank from the file's name and checked against
//!   its content, each exposition checked ([`super::lint`]) before it is
//!   merged; a rank whose TYPE for a family disagrees with an earlier
//!   rank's is rejected too.
//! - A rank is alive only while a live process holds its slot's lock
//!   (tested with `F_OFD_GETLK`, taking nothing: [`super::slot`]) and its
//!   file was touched within [`super::STALE_AFTER`] (a hung process holds
//!   its lock but stops touching).
//! - A file is read again only when its inode, size or modification time
//!   changed; what it said is kept in between ([`Reader`]).
//! - Bounded: at most [`MAX_REJECTED`] rejected files are listed per pass
//!   (the first by name, so the same ones each pass); the rest are counted
//!   in `left_out`.

use super::merge::{self, Rank, Unfit};
use crate::telemetry::names;
use std::collections::{BTreeSet, HashMap};
use std::io::Read;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::Path;
use std::time::SystemTime;

/// Most bytes a rank file may hold (a rank's recording is tens of KB).
pub const MAX_FILE_BYTES: u64 = 4 << 20;
/// Most rejected files listed (and counted) per pass.
pub const MAX_REJECTED: usize = 1024;

/// A file of the pod directory not taken as a rank.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Rejected {
    pub file: String,
    /// The closed word (the `reason` label of
    /// `nixl_agent_pod_files_rejected_total`).
    pub reason: &'static str,
    pub detail: String,
    /// The rank its name says, when it has a rank's name.
    #[serde(skip)]
    pub rank: Option<u32>,
    /// Which version of the file (inode, size, modification time): counted
    /// once each.
    #[serde(skip)]
    pub version: Version,
}

/// What tells one version of a file from the next.
pub type Version = (u64, u64, Option<SystemTime>);

/// What one pass over the directory found.
#[derive(Debug, Default)]
pub struct DirRead {
    pub ranks: Vec<Rank>,
    /// Each rank's file version, beside `ranks`.
    pub versions: Vec<Version>,
    pub rejected: Vec<Rejected>,
    /// Rejected files beyond [`MAX_REJECTED`], not listed.
    pub left_out: usize,
    /// Some rank's content or liveness differs from the previous pass.
    pub changed: bool,
    /// Ranks whose process ended longer ago than the retention and whose
    /// slot nobody claimed since: no longer served.
    pub expired: Vec<Rank>,
}

/// What a file said: a rank, or why it is not one (reason, detail).
type FileReading = Result<Rank, (&'static str, String)>;

/// The directory's files as last read: each re-read only when it changed.
pub struct Reader {
    files: HashMap<String, (Version, FileReading)>,
    /// (rank, version, alive) of the last pass's ranks.
    last: Vec<(u32, Version, bool)>,
    /// How long a rank whose process ended is served.
    retention: std::time::Duration,
}

impl Default for Reader {
    fn default() -> Self {
        Reader::new(super::RETENTION)
    }
}

fn version(m: &std::fs::Metadata) -> Version {
    (m.ino(), m.len(), m.modified().ok())
}

/// Reads one rank file's content: a regular file, opened without following
/// links or blocking, at most [`MAX_FILE_BYTES`].
pub(super) fn read_file(path: &Path) -> Result<String, (&'static str, String)> {
    let opened = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(super::slot::OPEN_FLAGS)
        .open(path)
        .and_then(super::slot::regular);
    let mut text = String::new();
    match opened.and_then(|f| f.take(MAX_FILE_BYTES + 1).read_to_string(&mut text)) {
        Err(e) => Err((names::POD_REJECT_UNREADABLE, e.to_string())),
        Ok(n) if n as u64 > MAX_FILE_BYTES => {
            Err((names::POD_REJECT_TOO_LARGE, format!("over {MAX_FILE_BYTES} bytes")))
        }
        Ok(_) => Ok(text),
    }
}

fn check(text: &str, named: u32) -> Result<Rank, (&'static str, String)> {
    Rank::checked(text, named, false).map_err(|u| match u {
        Unfit::NotARankFile => (
            names::POD_REJECT_NOT_A_RANK_FILE,
            format!("not a version {} rank file", super::FILE_VERSION),
        ),
        Unfit::NameMismatch(said) => (names::POD_REJECT_NAME_MISMATCH, format!("its content says rank {said}")),
        Unfit::Exposition(b) => (
            b.problem.reason(),
            format!("line {} of its exposition {}", b.line, b.problem.describe()),
        ),
    })
}

impl Reader {
    /// A reader that serves a rank whose process ended for `retention`.
    pub fn new(retention: std::time::Duration) -> Reader {
        Reader {
            files: HashMap::new(),
            last: Vec::new(),
            retention,
        }
    }

    /// One pass over `dir` at `now`. Blocking I/O: run it off the async
    /// workers.
    pub fn pass(&mut self, dir: &Path, now: SystemTime) -> DirRead {
        let mut out = DirRead::default();
        let Ok(entries) = std::fs::read_dir(dir) else {
            self.files.clear();
            out.changed = !std::mem::take(&mut self.last).is_empty();
            return out;
        };
        // Names that look like a rank's but are not one: the first by name.
        let mut misnamed: BTreeSet<String> = BTreeSet::new();
        let mut seen: HashMap<String, ()> = HashMap::new();
        let mut rejected = Vec::new();
        let mut found: Vec<(Rank, Version)> = Vec::new();
        for e in entries.filter_map(Result::ok) {
            let file = e.file_name().to_string_lossy().into_owned();
            let named = match super::rank_of_file(&file) {
                Ok(Some(r)) => r,
                Ok(None) => continue,
                Err(()) => {
                    misnamed.insert(file);
                    if misnamed.len() > MAX_REJECTED {
                        misnamed.pop_last();
                        out.left_out += 1;
                    }
                    continue;
                }
            };
            let reject = |reason, detail, version| Rejected {
                file: file.clone(),
                reason,
                detail,
                rank: Some(named),
                version,
            };
            let meta = match std::fs::symlink_metadata(e.path()) {
                Ok(m) => m,
                Err(err) => {
                    rejected.push(reject(names::POD_REJECT_UNREADABLE, err.to_string(), (0, 0, None)));
                    continue;
                }
            };
            let v = version(&meta);
            if !meta.file_type().is_file() {
                rejected.push(reject(
                    names::POD_REJECT_NOT_REGULAR,
                    format!("{:?}", meta.file_type()),
                    v,
                ));
                continue;
            }
            if meta.len() > MAX_FILE_BYTES {
                rejected.push(reject(names::POD_REJECT_TOO_LARGE, format!("{} bytes", meta.len()), v));
                continue;
            }
            seen.insert(file.clone(), ());
            let cached = self.files.get(&file).filter(|(was, _)| *was == v);
            let outcome = match cached {
                Some((_, o)) => o.clone(),
                None => {
                    let o = read_file(&e.path()).and_then(|text| check(&text, named));
                    self.files.insert(file.clone(), (v, o.clone()));
                    o
                }
            };
            match outcome {
                Ok(mut r) => {
                    let fresh = match meta.modified().map(|m| now.duration_since(m)) {
                        Ok(Ok(age)) => age < super::STALE_AFTER,
                        // A modification time in the future (a clock step, a
                        // file planted by hand): within a second it is a write
                        // that raced this read; beyond it, never alive.
                        Ok(Err(ahead)) => ahead.duration() <= std::time::Duration::from_secs(1),
                        Err(_) => false,
                    };
                    r.held = super::slot::is_held(dir, named);
                    r.alive = r.held && fresh;
                    r.touched_unix = meta
                        .modified()
                        .ok()
                        .and_then(|m| m.duration_since(std::time::UNIX_EPOCH).ok())
                        .map_or(0.0, |d| d.as_secs_f64());
                    let gone_for = meta.modified().ok().and_then(|m| now.duration_since(m).ok());
                    if !r.held && gone_for.is_some_and(|g| g > self.retention) {
                        out.expired.push(r);
                        continue;
                    }
                    found.push((r, v));
                }
                Err((reason, detail)) => rejected.push(reject(reason, detail, v)),
            }
        }
        self.files.retain(|f, _| seen.contains_key(f));
        found.sort_by_key(|(r, _)| r.rank);
        let clashing = merge::type_conflicts(&found.iter().map(|(r, _)| r.clone()).collect::<Vec<_>>());
        let mut kept: Vec<(u32, Version, bool)> = Vec::new();
        for (r, v) in found {
            if clashing.contains(&r.rank) {
                rejected.push(Rejected {
                    file: super::file_name(r.rank),
                    reason: names::POD_REJECT_CONFLICTING_METADATA,
                    detail: "a family's TYPE differs from a lower rank's".into(),
                    rank: Some(r.rank),
                    version: v,
                });
            } else {
                kept.push((r.rank, v, r.alive));
                out.ranks.push(r);
                out.versions.push(v);
            }
        }
        out.changed = kept != self.last;
        self.last = kept;
        rejected.extend(misnamed.into_iter().map(|file| Rejected {
            file,
            reason: names::POD_REJECT_NAME,
            detail: "not rank-<N>.json with N from 0 to 255".into(),
            rank: None,
            version: (0, 0, None),
        }));
        rejected.sort_by(|a, b| a.file.cmp(&b.file));
        if rejected.len() > MAX_REJECTED {
            out.left_out += rejected.len() - MAX_REJECTED;
            rejected.truncate(MAX_REJECTED);
        }
        out.rejected = rejected;
        out
    }
}
