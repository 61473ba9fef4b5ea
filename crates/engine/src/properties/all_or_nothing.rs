//! 3. All or nothing: a registrar that fails where it is told to.

use super::*;

// ---------------------------------------------------------------------------
// 3. All or nothing: a registrar that fails where it is told to.

#[derive(Debug, Default)]
pub(super) struct Ledger {
    /// Live registrations: handle id → address.
    live: BTreeMap<u64, usize>,
    next: u64,
    /// Addresses NIXL refuses: a list holding one fails whole and
    /// registers none of it (NIXL 1.5.1's addDescList rolls back).
    refuse: HashSet<usize>,
    /// Addresses whose deregistration fails: a list holding one removes
    /// none of it (NIXL 1.5.1 checks the whole list first).
    stuck: HashSet<usize>,
    register_calls: usize,
    /// Ids in the order they were registered / deregistered.
    registered: Vec<u64>,
    deregistered: Vec<u64>,
    /// Deregistrations of an id that was not live: must never happen.
    double_frees: usize,
}

/// A list's registrations that, like the real handles, deregister
/// themselves when dropped unless they were deregistered (the
/// `Registrar::Handle` contract).
#[derive(Debug)]
pub(super) struct LedgerHandle {
    ids: Vec<(u64, usize)>,
    done: bool,
    ledger: Rc<RefCell<Ledger>>,
}

impl Drop for LedgerHandle {
    fn drop(&mut self) {
        if !self.done {
            let mut l = self.ledger.borrow_mut();
            for (id, _) in &self.ids {
                l.live.remove(id);
            }
        }
    }
}

pub(super) struct NoProbe;

impl MemoryProbe for NoProbe {
    fn mapped_ranges(&self) -> Result<Vec<(usize, usize)>, String> {
        Ok(vec![(0, usize::MAX)])
    }
    fn device_pointer(&self, _: usize, _: u32) -> Result<DevicePointer, Reason> {
        Err(Reason::CudaUnavailable)
    }
    fn memlock(&self) -> Memlock {
        Memlock {
            soft_limit: None,
            exempt: true,
            locked_bytes: None,
        }
    }
}

pub(super) struct Faulty {
    ledger: Rc<RefCell<Ledger>>,
    probe: NoProbe,
}

impl Registrar for Faulty {
    type Handle = LedgerHandle;
    type Backing = ();

    fn preflight(&mut self) -> Result<RuntimeFacts, Failure> {
        Ok(RuntimeFacts::default())
    }
    fn ensure_backend(&mut self, _: &str) -> Result<Option<Duration>, Failure> {
        Ok(None)
    }
    fn allocate(&mut self, _: &GroupSpec, _: usize, _: usize) -> Result<(Vec<Region>, ()), Failure> {
        Err(Failure::new(Reason::AllocationFailed, "not here"))
    }
    fn probe(&self) -> &dyn MemoryProbe {
        &self.probe
    }
    fn register(&mut self, _: &GroupSpec, regions: &[Region]) -> Result<LedgerHandle, ListFailure> {
        let mut l = self.ledger.borrow_mut();
        l.register_calls += 1;
        if let Some(r) = regions.iter().find(|r| l.refuse.contains(&r.addr)) {
            let f = Failure::new(Reason::NixlBackendError, format!("refused {:#x}", r.addr));
            return Err(ListFailure::new(f, At::List));
        }
        let mut ids = Vec::with_capacity(regions.len());
        for r in regions {
            let id = l.next;
            l.next += 1;
            l.live.insert(id, r.addr);
            l.registered.push(id);
            ids.push((id, r.addr));
        }
        Ok(LedgerHandle {
            ids,
            done: false,
            ledger: self.ledger.clone(),
        })
    }
    fn deregister(&mut self, mut h: LedgerHandle) -> Result<(), Unreleased<LedgerHandle>> {
        let mut l = self.ledger.borrow_mut();
        if let Some(&(_, addr)) = h.ids.iter().find(|(_, a)| l.stuck.contains(a)) {
            let failure = Failure::new(Reason::NixlNotFound, format!("stuck {addr:#x}"));
            let regions = h.ids.len();
            drop(l);
            let split = regions > 1;
            let held = if split {
                // The parts own the ids now; `h` must not release them.
                h.done = true;
                let ledger = self.ledger.clone();
                h.ids
                    .iter()
                    .map(|&id| LedgerHandle {
                        ids: vec![id],
                        done: false,
                        ledger: ledger.clone(),
                    })
                    .collect()
            } else {
                // Still held: handed back, to be released again.
                vec![h]
            };
            let bytes = 0x1000 * regions as u64;
            return Err(Unreleased {
                failure,
                regions,
                bytes,
                held,
                split,
            });
        }
        for (id, _) in h.ids.iter().rev() {
            l.deregistered.push(*id);
            if l.live.remove(id).is_none() {
                l.double_frees += 1;
            }
        }
        h.done = true;
        Ok(())
    }
}

