//! The clock a post is timed with: [`nixl_agent_sys::clock::ticks`] (the
//! time-stamp counter where the kernel trusts it) read on each side, turned
//! into the recording's nanoseconds at a rate calibrated against the
//! monotonic clock — at the first post, then again about once a second,
//! each time over the whole span since the observer was made (so the rate
//! only gets better, and follows the monotonic clock's slewing). Nothing
//! is measured at start-up: by the first post, the span is usually long.
//!
//! A post's duration is its two readings' difference at that rate: as
//! exact as the clock it stands for. Its start in the recording's
//! nanoseconds (the in-flight mark's age, when a posting that ended within
//! the call happened) is good to the rate's error over the span, well
//! under a millisecond; a posting that stays in flight is placed by one
//! reading of the monotonic clock when the post returns, since its poll
//! will be timed against that clock.

use nixl_agent_sys::clock::{monotonic_nanos, ticks, ticks_are_nanos};
use std::sync::atomic::{AtomicU64, Ordering};

/// The shortest span a rate is measured over (a post within it of the
/// observer's making waits for the rest).
const FIRST_SPAN_NANOS: u64 = 50_000;
/// How often the rate is measured again, in nanoseconds.
const AGAIN_NANOS: u64 = 1_000_000_000;

pub(crate) struct PostClock {
    /// The monotonic clock at the recording's start (nanoseconds).
    base: u64,
    /// A reading of both clocks, the rate's origin: ticks, and the
    /// recording's nanoseconds.
    origin: (u64, u64),
    /// Nanoseconds a tick (`f64` bits).
    rate: AtomicU64,
    /// Ticks at which the rate is measured again.
    next: AtomicU64,
}

impl PostClock {
    /// A clock for the recording that started when the monotonic clock
    /// read `base`; its rate is measured at its first use.
    pub(crate) fn new(base: u64) -> PostClock {
        PostClock {
            base,
            origin: (ticks(), monotonic_nanos().saturating_sub(base)),
            rate: AtomicU64::new(1f64.to_bits()),
            // Ticks that are nanoseconds have their rate already.
            next: AtomicU64::new(if ticks_are_nanos() { u64::MAX } else { 0 }),
        }
    }

    /// Measures the rate over the span since the origin (at least
    /// [`FIRST_SPAN_NANOS`]), and when to do it again.
    fn measure(&self) {
        while self.monotonic() < self.origin.1 + FIRST_SPAN_NANOS {
            std::hint::spin_loop();
        }
        let (t, n) = (ticks(), self.monotonic());
        let (dt, dn) = (t.saturating_sub(self.origin.0), n.saturating_sub(self.origin.1));
        if dt == 0 || dn == 0 {
            return;
        }
        let rate = dn as f64 / dt as f64;
        self.rate.store(rate.to_bits(), Ordering::Relaxed);
        self.next
            .store(t.saturating_add((AGAIN_NANOS as f64 / rate) as u64), Ordering::Relaxed);
    }

    fn rate(&self) -> f64 {
        f64::from_bits(self.rate.load(Ordering::Relaxed))
    }

    /// The counter now.
    pub(crate) fn now(&self) -> u64 {
        ticks()
    }

    /// The monotonic clock now, in the recording's nanoseconds.
    pub(crate) fn monotonic(&self) -> u64 {
        monotonic_nanos().saturating_sub(self.base)
    }

    /// The recording's nanoseconds at the counter's fresh reading `t`;
    /// the rate is measured again first when it is due.
    pub(crate) fn nanos_at(&self, t: u64) -> u64 {
        self.measured_by(t);
        let (t0, n0) = self.origin;
        if t >= t0 {
            n0.saturating_add(((t - t0) as f64 * self.rate()) as u64)
        } else {
            n0.saturating_sub(((t0 - t) as f64 * self.rate()) as u64)
        }
    }

    /// Nanoseconds between the readings `from` and `to`; the rate is
    /// measured again first when it is due (`to` is a fresh reading).
    pub(crate) fn span(&self, from: u64, to: u64) -> u64 {
        self.measured_by(to);
        (to.saturating_sub(from) as f64 * self.rate()) as u64
    }

    /// Measures the rate when it is due at the fresh reading `t`.
    fn measured_by(&self, t: u64) {
        if t >= self.next.load(Ordering::Relaxed) {
            self.measure();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    #[test]
    fn a_span_is_what_the_monotonic_clock_measures() {
        let clock = PostClock::new(monotonic_nanos());
        for wait in [Duration::from_micros(200), Duration::from_millis(20)] {
            let (t0, i0) = (clock.now(), Instant::now());
            std::thread::sleep(wait);
            let (t1, took) = (clock.now(), i0.elapsed());
            let span = clock.span(t0, t1) as f64;
            let want = took.as_nanos() as f64;
            // Within 1% and the two clock reads between the readings.
            assert!((span - want).abs() < want * 0.01 + 2_000.0, "{span} vs {want}");
        }
    }

    #[test]
    fn a_reading_is_placed_on_the_recordings_clock() {
        let base = monotonic_nanos();
        let clock = PostClock::new(base);
        std::thread::sleep(Duration::from_millis(5));
        let (t, n) = (clock.now(), clock.monotonic());
        assert!(clock.nanos_at(t).abs_diff(n) < 100_000, "{} vs {n}", clock.nanos_at(t));
    }
}
