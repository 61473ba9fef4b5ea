//! Publishing one rank's recording to the pod directory, in the slot it
//! claimed ([`super::claim`]). A thread of its
//! own looks every [`super::PUBLISH_EVERY`] whether anything was recorded
//! (the metrics' write counter, the status snapshot) and then replaces the
//! rank's file (write a temporary file, rename: a reader never sees half a
//! file, and a process killed mid-write leaves the last whole one). It
//! touches the file every [`super::HEARTBEAT`] otherwise, so the pod's
//! agent tells a hung rank from a live one by the file's age. The
//! registration path pays nothing for it.
//!
//! The file outlives its process: a process that ends through its
//! interpreter's exit writes an end record into it ([`Publisher::finish`]:
//! how it ended) and then frees the slot; one that dies leaves its last
//! file as it was. Either way the pod keeps serving what it counted until
//! a process claims the slot again or the retention passes
//! ([`super::RETENTION`]). The next process of the rank reads the previous
//! one's file before it writes its own ([`previous_run`]) and serves what
//! killed it.
//!
//! A write that fails (a full memory-backed `emptyDir`, a directory made
//! read-only) is no death: the heartbeat goes on on the last file written,
//! the failure is counted by cause (`nixl_agent_pod_publish_failures_total`)
//! and logged once per cause, and the pod reads the rank as stale since
//! that file's write.
//!
//! The writer trusts nothing in the directory (anyone who may write it
//! could have planted a link or a FIFO): a temporary file has a random name
//! and is created `O_CREAT | O_EXCL | O_NOFOLLOW | O_NONBLOCK` (never
//! another file, never a wait), then renamed into place; the heartbeat is a
//! `futimens` on the descriptor of the file it wrote, never an open by
//! path; a rank file that is no longer the one it wrote is written again at
//! the next look.

use super::claim::{Claim, Conflict, Wish};
use crate::model::{Ended, How};
use crate::status::Status;
use crate::telemetry::exposition::Format;
use crate::telemetry::Metrics;
use std::fs::{self, File, OpenOptions};
use std::hash::{BuildHasher, Hasher};
use std::io::Write;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

pub use super::FILE_VERSION as VERSION;

/// The publishing thread; ends the rank when finished or dropped, and the
/// rank's slot is free again.
pub struct Publisher {
    shared: Arc<Shared>,
    thread: Option<std::thread::JoinHandle<()>>,
    /// Released once the end record is written.
    claim: Option<Arc<Claim>>,
}

/// What the publishing thread and a failure's synchronous write share.
struct Shared {
    dir: PathBuf,
    path: PathBuf,
    rank: u32,
    conflict: Option<Conflict>,
    metrics: Metrics,
    status: Arc<dyn Fn() -> Arc<Status> + Send + Sync>,
    /// This publisher's run id, written in every file.
    run: u64,
    /// The process that claimed the slot: a forked child that inherited
    /// this publisher never writes the parent's file.
    pid: u32,
    stop: AtomicBool,
    /// The file last written (`None` once the rank ended: nothing is
    /// written after the end record). One writer at a time.
    last: Mutex<Option<Written>>,
    failing: Mutex<WriteFailures>,
    /// When a transfer failure last wrote the file synchronously.
    last_sync: Mutex<Option<Instant>>,
}

/// The least time between two synchronous writes for transfer failures
/// (which can come by the thousand when a peer goes): the thread writes
/// the rest.
const SYNC_EVERY: std::time::Duration = super::PUBLISH_EVERY;

impl Shared {
    /// Writes the rank's file now (`ended`: its end record, the last one);
    /// a failed write keeps the heartbeat on the last file written.
    fn write_now(&self, ended: Option<&Ended>) {
        if std::process::id() != self.pid {
            return;
        }
        let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        let Some(written) = last.as_mut() else { return };
        let w = self.write(ended);
        let mut failing = self.failing.lock().unwrap_or_else(|e| e.into_inner());
        match w {
            Ok(w) => {
                *written = w;
                failing.recovered(self.rank);
            }
            Err(e) => {
                failing.failed(&e, self.rank, &self.dir, &self.metrics, ended.is_some());
                // The heartbeat goes on on the last file written: a rank
                // that cannot write is stale, never dead.
                let _ = written.file.set_modified(SystemTime::now());
            }
        }
        if ended.is_some() {
            *last = None;
        }
    }

