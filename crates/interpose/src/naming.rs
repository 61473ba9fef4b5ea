//! The group of a registration nobody named. A C++ or Rust program tells
//! NIXL only memory: its type, device and the order of its calls. So a call
//! is named, first match wins, by the operator's `NIXL_AGENT_GROUPS` keys
//! - `MEM#N`: the agent's N-th region set of that memory type, counting
//!   from 0 (`dram#1=aux:aux`; the rule below),
//! - `MEM@DEV`: that memory type on that device (`vram@0=kv`),
//! - `MEM`: every call of that memory type (`vram=kv`),
//!
//! and otherwise by its memory type's word (`dram`, `vram`), kind `buffer`.
//! `MEM` is `dram` or `vram`.
//!
//! The ordinal `N` is what a program means by "its N-th registration":
//! per NIXL agent and memory type, the region sets (the call's regions as
//! a set of address, length and device) that agent registered
//! successfully, in the order of their first success. A call's ordinal is
//! its set's, when that agent registered the set successfully before (a
//! registration again after a deregistration keeps its name); otherwise
//! the number of sets registered so far. Only a success takes the ordinal,
//! so a failed call (NIXL's error or exception) and its retry have the same
//! name, and the call after them the next one. A call whose name a front-end
//! handed down is not counted. Stable across runs, and across threads where
//! each thread registers on its own agent (calls racing on one agent are
//! named in the order they begin, counted in the order they succeed).
//!
//! Memory is bounded by the rules: a set is remembered only while its
//! ordinal is one a `MEM#N` rule names (past the largest N every ordinal
//! is named alike), and an agent's sets are forgotten when it is dropped.

use nixl_agent_core::model::{AgentId, Kind, MemType, Region};
use nixl_agent_instrument::frameworks::kind_of_word;
use nixl_agent_instrument::{Override, BUFFER_KIND};
use std::collections::HashMap;
use std::hash::{BuildHasher, BuildHasherDefault, DefaultHasher};
use std::sync::Mutex;

pub struct Naming {
    overrides: Vec<Override>,
    /// The largest N of a `MEM#N` rule, DRAM and VRAM (`None`: no rule
    /// counts that memory type's calls).
    largest: [Option<u64>; 2],
    /// Per agent, per memory type: the region sets it registered.
    agents: Mutex<HashMap<AgentId, [Sets; 2]>>,
}

/// One agent's region sets of one memory type.
#[derive(Default)]
struct Sets {
    /// Distinct sets registered successfully so far.
    registered: u64,
    /// A set's fingerprint → its ordinal, for ordinals a rule names.
    ordinals: HashMap<u64, u64>,
}

/// What a named call's end needs to take its ordinal ([`Naming::registered`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Counted {
    agent: AgentId,
    mem: MemType,
    set: u64,
}

fn slot(mem: MemType) -> usize {
    usize::from(mem == MemType::Vram)
}

/// A region set's fingerprint: the same for the same regions in any order.
fn fingerprint(regions: &[Region]) -> u64 {
    let hasher = BuildHasherDefault::<DefaultHasher>::default();
    let sum = regions.iter().fold(0u64, |a, r| a.wrapping_add(hasher.hash_one(r)));
    hasher.hash_one((sum, regions.len()))
}

impl Naming {
    pub fn new(overrides: Vec<Override>) -> Naming {
        let largest = |word: &str| {
            overrides
                .iter()
                .filter_map(|o| o.key.strip_prefix(word)?.strip_prefix('#')?.parse::<u64>().ok())
                .max()
        };
        Naming {
            largest: [largest("dram"), largest("vram")],
            overrides,
            agents: Mutex::new(HashMap::new()),
        }
    }

