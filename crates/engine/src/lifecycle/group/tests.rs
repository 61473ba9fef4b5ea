//! `register_all` / `release_all` against a registrar that takes lists the
//! way NIXL 1.5.1 does: a list with a bad region fails whole and leaves
//! nothing; a deregistration of a list with a missing region removes none.

use super::*;
use crate::model::{MemType, Reason, RuntimeFacts};
use crate::plan::Kind;
use crate::validate::{MemoryProbe, NullProbe};
use std::collections::BTreeSet;
use std::time::Duration;

#[derive(Default)]
struct Ledger {
    live: BTreeSet<usize>,
    /// Addresses NIXL refuses to register.
    bad: BTreeSet<usize>,
    /// Addresses whose deregistration fails.
    stuck: BTreeSet<usize>,
    /// At most this many regions fit (a memlock limit).
    room: Option<usize>,
    /// Register calls (1-based) that fail once, whatever they hold.
    flaky: BTreeSet<usize>,
    calls: usize,
    deregistered: Vec<usize>,
    whole: bool,
}

impl Registrar for Ledger {
    type Handle = Vec<usize>;
    type Backing = ();
    fn preflight(&mut self) -> Result<RuntimeFacts, Failure> {
        Ok(Default::default())
    }
    fn ensure_backend(&mut self, _: &str) -> Result<Option<Duration>, Failure> {
        Ok(None)
    }
    fn allocate(&mut self, _: &GroupSpec, _: usize, _: usize) -> Result<(Vec<Region>, ()), Failure> {
        Ok((vec![], ()))
    }
    fn probe(&self) -> &dyn MemoryProbe {
        &NullProbe
    }
    fn register(&mut self, _: &GroupSpec, regions: &[Region]) -> Result<Vec<usize>, ListFailure> {
        self.calls += 1;
        let fail = |m: &str| Err(ListFailure::new(Failure::new(Reason::NixlBackendError, m), At::List));
        if self.whole {
            return Err(ListFailure::new(
                Failure::new(Reason::NixlNotFound, "no backend"),
                At::Whole,
            ));
        }
        if self.flaky.contains(&self.calls) {
            return fail("flaky");
        }
        if regions.iter().any(|r| self.bad.contains(&r.addr)) {
            return fail("boom");
        }
        if self.room.is_some_and(|room| self.live.len() + regions.len() > room) {
            return fail("memlock");
        }
        self.live.extend(regions.iter().map(|r| r.addr));
        Ok(regions.iter().map(|r| r.addr).collect())
    }
    fn deregister(&mut self, h: Vec<usize>) -> Result<(), Unreleased<Vec<usize>>> {
        if let Some(&a) = h.iter().find(|a| self.stuck.contains(a)) {
            let failure = Failure::new(Reason::NixlNotFound, format!("stuck {a:#x}"));
            // Like NIXL 1.5.1: a list with a stuck region releases none.
            let split = h.len() > 1;
            let held = if split {
                h.iter().map(|a| vec![*a]).collect()
            } else {
                vec![h.clone()]
            };
            return Err(Unreleased {
                failure,
                regions: h.len(),
                bytes: 0x1000 * h.len() as u64,
                held,
                split,
            });
        }
        for a in h.iter().rev() {
            self.live.remove(a);
            self.deregistered.push(*a);
        }
        Ok(())
    }
}

fn regions(n: usize) -> Vec<Region> {
    (1..=n).map(|i| Region::new(i * 0x1000, 0x1000, 0)).collect()
}

fn spec(n: usize) -> GroupSpec {
    GroupSpec::provided("aux", Kind::Aux, MemType::Dram, regions(n))
}

/// Calls the search may take for `n` regions: the first, then at most two
/// per halving.
fn call_budget(n: usize) -> usize {
    1 + 2 * (usize::BITS - n.leading_zeros()) as usize
}

#[test]
fn a_success_is_one_call_and_a_release_one_call() {
    let mut l = Ledger::default();
    let h = register_all(&mut l, &spec(4096), &regions(4096)).unwrap();
    assert_eq!((l.calls, h.len(), l.live.len()), (1, 1, 4096));
    assert!(release_all(&mut l, h).is_clean());
    assert!(l.live.is_empty());
    assert_eq!(l.deregistered.first(), Some(&(4096 * 0x1000)), "newest first");
}

