//! Unit tests of the pod's watcher: hostile directories, conflicts,
//! liveness, bounds.

use super::*;
use std::path::Path;
use std::time::Duration;

/// Plants what a hostile or messy directory holds beside two real
/// ranks: a symlink to /dev/zero, a FIFO, a 1 GiB sparse file, garbage,
/// a leftover `rank-0-old.json`, a file whose content names another
/// rank, one whose exposition has a bad line, one with a future mtime.
pub(crate) fn plant_hostile_files(dir: &Path) {
    let real = std::fs::read_to_string(dir.join("rank-0.json")).unwrap();
    std::os::unix::fs::symlink("/dev/zero", dir.join("rank-2.json")).unwrap();
    let fifo = std::process::Command::new("mkfifo")
        .arg(dir.join("rank-3.json"))
        .status()
        .unwrap();
    assert!(fifo.success());
    let sparse = std::fs::File::create(dir.join("rank-4.json")).unwrap();
    sparse.set_len(1 << 30).unwrap();
    std::fs::write(dir.join("rank-5.json"), "{\"version\": 1, garbage").unwrap();
    std::fs::write(dir.join("rank-0-old.json"), &real).unwrap();
    std::fs::write(dir.join("rank-7.json"), &real).unwrap();
    let mut v: serde_json::Value = serde_json::from_str(&real).unwrap();
    v["rank"] = 8.into();
    v["metrics"] = format!("{}this is not a sample\n", v["metrics"].as_str().unwrap()).into();
    std::fs::write(dir.join("rank-8.json"), v.to_string()).unwrap();
    v["rank"] = 9.into();
    v["metrics"] = real_metrics(&real).into();
    std::fs::write(dir.join("rank-9.json"), v.to_string()).unwrap();
    std::fs::File::options()
        .write(true)
        .open(dir.join("rank-9.json"))
        .unwrap()
        .set_modified(SystemTime::now() + Duration::from_secs(3600))
        .unwrap();
}

fn real_metrics(file: &str) -> String {
    let v: serde_json::Value = serde_json::from_str(file).unwrap();
    v["metrics"].as_str().unwrap().to_string()
}

/// Only the real ranks count; each other file is named with its reason
/// and counted once; the merged scrape parses.
#[test]
fn a_hostile_directory_leaves_only_the_real_ranks() {
    let dir = tempfile::tempdir().unwrap();
    let o = crate::observe::Observer::new(crate::observe::ObserveSettings::default());
    let p0 = o.publish(dir.path(), 0).unwrap();
    let p1 = o.publish(dir.path(), 1).unwrap();
    plant_hostile_files(dir.path());
    let mut w = Watcher::new(dir.path().to_path_buf(), Some(2));
    let t0 = std::time::Instant::now();
    let v = w.pass(true);
    assert!(
        t0.elapsed() < Duration::from_secs(2),
        "no FIFO or 1 GiB read: {:?}",
        t0.elapsed()
    );
    let ranks: Vec<(u32, bool)> = v.ranks.iter().map(|r| (r.rank, r.alive)).collect();
    assert_eq!(ranks, [(0, true), (1, true), (9, false)], "{:#?}", v.rejected);
    let reasons: Vec<(&str, &str)> = v.rejected.iter().map(|r| (r.file.as_str(), r.reason)).collect();
    assert_eq!(
        reasons,
        [
            ("rank-0-old.json", "name"),
            ("rank-2.json", "not_regular"),
            ("rank-3.json", "not_regular"),
            ("rank-4.json", "too_large"),
            ("rank-5.json", "not_a_rank_file"),
            ("rank-7.json", "name_mismatch"),
            ("rank-8.json", "bad_exposition"),
        ]
    );
    // The pod waits for ranks 0 and 1, both there and alive (their
    // observers saw no NIXL, so neither is ready); nothing else counts.
    let checks: Vec<(u32, Option<&str>)> = v.checks.iter().map(|c| (c.rank, c.failure.as_deref())).collect();
    assert_eq!(
        checks,
        [
            (0, Some("not ready: see /v1/status")),
            (1, Some("not ready: see /v1/status"))
        ]
    );
    assert!(!v.metrics.contains("rank=\"7\"") && !v.metrics.contains("rank=\"8\""));
    // Counted once per version of a file, not once per pass.
    let _ = w.pass(false);
    let text = crate::telemetry::exposition::encode(&w.own.registry, Format::Text);
    assert!(
        text.contains("nixl_agent_pod_files_rejected_total{reason=\"not_regular\"} 2"),
        "{text}"
    );
    assert!(
        text.contains("nixl_agent_pod_files_rejected_total{reason=\"name\"} 1"),
        "{text}"
    );
    drop((p0, p1));
}