    /// The group and kind of a registration call of `regions` (`mem` on
    /// `device`) on `agent`, and what its end hands to
    /// [`Naming::registered`] when NIXL registered it (`None`: nothing to
    /// count, no rule counts `mem`).
    pub fn next(
        &self,
        agent: AgentId,
        mem: MemType,
        device: u32,
        regions: &[Region],
    ) -> (String, Kind, Option<Counted>) {
        let Some(largest) = self.largest[slot(mem)] else {
            let (group, kind) = name(&self.overrides, mem, device, None);
            return (group, kind, None);
        };
        let set = fingerprint(regions);
        let n = {
            let agents = self.agents.lock().unwrap_or_else(|e| e.into_inner());
            agents.get(&agent).map_or(0, |a| {
                let s = &a[slot(mem)];
                s.ordinals.get(&set).copied().unwrap_or(s.registered)
            })
        };
        let (group, kind) = name(&self.overrides, mem, device, Some(n).filter(|n| *n <= largest));
        (group, kind, Some(Counted { agent, mem, set }))
    }

    /// NIXL registered the call [`Naming::next`] named: a set the agent
    /// had not registered takes the next ordinal.
    pub fn registered(&self, c: Counted) {
        let largest = self.largest[slot(c.mem)].unwrap_or(0);
        let mut agents = self.agents.lock().unwrap_or_else(|e| e.into_inner());
        let s = &mut agents.entry(c.agent).or_default()[slot(c.mem)];
        if s.ordinals.contains_key(&c.set) {
            return;
        }
        if s.registered <= largest {
            s.ordinals.insert(c.set, s.registered);
        }
        s.registered += 1;
    }

    /// The agent was dropped: its sets are forgotten.
    pub fn forget(&self, agent: AgentId) {
        self.agents.lock().unwrap_or_else(|e| e.into_inner()).remove(&agent);
    }
}

