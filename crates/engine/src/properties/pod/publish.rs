//! `pod::publish` with an observer publishing: tests that need observe mode, above the pod crate.

use crate::pod::publish::*;
use crate::telemetry::exposition::Format;
use std::path::Path;
use std::time::{Duration, Instant};

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
        let m = std::fs::symlink_metadata(dir.path().join(crate::pod::file_name(r))).unwrap();
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
    let path = dir.path().join(crate::pod::file_name(0));
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
    // A FIFO in place when the rank ends: it returns, never opens the
    // FIFO, and its end record is renamed over it.
    mkfifo(&dir.path().join("last"));
    std::fs::rename(dir.path().join("last"), &path).unwrap();
    within(Duration::from_secs(5), "ending", move || drop(p));
    assert!(std::fs::symlink_metadata(&path).unwrap().file_type().is_file());
    let doc: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    assert_eq!(doc["ended"]["how"], "exited");
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
