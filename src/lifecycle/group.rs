//! Registering one group all or nothing.
//!
//! Architecture invariant: when any region of a group fails, every region of
//! that group registered before it is deregistered before the attempt is
//! reported, so a failed group holds nothing.

use super::{Failure, Registrar};
pub use crate::model::GroupFailure;
use crate::plan::{GroupSpec, Region};

/// Registers every region, or none.
pub fn register_all<R: Registrar>(
    r: &mut R,
    spec: &GroupSpec,
    regions: &[Region],
) -> Result<Vec<R::Handle>, GroupFailure> {
    let mut handles = Vec::with_capacity(regions.len());
    for (i, region) in regions.iter().enumerate() {
        match r.register_region(spec, region) {
            Ok(h) => handles.push(h),
            Err(f) => {
                let rolled_back = handles.len();
                let (_, rollback_error) = release_all(r, handles);
                let mut message = format!("region {i} [{:#x}, +{}): {}", region.addr, region.len, f.message);
                if let Some(e) = rollback_error {
                    message.push_str(&format!("; rollback also failed: {e}"));
                }
                return Err(GroupFailure {
                    reason: f.reason,
                    region: Some(i),
                    message,
                    rolled_back,
                    diagnostics: vec![],
                });
            }
        }
    }
    Ok(handles)
}

/// Deregisters handles in reverse registration order (cheaper for UCX's
/// registration cache than forward order). Returns how many failed and the
/// first failure.
pub fn release_all<R: Registrar>(r: &mut R, handles: Vec<R::Handle>) -> (usize, Option<Failure>) {
    let mut failed = 0;
    let mut first = None;
    for h in handles.into_iter().rev() {
        if let Err(e) = r.deregister_region(h) {
            failed += 1;
            first.get_or_insert(e);
        }
    }
    (failed, first)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{MemType, Reason};
    use crate::plan::Kind;
    use crate::validate::{MemoryProbe, NullProbe};
    use std::collections::BTreeSet;
    use std::time::Duration;

    /// Records what is registered; fails the region whose address is `fail_at`.
    struct Ledger {
        live: BTreeSet<usize>,
        fail_at: Option<usize>,
        order: Vec<usize>,
    }

    impl Registrar for Ledger {
        type Handle = usize;
        type Backing = ();
        fn preflight(&mut self) -> Result<super::super::RuntimeFacts, Failure> {
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
        fn register_region(&mut self, _: &GroupSpec, r: &Region) -> Result<usize, Failure> {
            if Some(r.addr) == self.fail_at {
                return Err(Failure::new(Reason::NixlBackendError, "boom"));
            }
            self.live.insert(r.addr);
            Ok(r.addr)
        }
        fn deregister_region(&mut self, h: usize) -> Result<(), Failure> {
            self.order.push(h);
            self.live.remove(&h);
            Ok(())
        }
    }

    fn regions(n: usize) -> Vec<Region> {
        (1..=n).map(|i| Region::new(i * 0x1000, 0x1000, 0)).collect()
    }

    #[test]
    fn failure_in_the_middle_leaves_nothing_registered() {
        let spec = GroupSpec::provided("aux", Kind::Aux, MemType::Dram, regions(5));
        for fail in 1..=5 {
            let mut l = Ledger {
                live: BTreeSet::new(),
                fail_at: Some(fail * 0x1000),
                order: vec![],
            };
            let e = register_all(&mut l, &spec, &regions(5)).unwrap_err();
            assert!(l.live.is_empty(), "leaked {:?}", l.live);
            assert_eq!(e.region, Some(fail - 1));
            assert_eq!(e.rolled_back, fail - 1);
            assert_eq!(e.reason, Reason::NixlBackendError);
            assert!(e.message.contains("boom"));
            // Rolled back newest first.
            let mut expect: Vec<usize> = (1..fail).map(|i| i * 0x1000).collect();
            expect.reverse();
            assert_eq!(l.order, expect);
        }
    }

    #[test]
    fn success_registers_all_and_release_reverses() {
        let spec = GroupSpec::provided("kv", Kind::Kv, MemType::Dram, regions(3));
        let mut l = Ledger {
            live: BTreeSet::new(),
            fail_at: None,
            order: vec![],
        };
        let h = register_all(&mut l, &spec, &regions(3)).unwrap();
        assert_eq!(l.live.len(), 3);
        assert_eq!(release_all(&mut l, h), (0, None));
        assert!(l.live.is_empty());
        assert_eq!(l.order, [0x3000, 0x2000, 0x1000]);
    }
}
