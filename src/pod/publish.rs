//! Publishing one rank's recording to the pod directory. A thread of its
//! own looks every [`super::PUBLISH_EVERY`] whether anything was recorded
//! (the metrics' write counter, the status snapshot) and then replaces the
//! rank's file (write a temporary file, rename: a reader never sees half a
//! file, and a process killed mid-write leaves the last whole one). It
//! touches the file every [`super::HEARTBEAT`] otherwise, so the pod's
//! agent tells a live rank from a dead one by the file's age. The
//! registration path pays nothing for it.

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

/// The publishing thread; stops when dropped.
pub struct Publisher {
    stop: Arc<AtomicBool>,
}

impl Publisher {
    /// Starts publishing `metrics` and `status()` as rank `rank` into `dir`
    /// (created if missing). Fails when the directory cannot be written.
    pub(crate) fn start(
        dir: &Path,
        rank: u32,
        metrics: Metrics,
        status: impl Fn() -> Arc<Status> + Send + 'static,
    ) -> std::io::Result<Publisher> {
        fs::create_dir_all(dir)?;
        let path = dir.join(super::file_name(rank));
        let tmp = dir.join(format!(".{}.tmp", super::file_name(rank)));
        let stop = Arc::new(AtomicBool::new(false));
        // The first write before returning: a directory that cannot be
        // written says so now, not in a thread.
        let mut last = write(&path, &tmp, rank, &metrics, &status())?;
        let stop2 = stop.clone();
        std::thread::Builder::new()
            .name("nixl-agent-publish".into())
            .spawn(move || {
                let mut touched = Instant::now();
                while !stop2.load(Ordering::Acquire) {
                    std::thread::sleep(super::PUBLISH_EVERY);
                    let st = status();
                    let changed = metrics.generation() != last.generation || st.ready != last.ready;
                    if changed || touched.elapsed() >= super::HEARTBEAT * 4 {
                        if let Ok(w) = write(&path, &tmp, rank, &metrics, &st) {
                            last = w;
                        }
                        touched = Instant::now();
                    } else if touched.elapsed() >= super::HEARTBEAT {
                        let _ = File::options()
                            .write(true)
                            .open(&path)
                            .and_then(|f| f.set_modified(SystemTime::now()));
                        touched = Instant::now();
                    }
                }
            })?;
        Ok(Publisher { stop })
    }
}

impl Drop for Publisher {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
    }
}

struct Written {
    generation: u64,
    ready: bool,
}

fn write(path: &Path, tmp: &Path, rank: u32, metrics: &Metrics, status: &Status) -> std::io::Result<Written> {
    let generation = metrics.generation();
    let doc = serde_json::json!({
        "version": VERSION,
        "rank": rank,
        "pid": std::process::id(),
        "written_unix": SystemTime::now().duration_since(UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64()),
        "ready": status.ready,
        "status": status,
        "metrics": metrics.encode(Format::Text),
    });
    let mut f = File::create(tmp)?;
    f.write_all(doc.to_string().as_bytes())?;
    drop(f);
    fs::rename(tmp, path)?;
    Ok(Written {
        generation,
        ready: status.ready,
    })
}
