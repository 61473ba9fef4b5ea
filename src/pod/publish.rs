//! Publishing one rank's recording to the pod directory, in the slot it
//! claimed ([`super::claim`]). A thread of its
//! own looks every [`super::PUBLISH_EVERY`] whether anything was recorded
//! (the metrics' write counter, the status snapshot) and then replaces the
//! rank's file (write a temporary file, rename: a reader never sees half a
//! file, and a process killed mid-write leaves the last whole one). It
//! touches the file every [`super::HEARTBEAT`] otherwise, so the pod's
//! agent tells a live rank from a dead one by the file's age. The
//! registration path pays nothing for it.

use super::claim::{Claim, Conflict, Wish};
use crate::status::Status;
use crate::telemetry::exposition::Format;
use crate::telemetry::Metrics;
use std::fs::{self, File};
use std::io::Write;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

/// Format version of a rank file.
pub const VERSION: u32 = 1;

/// The publishing thread; stops when dropped, and the rank's slot is free
/// again.
pub struct Publisher {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
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
        let claim = Arc::new(super::claim::claim(dir, wish)?);
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
        // Each writer its own temporary file: two processes publishing the
        // same rank never write into one half-written file.
        let tmp = dir.join(format!(".{}.{}.tmp", super::file_name(rank), std::process::id()));
        let stop = Arc::new(AtomicBool::new(false));
        // The first write before returning: a directory that cannot be
        // written says so now, not in a thread.
        let mut last = write(&path, &tmp, rank, conflict.as_ref(), &metrics, &status)?;
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
                    if changed || rewritten.elapsed() >= super::HEARTBEAT * 4 {
                        if let Ok(w) = write(&path, &tmp, rank, conflict2.as_ref(), &metrics, &status) {
                            last = w;
                        }
                        touched = Instant::now();
                        rewritten = touched;
                    } else if touched.elapsed() >= super::HEARTBEAT {
                        let _ = File::options()
                            .write(true)
                            .open(&path)
                            .and_then(|f| f.set_modified(SystemTime::now()));
                        touched = Instant::now();
                    }
                }
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
            let _ = t.join();
        }
        let _ = fs::remove_file(&self.path);
    }
}

struct Written {
    generation: u64,
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
    path: &Path,
    tmp: &Path,
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
        "ready": status.ready,
        "conflict": conflict,
        "status": &*status,
        "metrics": text,
        // With exemplars, for a pod scrape that asks for OpenMetrics.
        "openmetrics": openmetrics,
    });
    let mut f = File::create(tmp)?;
    f.write_all(doc.to_string().as_bytes())?;
    drop(f);
    fs::rename(tmp, path)?;
    Ok(Written { generation })
}
