//! The life of each rank as the pod's agent sees it from one pass over the
//! directory to the next — joined, ready, in conflict, hung, ended — worked
//! out here (pure: the ranks of two passes in, the changes out) and said by
//! [`Life::pass`] in one log line each, in words an operator reads. A rank
//! ends once per process: when its slot is found free (the process exited
//! and wrote its end record, or died without one), counted by how
//! (`nixl_agent_pod_rank_exits_total`).

use super::merge::Rank;
use crate::model::How;
use std::collections::{BTreeMap, BTreeSet, HashSet};

/// What the pod last saw of a rank.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Seen {
    pid: u32,
    /// Its publisher's run: a new process of the rank with the same pid
    /// is a new process.
    run: u64,
    held: bool,
    alive: bool,
    ready: bool,
    conflict: Option<u32>,
}

/// One change in a rank's life between two passes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// A live process publishes the rank (first seen, back, or a new pid).
    Joined { rank: u32, pid: u32 },
    /// Its process became ready.
    Ready { rank: u32, pid: u32 },
    /// Its process was told another rank, which a live process holds.
    Conflict { rank: u32, pid: u32, wanted: u32 },
    /// Its process holds the slot but stopped touching its file (hangs, or
    /// is stopped).
    Stopped { rank: u32, pid: u32 },
    /// Its process ended: its slot is free. `words` says how and when.
    Ended {
        rank: u32,
        pid: u32,
        how: How,
        words: String,
    },
    /// Its file was removed while it was served.
    Removed { rank: u32, pid: u32 },
}

/// The ranks as last seen, the processes whose end was counted, and the
/// ranks whose file was removed.
#[derive(Debug)]
pub struct Life {
    seen: BTreeMap<u32, Seen>,
    /// (rank, pid, run) whose end was said: once each.
    ended: HashSet<(u32, u32, u64)>,
    removed: BTreeSet<u32>,
    /// When this watcher started (Unix seconds), less
    /// [`ENDS_BEFORE_START`]: a dead rank first seen here is counted only
    /// if its file was touched after it.
    started_unix: f64,
}

/// A watcher counts the ends of runs whose file was touched at most this
/// long before it started: in a zero-configuration pod the rank that takes
/// the address over (within a second or so) counts the end of the one that
/// held it; a restarted sidecar, those it was down for.
const ENDS_BEFORE_START: f64 = 5.0;

impl Default for Life {
    fn default() -> Self {
        Life::new(crate::ledger::counts::unix_now() - ENDS_BEFORE_START)
    }
}

impl Life {
    pub fn new(started_unix: f64) -> Life {
        Life {
            seen: BTreeMap::new(),
            ended: HashSet::new(),
            removed: BTreeSet::new(),
            started_unix,
        }
    }

    /// The changes from the last pass to `ranks`, each logged.
    pub fn pass(&mut self, ranks: &[Rank]) -> Vec<Change> {
        let changes = self.changes(ranks);
        for c in &changes {
            log(c);
        }
        changes
    }

    /// Ranks whose file was removed and that no process publishes now.
    pub fn removed(&self) -> &BTreeSet<u32> {
        &self.removed
    }