/// Two processes told the same rank: the second never overwrites the
/// first; it publishes under a free rank with the conflict, which the
/// pod counts and names.
#[test]
fn a_second_process_told_the_same_rank_is_counted_and_named() {
    let dir = tempfile::tempdir().unwrap();
    let a = crate::observe::Observer::new(crate::observe::ObserveSettings::default());
    let b = crate::observe::Observer::new(crate::observe::ObserveSettings::default());
    let first = a.publish(dir.path(), 0).unwrap();
    let second = b.publish(dir.path(), 0).unwrap();
    assert_eq!((first.rank(), first.conflict()), (0, None));
    assert_eq!((second.rank(), second.conflict()), (1, Some(0)));
    let mut w = Watcher::new(dir.path().to_path_buf(), Some(1));
    let v = w.pass(false);
    assert!(!v.ready);
    let failure = v.checks.iter().find(|c| c.rank == 1).and_then(|c| c.failure.clone());
    assert!(
        failure.as_deref().is_some_and(|f| f.starts_with("conflict: pid ")),
        "{:?}",
        v.checks
    );
    let _ = w.pass(false);
    let text = crate::telemetry::exposition::encode(&w.own.registry, Format::Text);
    assert!(text.contains("nixl_agent_rank_conflicts_total 1"), "{text}");
    drop(second);
}

/// A rank file whose modification time is in the future is stale, not
/// alive for ever; one just written is alive.
#[test]
fn a_future_modification_time_is_not_alive() {
    let dir = tempfile::tempdir().unwrap();
    let o = crate::observe::Observer::new(crate::observe::ObserveSettings::default());
    let publisher = o.publish(dir.path(), 0).unwrap();
    // A copy of what the publisher wrote, as rank 3: a file nobody
    // touches but this test.
    let mut v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join(super::super::file_name(0))).unwrap()).unwrap();
    v["rank"] = 3.into();
    let path = dir.path().join(super::super::file_name(3));
    std::fs::write(&path, v.to_string()).unwrap();
    drop(publisher);
    assert!(
        !dir.path().join(super::super::file_name(0)).exists(),
        "a retired rank's file is removed"
    );
    let now = SystemTime::now();
    std::fs::File::options()
        .write(true)
        .open(&path)
        .unwrap()
        .set_modified(now)
        .unwrap();
    let mut reader = Reader::default();
    let ranks = reader.pass(dir.path(), now).ranks;
    assert_eq!(ranks.len(), 1);
    assert!(
        !ranks[0].alive && !ranks[0].held,
        "written by hand, no process holding slot 3: a dead rank, however fresh"
    );
    let uid = super::super::dir::uid().unwrap();
    let slot3 = super::super::claim::claim(dir.path(), super::super::claim::Wish::Explicit(3), uid).unwrap();
    let ranks = reader.pass(dir.path(), now).ranks;
    assert!(ranks[0].alive, "just written, its slot held");
    std::fs::File::options()
        .write(true)
        .open(&path)
        .unwrap()
        .set_modified(now + Duration::from_secs(3600))
        .unwrap();
    let ranks = reader.pass(dir.path(), now).ranks;
    assert!(!ranks[0].alive, "an hour in the future is stale");
    drop(slot3);
}

/// More misnamed files than are listed: the first by name are listed and
/// counted, each once, however many passes see them; the rest are counted
/// as left out. (The old counter forgot what it counted past 4,096 files
/// and counted every present one again.)
#[test]
fn rejects_are_bounded_and_counted_once() {
    let dir = tempfile::tempdir().unwrap();
    let extra = 5;
    for i in 0..super::super::read::MAX_REJECTED + extra {
        std::fs::write(dir.path().join(format!("rank-0{i:04}.json")), "").unwrap();
    }
    let mut w = Watcher::new(dir.path().to_path_buf(), Some(1));
    for _ in 0..3 {
        let v = w.pass(false);
        assert_eq!(v.rejected.len(), super::super::read::MAX_REJECTED);
        assert_eq!(v.rejected_left_out, extra);
        assert_eq!(v.rejected[0].file, "rank-00000.json");
    }
    let text = crate::telemetry::exposition::encode(&w.own.registry, Format::Text);
    let want = format!(
        "nixl_agent_pod_files_rejected_total{{reason=\"name\"}} {}",
        super::super::read::MAX_REJECTED
    );
    assert!(text.contains(&want), "{text}");
}