    /// One look of the thread: written when something was recorded or the
    /// file is not its own any more, else touched.
    fn look(&self, rewritten: &mut Instant, touched: &mut Instant) {
        let (changed, replaced) = {
            let last = self.last.lock().unwrap_or_else(|e| e.into_inner());
            let Some(w) = last.as_ref() else { return };
            (self.metrics.generation() != w.generation, !w.is_at(&self.path))
        };
        if changed || replaced || rewritten.elapsed() >= super::HEARTBEAT * 4 {
            self.write_now(None);
            *touched = Instant::now();
            *rewritten = *touched;
        } else if touched.elapsed() >= super::HEARTBEAT {
            // futimens on the file written: no open, no link followed,
            // nothing to block on.
            if let Some(w) = self.last.lock().unwrap_or_else(|e| e.into_inner()).as_ref() {
                let _ = w.file.set_modified(SystemTime::now());
            }
            *touched = Instant::now();
        }
    }
}

/// Writes the rank's file as a failure is recorded, on the thread that
/// recorded it: a process that dies of it right after (`os._exit`, a
/// signal) leaves the failure in its file. A registration failure always;
/// transfer failures at most every [`SYNC_EVERY`].
struct WriteOnFailure(std::sync::Weak<Shared>);

impl crate::event::Sink for WriteOnFailure {
    fn on(&self, e: &crate::event::Event<'_>) {
        use crate::event::{Event, XferEnd};
        let (failed, transfer) = match e {
            Event::Attempted(a) => (a.outcome.is_err(), false),
            Event::XferCreateFailed(crate::event::XferCreateFailed { pending, .. }) => (!pending, true),
            Event::XferPosted(crate::event::XferPosted {
                ended: Some((_, XferEnd::Failed(_))),
                ..
            })
            | Event::XferEnded(crate::event::XferEnded {
                end: XferEnd::Failed(_),
                ..
            }) => (true, true),
            _ => (false, false),
        };
        if !failed {
            return;
        }
        let Some(shared) = self.0.upgrade() else { return };
        if shared.stop.load(Ordering::Acquire) {
            return;
        }
        if transfer {
            let mut at = shared.last_sync.lock().unwrap_or_else(|e| e.into_inner());
            if at.is_some_and(|t| t.elapsed() < SYNC_EVERY) {
                return;
            }
            *at = Some(Instant::now());
        }
        shared.write_now(None);
    }

    fn gone(&self) -> bool {
        self.0.strong_count() == 0
    }
}

