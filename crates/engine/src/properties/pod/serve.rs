//! Unit tests of the pod's watcher: hostile directories, conflicts,
//! liveness, bounds.

use crate::pod::read::Reader;
use crate::pod::serve::*;
use crate::status::document::Shape;
use crate::telemetry::exposition::Format;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use std::time::SystemTime;
use tokio::sync::watch;

/// Plants what a hostile or messy directory holds beside two real
/// ranks: a symlink to /dev/zero, a FIFO, a 1 GiB sparse file, garbage,
/// a leftover `rank-0-old.json`, a file whose content names another
/// rank, one whose exposition has a bad line, one with a future mtime.
pub fn plant_hostile_files(dir: &Path) {
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
    let text = w.own_text();
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
    let text = w.own_text();
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
        serde_json::from_str(&std::fs::read_to_string(dir.path().join(crate::pod::file_name(0))).unwrap()).unwrap();
    v["rank"] = 3.into();
    let path = dir.path().join(crate::pod::file_name(3));
    std::fs::write(&path, v.to_string()).unwrap();
    drop(publisher);
    let ended: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join(crate::pod::file_name(0))).unwrap()).unwrap();
    assert_eq!(
        ended["ended"]["how"], "exited",
        "an ended rank's file stays, with its end record"
    );
    std::fs::remove_file(dir.path().join(crate::pod::file_name(0))).unwrap();
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
    let uid = crate::pod::dir::uid().unwrap();
    let slot3 = crate::pod::claim::claim(dir.path(), crate::pod::claim::Wish::Explicit(3), uid).unwrap();
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
    for i in 0..crate::pod::read::MAX_REJECTED + extra {
        std::fs::write(dir.path().join(format!("rank-0{i:04}.json")), "").unwrap();
    }
    let mut w = Watcher::new(dir.path().to_path_buf(), Some(1));
    for _ in 0..3 {
        let v = w.pass(false);
        assert_eq!(v.rejected.len(), crate::pod::read::MAX_REJECTED);
        assert_eq!(v.rejected_left_out, extra);
        assert_eq!(v.rejected[0].file, "rank-00000.json");
    }
    let text = w.own_text();
    let want = format!(
        "nixl_agent_pod_files_rejected_total{{reason=\"name\"}} {}",
        crate::pod::read::MAX_REJECTED
    );
    assert!(text.contains(&want), "{text}");
}

/// The pod's /livez and /v1/status for a view, through its router.
fn get(view: PodView, path: &str) -> (u16, String) {
    use tower::ServiceExt;
    let (_tx, rx) = watch::channel(Arc::new(view));
    let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
    rt.block_on(async move {
        let req = axum::http::Request::get(path).body(axum::body::Body::empty()).unwrap();
        let res = router(rx).oneshot(req).await.unwrap();
        let code = res.status().as_u16();
        let body = axum::body::to_bytes(res.into_body(), 1 << 24).await.unwrap();
        (code, String::from_utf8(body.to_vec()).unwrap())
    })
}

