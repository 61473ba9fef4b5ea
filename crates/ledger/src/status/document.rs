//! The /v1/status document: one schema for a lone process, a
//! zero-configuration pod and the `nixl-agent pod` sidecar
//! (`docs/status.schema.json`, described in docs/status.md). The same
//! top-level keys in every shape; `ranks` always present, one element per
//! rank, each carrying that rank's own [`Status`](super::Status) — a lone
//! process is a pod of one.
//!
//! The health verdicts it shows are never derived here: a rank's `ready`
//! and `liveness_failure` are [`Status::derive_ready`](super::Status::derive_ready)
//! and [`Status::liveness_failure`](super::Status::liveness_failure) of that
//! rank's recording (a pod reads them from the rank files, where each rank
//! published them), and the document's `live` and `liveness_failures` are
//! [`liveness_failures`] over its ranks — the one rule /livez applies.

use serde::Serialize;

/// The schema's version (`schema_version`): raised when a key is renamed
/// or removed, or changes meaning.
pub const SCHEMA_VERSION: u32 = 1;

/// Which shape served the document.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Shape {
    /// One process serving its own recording (also a zero-configuration
    /// pod's port holder while it is the only rank of its address).
    Process,
    /// The port holder of a zero-configuration pod serving every rank of
    /// its address.
    ZeroConfigPod,
    /// `nixl-agent pod`, serving a pod directory.
    Sidecar,
}

/// The whole document.
#[derive(Debug, Clone, Serialize)]
pub struct Document<'a, S: Serialize> {
    pub schema_version: u32,
    pub shape: Shape,
    /// Every expected rank is there, alive and ready (a lone process: its
    /// own readiness). /readyz says the same.
    pub ready: bool,
    /// No live rank has a NIXL call past its deadline or a dead lifecycle.
    /// /livez says the same.
    pub live: bool,
    /// Why /livez fails: one line per failing live rank (`rank N: …`; a
    /// lone process's without the prefix). Empty when live.
    pub liveness_failures: Vec<String>,
    /// The pod directory read (a lone process: the one it publishes to,
    /// if any).
    pub dir: Option<&'a str>,
    pub ranks_expected: usize,
    pub ranks: Vec<RankEntry<'a, S>>,
    /// Files of the pod directory not taken as a rank (empty for a lone
    /// process).
    pub rejected: Vec<RejectedFile<'a>>,
    pub rejected_left_out: usize,
    /// The pod directory watcher's own health (`None` for a lone process):
    /// reported, never by itself a reason for /livez to fail.
    pub watcher: Option<WatcherHealth>,
}

/// One rank.
#[derive(Debug, Clone, Serialize)]
pub struct RankEntry<'a, S: Serialize> {
    /// Its slot in the pod directory, the `rank` label its series carry in
    /// this document's /metrics (a lone process: `None`, no label).
    pub rank: Option<u32>,
    pub pid: u32,
    /// A live process holds its slot.
    pub held: bool,
    /// Held and publishing: its process is alive.
    pub alive: bool,
    /// Its own readiness ([`Status::derive_ready`](super::Status::derive_ready)).
    pub ready: bool,
    /// Why its own /livez fails ([`Status::liveness_failure`](super::Status::liveness_failure)).
    pub liveness_failure: Option<&'a str>,
    /// The rank it was told and could not have.
    pub conflict: Option<RankConflict>,
    /// How its process ended, once no live process holds its slot: its end
    /// record (`exited`, `exception` with the exception's name), else
    /// `died`, with when (`at_unix`: the end record's, else its file's
    /// last touch). `None` while its process lives.
    pub ended: Option<crate::model::Ended>,
    /// Its process lives but cannot write its file: what it says is as of
    /// this time (Unix seconds).
    pub stale_since_unix: Option<f64>,
    /// Its recording: the process's own /v1/status of before schema 1.
    pub status: S,
}

/// A rank told a slot another live process holds.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct RankConflict {
    pub wanted: u32,
}

/// A file of the pod directory not taken as a rank.
#[derive(Debug, Clone, Serialize)]
pub struct RejectedFile<'a> {
    pub file: &'a str,
    /// The closed word (the `reason` label of
    /// `nixl_agent_pod_files_rejected_total`).
    pub reason: &'static str,
    pub detail: &'a str,
}

/// The pod directory watcher's health.
#[derive(Debug, Clone, Serialize)]
pub struct WatcherHealth {
    /// Seconds since its last completed pass, as this document was served.
    pub last_pass_age_seconds: f64,
    /// How long that pass took.
    pub last_pass_seconds: f64,
    /// No pass completed for three intervals: the view served is that old.
    pub stalled: bool,
}

/// The one rule for a pod's (or a process's) liveness: every live rank's
/// own verdict, named by rank. `(rank, alive, why)` per rank; a rank that
/// is not alive is a readiness failure, not a liveness one (its own
/// process, or its absence, is what a restart would act on). `None` as the
/// rank: a lone process, whose reason goes unprefixed.
pub fn liveness_failures<'a>(ranks: impl IntoIterator<Item = (Option<u32>, bool, Option<&'a str>)>) -> Vec<String> {
    ranks
        .into_iter()
        .filter(|(_, alive, _)| *alive)
        .filter_map(|(rank, _, why)| {
            let why = why?;
            Some(match rank {
                Some(n) => format!("rank {n}: {why}"),
                None => why.to_string(),
            })
        })
        .collect()
}

impl<'a> Document<'a, &'a super::Status> {
    /// A lone process's document: a pod of one, its own recording. Its
    /// rank is `None`: its series carry no `rank` label (the slot it may
    /// hold in a pod directory is its status's `pod.rank`).
    pub fn process(st: &'a super::Status, liveness: Option<&'a str>) -> Self {
        Document {
            schema_version: SCHEMA_VERSION,
            shape: Shape::Process,
            ready: st.ready,
            live: liveness.is_none(),
            liveness_failures: liveness.map(str::to_string).into_iter().collect(),
            dir: st.pod.as_ref().map(|p| p.dir.as_str()),
            ranks_expected: 1,
            ranks: vec![RankEntry {
                rank: None,
                pid: std::process::id(),
                held: true,
                alive: true,
                ready: st.ready,
                liveness_failure: liveness,
                conflict: None,
                ended: None,
                stale_since_unix: None,
                status: st,
            }],
            rejected: Vec::new(),
            rejected_left_out: 0,
            watcher: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_live_ranks_fail_liveness_and_each_is_named() {
        let f = liveness_failures([
            (Some(0), true, None),
            (
                Some(1),
                true,
                Some("NIXL register of group kv past its deadline (6.6 s)"),
            ),
            (Some(2), false, Some("lifecycle thread died")),
        ]);
        assert_eq!(f, ["rank 1: NIXL register of group kv past its deadline (6.6 s)"]);
        assert_eq!(liveness_failures([(None, true, Some("x"))]), ["x"]);
    }

    #[test]
    fn a_lone_process_is_a_pod_of_one() {
        let st = super::super::Status::empty();
        let v = serde_json::to_value(Document::process(&st, None)).unwrap();
        assert_eq!(v["schema_version"], SCHEMA_VERSION);
        assert_eq!(v["shape"], "process");
        assert_eq!(v["ranks"].as_array().unwrap().len(), 1);
        assert_eq!(v["ranks"][0]["status"]["generation"], 0);
        assert_eq!(v["live"], true);
    }
}