impl Publisher {
    /// Claims a slot of `dir` (created if missing) as `wish` asks and
    /// starts publishing `metrics` and `status()` there. Fails when the
    /// directory cannot be written or no slot can be claimed.
    #[doc(hidden)]
    pub fn start(
        dir: &Path,
        wish: Wish,
        metrics: Metrics,
        status: impl Fn() -> Arc<Status> + Send + Sync + 'static,
    ) -> std::io::Result<Publisher> {
        let uid = super::dir::uid().ok_or_else(|| std::io::Error::other("no Uid in /proc/self/status"))?;
        let claim = Arc::new(super::claim::claim(dir, wish, uid)?);
        let rank = claim.rank;
        let conflict = claim.conflict.clone();
        if let Some(c) = &conflict {
            tracing::error!(
                target: crate::telemetry::names::INSTRUMENT_LOG_TARGET,
                wanted = c.wanted,
                rank,
                dir = %dir.display(),
                "this process was told a rank another live process holds; publishing as another rank with the conflict (the pod is not ready until it is resolved; nothing is overwritten)"
            );
        }
        let path = dir.join(super::file_name(rank));
        // Temporary files of this slot are a dead holder's (a write cut
        // short): removed under the slot this process now holds.
        remove_temporaries(dir, rank);
        // What the slot's previous process left, read before this one
        // writes over it.
        let previous = previous_run(&path);
        if let Some(p) = &previous {
            tracing::info!(
                target: crate::telemetry::names::INSTRUMENT_LOG_TARGET,
                rank,
                pid = p.pid,
                how = p.how.as_str(),
                failures = p.failures.iter().map(|f| f.3).sum::<f64>(),
                "the previous process of this rank (pid {}) {}; its registration failures are served as nixl_agent_previous_run_registration_failures",
                p.pid,
                p.how.describe()
            );
        }
        metrics.previous_run(
            previous
                .as_ref()
                .map(|p| (p.how.as_str(), p.ended_unix, p.failures.as_slice())),
        );
        let run = run_id();
        let status: Arc<dyn Fn() -> Arc<Status> + Send + Sync> = Arc::new(status);
        let shared = Arc::new(Shared {
            dir: dir.to_path_buf(),
            path,
            rank,
            conflict,
            metrics,
            status,
            run,
            pid: std::process::id(),
            stop: AtomicBool::new(false),
            last: Mutex::new(None),
            failing: Mutex::new(WriteFailures::default()),
            last_sync: Mutex::new(None),
        });
        // The first write before returning: a directory that cannot be
        // written says so now, not in a thread.
        let first = shared.write(None)?;
        *shared.last.lock().unwrap_or_else(|e| e.into_inner()) = Some(first);
        let mine = shared.clone();
        // The slot is held while this thread writes its file.
        let held = claim.clone();
        let thread = std::thread::Builder::new()
            .name("nixl-agent-publish".into())
            .spawn(move || {
                let _held = held;
                let mut touched = Instant::now();
                // Rewritten at least this often even when nothing was
                // recorded: the process_* series keep moving.
                let mut rewritten = Instant::now();
                while !mine.stop.load(Ordering::Acquire) {
                    // Woken early when the publisher ends.
                    std::thread::park_timeout(super::PUBLISH_EVERY);
                    if mine.stop.load(Ordering::Acquire) {
                        break;
                    }
                    mine.look(&mut rewritten, &mut touched);
                }
            })?;
        Ok(Publisher {
            shared,
            thread: Some(thread),
            claim: Some(claim),
        })
    }

    /// What writes this rank's file as a failure is recorded, for the
    /// recording's subscribers (it does nothing once the rank ended).
    #[doc(hidden)]
    pub fn sink(&self) -> Box<dyn crate::event::Sink> {
        Box::new(WriteOnFailure(Arc::downgrade(&self.shared)))
    }

    /// The process ends through its interpreter's exit (or an embedder
    /// stops publishing): the thread stops, the rank's file is written one
    /// last time with `ended` (how it ended), and then the slot is free.
    /// The file stays for the pod to serve. A final write that fails leaves
    /// the last file written: the pod then reads the rank as died.
    pub fn finish(mut self, ended: Ended) {
        self.end(ended);
    }

    fn end(&mut self, ended: Ended) {
        self.shared.stop.store(true, Ordering::Release);
        let Some(t) = self.thread.take() else { return };
        t.thread().unpark();
        if t.join().is_err() {
            return;
        }
        self.shared.write_now(Some(&ended));
        // Then the slot is free: a reader that finds it free finds the end
        // record with it.
        self.claim = None;
    }

    /// The rank claimed.
    pub fn rank(&self) -> u32 {
        self.shared.rank
    }

    /// The claim's lock descriptor (a forked child closes its copy, so that
    /// the parent's slot is free once the parent is gone).
    #[doc(hidden)]
    pub fn lock_fd(&self) -> Option<std::os::fd::RawFd> {
        self.claim.as_ref().map(|c| c.lock_fd())
    }

    /// The rank this process was told and could not have, if any.
    pub fn conflict(&self) -> Option<u32> {
        self.shared.conflict.as_ref().map(|c| c.wanted)
    }
}

/// A publisher dropped without [`Publisher::finish`] ends as an exit
/// ([`How::Exited`]). A process that dies instead leaves its last file: a
/// dead rank, until a process claims the slot again or the retention
/// passes.
impl Drop for Publisher {
    fn drop(&mut self) {
        self.end(Ended::now(None));
    }
}

/// Write failures of one publisher: counted each, logged once per cause
/// until a write succeeds again.
#[derive(Default)]
struct WriteFailures {
    logged: Vec<&'static str>,
}

