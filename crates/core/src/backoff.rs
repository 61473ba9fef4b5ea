//! Capped exponential backoff, as a pure function.

use std::time::Duration;

/// Delay before the next attempt after `failures` consecutive failures
/// (1 → `initial`, 2 → 2×`initial`, …), never above `max`. Never overflows,
/// however many failures: the exponent is clamped before shifting.
pub fn delay(initial: Duration, max: Duration, failures: u32) -> Duration {
    if failures == 0 {
        return Duration::ZERO;
    }
    let exp = (failures - 1).min(32);
    initial
        .checked_mul(1u32 << exp.min(31))
        .map_or(max, |d| d.min(max))
        .min(max)
}

#[cfg(test)]
mod tests {
    use super::*;

    const I: Duration = Duration::from_millis(100);
    const M: Duration = Duration::from_secs(5);

    #[test]
    fn doubles_then_caps() {
        let got: Vec<u128> = (0..=9).map(|n| delay(I, M, n).as_millis()).collect();
        assert_eq!(got, [0, 100, 200, 400, 800, 1600, 3200, 5000, 5000, 5000]);
    }

    #[test]
    fn never_overflows_or_exceeds_cap() {
        for n in [31, 32, 33, 64, 1000, u32::MAX] {
            assert_eq!(delay(I, M, n), M, "failures={n}");
        }
        let huge = Duration::from_secs(u64::MAX / 2);
        assert_eq!(delay(huge, Duration::MAX, 40), Duration::MAX);
        assert_eq!(delay(huge, M, 3), M);
    }

    #[test]
    fn monotonic() {
        let mut last = Duration::ZERO;
        for n in 0..100 {
            let d = delay(I, M, n);
            assert!(d >= last);
            last = d;
        }
    }
}