    fn changes(&mut self, ranks: &[Rank]) -> Vec<Change> {
        let mut out = Vec::new();
        let mut now = BTreeMap::new();
        for r in ranks {
            let s = Seen {
                pid: r.pid,
                run: r.run,
                held: r.held,
                alive: r.alive,
                ready: r.ready,
                conflict: r.conflict,
            };
            let (rank, pid) = (r.rank, r.pid);
            let was = self.seen.get(&rank).filter(|p| p.pid == pid && p.run == r.run);
            let before = was.filter(|p| p.alive);
            match (before, s.alive) {
                (None, true) => {
                    self.removed.remove(&rank);
                    out.push(Change::Joined { rank, pid });
                    if let Some(wanted) = s.conflict {
                        out.push(Change::Conflict { rank, pid, wanted });
                    }
                    if s.ready {
                        out.push(Change::Ready { rank, pid });
                    }
                }
                (Some(_), false) if r.held => out.push(Change::Stopped { rank, pid }),
                (Some(p), true) => {
                    if let (None, Some(wanted)) = (p.conflict, s.conflict) {
                        out.push(Change::Conflict { rank, pid, wanted });
                    }
                    if !p.ready && s.ready {
                        out.push(Change::Ready { rank, pid });
                    }
                }
                _ => {}
            }
            // Its end, once per process: seen living before, or touched
            // since this watcher started (not a run that ended before it).
            if let Some(how) = r.how_ended() {
                let ours = was.is_some_and(|p| p.held) || r.touched_unix >= self.started_unix;
                if ours && self.ended.insert((rank, pid, r.run)) {
                    out.push(Change::Ended {
                        rank,
                        pid,
                        how,
                        words: r.ending_words().unwrap_or_default(),
                    });
                }
            }
            now.insert(rank, s);
        }
        for (rank, p) in &self.seen {
            if !now.contains_key(rank) && p.alive {
                self.removed.insert(*rank);
                out.push(Change::Removed {
                    rank: *rank,
                    pid: p.pid,
                });
            }
        }
        // Bounded by the ranks present.
        self.ended
            .retain(|(rank, pid, run)| now.get(rank).is_some_and(|s| s.pid == *pid && s.run == *run));
        self.seen = now;
        out
    }
}

