//! The monotonic clock as plain nanoseconds: the clock `std::time::Instant`
//! reads (`CLOCK_MONOTONIC`), without its arithmetic, for the data path,
//! where a post is timed on each side and its times are only subtracted.

/// `CLOCK_MONOTONIC` now, in nanoseconds (the epoch is the system's: only
/// differences mean anything).
pub fn monotonic_nanos() -> u64 {
    let mut t = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // Safety: a valid clock id and a pointer to a timespec on our stack.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut t) };
    debug_assert_eq!(rc, 0, "CLOCK_MONOTONIC is always there on Linux");
    (t.tv_sec as u64)
        .wrapping_mul(1_000_000_000)
        .wrapping_add(t.tv_nsec as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn it_is_the_clock_instant_reads() {
        let a = monotonic_nanos();
        let i = std::time::Instant::now();
        std::thread::sleep(std::time::Duration::from_millis(20));
        let b = monotonic_nanos();
        let elapsed = i.elapsed().as_nanos() as u64;
        assert!(b > a);
        // The same clock: the two intervals agree to well under a ms.
        assert!((b - a).abs_diff(elapsed) < 1_000_000, "{} vs {elapsed}", b - a);
    }
}