impl WriteFailures {
    fn failed(&mut self, e: &std::io::Error, rank: u32, dir: &Path, metrics: &Metrics, last: bool) {
        let cause = match e.raw_os_error() {
            Some(libc::ENOSPC | libc::EDQUOT) => "no_space",
            Some(libc::EACCES | libc::EPERM | libc::EROFS) => "permission",
            _ => "other",
        };
        metrics.publish_failed(cause);
        if last {
            tracing::warn!(
                target: crate::telemetry::names::INSTRUMENT_LOG_TARGET,
                rank,
                cause,
                error = %e,
                "cannot write this rank's end record; the pod will read it as died"
            );
        } else if !self.logged.contains(&cause) {
            self.logged.push(cause);
            tracing::warn!(
                target: crate::telemetry::names::INSTRUMENT_LOG_TARGET,
                rank,
                dir = %dir.display(),
                cause,
                error = %e,
                "cannot write this rank's file to the pod directory; its heartbeat goes on on the last file written (the pod reads it as stale, not dead) and writing is retried"
            );
        }
    }

    fn recovered(&mut self, rank: u32) {
        if !self.logged.is_empty() {
            self.logged.clear();
            tracing::info!(target: crate::telemetry::names::INSTRUMENT_LOG_TARGET, rank, "this rank's file is written again");
        }
    }
}

/// What the previous process of a slot left in its file.
#[derive(Debug, Clone, PartialEq)]
pub struct PreviousRun {
    pub pid: u32,
    pub how: How,
    /// Its end record's time, else its file's last write or touch.
    pub ended_unix: f64,
    /// Its registration failures, summed by (group, backend, reason): at
    /// most [`MAX_PREVIOUS_SERIES`].
    pub failures: Vec<(String, String, String, f64)>,
}

/// The most (group, reason) series of a previous run served.
pub const MAX_PREVIOUS_SERIES: usize = 16;

/// The previous run of the slot whose file is `path`, read before this
/// process writes over it: `None` when there is none, or it is not a rank
/// file of this version.
pub fn previous_run(path: &Path) -> Option<PreviousRun> {
    let text = super::read::read_file(path).ok()?;
    let mtime = fs::symlink_metadata(path).ok()?.modified().ok()?;
    let rank = super::merge::Rank::parse(&text, false)?;
    let (how, ended_unix) = match &rank.ended {
        Some(e) => (e.how, e.at_unix),
        None => (
            How::Died,
            mtime.duration_since(UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64()),
        ),
    };
    Some(PreviousRun {
        pid: rank.pid,
        how,
        ended_unix,
        failures: registration_failures(&rank.metrics),
    })
}

/// `nixl_agent_registration_failures_total` of an exposition, summed by
/// (group, backend, reason), in order of first appearance. The backend is
/// kept so that an alert joins the previous run's failure to the same
/// series the failure counter makes.
fn registration_failures(text: &str) -> Vec<(String, String, String, f64)> {
    let family = crate::telemetry::names::REGISTRATION_FAILURES_TOTAL;
    let mut out: Vec<(String, String, String, f64)> = Vec::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix(family).and_then(|r| r.strip_prefix('{')) else {
            continue;
        };
        let Some((labels, value)) = rest.rsplit_once("} ") else {
            continue;
        };
        let Ok(value) = value.trim().parse::<f64>() else {
            continue;
        };
        let label = |name: &str| {
            let start = labels.find(&format!("{name}=\""))? + name.len() + 2;
            let end = labels[start..].find('"')? + start;
            Some(labels[start..end].to_string())
        };
        let (Some(group), Some(reason)) = (label("group"), label("reason")) else {
            continue;
        };
        let backend = label("backend").unwrap_or_default();
        match out
            .iter()
            .position(|(g, b, r, _)| *g == group && *b == backend && *r == reason)
        {
            Some(i) => out[i].3 += value,
            None if out.len() < MAX_PREVIOUS_SERIES => out.push((group, backend, reason, value)),
            None => {}
        }
    }
    out
}

/// The file last written, held open for the heartbeat.
struct Written {
    generation: u64,
    file: File,
}

impl Written {
    /// Whether `path` still names the file written (not one renamed over
    /// it, not removed). An `lstat`: no link followed, nothing opened.
    fn is_at(&self, path: &Path) -> bool {
        match (fs::symlink_metadata(path), self.file.metadata()) {
            (Ok(there), Ok(mine)) => there.dev() == mine.dev() && there.ino() == mine.ino(),
            _ => false,
        }
    }
}