/// One line per change: structured fields first, then the sentence.
fn log(c: &Change) {
    match c {
        &Change::Joined { rank, pid } => tracing::info!(rank, pid, "rank {rank} joined: pid {pid} publishes it"),
        &Change::Ready { rank, pid } => {
            tracing::info!(rank, pid, "rank {rank} is ready: pid {pid} registered what it waits for")
        }
        &Change::Conflict { rank, pid, wanted } => tracing::warn!(
            rank,
            pid,
            wanted,
            "rank conflict: pid {pid} was told rank {wanted}, which another live process holds; it publishes as rank {rank}, and the pod is not ready until one of them moves"
        ),
        &Change::Stopped { rank, pid } => tracing::warn!(
            rank,
            pid,
            "rank {rank} stopped publishing: pid {pid} holds its slot but no longer touches its file (hung or stopped); the pod is not ready until it is back"
        ),
        Change::Ended { rank, pid, how, words } => tracing::warn!(
            rank,
            pid,
            how = how.as_str(),
            "rank {rank} ended: {words}; its counters stay on /metrics until a process claims the rank or the retention passes"
        ),
        &Change::Removed { rank, pid } => tracing::info!(
            rank,
            pid,
            "rank {rank}'s file was removed while pid {pid} published it"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Ended;
    use std::sync::Arc;

    fn rank(n: u32, pid: u32, alive: bool, ready: bool, conflict: Option<u32>) -> Rank {
        Rank {
            rank: n,
            pid,
            held: alive,
            alive,
            ready,
            liveness_failure: None,
            conflict,
            status: Arc::new(serde_json::Value::Null),
            metrics: Arc::from(""),
            openmetrics: None,
            types: Arc::default(),
            ended: None,
            written_unix: 100.0,
            run: u64::from(pid),
            touched_unix: 100.0,
        }
    }

    fn ended(mut r: Rank, exception: Option<&str>) -> Rank {
        r.ended = Some(Ended {
            at_unix: 101.0,
            ..Ended::now(exception)
        });
        r
    }

    fn how(changes: &[Change]) -> Vec<(u32, u32, How)> {
        changes
            .iter()
            .filter_map(|c| match c {
                Change::Ended { rank, pid, how, .. } => Some((*rank, *pid, *how)),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn a_rank_joins_becomes_ready_hangs_comes_back_and_ends_once_per_process() {
        let mut life = Life::new(50.0);
        assert_eq!(
            life.pass(&[rank(0, 10, true, false, None)]),
            [Change::Joined { rank: 0, pid: 10 }]
        );
        assert_eq!(life.pass(&[rank(0, 10, true, false, None)]), []);
        assert_eq!(
            life.pass(&[rank(0, 10, true, true, None)]),
            [Change::Ready { rank: 0, pid: 10 }]
        );
        // Held, but its file untouched: hung, not ended.
        let mut hung = rank(0, 10, false, true, None);
        hung.held = true;
        assert_eq!(
            life.pass(std::slice::from_ref(&hung)),
            [Change::Stopped { rank: 0, pid: 10 }]
        );
        assert_eq!(life.pass(std::slice::from_ref(&hung)), []);
        // Its slot free, no end record: died, said once.
        let dead = rank(0, 10, false, true, None);
        assert_eq!(how(&life.pass(std::slice::from_ref(&dead))), [(0, 10, How::Died)]);
        assert_eq!(life.pass(std::slice::from_ref(&dead)), []);
        assert_eq!(
            life.pass(&[rank(0, 11, true, true, None)]),
            [Change::Joined { rank: 0, pid: 11 }, Change::Ready { rank: 0, pid: 11 }]
        );
        // An uncaught exception: its end record says so.
        let raised = ended(rank(0, 11, false, true, None), Some("nixlBackendError"));
        let changes = life.pass(std::slice::from_ref(&raised));
        assert_eq!(how(&changes), [(0, 11, How::Exception)]);
        let Change::Ended { words, .. } = &changes[0] else {
            unreachable!()
        };
        assert!(
            words.contains("pid 11 exited after an uncaught exception (nixlBackendError)"),
            "{words}"
        );
        assert_eq!(life.pass(&[raised]), []);
        // A clean exit.
        life.pass(&[rank(0, 12, true, true, None)]);
        assert_eq!(
            how(&life.pass(&[ended(rank(0, 12, false, true, None), None)])),
            [(0, 12, How::Exited)]
        );
        // Its file removed: said, and remembered for readiness.
        assert!(life.pass(&[]).is_empty(), "a dead rank's file going is no news");
        life.pass(&[rank(1, 20, true, true, None)]);
        assert_eq!(life.pass(&[]), [Change::Removed { rank: 1, pid: 20 }]);
        assert!(life.removed().contains(&1));
        life.pass(&[rank(1, 21, true, false, None)]);
        assert!(life.removed().is_empty(), "published again");
    }

    #[test]
    fn a_run_that_ended_before_the_watcher_started_is_not_counted() {
        let mut life = Life::new(500.0);
        let old = rank(0, 10, false, true, None);
        assert_eq!(life.pass(std::slice::from_ref(&old)), []);
        // A process that started and died between two passes: counted.
        let mut quick = rank(1, 11, false, false, None);
        quick.touched_unix = 501.0;
        assert_eq!(how(&life.pass(&[old, quick])), [(1, 11, How::Died)]);
    }

    /// A restarted container's process often has the pid of the one before
    /// (its entry point is pid 1 or so): each run ends once all the same.
    #[test]
    fn a_process_with_the_pid_of_the_one_before_ends_again() {
        let mut life = Life::new(50.0);
        for run in 1..=3u64 {
            let mut live = rank(0, 7, true, true, None);
            live.run = run;
            let joined = life.pass(std::slice::from_ref(&live));
            assert_eq!(joined[0], Change::Joined { rank: 0, pid: 7 }, "run {run}");
            let mut dead = rank(0, 7, false, true, None);
            dead.run = run;
            assert_eq!(how(&life.pass(&[dead])), [(0, 7, How::Died)], "run {run}");
        }
    }

    #[test]
    fn a_conflict_is_said_once() {
        let mut life = Life::default();
        let c = rank(3, 20, true, true, Some(1));
        assert_eq!(
            life.pass(std::slice::from_ref(&c)),
            [
                Change::Joined { rank: 3, pid: 20 },
                Change::Conflict {
                    rank: 3,
                    pid: 20,
                    wanted: 1
                },
                Change::Ready { rank: 3, pid: 20 }
            ]
        );
        assert_eq!(life.pass(std::slice::from_ref(&c)), []);
    }
}
