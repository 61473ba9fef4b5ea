//! The real [`MemoryProbe`]: /proc/self/maps, RLIMIT_MEMLOCK with
//! CAP_IPC_LOCK, and CUDA pointer attributes.

use super::cuda;
use crate::model::Reason;
use crate::validate::{self, DevicePointer, Memlock, MemoryProbe};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long one reading of what the process holds locked (VmLck + VmPin of
/// /proc/self/status, ~20 us on a 2-core VM) stands for the validations
/// after it. A process registering block by block (thousands of calls at
/// start-up) reads it once per this, not once per call; what nixl-agent
/// itself registered since is counted by the caller either way
/// (`pinned_bytes`), and NIXL's own failure names a limit the estimate
/// missed.
const LOCKED_READ_EVERY: Duration = Duration::from_millis(100);

/// How long one reading of the soft RLIMIT_MEMLOCK stands. `getrlimit` is
/// a system call (451 ns on the VM of bench/results/latest.json,
/// `validation_probe.getrlimit_ns`; more than the rest of an observed
/// call's validation) for a limit that changes only when someone runs
/// `prlimit` on the process: a retry after raising it sees the new one, a
/// call within this interval may not.
const LIMIT_READ_EVERY: Duration = Duration::from_millis(100);

/// The last readings of the soft limit and of what the process holds
/// locked, and when (one lock for both: validation wants them together).
/// Only ever tried, never waited on: a call that finds it held reads
/// afresh. In a host process another thread may hold it, and in a child
/// forked meanwhile it stays held by a thread that no longer exists.
static MEMLOCK: Mutex<Readings> = Mutex::new(Readings {
    limit: Recent::new(LIMIT_READ_EVERY),
    locked: Recent::new(LOCKED_READ_EVERY),
});

struct Readings {
    limit: Recent<Option<u64>>,
    locked: Recent<Option<u64>>,
}

/// The soft RLIMIT_MEMLOCK now (`None` = unlimited or unreadable).
fn soft_memlock_limit() -> Option<u64> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // Safety: getrlimit writes into the live `lim` struct only.
    let rc = unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut lim) };
    if rc != 0 || lim.rlim_cur == libc::RLIM_INFINITY {
        None
    } else {
        Some(lim.rlim_cur)
    }
}

/// A value read at most once per `every`.
#[derive(Debug)]
struct Recent<T> {
    every: Duration,
    last: Option<(Instant, T)>,
}

impl<T: Copy> Recent<T> {
    const fn new(every: Duration) -> Recent<T> {
        Recent { every, last: None }
    }

    /// The last reading when it is younger than `every` at `now`, else a
    /// new one.
    fn get(&mut self, now: Instant, read: impl FnOnce() -> T) -> T {
        match self.last {
            Some((at, v)) if now.saturating_duration_since(at) < self.every && now >= at => v,
            _ => {
                let v = read();
                self.last = Some((now, v));
                v
            }
        }
    }
}

/// Reads facts about this process's memory.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemProbe;

/// The first region not (fully) mapped, walking `regions` in the order
/// `at` gives and asking `mapped` once per run of touching regions (per
/// region only inside a run that is not). `None` when `check_order` and
/// the walk finds the order is not by address.
fn first_unmapped_run(
    regions: &[crate::model::Region],
    at: impl Fn(usize) -> usize,
    check_order: bool,
    mapped: &impl Fn(usize, usize) -> bool,
) -> Option<Option<usize>> {
    let end_of = |i: usize| regions[i].addr.saturating_add(regions[i].len);
    let mut first_bad: Option<usize> = None;
    let mut k = 0;
    while k < regions.len() {
        let (start, mut end, from) = (regions[at(k)].addr, end_of(at(k)), k);
        while k + 1 < regions.len() {
            let next = regions[at(k + 1)].addr;
            if check_order && next < regions[at(k)].addr {
                return None;
            }
            if next > end {
                break;
            }
            k += 1;
            end = end.max(end_of(at(k)));
        }
        if !mapped(start, end) {
            for i in (from..=k).map(&at) {
                if !mapped(regions[i].addr, end_of(i)) {
                    first_bad = Some(first_bad.map_or(i, |b| b.min(i)));
                }
            }
        }
        k += 1;
    }
    Some(first_bad)
}

impl MemoryProbe for SystemProbe {
    fn mapped_ranges(&self) -> Result<Vec<(usize, usize)>, String> {
        std::fs::read_to_string("/proc/self/maps")
            .map(|t| validate::parse_maps(&t))
            .map_err(|e| format!("/proc/self/maps: {e}"))
    }

