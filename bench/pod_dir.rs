//! The pod section's large directory: what `nixl-agent pod` costs watching a
//! directory of many large rank files (256 × 4 MiB, the most it reads of
//! each) that do not change. Each file is a real rank file (a recording's
//! own, published by an observer) padded to 4 MiB with trailing blanks
//! (read and parsed, kept by nobody); no process
//! holds their slots, so they are dead ranks whose counters are served. The
//! watcher reads each file once and then only looks at it (`lstat`, the
//! slot's lock tested): the CPU it takes per second of watching is the row.

use crate::common::cpu_time;
use crate::procs::get_text;
use nixl_agent::{ObserveSettings, Observer};
use serde::Serialize;
use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

/// Bytes of each file (the pod reader's cap).
pub const FILE_BYTES: usize = 4 << 20;

#[derive(Debug, Clone, Serialize)]
pub struct DirCost {
    pub files: u32,
    pub file_bytes: usize,
    /// From start to the first view listing every rank.
    pub first_view_s: f64,
    pub seconds: f64,
    /// CPU time of the pod agent over `seconds` of watching, in % of one core.
    pub cpu_percent: f64,
}

/// `files` copies of a real rank file, as ranks 0..files, each padded to
/// [`FILE_BYTES`].
fn fill(dir: &Path, files: u32) -> Result<(), String> {
    let src = tempfile::tempdir().map_err(|e| e.to_string())?;
    let o = Observer::new(ObserveSettings::default());
    let p = o.publish(src.path(), 0).map_err(|e| format!("publish: {e}"))?;
    let text = std::fs::read_to_string(src.path().join("rank-0.json")).map_err(|e| e.to_string())?;
    drop(p);
    let mut v: serde_json::Value = serde_json::from_str(&text).map_err(|e| e.to_string())?;
    for r in 0..files {
        v["rank"] = r.into();
        let mut body = v.to_string();
        body.push_str(&" ".repeat(FILE_BYTES.saturating_sub(body.len())));
        if body.len() != FILE_BYTES {
            return Err(format!("rank {r}: {} bytes, not {FILE_BYTES}", body.len()));
        }
        std::fs::write(dir.join(format!("rank-{r}.json")), body).map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// `nixl-agent pod` on a directory of `files` × 4 MiB rank files, watched
/// for `watch`.
pub fn cost(agent_bin: &Path, files: u32, watch: Duration) -> Result<DirCost, String> {
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    fill(dir.path(), files)?;
    let port = crate::procs::free_port();
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().map_err(|e| format!("{e}"))?;
    let t0 = Instant::now();
    let mut pod = crate::procs::spawn_pod(agent_bin, dir.path(), files, addr)?;
    let measured = (|| {
        let end = t0 + Duration::from_secs(120);
        loop {
            let listed = get_text(addr, "/metrics")
                .ok()
                .map(|(_, body)| body.lines().filter(|l| l.starts_with("nixl_agent_rank_up{")).count());
            if listed == Some(files as usize) {
                break;
            }
            if Instant::now() > end {
                return Err(format!("the pod never listed {files} ranks (last: {listed:?})"));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let first_view_s = t0.elapsed().as_secs_f64();
        // A pass already under way when the first view came out.
        std::thread::sleep(Duration::from_millis(500));
        let pid = pod.id();
        let c0 = cpu_time(pid).ok_or("no /proc/PID/stat")?;
        let w0 = Instant::now();
        std::thread::sleep(watch);
        let c1 = cpu_time(pid).ok_or("no /proc/PID/stat")?;
        let seconds = w0.elapsed().as_secs_f64();
        Ok(DirCost {
            files,
            file_bytes: FILE_BYTES,
            first_view_s,
            seconds,
            cpu_percent: 100.0 * (c1 - c0).as_secs_f64() / seconds,
        })
    })();
    let _ = pod.kill();
    let _ = pod.wait();
    measured
}
