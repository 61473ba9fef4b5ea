//! Clocks for the data path, where a post is timed on each side and its
//! times are only subtracted: the monotonic clock as plain nanoseconds
//! (the clock `std::time::Instant` reads, `CLOCK_MONOTONIC`, without its
//! arithmetic), and [`ticks`], a counter at a constant rate that is cheaper
//! to read still (the CPU's time-stamp counter where the kernel keeps time
//! by it: 7 ns against 16 ns on this project's x86 VM).

use std::sync::OnceLock;

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

/// Whether [`ticks`] are the CPU's time-stamp counter: on x86-64, when the
/// kernel's clocksource is `tsc` (the kernel found it invariant and in step
/// across CPUs; else it would have left it). Decided once.
fn tsc() -> bool {
    static TSC: OnceLock<bool> = OnceLock::new();
    *TSC.get_or_init(|| {
        cfg!(target_arch = "x86_64")
            && std::fs::read_to_string("/sys/devices/system/clocksource/clocksource0/current_clocksource")
                .is_ok_and(|s| s.trim() == "tsc")
    })
}

/// A counter that only goes up, at a constant rate: the time-stamp counter
/// where [`ticks_are_nanos`] is false, else [`monotonic_nanos`]. Its rate
/// is the caller's to calibrate against the monotonic clock.
pub fn ticks() -> u64 {
    #[cfg(target_arch = "x86_64")]
    if tsc() {
        // Safety: RDTSC exists on every x86-64 CPU and reads a counter,
        // nothing else.
        return unsafe { core::arch::x86_64::_rdtsc() };
    }
    monotonic_nanos()
}

/// [`ticks`] are the monotonic clock's nanoseconds (their rate is 1).
pub fn ticks_are_nanos() -> bool {
    !tsc()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_go_up_at_a_rate_the_monotonic_clock_confirms() {
        let (t0, n0) = (ticks(), monotonic_nanos());
        std::thread::sleep(std::time::Duration::from_millis(20));
        let (t1, n1) = (ticks(), monotonic_nanos());
        assert!(t1 > t0);
        let rate = (n1 - n0) as f64 / (t1 - t0) as f64;
        if ticks_are_nanos() {
            assert!((rate - 1.0).abs() < 1e-3, "{rate}");
        } else {
            // Some GHz: between 0.05 and 5 ns a tick.
            assert!((0.05..5.0).contains(&rate), "{rate}");
        }
    }

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
