//! Registering one group all or nothing, in one NIXL call; releasing it in
//! one call, newest first.
//!
//! Architecture invariant: when any region of a group fails, every region of
//! that group registered before it is deregistered before the attempt is
//! reported, so a failed group holds nothing.
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

/// Registers every region, or none. Returns the handles of the calls that
/// succeeded (one on the fast path), in registration order.
pub fn register_all<R: Registrar>(
    r: &mut R,
    spec: &GroupSpec,
    regions: &[Region],
) -> Result<Vec<R::Handle>, GroupFailure> {
    if regions.is_empty() {
        return Ok(Vec::new());
    }
    let first = match r.register(spec, regions) {
        Ok(h) => return Ok(vec![h]),
        Err(f) => f,
    };
    if first.at == At::Whole {
        return Err(GroupFailure::whole(first.failure));
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
    if let Some(e) = released.first {
        out.message.push_str(&format!("; rollback also failed: {e}"));
    }
    Err(out)
}

/// What a release left: regions whose deregistration failed (NIXL may still
/// hold them), their bytes, and the first failure.
#[derive(Debug, Default, PartialEq)]
pub struct Released {
    pub failed: usize,
    pub failed_bytes: u64,
    pub first: Option<Failure>,
}

/// Deregisters handles newest first, each in one call. A call that fails
/// falls back to one call per region, so that each failing region is
/// counted and the first one named.
pub fn release_all<R: Registrar>(r: &mut R, handles: Vec<R::Handle>) -> Released {
    let mut out = Released::default();
    for h in handles.into_iter().rev() {
        let Err(Unreleased {
            failure,
            regions,
            bytes,
            parts,
        }) = r.deregister(h)
        else {
            continue;
        };
        if parts.is_empty() {
            out.failed += regions;
            out.failed_bytes += bytes;
            out.first.get_or_insert(failure);
            continue;
        }
        for part in parts.into_iter().rev() {
            if let Err(u) = r.deregister(part) {
                out.failed += u.regions;
                out.failed_bytes += u.bytes;
                out.first.get_or_insert(u.failure);
            }
        }
    }
    out
}

/// A failure of a call made with one region, for a registrar that knows
/// which of a list's regions failed because it registers them one by one.
pub fn at_region(failure: Failure, index: usize) -> ListFailure {
    ListFailure::new(failure, At::Region(index))
}

#[cfg(test)]
mod tests;
