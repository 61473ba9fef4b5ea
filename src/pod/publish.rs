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
//! The writer trusts nothing in the directory (anyone who may write it
//! could have planted a link or a FIFO): a temporary file has a random name
//! and is created `O_CREAT | O_EXCL | O_NOFOLLOW | O_NONBLOCK` (never
//! another file, never a wait), then renamed into place; the heartbeat is a
//! `futimens` on the descriptor of the file it wrote, never an open by
//! path; a rank file that is no longer the one it wrote is written again at
//! the next look; retiring removes the file only while it is its own.

use super::claim::{Claim, Conflict, Wish};
use crate::status::Status;
use crate::telemetry::exposition::Format;
use crate::telemetry::Metrics;
use std::fs::{self, File, OpenOptions};
use std::hash::{BuildHasher, Hasher};
use std::io::Write;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

/// Format version of a rank file.
pub const VERSION: u32 = 1;

/// The publishing thread; stops when dropped, and the rank's slot is free
/// again.
pub struct Publisher {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<Written>>,
    path: std::path::PathBuf,
    rank: u32,
    conflict: Option<Conflict>,
    _claim: Arc<Claim>,
}

impl Publisher {
    /// Claims a slot of `dir` (created if missing) as `wish` asks and
    /// starts publishing `metrics` and `status()` there. Fails when the
    /// directory cannot be written or no slot can be claimed.
    pub(crate) fn start(
        dir: &Path,
        wish: Wish,
        metrics: Metrics,
        status: impl Fn() -> Arc<Status> + Send + 'static,
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
        let stop = Arc::new(AtomicBool::new(false));
        // The first write before returning: a directory that cannot be
        // written says so now, not in a thread.
        let mut last = write(dir, &path, rank, conflict.as_ref(), &metrics, &status)?;
        let dir = dir.to_path_buf();
        let stop2 = stop.clone();
        let held = claim.clone();
        let conflict2 = conflict.clone();
        let own_path = path.clone();
        let thread = std::thread::Builder::new()
            .name("nixl-agent-publish".into())
            .spawn(move || {
                let mut touched = Instant::now();
                // Rewritten at least this often even when nothing was
                // recorded: the process_* series keep moving.
                let mut rewritten = Instant::now();
                // The slot is held while this thread writes its file.
                let _held = held;
                while !stop2.load(Ordering::Acquire) {
                    // Woken early when the publisher is dropped.
                    std::thread::park_timeout(super::PUBLISH_EVERY);
                    if stop2.load(Ordering::Acquire) {
                        break;
                    }
                    let changed = metrics.generation() != last.generation;
                    // Replaced or removed by someone else: written again.
                    let replaced = !last.is_at(&path);
                    if changed || replaced || rewritten.elapsed() >= super::HEARTBEAT * 4 {
                        if let Ok(w) = write(&dir, &path, rank, conflict2.as_ref(), &metrics, &status) {
                            last = w;
                        }
                        touched = Instant::now();
                        rewritten = touched;
                    } else if touched.elapsed() >= super::HEARTBEAT {
                        // futimens on the file written: no open, no link
                        // followed, nothing to block on.
                        let _ = last.file.set_modified(SystemTime::now());
                        touched = Instant::now();
                    }
                }
                last
            })?;
        Ok(Publisher {
            stop,
            thread: Some(thread),
            path: own_path,
            rank,
            conflict,
            _claim: claim,
        })
    }

    /// The rank claimed.
    pub fn rank(&self) -> u32 {
        self.rank
    }

    /// The claim's lock descriptor (a forked child closes its copy, so that
    /// the parent's slot is free once the parent is gone).
    pub(crate) fn lock_fd(&self) -> std::os::fd::RawFd {
        self._claim.lock_fd()
    }

    /// The rank this process was told and could not have, if any.
    pub fn conflict(&self) -> Option<u32> {
        self.conflict.as_ref().map(|c| c.wanted)
    }
}

