//! `pod::read` with an observer publishing: tests that need observe mode, above the pod crate.

use crate::pod::read::*;
use crate::telemetry::names;
use std::time::{Duration, SystemTime};

/// A file whose inode, size and modification time did not change is
/// not read again (a directory of large files that do not change costs
/// a look per pass, not a read); one whose modification time changed is.
#[test]
fn a_file_is_read_again_only_when_it_changed() {
    let dir = tempfile::tempdir().unwrap();
    let o = crate::observe::Observer::new(crate::observe::ObserveSettings::default());
    let p = o.publish(dir.path(), 0).unwrap();
    let mut v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("rank-0.json")).unwrap()).unwrap();
    drop(p);
    std::fs::remove_file(dir.path().join("rank-0.json")).unwrap();
    v["rank"] = 3.into();
    let path = dir.path().join("rank-3.json");
    std::fs::write(&path, v.to_string()).unwrap();
    let when = SystemTime::now() - Duration::from_secs(60);
    let set = |t: SystemTime| {
        std::fs::File::options()
            .write(true)
            .open(&path)
            .unwrap()
            .set_modified(t)
            .unwrap()
    };
    set(when);
    let mut reader = Reader::default();
    let first = reader.pass(dir.path(), SystemTime::now());
    assert_eq!(first.ranks.len(), 1);
    assert!(first.changed);
    // Garbage of the same size, written in place, the time put back.
    let len = std::fs::metadata(&path).unwrap().len() as usize;
    std::fs::write(&path, " ".repeat(len)).unwrap();
    set(when);
    let again = reader.pass(dir.path(), SystemTime::now());
    assert_eq!(again.ranks.len(), 1, "not read again: {:?}", again.rejected);
    assert!(!again.changed);
    set(SystemTime::now());
    let read = reader.pass(dir.path(), SystemTime::now());
    assert!(read.ranks.is_empty() && read.changed);
    assert_eq!(read.rejected[0].reason, names::POD_REJECT_NOT_A_RANK_FILE);
}