/// A live rank with an observed NIXL call past its deadline (its own
/// /livez would be 503) fails the pod's /livez, which names the rank and
/// the call; the document says the same, and it clears when the call
/// returns. (Before: the pod's /livez looked only at its watcher.)
#[test]
fn a_rank_with_a_call_past_its_deadline_fails_the_pods_livez_naming_rank_and_call() {
    use crate::model::{AgentId, Kind, MemType, Region};
    use crate::observe::{Call, ObserveSettings, Observer, Outcome};
    let dir = tempfile::tempdir().unwrap();
    let healthy = Observer::new(ObserveSettings::default());
    let hung = Observer::with_probe(
        ObserveSettings {
            call_timeout: Some(Duration::from_millis(40)),
            ..Default::default()
        },
        Box::new(crate::validate::NullProbe),
    );
    let _p0 = healthy.publish(dir.path(), 0).unwrap();
    let _p1 = hung.publish(dir.path(), 1).unwrap();
    let agent = AgentId::fresh();
    hung.saw_agent(agent, "a", Vec::new);
    let regions = [Region::new(0x1000, 64, 0)];
    let call = Call {
        agent,
        group: "kv",
        kind: &Kind::Kv,
        mem_type: MemType::Dram,
        device: 0,
        backends: None,
        regions: &regions,
    };
    let pending = hung.begin(&call);
    let mut w = Watcher::new(dir.path().to_path_buf(), None);
    let t0 = std::time::Instant::now();
    let view = loop {
        let v = w.pass(false);
        if !v.liveness_failures.is_empty() {
            break v;
        }
        assert!(t0.elapsed() < Duration::from_secs(10), "never seen stuck");
        std::thread::sleep(Duration::from_millis(50));
    };
    let own = hung.status().liveness_failure().expect("its own /livez fails");
    assert!(
        own.starts_with("NIXL register of group kv past its deadline ("),
        "{own}"
    );
    assert_eq!(view.liveness_failures.len(), 1, "{:?}", view.liveness_failures);
    assert!(
        view.liveness_failures[0].starts_with("rank 1: NIXL register of group kv past its deadline ("),
        "{:?}",
        view.liveness_failures
    );
    let (code, body) = get(view.clone(), "/livez");
    assert_eq!(code, 503, "{body}");
    assert!(
        body.starts_with("rank 1: NIXL register of group kv past its deadline ("),
        "{body}"
    );
    // A sidecar: its own /livez says whether the sidecar works; the hung
    // rank fails the probe the serving container carries.
    let mut sidecar = view.clone();
    sidecar.shape = Shape::Sidecar;
    assert_eq!(get(sidecar.clone(), "/livez"), (200, "ok\n".to_string()));
    let (code, body) = get(sidecar.clone(), "/livez/ranks");
    assert_eq!(code, 503, "{body}");
    assert!(
        body.starts_with("rank 1: NIXL register of group kv past its deadline ("),
        "{body}"
    );
    let (code, body) = get(sidecar.clone(), "/livez/rank/1");
    assert_eq!(code, 503, "{body}");
    assert!(
        body.starts_with("rank 1: NIXL register of group kv past its deadline ("),
        "{body}"
    );
    assert_eq!(get(sidecar.clone(), "/livez/rank/0"), (200, "ok: rank 0\n".to_string()));
    assert_eq!(
        get(sidecar.clone(), "/livez/rank/7").0,
        200,
        "not published yet: starting"
    );
    assert_eq!(get(sidecar.clone(), "/livez/rank/256").0, 404);
    assert_eq!(get(sidecar, "/livez/rank/x").0, 404);
    let (_, doc) = get(view, "/v1/status");
    let doc: serde_json::Value = serde_json::from_str(&doc).unwrap();
    assert_eq!(doc["shape"], "zero_config_pod");
    assert_eq!(doc["live"], false);
    assert_eq!(doc["ranks"][1]["liveness_failure"].as_str(), Some(own.as_str()));
    assert_eq!(doc["ranks"][0]["liveness_failure"], serde_json::Value::Null);

    hung.end(pending, &call, None, Outcome::Registered);
    let t0 = std::time::Instant::now();
    let view = loop {
        let v = w.pass(false);
        if v.liveness_failures.is_empty() {
            break v;
        }
        assert!(t0.elapsed() < Duration::from_secs(10), "never cleared");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(get(view, "/livez").0, 200);
}

/// A watcher whose last pass is long ago (a slow or stalled pass) is
/// reported in /v1/status and does not fail /livez while it is merely slow
/// (before: 503 after three intervals without a pass); a sidecar whose
/// watcher has not passed for a minute is stuck, and its own /livez says
/// so. A zero-configuration pod's never does for this.
#[test]
fn a_slow_watcher_is_reported_and_never_fails_livez_by_itself() {
    let dir = tempfile::tempdir().unwrap();
    let o = crate::observe::Observer::new(crate::observe::ObserveSettings::default());
    let _p0 = o.publish(dir.path(), 0).unwrap();
    let mut view = Watcher::new(dir.path().to_path_buf(), Some(1)).pass(false);
    view.at = std::time::Instant::now() - Duration::from_secs(30);
    let (code, body) = get(view.clone(), "/livez");
    assert_eq!((code, body.as_str()), (200, "ok\n"));
    let (_, doc) = get(view.clone(), "/v1/status");
    let doc: serde_json::Value = serde_json::from_str(&doc).unwrap();
    assert_eq!(doc["shape"], "sidecar");
    assert_eq!(doc["live"], true);
    assert_eq!(doc["watcher"]["stalled"], true, "{doc}");
    assert!(doc["watcher"]["last_pass_age_seconds"].as_f64().unwrap() >= 30.0);
    view.at = std::time::Instant::now() - Duration::from_secs(90);
    let (code, body) = get(view.clone(), "/livez");
    assert_eq!(code, 503);
    assert!(
        body.contains("the pod directory watcher has not completed a pass"),
        "{body}"
    );
    view.shape = Shape::ZeroConfigPod;
    assert_eq!(get(view, "/livez").0, 200);
}

/// Records one failed registration of group `aux` (reason
/// `nixl_backend_error`) on `o`.
fn fail_aux(o: &crate::observe::Observer) {
    use crate::model::{AgentId, Failure, Kind, MemType, Reason, Region};
    use crate::observe::{Call, Outcome};
    let agent = AgentId::fresh();
    o.saw_agent(agent, "a", Vec::new);
    let regions = [Region::new(0, 4096, 0)];
    let call = Call {
        agent,
        group: "aux",
        kind: &Kind::Aux,
        mem_type: MemType::Dram,
        device: 0,
        backends: None,
        regions: &regions,
    };
    let pending = o.begin(&call);
    let failure = Failure::new(Reason::NixlBackendError, "NIXL_ERR_BACKEND");
    o.end(pending, &call, None, Outcome::Failed(failure));
}

fn sample(text: &str, prefix: &str) -> Option<f64> {
    text.lines()
        .find(|l| l.starts_with(prefix))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

/// A rank whose process ends — an exit with an end record, or a death
/// without one — keeps its counters on the pod's /metrics and loses its
/// gauges, is said in /readyz?verbose and /v1/status with how it ended, is
/// counted once by how; the next process of the rank serves the previous
/// run's failures; past the retention the rank is no longer served.
#[test]
fn an_ended_rank_keeps_its_counters_says_how_and_its_next_process_serves_the_previous_run() {
    use crate::observe::{ObserveSettings, Observer};
    let dir = tempfile::tempdir().unwrap();
    let mut w = Watcher::with_retention(dir.path().to_path_buf(), Some(1), Duration::from_secs(3));
    let first = Observer::new(ObserveSettings::default());
    let p = first.publish(dir.path(), 0).unwrap();
    fail_aux(&first);
    let v = w.pass(false);
    assert!(v.ranks[0].alive);
    p.finish(crate::model::Ended::now(Some("nixlBackendError")));
    let v = w.pass(false);
    let failures = "nixl_agent_registration_failures_total{rank=\"0\",";
    assert_eq!(sample(&v.metrics, failures), Some(1.0), "{}", v.metrics);
    assert!(
        !v.metrics.contains("nixl_agent_group_registered{rank=\"0\""),
        "gauges go at once"
    );
    assert_eq!(
        sample(
            &v.metrics,
            "nixl_agent_pod_rank_exits_total{how=\"exception\",rank=\"0\"}"
        ),
        Some(1.0),
        "{}",
        v.metrics
    );
    assert_eq!(
        sample(&v.metrics, "nixl_agent_pod_rank_exits_total{how=\"died\",rank=\"0\"}"),
        Some(0.0)
    );
    let (_, body) = get(v.clone(), "/readyz?verbose");
    assert!(
        body.contains("[-]rank:0 failed: ended: pid ")
            && body.contains("exited after an uncaught exception (nixlBackendError)"),
        "{body}"
    );
    let (_, doc) = get(v, "/v1/status");
    let doc: serde_json::Value = serde_json::from_str(&doc).unwrap();
    assert_eq!(doc["ranks"][0]["ended"]["how"], "exception", "{doc}");
    assert_eq!(doc["ranks"][0]["ended"]["exception"], "nixlBackendError");
    // Counted once, however many passes see it.
    let v = w.pass(false);
    assert_eq!(
        sample(
            &v.metrics,
            "nixl_agent_pod_rank_exits_total{how=\"exception\",rank=\"0\"}"
        ),
        Some(1.0)
    );

    // The next process of the rank: the previous run's failures, and how.
    let second = Observer::new(ObserveSettings::default());
    let p2 = second.publish(dir.path(), 0).unwrap();
    let own = second.metrics().encode(Format::Text);
    assert_eq!(
        sample(
            &own,
            "nixl_agent_previous_run_registration_failures{backend=\"UCX\",group=\"aux\",reason=\"nixl_backend_error\"}"
        ),
        Some(1.0),
        "{own}"
    );
    assert!(
        own.contains("nixl_agent_previous_run_end_timestamp_seconds{how=\"exception\"}"),
        "{own}"
    );
    let v = w.pass(false);
    assert_eq!(sample(&v.metrics, failures), None, "its own counters start afresh");
    // A death: no end record (the publisher's thread and slot lost as a
    // killed process loses them).
    std::mem::forget(p2);
    let lock = dir.path().join(crate::pod::slot::lock_name(0));
    // The slot's lock is freed only with the process; stand in for the
    // kernel by moving the lock file away (a fresh one is free).
    std::fs::rename(&lock, dir.path().join("old.lock")).unwrap();
    let t0 = std::time::Instant::now();
    let v = loop {
        let v = w.pass(false);
        if v.ranks.first().is_some_and(|r| !r.held) {
            break v;
        }
        assert!(t0.elapsed() < Duration::from_secs(5));
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(
        sample(&v.metrics, "nixl_agent_pod_rank_exits_total{how=\"died\",rank=\"0\"}"),
        Some(1.0),
        "{}",
        v.metrics
    );
    let (_, doc) = get(v, "/v1/status");
    let doc: serde_json::Value = serde_json::from_str(&doc).unwrap();
    assert_eq!(doc["ranks"][0]["ended"]["how"], "died", "{doc}");
}

/// Past the retention, an ended rank whose slot nobody claimed is no
/// longer served, and readiness says why.
#[test]
fn an_ended_rank_is_served_for_the_retention_only() {
    use crate::observe::{ObserveSettings, Observer};
    let dir = tempfile::tempdir().unwrap();
    let o = Observer::new(ObserveSettings::default());
    let p = o.publish(dir.path(), 0).unwrap();
    fail_aux(&o);
    drop(p);
    let path = dir.path().join(crate::pod::file_name(0));
    std::fs::File::options()
        .write(true)
        .open(&path)
        .unwrap()
        .set_modified(SystemTime::now() - Duration::from_secs(20))
        .unwrap();
    let mut w = Watcher::with_retention(dir.path().to_path_buf(), Some(1), Duration::from_secs(10));
    let v = w.pass(false);
    assert!(v.ranks.is_empty());
    assert!(!v.metrics.contains("nixl_agent_registration_failures_total{rank=\"0\""));
    let why = v.checks[0].failure.clone().unwrap_or_default();
    assert!(
        why.starts_with("ended: pid ") && why.contains("the retention passed"),
        "{why}"
    );
    let mut w = Watcher::with_retention(dir.path().to_path_buf(), Some(1), Duration::from_secs(60));
    let v = w.pass(false);
    assert_eq!(v.ranks.len(), 1);
    assert!(v.metrics.contains("nixl_agent_registration_failures_total{rank=\"0\""));
}

/// A rank that cannot write its file (here: its directory made read-only
/// under it) keeps beating on its last file: never read as dead; the pod
/// says its file is stale since its last write, and the rank counts the
/// failures by cause.
#[test]
fn a_rank_that_cannot_write_its_file_is_stale_never_dead() {
    use crate::observe::{ObserveSettings, Observer};
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let pod = dir.path().join("pod");
    std::fs::create_dir(&pod).unwrap();
    let o = Observer::new(ObserveSettings::default());
    let p = o.publish(&pod, 0).unwrap();
    let mut w = Watcher::new(pod.clone(), Some(1));
    assert!(w.pass(false).ranks[0].alive);
    // Root writes anywhere: an immutable directory stands in for a full
    // one where chattr works; else read-only for a non-root user.
    let immutable = std::process::Command::new("chattr")
        .arg("+i")
        .arg(&pod)
        .status()
        .is_ok_and(|s| s.success());
    if !immutable {
        std::fs::set_permissions(&pod, std::fs::Permissions::from_mode(0o555)).unwrap();
    }
    let undo = |pod: &Path| {
        let _ = std::process::Command::new("chattr").arg("-i").arg(pod).status();
        let _ = std::fs::set_permissions(pod, std::fs::Permissions::from_mode(0o755));
    };
    if std::fs::write(pod.join("probe"), "").is_ok() {
        undo(&pod);
        eprintln!("SKIPPED: this user writes a read-only directory and chattr is unavailable");
        return;
    }
    fail_aux(&o);
    let t0 = std::time::Instant::now();
    let v = loop {
        let v = w.pass(false);
        if v.checks[0].note.is_some() {
            break v;
        }
        assert!(v.ranks[0].alive, "a rank that cannot write was read as dead");
        if t0.elapsed() > Duration::from_secs(15) {
            undo(&pod);
            panic!("never read as stale: {:?}", v.checks);
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    undo(&pod);
    assert!(v.ranks[0].alive);
    let note = v.checks[0].note.clone().unwrap();
    assert!(note.starts_with("its file is stale since "), "{note}");
    let (_, body) = get(v.clone(), "/readyz?verbose");
    assert!(body.contains("(its file is stale since "), "{body}");
    let (_, doc) = get(v, "/v1/status");
    let doc: serde_json::Value = serde_json::from_str(&doc).unwrap();
    assert!(doc["ranks"][0]["stale_since_unix"].as_f64().is_some(), "{doc}");
    let own = o.metrics().encode(Format::Text);
    assert!(
        sample(&own, "nixl_agent_pod_publish_failures_total{cause=\"permission\"}").unwrap_or(0.0) >= 1.0,
        "{own}"
    );
    // Written again once it can: no longer stale.
    let t0 = std::time::Instant::now();
    while w.pass(false).checks[0].note.is_some() {
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "still stale after the directory came back"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    drop(p);
}