/// A publisher dropped (the process ends cleanly, an embedder stops
/// publishing) retires its rank: the thread stops, the file is removed, and
/// then the slot is free. A process that dies instead leaves its file to go
/// stale: a dead rank, until a process claims the slot again.
impl Drop for Publisher {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            t.thread().unpark();
            // Only this writer's own file: not one planted in its place.
            if let Ok(last) = t.join() {
                if last.is_at(&self.path) {
                    let _ = fs::remove_file(&self.path);
                }
            }
        }
    }
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

/// How many random names a write tries before it gives up (each one taken
/// means someone planted a file at a name nobody could guess).
const TEMP_TRIES: u32 = 8;

/// A temporary file's name for slot `rank`: `.rank-N.json.<random>.tmp`.
fn temp_name(rank: u32) -> String {
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
fn consistent(metrics: &Metrics, status: &impl Fn() -> Arc<Status>) -> (Arc<Status>, String, String) {
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

fn write(
    dir: &Path,
    path: &Path,
    rank: u32,
    conflict: Option<&Conflict>,
    metrics: &Metrics,
    status: &impl Fn() -> Arc<Status>,
) -> std::io::Result<Written> {
    let (status, text, openmetrics) = consistent(metrics, status);
    let generation = status.generation;
    let doc = serde_json::json!({
        // The ledger generation both halves were read at.
        "generation": status.generation,
        "version": VERSION,
        "rank": rank,
        "pid": std::process::id(),
        "written_unix": SystemTime::now().duration_since(UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64()),
        // The verdicts of the one rule (`Status::derive_ready`,
        // `Status::liveness_failure`) over this recording: the pod shows
        // them, it never derives them again.
        "ready": status.ready,
        "liveness_failure": status.liveness_failure(),
        "conflict": conflict,
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::FileTypeExt;
    use std::time::Duration;

    fn observer() -> crate::observe::Observer {
        crate::observe::Observer::new(crate::observe::ObserveSettings::default())
    }

    fn mkfifo(path: &Path) {
        assert!(std::process::Command::new("mkfifo")
            .arg(path)
            .status()
            .unwrap()
            .success());
    }

    /// Runs `f` on a thread and fails (instead of hanging the run) when it
    /// does not return within `within`.
    fn within<T: Send + 'static>(within: Duration, what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(f());
        });
        rx.recv_timeout(within)
            .unwrap_or_else(|_| panic!("{what}: still blocked after {within:?}"))
    }

    /// A link and a FIFO planted at the temporary names the old writer used
    /// (`.rank-N.json.<pid>.tmp`) and at the rank file's path before the
    /// first write: nothing is written through the link, nothing waits on
    /// the FIFO, and each rank file is a regular file of the writer's own.
    #[test]
    fn links_and_fifos_at_the_temporary_and_rank_paths_are_never_used() {
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim");
        std::fs::write(&victim, "keep").unwrap();
        let pid = std::process::id();
        std::os::unix::fs::symlink(&victim, dir.path().join(format!(".rank-0.json.{pid}.tmp"))).unwrap();
        mkfifo(&dir.path().join(format!(".rank-1.json.{pid}.tmp")));
        std::os::unix::fs::symlink(&victim, dir.path().join("rank-2.json")).unwrap();
        mkfifo(&dir.path().join("rank-3.json"));
        let d = dir.path().to_path_buf();
        let publishers = within(Duration::from_secs(5), "publishing", move || {
            let o = observer();
            (0..4).map(|r| o.publish(&d, r).unwrap()).collect::<Vec<_>>()
        });
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep");
        for r in 0..4 {
            let m = std::fs::symlink_metadata(dir.path().join(super::super::file_name(r))).unwrap();
            assert!(m.file_type().is_file(), "rank {r}: {:?}", m.file_type());
        }
        within(Duration::from_secs(5), "retiring", move || drop(publishers));
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep");
    }

    /// A FIFO, then a link, renamed over a live rank's file: the heartbeat
    /// never opens the path (the old one blocked on the FIFO, and retiring
    /// hung the interpreter at exit), the file is written again, and
    /// retiring removes only the writer's own file.
    #[test]
    fn a_fifo_or_link_renamed_over_the_rank_file_blocks_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let o = observer();
        let p = o.publish(dir.path(), 0).unwrap();
        let path = dir.path().join(super::super::file_name(0));
        let victim = dir.path().join("victim");
        std::fs::write(&victim, "keep").unwrap();
        for plant in ["fifo", "link"] {
            let planted = dir.path().join(format!("planted-{plant}"));
            if plant == "fifo" {
                mkfifo(&planted);
            } else {
                std::os::unix::fs::symlink(&victim, &planted).unwrap();
            }
            std::fs::rename(&planted, &path).unwrap();
            // Past a heartbeat: the writer noticed and wrote its own again.
            let deadline = Instant::now() + Duration::from_secs(3);
            while !std::fs::symlink_metadata(&path).is_ok_and(|m| m.file_type().is_file()) {
                assert!(
                    Instant::now() < deadline,
                    "{plant}: the rank file was not written again"
                );
                std::thread::sleep(Duration::from_millis(20));
            }
            assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep");
        }
        // A FIFO in place when the rank retires: it returns, and leaves
        // what is not its own.
        mkfifo(&dir.path().join("last"));
        std::fs::rename(dir.path().join("last"), &path).unwrap();
        within(Duration::from_secs(5), "retiring", move || drop(p));
        assert!(std::fs::symlink_metadata(&path).unwrap().file_type().is_fifo());
    }

    /// A pod directory that is a link: nothing is written, the recording
    /// runs alone and says so on /readyz?verbose (a failing `pod_dir`
    /// check: not ready), on a metric and in /v1/status; it never blocks.
    #[test]
    fn a_refused_directory_is_said_on_readyz_a_metric_and_the_status() {
        let base = tempfile::tempdir().unwrap();
        let real = base.path().join("real");
        std::fs::create_dir(&real).unwrap();
        let link = base.path().join("pod");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        let o = observer();
        assert!(o.publish(&link, 0).is_err());
        assert_eq!(std::fs::read_dir(&real).unwrap().count(), 0, "nothing written");
        let st = o.status();
        let pod = st.pod.as_ref().unwrap();
        assert_eq!(pod.refused, Some(crate::model::DirRefusal::Link));
        assert_eq!(pod.dir, link.display().to_string());
        assert!(!st.ready);
        let check = st
            .checks()
            .into_iter()
            .find(|c| c.name == crate::status::CHECK_POD_DIR)
            .unwrap();
        assert!(
            check.failure.as_deref().is_some_and(|f| f.starts_with("link (")),
            "{check:?}"
        );
        let text = o.metrics().encode(Format::Text);
        assert!(text.contains("nixl_agent_pod_dir_refused{reason=\"link\"} 1"), "{text}");
        // A directory that can be used: said too, and the check passes.
        let fine = observer();
        let p = fine.publish(&real, 0).unwrap();
        let st = fine.status();
        assert_eq!(st.pod.as_ref().and_then(|p| p.rank), Some(0));
        assert!(st
            .checks()
            .iter()
            .any(|c| c.name == crate::status::CHECK_POD_DIR && c.failure.is_none()));
        drop(p);
    }

    #[test]
    fn temporary_names_are_random_and_known_by_their_slot() {
        let (a, b) = (temp_name(7), temp_name(7));
        assert_ne!(a, b);
        assert_eq!(temp_rank(&a), Some(7));
        assert_eq!(temp_rank(&format!(".rank-7.json.{}.tmp", std::process::id())), None);
        assert_eq!(temp_rank("rank-7.json"), None);
    }
}