/// A random id of one publisher's run (the standard library's hasher keys
/// come from the OS's random source).
fn run_id() -> u64 {
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u32(std::process::id());
    h.finish()
}

/// How many random names a write tries before it gives up (each one taken
/// means someone planted a file at a name nobody could guess).
const TEMP_TRIES: u32 = 8;

/// A temporary file's name for slot `rank`: `.rank-N.json.<random>.tmp`.
pub fn temp_name(rank: u32) -> String {
    // The standard library's hasher keys come from the OS's random source.
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u32(std::process::id());
    h.write_u128(SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos()));
    format!(".{}.{:016x}.tmp", super::file_name(rank), h.finish())
}

/// The slot a temporary file's name belongs to.
pub fn temp_rank(name: &str) -> Option<u32> {
    let rest = name.strip_prefix('.')?.strip_suffix(".tmp")?;
    let (file, random) = rest.rsplit_once('.')?;
    if random.len() != 16 || !random.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    super::rank_of_file(file).ok().flatten()
}

fn remove_temporaries(dir: &Path, rank: u32) {
    let Ok(entries) = fs::read_dir(dir) else { return };
    for e in entries.filter_map(Result::ok) {
        if temp_rank(&e.file_name().to_string_lossy()) == Some(rank) {
            let _ = fs::remove_file(e.path());
        }
    }
}

/// A new temporary file of slot `rank` in `dir`: exclusive, never through
/// a link, never a FIFO.
fn create_temp(dir: &Path, rank: u32) -> std::io::Result<(PathBuf, File)> {
    let mut last = None;
    for _ in 0..TEMP_TRIES {
        let tmp = dir.join(temp_name(rank));
        let created = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o644)
            .custom_flags(super::slot::OPEN_FLAGS)
            .open(&tmp);
        match created {
            Ok(f) => return Ok((tmp, f)),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => last = Some(e),
            Err(e) => return Err(e),
        }
    }
    Err(last.unwrap_or_else(|| std::io::Error::other("no temporary file")))
}

/// The status and the exposition read at one ledger generation (read again
/// when an event landed in between, at most a few times).
fn consistent(metrics: &Metrics, status: &dyn Fn() -> Arc<Status>) -> (Arc<Status>, String, String) {
    let mut st = status();
    let encode = || (metrics.encode(Format::Text), metrics.encode(Format::OpenMetrics));
    let (mut text, mut om) = encode();
    for _ in 0..3 {
        let after = status();
        if after.generation == st.generation {
            break;
        }
        st = after;
        (text, om) = encode();
    }
    (st, text, om)
}

impl Shared {
    /// Writes the rank's file (a temporary file renamed into place) with
    /// the status and the exposition read at one ledger generation, and
    /// `ended` when the process is ending.
    fn write(&self, ended: Option<&Ended>) -> std::io::Result<Written> {
        let (dir, path, rank, run) = (&self.dir, &self.path, self.rank, self.run);
        let conflict = self.conflict.as_ref();
        let (status, text, openmetrics) = consistent(&self.metrics, &*self.status);
        let generation = status.generation;
        let doc = serde_json::json!({
            // The ledger generation both halves were read at.
            "generation": status.generation,
            "version": VERSION,
            "rank": rank,
            "pid": std::process::id(),
            // This publisher's run: tells one process of the rank from the
            // next when they have the same pid (a restarted container's).
            "run": run,
            "written_unix": SystemTime::now().duration_since(UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64()),
            // The verdicts of the one rule (`Status::derive_ready`,
            // `Status::liveness_failure`) over this recording: the pod shows
            // them, it never derives them again.
            "ready": status.ready,
            "liveness_failure": status.liveness_failure(),
            "conflict": conflict,
            // How its process ended: written once, as it exits.
            "ended": ended,
            "status": &*status,
            "metrics": text,
            // With exemplars, for a pod scrape that asks for OpenMetrics.
            "openmetrics": openmetrics,
        });
        let (tmp, mut file) = create_temp(dir, rank)?;
        let placed = file
            .write_all(doc.to_string().as_bytes())
            .and_then(|()| fs::rename(&tmp, path));
        if let Err(e) = placed {
            let _ = fs::remove_file(&tmp);
            return Err(e);
        }
        Ok(Written { generation, file })
    }
}