    fn first_unmapped(&self, regions: &[crate::model::Region]) -> Result<Option<usize>, String> {
        // One kernel question per run of touching regions (a group is usually
        // carved from one allocation); per region only inside a failing run.
        let page = super::memory::page_size();
        let mapped = |start: usize, end: usize| {
            let lo = start - start % page;
            // Safety: msync with MS_ASYNC only asks the kernel whether the
            // range is mapped (ENOMEM when any page is not); it reads and
            // writes no memory. Anonymous and file mappings alike.
            let rc = unsafe { libc::msync(lo as *mut libc::c_void, end - lo, libc::MS_ASYNC) };
            !(rc != 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ENOMEM))
        };
        // Usually in address order already: the runs are found and asked
        // about in one walk, with no index to sort (nor to allocate, for a
        // call of thousands of regions). A list found out of order is
        // walked again, sorted.
        let first_bad = match first_unmapped_run(regions, |k| k, true, &mapped) {
            Some(found) => found,
            None => {
                let mut order: Vec<usize> = (0..regions.len()).collect();
                order.sort_unstable_by_key(|&i| regions[i].addr);
                first_unmapped_run(regions, |k| order[k], false, &mapped).flatten()
            }
        };
        Ok(first_bad)
    }

    fn device_pointer(&self, addr: usize, device: u32) -> Result<DevicePointer, Reason> {
        cuda::pointer(addr, device)
    }

    fn memlock(&self) -> Memlock {
        // Capabilities do not change under the agent: read them once.
        static EXEMPT: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        let exempt = *EXEMPT
            .get_or_init(|| std::fs::read_to_string("/proc/self/status").is_ok_and(|s| validate::has_ipc_lock(&s)));
        let read_locked = || {
            std::fs::read_to_string("/proc/self/status")
                .ok()
                .and_then(|s| validate::locked_bytes(&s))
        };
        let now = Instant::now();
        let mut kept = match MEMLOCK.try_lock() {
            Ok(g) => Some(g),
            Err(std::sync::TryLockError::Poisoned(e)) => Some(e.into_inner()),
            Err(std::sync::TryLockError::WouldBlock) => None,
        };
        let soft_limit = match kept.as_deref_mut() {
            Some(r) => r.limit.get(now, soft_memlock_limit),
            None => soft_memlock_limit(),
        };
        // What the process holds is only worth a read when a limit applies.
        let locked_bytes = match (soft_limit, exempt, kept.as_deref_mut()) {
            (Some(_), false, Some(r)) => r.locked.get(now, read_locked),
            (Some(_), false, None) => read_locked(),
            _ => None,
        };
        Memlock {
            soft_limit,
            exempt,
            locked_bytes,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Four pages with the third unmapped: the first region touching it is
    /// found, whether the list is in address order or not.
    #[test]
    fn the_first_unmapped_region_is_found_in_order_or_not() {
        use crate::model::Region;
        let page = super::super::memory::page_size();
        // Safety: a fresh anonymous mapping of four pages, the third page
        // then unmapped; nothing else uses them, and both are undone below.
        let base = unsafe {
            let p = libc::mmap(
                std::ptr::null_mut(),
                4 * page,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            );
            assert_ne!(p, libc::MAP_FAILED);
            assert_eq!(libc::munmap((p as usize + 2 * page) as *mut libc::c_void, page), 0);
            p as usize
        };
        let r = |k: usize| Region::new(base + k * page, page, 0);
        let probe = SystemProbe;
        assert_eq!(probe.first_unmapped(&[r(0), r(1), r(3)]).unwrap(), None);
        assert_eq!(probe.first_unmapped(&[r(0), r(1), r(2), r(3)]).unwrap(), Some(2));
        assert_eq!(probe.first_unmapped(&[r(3), r(2), r(0)]).unwrap(), Some(1));
        assert_eq!(probe.first_unmapped(&[r(1), r(0), r(3)]).unwrap(), None);
        assert_eq!(probe.first_unmapped(&[]).unwrap(), None);
        // Safety: the mapping made above, its pages that are still mapped.
        unsafe {
            libc::munmap(base as *mut libc::c_void, 2 * page);
            libc::munmap((base + 3 * page) as *mut libc::c_void, page);
        }
    }

    /// Read on first use, reused while young, read again once `every` has
    /// passed; an instant before the last reading reads again too.
    #[test]
    fn a_reading_stands_for_its_interval_and_no_longer() {
        let mut r = Recent::new(Duration::from_millis(100));
        let t0 = Instant::now();
        let mut reads = 0;
        let mut get = |r: &mut Recent<u32>, at: Instant| {
            r.get(at, || {
                reads += 1;
                reads
            })
        };
        assert_eq!(get(&mut r, t0), 1);
        assert_eq!(get(&mut r, t0 + Duration::from_millis(99)), 1);
        assert_eq!(get(&mut r, t0 + Duration::from_millis(100)), 2);
        assert_eq!(get(&mut r, t0 + Duration::from_millis(150)), 2);
        assert_eq!(get(&mut r, t0), 3, "earlier than the reading: read again");
    }

    /// A reading held by another thread (or, in a forked child, by a
    /// thread that is gone) is not waited for: the limit is read afresh.
    #[test]
    fn memlock_never_waits_for_the_kept_readings() {
        let held = MEMLOCK.lock().unwrap_or_else(|e| e.into_inner());
        let m = SystemProbe.memlock();
        drop(held);
        assert_eq!(m.soft_limit, soft_memlock_limit());
        assert_eq!(SystemProbe.memlock().soft_limit, soft_memlock_limit());
    }
}