fn name(overrides: &[Override], mem: MemType, device: u32, n: Option<u64>) -> (String, Kind) {
    let word = mem.as_str().to_ascii_lowercase();
    let keys = [
        n.map(|n| format!("{word}#{n}")),
        Some(format!("{word}@{device}")),
        Some(word.to_string()),
    ];
    for key in keys.iter().flatten() {
        if let Some(o) = overrides.iter().find(|o| o.key == *key) {
            let kind = o
                .kind
                .clone()
                .or_else(|| kind_of_word(&o.group))
                .unwrap_or_else(|| Kind::Custom(BUFFER_KIND.into()));
            return (o.group.clone(), kind);
        }
    }
    (word, Kind::Custom(BUFFER_KIND.into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn o(key: &str, group: &str, kind: Option<Kind>) -> Override {
        Override {
            key: key.into(),
            group: group.into(),
            kind,
        }
    }

    fn region(addr: usize, len: usize) -> Region {
        Region::new(addr, len, 0)
    }

    /// One call on `agent` of `regions` (DRAM, device 0) that NIXL
    /// registers when `ok`: its group.
    fn call(n: &Naming, agent: u64, regions: &[Region], ok: bool) -> String {
        let (group, _, counted) = n.next(AgentId(agent), MemType::Dram, 0, regions);
        if let (true, Some(c)) = (ok, counted) {
            n.registered(c);
        }
        group
    }

    #[test]
    fn order_then_device_then_memory_type_then_the_word() {
        let rules = vec![
            o("dram#1", "aux", Some(Kind::Aux)),
            o("vram@1", "draft", None),
            o("vram", "kv", None),
        ];
        let n = Naming::new(rules);
        let a = AgentId(1);
        let (r0, r1, r2) = ([region(0x1000, 64)], [region(0x2000, 64)], [region(0x3000, 64)]);
        let (g, k, c) = n.next(a, MemType::Dram, 0, &r0);
        assert_eq!((g.as_str(), k), ("dram", Kind::Custom("buffer".into())));
        n.registered(c.unwrap());
        let (g, k, c) = n.next(a, MemType::Dram, 0, &r1);
        assert_eq!((g.as_str(), k), ("aux", Kind::Aux));
        n.registered(c.unwrap());
        assert_eq!(n.next(a, MemType::Dram, 0, &r2).0, "dram");
        assert_eq!(n.next(a, MemType::Vram, 1, &r2).0, "draft");
        let (g, k, c) = n.next(a, MemType::Vram, 0, &r2);
        assert_eq!((g.as_str(), k, c), ("kv", Kind::Kv, None), "no rule counts VRAM");
    }

    #[test]
    fn a_failed_call_and_its_retry_share_a_name_and_the_next_set_takes_the_next() {
        let n = Naming::new(vec![o("dram#0", "kv", None), o("dram#1", "aux", None)]);
        let (at0, kv, aux) = (
            [region(0, 1 << 20)],
            [region(0x10_0000, 1 << 20)],
            [region(0x30_0000, 4096)],
        );
        assert_eq!(call(&n, 1, &at0, false), "kv");
        assert_eq!(call(&n, 1, &kv, false), "kv", "a failure again takes nothing");
        assert_eq!(call(&n, 1, &kv, true), "kv");
        assert_eq!(call(&n, 1, &aux, true), "aux");
        assert_eq!(call(&n, 1, &[region(0x40_0000, 64)], true), "dram");
    }

    #[test]
    fn a_set_registered_again_keeps_its_name_in_any_order() {
        let n = Naming::new(vec![o("dram#0", "kv", None), o("dram#1", "aux", None)]);
        let kv = [region(0x1000, 64), region(0x2000, 64)];
        let aux = [region(0x9000, 64)];
        assert_eq!(call(&n, 1, &kv, true), "kv");
        assert_eq!(call(&n, 1, &aux, true), "aux");
        // Deregistered and registered again (NIXL does not say which): kv
        // keeps its name, its regions listed in another order too.
        assert_eq!(call(&n, 1, &kv, true), "kv");
        assert_eq!(call(&n, 1, &[kv[1], kv[0]], true), "kv");
        assert_eq!(call(&n, 1, &aux, true), "aux");
        // A part of kv is another set.
        assert_eq!(call(&n, 1, &kv[..1], true), "dram");
    }

    #[test]
    fn each_agent_counts_its_own_and_a_dropped_agent_is_forgotten() {
        let n = Naming::new(vec![o("dram#0", "kv", None), o("dram#1", "aux", None)]);
        let (kv_a, kv_b) = ([region(0x1000, 64)], [region(0x8000, 64)]);
        assert_eq!(call(&n, 1, &kv_a, true), "kv");
        // Another agent (another thread's, say), in any interleaving.
        assert_eq!(call(&n, 2, &kv_b, true), "kv");
        assert_eq!(call(&n, 2, &[region(0x9000, 8)], true), "aux");
        assert_eq!(call(&n, 1, &[region(0x2000, 8)], true), "aux");
        n.forget(AgentId(1));
        assert!(!n.agents.lock().unwrap().contains_key(&AgentId(1)));
        assert!(n.agents.lock().unwrap().contains_key(&AgentId(2)));
    }

    #[test]
    fn only_the_sets_a_rule_can_name_are_remembered() {
        let n = Naming::new(vec![o("dram#1", "aux", None)]);
        for i in 0..1000 {
            call(&n, 1, &[region(0x1000 * (i + 1), 64)], true);
        }
        let agents = n.agents.lock().unwrap();
        let s = &agents[&AgentId(1)][0];
        assert_eq!((s.registered, s.ordinals.len()), (1000, 2));
        drop(agents);
        // The 500th set again: past every rule, named as any new set is.
        assert_eq!(call(&n, 1, &[region(0x1000 * 500, 64)], true), "dram");
        assert_eq!(call(&n, 1, &[region(0x2000, 64)], true), "aux");
        let (_, _, c) = Naming::new(vec![o("dram", "kv", None)]).next(AgentId(1), MemType::Dram, 0, &[]);
        assert_eq!(c, None, "without a MEM#N rule nothing is counted");
    }
}