#[test]
fn the_search_names_the_failing_region_and_leaves_nothing_registered() {
    for n in [1, 2, 3, 7, 64, 1000] {
        for fail in (0..n).step_by((n / 16).max(1)).chain([n - 1]) {
            let mut l = Ledger::default();
            l.bad.insert((fail + 1) * 0x1000);
            let e = register_all(&mut l, &spec(n), &regions(n)).unwrap_err().failure;
            assert!(l.live.is_empty(), "n={n} fail={fail}: leaked {:?}", l.live);
            assert_eq!((e.region, e.rolled_back), (Some(fail), fail), "n={n}");
            assert_eq!(e.reason, Reason::NixlBackendError);
            assert!(e.message.starts_with(&format!("region {fail} [")), "{}", e.message);
            assert!(e.message.contains("boom"));
            assert!(l.calls <= call_budget(n), "n={n}: {} calls", l.calls);
        }
    }
}

#[test]
fn a_memlock_limit_blames_the_first_region_that_does_not_fit() {
    // Each half fits alone; the list does not: a per-list search that forgot
    // what is already registered would find no culprit.
    let mut l = Ledger {
        room: Some(700),
        ..Ledger::default()
    };
    let e = register_all(&mut l, &spec(1000), &regions(1000)).unwrap_err().failure;
    assert_eq!((e.region, e.rolled_back), (Some(700), 700));
    assert!(e.message.contains("memlock"));
    assert!(l.live.is_empty());
}

#[test]
fn a_failure_that_does_not_repeat_ends_registered() {
    for flaky in [vec![1], vec![1, 2], vec![1, 3, 4]] {
        let mut l = Ledger {
            flaky: flaky.iter().copied().collect(),
            ..Ledger::default()
        };
        let h = register_all(&mut l, &spec(100), &regions(100)).unwrap();
        assert_eq!(l.live.len(), 100, "{flaky:?}");
        assert!(release_all(&mut l, h).failed == 0 && l.live.is_empty());
    }
}

#[test]
fn a_failure_about_no_region_is_the_groups_after_one_call() {
    let mut l = Ledger {
        whole: true,
        ..Ledger::default()
    };
    let e = register_all(&mut l, &spec(64), &regions(64)).unwrap_err().failure;
    assert_eq!((e.region, e.reason, l.calls), (None, Reason::NixlNotFound, 1));
}

#[test]
fn a_failed_batch_release_falls_back_to_one_call_a_region() {
    let mut l = Ledger::default();
    let h = register_all(&mut l, &spec(10), &regions(10)).unwrap();
    l.stuck = [3 * 0x1000, 7 * 0x1000].into();
    let out = release_all(&mut l, h);
    assert_eq!((out.failed, out.failed_bytes), (2, 0x2000));
    // Newest first: region 7's address is named.
    assert_eq!(out.first.unwrap().message, "stuck 0x7000");
    assert_eq!(l.live, [0x3000, 0x7000].into(), "the others were released");
}

#[test]
fn a_rollback_that_fails_hands_back_exactly_what_nixl_still_holds() {
    let mut l = Ledger::default();
    l.bad.insert(9 * 0x1000);
    l.stuck.insert(2 * 0x1000);
    let Refused { failure: e, held } = register_all(&mut l, &spec(10), &regions(10)).unwrap_err();
    assert_eq!(e.region, Some(8));
    assert!(
        e.message
            .ends_with("; rollback also failed for 1 regions, which NIXL may still hold: nixl_not_found: stuck 0x2000"),
        "{}",
        e.message
    );
    // Only region 2 is still registered, and it comes back as a handle
    // that can be released once NIXL lets it go.
    assert_eq!(l.live, [0x2000].into());
    assert_eq!(
        (held.failed, held.failed_bytes, held.held.clone()),
        (1, 0x1000, vec![vec![0x2000]])
    );
    l.stuck.clear();
    assert!(release_all(&mut l, held.held).is_clean());
    assert!(l.live.is_empty());
}

#[test]
fn a_split_release_retries_only_what_is_still_held() {
    let mut l = Ledger::default();
    let h = register_all(&mut l, &spec(6), &regions(6)).unwrap();
    l.stuck = [4 * 0x1000].into();
    let out = release_all(&mut l, h);
    assert_eq!((out.failed, out.held.clone()), (1, vec![vec![0x4000]]));
    // Each of the others was deregistered exactly once.
    let mut once = l.deregistered.clone();
    once.sort_unstable();
    assert_eq!(once, vec![0x1000, 0x2000, 0x3000, 0x5000, 0x6000]);
}
