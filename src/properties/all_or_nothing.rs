//! 3. All or nothing: a registrar that fails where it is told to.

use super::*;

// ---------------------------------------------------------------------------
// 3. All or nothing: a registrar that fails where it is told to.

#[derive(Debug, Default)]
pub(super) struct Ledger {
    /// Live registrations: handle id → address.
    live: BTreeMap<u64, usize>,
    next: u64,
    /// Register calls (0-based, across the ledger's life) that fail.
    fail_register: HashSet<usize>,
    /// Deregister calls that fail.
    fail_deregister: HashSet<usize>,
    register_calls: usize,
    deregister_calls: usize,
    /// Handle ids in the order they were registered / deregistered.
    registered: Vec<u64>,
    deregistered: Vec<u64>,
    /// Deregistrations of a handle that was not live: must never happen.
    double_frees: usize,
}

/// A handle that, like nixl-sys's, deregisters itself when dropped unless it
/// was deregistered (the `Registrar::Handle` contract).
#[derive(Debug)]
pub(super) struct LedgerHandle {
    id: u64,
    done: bool,
    ledger: Rc<RefCell<Ledger>>,
}

impl Drop for LedgerHandle {
    fn drop(&mut self) {
        if !self.done {
            self.ledger.borrow_mut().live.remove(&self.id);
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
    fn register_region(&mut self, _: &GroupSpec, region: &Region) -> Result<LedgerHandle, Failure> {
        let mut l = self.ledger.borrow_mut();
        let call = l.register_calls;
        l.register_calls += 1;
        if l.fail_register.contains(&call) {
            return Err(Failure::new(Reason::NixlBackendError, format!("injected fault {call}")));
        }
        let id = l.next;
        l.next += 1;
        l.live.insert(id, region.addr);
        l.registered.push(id);
        Ok(LedgerHandle {
            id,
            done: false,
            ledger: self.ledger.clone(),
        })
    }
    fn deregister_region(&mut self, mut h: LedgerHandle) -> Result<(), Failure> {
        let mut l = self.ledger.borrow_mut();
        let call = l.deregister_calls;
        l.deregister_calls += 1;
        l.deregistered.push(h.id);
        if !l.live.contains_key(&h.id) {
            l.double_frees += 1;
        }
        if l.fail_deregister.contains(&call) {
            // The handle is dropped on return and deregisters itself then.
            drop(l);
            return Err(Failure::new(
                Reason::NixlBackendError,
                format!("injected deregister fault {call}"),
            ));
        }
        l.live.remove(&h.id);
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
        fail_reg in prop::collection::hash_set(0usize..48, 0..3),
        fail_dereg in prop::collection::hash_set(0usize..48, 0..4),
        other in 0usize..6,
    ) {
        let ledger = Rc::new(RefCell::new(Ledger::default()));
        let mut r = Faulty { ledger: ledger.clone(), probe: NoProbe };
        // Another group, registered first, must be untouched by this one's rollback.
        let first = GroupSpec::provided("first", Kind::Kv, MemType::Dram, regions_at(0x100000, other));
        let kept = register_all(&mut r, &first, &regions_at(0x100000, other)).expect("no faults yet");
        let kept_ids: Vec<u64> = ledger.borrow().registered.clone();
        {
            let mut l = ledger.borrow_mut();
            // Fault positions are relative to this group's calls.
            l.fail_register = fail_reg.iter().map(|c| c + other).collect();
            l.fail_deregister = fail_dereg.clone();
        }
        let regions = regions_at(0x1000_0000, n);
        let spec = GroupSpec::provided("g", Kind::Aux, MemType::Dram, regions.clone());
        let first_fault = (0..n).find(|i| fail_reg.contains(i));
        let before = ledger.borrow().registered.len();
        match register_all(&mut r, &spec, &regions) {
            Err(GroupFailure { reason, region, message, rolled_back, .. }) => {
                let f = first_fault.expect("failed without an injected fault");
                prop_assert_eq!(region, Some(f));
                prop_assert_eq!(rolled_back, f);
                prop_assert_eq!(reason, Reason::NixlBackendError);
                prop_assert!(message.contains("injected fault"), "{}", message);
                let l = ledger.borrow();
                let mine: Vec<u64> = l.registered[before..].to_vec();
                prop_assert_eq!(mine.len(), f);
                // Nothing of this group is left; the other group is intact.
                prop_assert_eq!(l.live.keys().copied().collect::<Vec<_>>(), kept_ids.clone(), "leaked");
                // Rolled back newest first, each exactly once.
                let mut rev = mine.clone();
                rev.reverse();
                prop_assert_eq!(&l.deregistered, &rev);
                prop_assert_eq!(l.double_frees, 0);
                let dereg_failed = (0..f).any(|c| fail_dereg.contains(&c));
                prop_assert_eq!(message.contains("rollback also failed"), dereg_failed, "{}", message);
            }
            Ok(handles) => {
                prop_assert!(first_fault.is_none());
                prop_assert_eq!(handles.len(), n);
                prop_assert_eq!(ledger.borrow().live.len(), n + other);
                let (failed, first_err) = release_all(&mut r, handles);
                let l = ledger.borrow();
                let expect_failed = (0..n).filter(|c| fail_dereg.contains(c)).count();
                prop_assert_eq!(failed, expect_failed);
                prop_assert_eq!(first_err.is_some(), expect_failed > 0);
                if let Some(e) = first_err {
                    let c = (0..n).find(|c| fail_dereg.contains(c)).unwrap();
                    prop_assert_eq!(e.message, format!("injected deregister fault {c}"));
                }
                prop_assert_eq!(l.live.keys().copied().collect::<Vec<_>>(), kept_ids.clone(), "leaked");
                let mut rev = l.registered[before..].to_vec();
                rev.reverse();
                prop_assert_eq!(&l.deregistered, &rev);
                prop_assert_eq!(l.double_frees, 0);
            }
        }
        // Releasing the first group empties the ledger.
        ledger.borrow_mut().fail_deregister.clear();
        let (failed, _) = release_all(&mut r, kept);
        prop_assert_eq!(failed, 0);
        prop_assert!(ledger.borrow().live.is_empty());
        prop_assert_eq!(ledger.borrow().double_frees, 0);
    }
}
