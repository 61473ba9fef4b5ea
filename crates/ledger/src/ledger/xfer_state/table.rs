//! The data path's bounded tables: requests by their identity (a cheap
//! hash: identities are serials the front-ends hand out) and eviction by last use, so a
//! program that never releases its handles cannot grow the ledger, and the
//! requests it still uses are the ones kept.

use std::collections::HashMap;

/// Request identities are serials: spread by one multiplication, not
/// SipHash — the post and poll path hashes them.
#[derive(Default, Clone, Copy)]
pub(super) struct HandleHasher(u64);

impl std::hash::Hasher for HandleHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = (self.0 ^ u64::from(*b)).wrapping_mul(0x100_0000_01b3);
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = (n ^ (n >> 29)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

pub(super) type ByHandle<V> = HashMap<u64, V, std::hash::BuildHasherDefault<HandleHasher>>;

/// The keys of the `n` entries used least recently (smallest `last_used`)
/// among those `keep` does not hold on to: one pass and a partial sort, so
/// evicting a batch costs about as much as one lookup per entry kept.
pub(super) fn least_recent<V>(
    table: &ByHandle<V>,
    n: usize,
    last_used: impl Fn(&V) -> u64,
    keep: impl Fn(u64) -> bool,
) -> Vec<u64> {
    let mut ages: Vec<(u64, u64)> = table
        .iter()
        .filter(|(h, _)| !keep(**h))
        .map(|(h, v)| (last_used(v), *h))
        .collect();
    let n = n.min(ages.len());
    if n == 0 {
        return Vec::new();
    }
    if n < ages.len() {
        ages.select_nth_unstable(n - 1);
    }
    ages[..n].iter().map(|(_, h)| *h).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_least_recently_used_are_chosen_and_the_kept_never() {
        let mut t: ByHandle<u64> = ByHandle::default();
        for (h, used) in [(1, 50), (2, 10), (3, 30), (4, 20), (5, 40)] {
            t.insert(h, used);
        }
        let mut out = least_recent(&t, 2, |u| *u, |h| h == 2);
        out.sort_unstable();
        assert_eq!(out, [3, 4], "2 is the oldest but kept; 4 and 3 are next");
        assert_eq!(least_recent(&t, 9, |u| *u, |_| true), Vec::<u64>::new());
        assert_eq!(least_recent(&t, 9, |u| *u, |_| false).len(), 5);
    }
}
