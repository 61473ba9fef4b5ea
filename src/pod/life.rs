//! The life of each rank as the pod's agent sees it from one pass over the
//! directory to the next — joined, ready, in conflict, stopped publishing,
//! retired — worked out here (pure: the ranks of two passes in, the changes
//! out) and said by [`Life::pass`] in one log line each, in words an
//! operator reads. A rank that retired (its process exited cleanly and
//! removed its file) is remembered, so readiness says so instead of "no
//! process has published this rank".

use super::merge::Rank;
use std::collections::{BTreeMap, BTreeSet};

/// What the pod last saw of a rank.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Seen {
    pid: u32,
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
    /// Its file stays but its process stopped publishing (died or hangs).
    Stopped { rank: u32, pid: u32 },
    /// Its process exited cleanly and removed its file.
    Retired { rank: u32, pid: u32 },
}

/// The ranks as last seen, and those retired since no process published
/// them.
#[derive(Debug, Default)]
pub struct Life {
    seen: BTreeMap<u32, Seen>,
    retired: BTreeSet<u32>,
}

impl Life {
    /// The changes from the last pass to `ranks`, each logged.
    pub fn pass(&mut self, ranks: &[Rank]) -> Vec<Change> {
        let changes = self.changes(ranks);
        for c in &changes {
            log(c);
        }
        changes
    }

    /// Ranks whose process exited cleanly and that no process publishes now.
    pub fn retired(&self) -> &BTreeSet<u32> {
        &self.retired
    }

    fn changes(&mut self, ranks: &[Rank]) -> Vec<Change> {
        let mut out = Vec::new();
        let mut now = BTreeMap::new();
        for r in ranks {
            let s = Seen {
                pid: r.pid,
                alive: r.alive,
                ready: r.ready,
                conflict: r.conflict,
            };
            let (rank, pid) = (r.rank, r.pid);
            let before = self.seen.get(&rank).filter(|p| p.alive && p.pid == pid);
            match (before, s.alive) {
                (None, true) => {
                    self.retired.remove(&rank);
                    out.push(Change::Joined { rank, pid });
                    if let Some(wanted) = s.conflict {
                        out.push(Change::Conflict { rank, pid, wanted });
                    }
                    if s.ready {
                        out.push(Change::Ready { rank, pid });
                    }
                }
                (Some(_), false) => out.push(Change::Stopped { rank, pid }),
                (Some(p), true) => {
                    if let (None, Some(wanted)) = (p.conflict, s.conflict) {
                        out.push(Change::Conflict { rank, pid, wanted });
                    }
                    if !p.ready && s.ready {
                        out.push(Change::Ready { rank, pid });
                    }
                }
                (None, false) => {}
            }
            now.insert(rank, s);
        }
        for (rank, p) in &self.seen {
            if !now.contains_key(rank) && p.alive {
                self.retired.insert(*rank);
                out.push(Change::Retired {
                    rank: *rank,
                    pid: p.pid,
                });
            }
        }
        self.seen = now;
        out
    }
}

/// One line per change: structured fields first, then the sentence.
fn log(c: &Change) {
    match *c {
        Change::Joined { rank, pid } => tracing::info!(rank, pid, "rank {rank} joined: pid {pid} publishes it"),
        Change::Ready { rank, pid } => {
            tracing::info!(rank, pid, "rank {rank} is ready: pid {pid} registered what it waits for")
        }
        Change::Conflict { rank, pid, wanted } => tracing::warn!(
            rank,
            pid,
            wanted,
            "rank conflict: pid {pid} was told rank {wanted}, which another live process holds; it publishes as rank {rank}, and the pod is not ready until one of them moves"
        ),
        Change::Stopped { rank, pid } => tracing::warn!(
            rank,
            pid,
            "rank {rank} stopped publishing: pid {pid} died or hangs; the pod is not ready until the rank is back"
        ),
        Change::Retired { rank, pid } => tracing::info!(
            rank,
            pid,
            "rank {rank} retired: pid {pid} exited cleanly and removed its file"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
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
        }
    }

    #[test]
    fn a_rank_joins_becomes_ready_stops_comes_back_and_retires() {
        let mut life = Life::default();
        assert_eq!(
            life.pass(&[rank(0, 10, true, false, None)]),
            [Change::Joined { rank: 0, pid: 10 }]
        );
        assert_eq!(life.pass(&[rank(0, 10, true, false, None)]), []);
        assert_eq!(
            life.pass(&[rank(0, 10, true, true, None)]),
            [Change::Ready { rank: 0, pid: 10 }]
        );
        assert_eq!(
            life.pass(&[rank(0, 10, false, true, None)]),
            [Change::Stopped { rank: 0, pid: 10 }]
        );
        assert_eq!(life.pass(&[rank(0, 10, false, true, None)]), []);
        assert_eq!(
            life.pass(&[rank(0, 11, true, true, None)]),
            [Change::Joined { rank: 0, pid: 11 }, Change::Ready { rank: 0, pid: 11 }]
        );
        assert_eq!(life.pass(&[]), [Change::Retired { rank: 0, pid: 11 }]);
        assert!(life.retired().contains(&0));
        life.pass(&[rank(0, 12, true, false, None)]);
        assert!(life.retired().is_empty(), "published again");
    }

    #[test]
    fn a_conflict_is_said_once_and_a_dead_ranks_removed_file_is_no_retirement() {
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
        life.pass(&[rank(3, 20, false, true, Some(1))]);
        assert_eq!(life.pass(&[]), [], "a dead rank's file swept is not a clean exit");
        assert!(life.retired().is_empty());
    }
}