pub(super) fn regions_at(base: usize, n: usize) -> Vec<Region> {
    (0..n).map(|i| Region::new(base + i * 0x1000, 0x1000, 0)).collect()
}

proptest! {
    #![proptest_config(cases(2000))]

    #[test]
    fn a_failed_group_holds_nothing_and_a_released_group_nothing_either(
        n in 0usize..40,
        refuse in prop::collection::hash_set(0usize..48, 0..3),
        stuck in prop::collection::hash_set(0usize..48, 0..4),
        other in 0usize..6,
    ) {
        let ledger = Rc::new(RefCell::new(Ledger::default()));
        let mut r = Faulty { ledger: ledger.clone(), probe: NoProbe };
        // Another group, registered first, must be untouched by this one's rollback.
        let first = GroupSpec::provided("first", Kind::Kv, MemType::Dram, regions_at(0x100000, other));
        let kept = register_all(&mut r, &first, &regions_at(0x100000, other)).expect("no faults yet");
        let kept_ids: Vec<u64> = ledger.borrow().registered.clone();
        let regions = regions_at(0x1000_0000, n);
        {
            let mut l = ledger.borrow_mut();
            l.refuse = refuse.iter().filter(|&&i| i < n).map(|&i| regions[i].addr).collect();
            l.stuck = stuck.iter().filter(|&&i| i < n).map(|&i| regions[i].addr).collect();
            l.register_calls = 0;
        }
        let spec = GroupSpec::provided("g", Kind::Aux, MemType::Dram, regions.clone());
        let first_fault = (0..n).find(|i| refuse.contains(i));
        let stuck_here: Vec<usize> = (0..n).filter(|i| stuck.contains(i)).collect();
        let outcome = register_all(&mut r, &spec, &regions);
        // One call on success; the search's O(log N) calls on failure.
        let budget = 1 + 2 * (usize::BITS - n.leading_zeros()) as usize;
        prop_assert!(ledger.borrow().register_calls <= budget, "{} calls for {n}", ledger.borrow().register_calls);
        match outcome {
            Err(Refused { failure: GroupFailure { reason, region, message, rolled_back, .. }, held }) => {
                let f = first_fault.expect("failed without an injected fault");
                prop_assert_eq!(region, Some(f));
                prop_assert_eq!(rolled_back, f);
                prop_assert_eq!(reason, Reason::NixlBackendError);
                let refused = format!("refused {:#x}", regions[f].addr);
                prop_assert!(message.contains(&refused), "{}", message);
                // Nothing of this group is left but what its rollback could
                // not release, handed back; the other group is intact.
                let stuck_before: Vec<usize> = stuck_here.iter().copied().filter(|&i| i < f).collect();
                prop_assert_eq!(held.failed, stuck_before.len());
                let mut held_addrs: Vec<usize> = held.held.iter().flat_map(|h| h.ids.iter().map(|(_, a)| *a)).collect();
                held_addrs.sort_unstable();
                prop_assert_eq!(held_addrs, stuck_before.iter().map(|&i| regions[i].addr).collect::<Vec<_>>());
                prop_assert_eq!(ledger.borrow().live.len(), kept_ids.len() + stuck_before.len(), "leaked");
                drop(held);
                let l = ledger.borrow();
                prop_assert_eq!(l.live.keys().copied().collect::<Vec<_>>(), kept_ids.clone(), "leaked");
                prop_assert_eq!(l.double_frees, 0);
                prop_assert_eq!(message.contains("rollback also failed"), !stuck_before.is_empty(), "{}", message);
            }
            Ok(handles) => {
                prop_assert!(first_fault.is_none());
                prop_assert_eq!(handles.len(), usize::from(n > 0), "one call for the group");
                prop_assert_eq!(ledger.borrow().live.len(), n + other);
                let released = release_all(&mut r, handles);
                prop_assert_eq!(released.failed, stuck_here.len());
                prop_assert_eq!(released.held.len(), stuck_here.len(), "one handle a stuck region");
                // Newest first: the last stuck region is named.
                let want = stuck_here.last().map(|&i| format!("stuck {:#x}", regions[i].addr));
                prop_assert_eq!(released.first.as_ref().map(|f| f.message.clone()), want);
                drop(released);
                let l = ledger.borrow();
                prop_assert_eq!(l.live.keys().copied().collect::<Vec<_>>(), kept_ids.clone(), "leaked");
                prop_assert_eq!(l.double_frees, 0);
            }
        }
        // Releasing the first group empties the ledger.
        ledger.borrow_mut().stuck.clear();
        prop_assert_eq!(release_all(&mut r, kept).failed, 0);
        prop_assert!(ledger.borrow().live.is_empty());
        prop_assert_eq!(ledger.borrow().double_frees, 0);
    }
}
