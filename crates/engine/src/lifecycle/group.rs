//! Registering one group all or nothing, in one NIXL call; releasing it in
//! one call, newest first.
//!
//! A group is registered all or nothing (ARCHITECTURE.md): what a failed
//! rollback left comes back as handles ([`Refused::held`]), so that the
//! group's record holds exactly what NIXL may still hold.
//!
//! A success costs one registration call. Only when that call fails is the
//! failing region searched for, by bisection over the list: each step
//! registers the first half of what is left on top of what already held,
//! so the search costs O(log N) calls and blames the region that fails
//! after the ones before it are registered — the same answer a
//! region-by-region loop gives, memlock-limit failures included. A failure
//! that does not repeat during the search ends in the group registered.

use super::{At, Failure, ListFailure, Registrar, Unreleased};
pub use crate::model::GroupFailure;
use crate::plan::{GroupSpec, Region};

/// A group registration that failed: why, and what its rollback could not
/// release (empty when the rollback succeeded).
#[derive(Debug)]
pub struct Refused<H> {
    pub failure: GroupFailure,
    pub held: Released<H>,
}

impl<H> From<GroupFailure> for Refused<H> {
    fn from(failure: GroupFailure) -> Self {
        Refused {
            failure,
            held: Released::default(),
        }
    }
}

/// Registers every region, or none. Returns the handles of the calls that
/// succeeded (one on the fast path), in registration order.
// The refusal is the cold path and carries what NIXL may still hold.
#[allow(clippy::result_large_err)]
pub fn register_all<R: Registrar>(
    r: &mut R,
    spec: &GroupSpec,
    regions: &[Region],
) -> Result<Vec<R::Handle>, Refused<R::Handle>> {
    if regions.is_empty() {
        return Ok(Vec::new());
    }
    let first = match r.register(spec, regions) {
        Ok(h) => return Ok(vec![h]),
        Err(f) => f,
    };
    if first.at == At::Whole {
        return Err(GroupFailure::whole(first.failure).into());
    }
    let n = regions.len();
    // Invariant: `held` registers regions[..lo]; `failed`, when set, is
    // what registering regions[lo..hi] on top of it returned.
    let mut held = Vec::new();
    let (mut lo, mut hi) = (0, n);
    let mut failed = Some(first);
    let (culprit, failure) = loop {
        match failed.take() {
            Some(f) => match f.at {
                At::Region(i) => break (Some(lo + i), f.failure),
                At::Whole => break (None, f.failure),
                At::List if hi - lo == 1 => break (Some(lo), f.failure),
                At::List => {}
            },
            None if hi - lo == 1 => {
                // The search assumed regions[lo] fails; ask it alone.
                match r.register(spec, &regions[lo..hi]) {
                    Err(f) => {
                        failed = Some(f);
                        continue;
                    }
                    Ok(h) => {
                        // Did not repeat: register the rest in one call.
                        held.push(h);
                        lo = hi;
                        if lo == n {
                            return Ok(held);
                        }
                        match r.register(spec, &regions[lo..n]) {
                            Ok(h) => {
                                held.push(h);
                                return Ok(held);
                            }
                            Err(f) => {
                                hi = n;
                                failed = Some(f);
                                continue;
                            }
                        }
                    }
                }
            }
            None => {}
        }
        let mid = lo + (hi - lo) / 2;
        match r.register(spec, &regions[lo..mid]) {
            Ok(h) => {
                held.push(h);
                lo = mid;
            }
            Err(f) => {
                hi = mid;
                failed = Some(f);
            }
        }
    };
    let released = release_all(r, held);
    let mut out = match culprit {
        // Every region before the culprit was registered, then rolled back.
        Some(i) => GroupFailure {
            reason: failure.reason,
            region: Some(i),
            message: format!(
                "region {i} [{:#x}, +{}): {}",
                regions[i].addr, regions[i].len, failure.message
            ),
            rolled_back: i,
            diagnostics: vec![],
        },
        None => GroupFailure {
            rolled_back: lo,
            ..GroupFailure::whole(failure)
        },
    };
    if let Some(e) = &released.first {
        out.message.push_str(&format!(
            "; rollback also failed for {} regions, which NIXL may still hold: {e}",
            released.failed
        ));
    }
    Err(Refused {
        failure: out,
        held: released,
    })
}

/// What a release left: what NIXL may still hold (`held`, as handles that
/// can be released again), its extent, and the first failure.
#[derive(Debug)]
pub struct Released<H> {
    pub failed: usize,
    pub failed_bytes: u64,
    pub first: Option<Failure>,
    pub held: Vec<H>,
}

impl<H> Default for Released<H> {
    fn default() -> Self {
        Released {
            failed: 0,
            failed_bytes: 0,
            first: None,
            held: Vec::new(),
        }
    }
}

impl<H> Released<H> {
    /// Everything was released.
    pub fn is_clean(&self) -> bool {
        self.failed == 0 && self.first.is_none()
    }

    /// Adds what another release left (an older one: its handles first).
    pub fn absorb(&mut self, older: Released<H>) {
        self.failed += older.failed;
        self.failed_bytes += older.failed_bytes;
        if older.first.is_some() {
            self.first = older.first;
        }
        let newer = std::mem::replace(&mut self.held, older.held);
        self.held.extend(newer);
    }
}

/// Deregisters handles newest first, each in one call. A list that fails
/// whole comes back one handle a region, each tried once more on its own,
/// so that each failing region is counted and the first one named; what
/// any call did release is never tried again. Returns what NIXL may still
/// hold, in registration order.
pub fn release_all<R: Registrar>(r: &mut R, handles: Vec<R::Handle>) -> Released<R::Handle> {
    let mut out = Released::default();
    let mut newest_first = Vec::new();
    let mut kept = |out: &mut Released<R::Handle>, u: Unreleased<R::Handle>| {
        newest_first.extend(u.held.into_iter().rev());
        out.failed += u.regions;
        out.failed_bytes += u.bytes;
        out.first.get_or_insert(u.failure);
    };
    for h in handles.into_iter().rev() {
        match r.deregister(h) {
            Ok(()) => {}
            Err(u) if u.split => {
                for part in u.held.into_iter().rev() {
                    if let Err(p) = r.deregister(part) {
                        kept(&mut out, p);
                    }
                }
            }
            Err(u) => kept(&mut out, u),
        }
    }
    newest_first.reverse();
    out.held = newest_first;
    out
}

/// A failure of a call made with one region, for a registrar that knows
/// which of a list's regions failed because it registers them one by one.
pub fn at_region(failure: Failure, index: usize) -> ListFailure {
    ListFailure::new(failure, At::Region(index))
}

#[cfg(test)]
mod tests;
