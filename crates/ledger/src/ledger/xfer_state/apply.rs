//! The data path's events applied to its tables: transfer requests, their
//! postings, peers, notifications and transports. One family of the
//! ledger's `apply`; the tables and their rules are in the parent module.

use super::{Rows, Transfers};
use crate::event::Event;
use crate::model::AgentId;
use std::time::Instant;

/// What a data-path event did that the ledger reports (`Applied`).
pub struct Heard {
    /// The event named a request or posting the ledger does not hold.
    pub unmatched: bool,
}

impl Transfers {
    /// Applies `e` when it is a data-path event (`None` otherwise).
    pub fn apply(&mut self, e: &Event<'_>) -> Option<Heard> {
        if !matches!(
            e,
            Event::XferCreated(_)
                | Event::XferCreateFailed(crate::event::XferCreateFailed { .. })
                | Event::XferPosted(crate::event::XferPosted { .. })
                | Event::XferEnded(crate::event::XferEnded { .. })
                | Event::XferReleased(crate::event::XferReleased { .. })
                | Event::XferTick(crate::event::XferTick { .. })
                | Event::Peer(crate::event::Peer { .. })
                | Event::Notified(crate::event::Notified { .. })
                | Event::XferTransport(crate::event::XferTransport { .. })
        ) {
            return None;
        }
        // The rows are taken out while the event is applied, so that the
        // table's own rules (which borrow all of `self`) can write them.
        let mut rows = std::mem::take(&mut self.rows);
        let heard = self.apply_to(&mut rows, e);
        self.rows = rows;
        heard
    }

    fn apply_to(&mut self, s: &mut Rows, e: &Event<'_>) -> Option<Heard> {
        let mut unmatched = false;
        match e {
            Event::XferCreated(r) => {
                // A request to a peer whose loading nobody saw: its metadata
                // arrived another way (NIXL's listener, a fetch, partial
                // metadata), and arrived now at the latest.
                self.arrived(s, r.agent, r.peer);
                self.created(r, Instant::now());
                return Some(Heard { unmatched });
            }
            Event::XferCreateFailed(crate::event::XferCreateFailed {
                agent,
                op,
                peer,
                failure,
                prepared,
                pending: false,
            }) => self.create_failed(s, *agent, *op, peer, failure, *prepared, Instant::now()),
            Event::XferCreateFailed(crate::event::XferCreateFailed { op, pending: true, .. }) => {
                self.create_pending(*op)
            }
            Event::XferPosted(crate::event::XferPosted {
                handle,
                at,
                ended,
                sampled,
            }) => unmatched = !self.posted(s, *handle, *at, *ended, *sampled),
            Event::XferEnded(crate::event::XferEnded {
                handle,
                at,
                end,
                measured,
                sampled,
            }) => unmatched = !self.ended(s, *handle, *at, *end, *measured, *sampled, "status"),
            Event::XferReleased(crate::event::XferReleased { handle, at }) => self.released(s, *handle, *at),
            Event::XferTick(crate::event::XferTick { at, stall_after }) => {
                self.tick(*at, *stall_after);
                self.stall_after = Some(*stall_after);
            }
            Event::Peer(crate::event::Peer {
                agent,
                op,
                peer,
                failure,
            }) => {
                if *op == crate::model::PeerOp::Check && failure.is_none() {
                    self.arrived(s, *agent, peer);
                }
                self.peer(s, *agent, *op, peer, *failure)
            }
            Event::Notified(crate::event::Notified {
                agent,
                direction,
                messages,
                failure,
                peer,
                heartbeats,
            }) => self.notified(s, *agent, *direction, peer, *messages, *heartbeats, *failure),
            Event::XferTransport(crate::event::XferTransport {
                agent,
                peer,
                op,
                transport,
            }) => {
                self.transport(s, *agent, peer, *op, *transport);
                return Some(Heard { unmatched });
            }
            _ => return None,
        }
        self.shown = true;
        Some(Heard { unmatched })
    }

    /// Postings of `handle` deferred by their thread, in its order
    /// (`Ledger::defer_posting`): each an `XferPosted` in flight or ended
    /// well within its call. Times in nanoseconds since `started`, whose
    /// Unix time is `started_unix`. The done ones a run begins with are
    /// counted on one look-up of the request; a handle the ledger does not
    /// hold is left alone.
    pub fn posted_later(&mut self, handle: u64, started: Instant, started_unix: f64, run: &[(u64, Option<u64>)]) {
        let mut rows = std::mem::take(&mut self.rows);
        let done = run.iter().take_while(|(_, end)| end.is_some()).count();
        let took = run[..done]
            .iter()
            .map(|(posted, end)| std::time::Duration::from_nanos(end.unwrap_or(*posted).saturating_sub(*posted)));
        let last_unix = run[..done]
            .last()
            .and_then(|(_, end)| *end)
            .map_or(started_unix, |end| started_unix + end as f64 * 1e-9);
        let rest = if self.done_within(&mut rows, handle, took, last_unix) {
            &run[done..]
        } else {
            run
        };
        let at = |n: u64| started + std::time::Duration::from_nanos(n);
        for (posted, end) in rest {
            let ended = end.map(|e| super::Ending {
                at: at(e),
                end: crate::event::XferEnd::Done,
                measured: Some(std::time::Duration::from_nanos(e.saturating_sub(*posted))),
                unix: Some(started_unix + e as f64 * 1e-9),
            });
            self.posted_within(&mut rows, handle, at(*posted), ended, false);
        }
        self.rows = rows;
        self.shown = true;
    }

    /// The Unix time of `at` (the wall anchor the data path stamps with).
    pub fn unix_at(&mut self, at: Instant) -> f64 {
        self.wall.unix_at(at)
    }

    /// The NIXL agent `agent` is gone: its requests, flights and remote
    /// agents go with it (the ledger's `AgentReleased`).
    pub fn agent_gone(&mut self, agent: AgentId) {
        self.names.remove(&agent);
        let mut rows = std::mem::take(&mut self.rows);
        self.agent_released(&mut rows, agent, Instant::now());
        self.rows = rows;
        self.shown = true;
    }

    /// The recording follows a caller's NIXL agent.
    pub fn follows_caller(&mut self) {
        self.observing = true;
    }

    /// The local NIXL agent `agent` is called `name`.
    pub fn agent_named(&mut self, agent: AgentId, name: &str) {
        if !name.is_empty() {
            self.names.insert(agent, name.into());
        }
    }
}
