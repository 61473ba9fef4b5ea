//! What observed calls registered and have not deregistered: a flat table
//! in registration order. A registration appends (no hashing, sequential
//! memory: the cold start-up of a process registering 16k blocks one by one
//! pays a push each); a deregistration looks from the newest end and from
//! the oldest live entry first — serving processes deregister in reverse or
//! in registration order — and scans the rest only otherwise, as NIXL's own
//! descriptor list does on every deregistration.

use crate::model::{AgentId, Region};

/// What one call registered on one agent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LiveKey {
    pub agent: AgentId,
    pub first: Region,
    pub descriptors: usize,
}

/// One live registration: its key, its group and its bytes. The same list
/// registered twice is two entries.
#[derive(Debug, Clone, Copy)]
pub struct Live {
    pub key: LiveKey,
    pub group: crate::event::GroupId,
    pub bytes: u64,
}

/// Entries probed at each end before a full scan.
const PROBE: usize = 16;

#[derive(Debug, Default)]
pub struct LiveTable {
    entries: Vec<Option<Live>>,
    /// No live entry before this index.
    head: usize,
    live: usize,
}

impl LiveTable {
    pub fn push(&mut self, live: Live) {
        self.entries.push(Some(live));
        self.live += 1;
    }

    /// Removes one registration of `key` (the newest), if any.
    pub fn take(&mut self, key: &LiveKey) -> Option<Live> {
        let i = self.position(key)?;
        let found = self.entries[i].take();
        self.live -= 1;
        self.tidy();
        found
    }

    /// The newest registration of `key`, left in place.
    pub fn find(&self, key: &LiveKey) -> Option<Live> {
        self.position(key).and_then(|i| self.entries[i])
    }

    /// The newest registration on `agent` whose list starts at `first`,
    /// whatever its length: what a refused deregistration of a list that
    /// matches no registration exactly was aimed at.
    pub fn find_first(&self, agent: AgentId, first: Region) -> Option<Live> {
        self.entries[self.head..]
            .iter()
            .rev()
            .flatten()
            .find(|l| l.key.agent == agent && l.key.first == first)
            .copied()
    }

    /// Removes every registration made on `agent`.
    pub fn take_agent(&mut self, agent: AgentId) -> Vec<Live> {
        let mut out = Vec::new();
        for slot in &mut self.entries[self.head..] {
            if slot.is_some_and(|l| l.key.agent == agent) {
                out.extend(slot.take());
            }
        }
        self.live -= out.len();
        self.tidy();
        out
    }

    fn position(&self, key: &LiveKey) -> Option<usize> {
        let matches = |i: &usize| self.entries[*i].is_some_and(|l| l.key == *key);
        let n = self.entries.len();
        let tail = (n.saturating_sub(PROBE).max(self.head)..n).rev();
        let head = self.head..(self.head + PROBE).min(n);
        tail.clone()
            .find(matches)
            .or_else(|| head.clone().find(matches))
            .or_else(|| (self.head..n).rev().find(matches))
    }

    /// Drops the dead slots at both ends, and compacts when most are dead.
    fn tidy(&mut self) {
        while self.entries.last().is_some_and(Option::is_none) {
            self.entries.pop();
        }
        self.head = self.head.min(self.entries.len());
        while self.head < self.entries.len() && self.entries[self.head].is_none() {
            self.head += 1;
        }
        if self.head >= self.entries.len() {
            self.entries.clear();
            self.head = 0;
        } else if self.entries.len() > 64 && self.live * 2 < self.entries.len() {
            self.entries.retain(Option::is_some);
            self.head = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(i: usize) -> LiveKey {
        LiveKey {
            agent: AgentId(1),
            first: Region::new(0x1000 * (i + 1), 4096, 0),
            descriptors: 1,
        }
    }

    fn live(i: usize) -> Live {
        Live {
            key: key(i),
            group: crate::event::GroupId(0),
            bytes: 4096,
        }
    }

    #[test]
    fn any_order_of_deregistration_finds_each_registration_once() {
        for order in ["lifo", "fifo", "middle-out"] {
            let mut t = LiveTable::default();
            let n = 300;
            for i in 0..n {
                t.push(live(i));
            }
            t.push(live(7)); // the same list twice
            let mut ids: Vec<usize> = (0..n).collect();
            match order {
                "lifo" => ids.reverse(),
                "fifo" => {}
                _ => ids.sort_by_key(|i| (*i as i64 - 150).abs()),
            }
            for i in ids {
                assert!(t.take(&key(i)).is_some(), "{order}: {i}");
            }
            assert!(t.take(&key(7)).is_some(), "{order}: the second registration of 7");
            assert!(t.take(&key(7)).is_none(), "{order}: no third");
            assert_eq!((t.live, t.entries.len()), (0, 0), "{order}");
        }
    }

    /// The oldest taken first, then the newest: the table is empty and a
    /// new registration must be found (a head past the end hid it).
    #[test]
    fn a_table_emptied_from_both_ends_finds_what_comes_next() {
        let mut t = LiveTable::default();
        t.push(live(1));
        t.push(live(2));
        assert!(t.take(&key(1)).is_some());
        assert!(t.take(&key(2)).is_some());
        t.push(live(3));
        assert!(t.take(&key(3)).is_some());
    }

    #[test]
    fn an_agent_takes_only_its_own() {
        let mut t = LiveTable::default();
        t.push(live(1));
        let mut other = live(1);
        other.key.agent = AgentId(2);
        t.push(other);
        assert_eq!(t.take_agent(AgentId(2)).len(), 1);
        assert!(t.take(&key(1)).is_some());
        assert!(t.take(&key(1)).is_none());
    }
}

#[cfg(test)]
mod model_check {
    use super::*;

    /// Against a plain list: any interleaving of pushes and takes.
    #[test]
    fn the_table_behaves_as_a_multiset() {
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let mut t = LiveTable::default();
        let mut model: Vec<usize> = Vec::new();
        for _ in 0..20_000 {
            let k = (next() % 400) as usize;
            let key = LiveKey {
                agent: AgentId(1),
                first: Region::new(0x1000 * (k + 1), 4096, 0),
                descriptors: 1,
            };
            if next() % 5 < 3 {
                t.push(Live {
                    key,
                    group: crate::event::GroupId(0),
                    bytes: 1,
                });
                model.push(k);
            } else {
                let expect = model.iter().position(|m| *m == k).map(|i| model.remove(i));
                assert_eq!(t.take(&key).is_some(), expect.is_some(), "key {k}");
            }
            assert_eq!(t.live, model.len());
        }
    }
}
