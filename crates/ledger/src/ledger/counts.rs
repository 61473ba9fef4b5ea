//! What the ledger counts: per group, the attempts, the distributions of
//! descriptors and durations, failures by reason, deregistrations, accepted
//! invalid calls; per process, the instrumentation's own failures. Plain
//! numbers written under the ledger's lock — the metric registry renders
//! them (with the gauges) from the same state, so a counter, a gauge and
//! /v1/status can never be read from two different moments.

use crate::model::Reason;

/// Upper bounds of the two histograms (the metrics layer's choice, handed
/// to the ledger when it is made).
#[derive(Debug, Clone, Copy)]
pub struct Bounds {
    pub duration: &'static [f64],
    pub descriptors: &'static [f64],
    /// The transfer duration histogram's.
    pub transfer_duration: &'static [f64],
}

/// A histogram's state: a count per bound and one for +Inf, the sum and the
/// number of observations.
#[derive(Debug, Clone, Default)]
pub struct Histogram {
    pub counts: Vec<u64>,
    pub sum: f64,
    pub count: u64,
}

impl Histogram {
    pub fn observe(&mut self, bounds: &[f64], v: f64) {
        if self.counts.is_empty() {
            self.counts = vec![0; bounds.len() + 1];
        }
        let i = bounds.iter().position(|b| v <= *b).unwrap_or(bounds.len());
        self.counts[i] += 1;
        self.sum += v;
        self.count += 1;
    }

    /// Cumulative counts per bound (+Inf last), as the exposition wants.
    pub fn cumulative(&self, bounds: &[f64]) -> Vec<u64> {
        let mut acc = 0;
        (0..=bounds.len())
            .map(|i| {
                acc += self.counts.get(i).copied().unwrap_or(0);
                acc
            })
            .collect()
    }
}

/// How often a reason was seen, and when last (Unix seconds).
#[derive(Debug, Clone, Copy)]
pub struct ReasonTally {
    pub reason: Reason,
    pub count: u64,
    pub last_unix: f64,
}

/// Adds one of `reason` to `list` (series appear on first use).
pub fn count_reason(list: &mut Vec<ReasonTally>, reason: Reason, unix: f64) {
    match list.iter_mut().find(|r| r.reason == reason) {
        Some(r) => {
            r.count += 1;
            r.last_unix = unix;
        }
        None => list.push(ReasonTally {
            reason,
            count: 1,
            last_unix: unix,
        }),
    }
}

/// One group's counts.
#[derive(Debug, Clone, Default)]
pub struct GroupCounts {
    pub attempts: u64,
    pub descriptors: Histogram,
    pub duration: Histogram,
    pub deregistrations: u64,
    pub failures: Vec<ReasonTally>,
    pub deregistration_failures: Vec<ReasonTally>,
    pub accepted_invalid: Vec<ReasonTally>,
}

/// `d` in nanoseconds, without a 128-bit product (a u64 of nanoseconds
/// lasts 584 years; saturates past that).
pub fn nanos(d: std::time::Duration) -> u64 {
    d.as_secs()
        .saturating_mul(1_000_000_000)
        .saturating_add(u64::from(d.subsec_nanos()))
}

pub fn unix_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// How long one wall-clock reading stands for the instants after it.
const REANCHOR: std::time::Duration = std::time::Duration::from_secs(1);

/// The Unix time of instants already read: one wall-clock reading a second
/// stands for every stamp within it, so what a hot call stamps costs no
/// clock read beyond the one that timed the call. A stamp is at most
/// [`REANCHOR`] behind a step of the wall clock.
#[derive(Debug, Clone, Copy)]
pub struct WallAnchor {
    at: std::time::Instant,
    unix: f64,
}

impl Default for WallAnchor {
    fn default() -> WallAnchor {
        WallAnchor {
            at: std::time::Instant::now(),
            unix: unix_now(),
        }
    }
}

impl WallAnchor {
    /// The Unix time (seconds) of `at`.
    pub fn unix_at(&mut self, at: std::time::Instant) -> f64 {
        if at.saturating_duration_since(self.at) > REANCHOR {
            *self = WallAnchor::default();
        }
        match at.checked_duration_since(self.at) {
            Some(d) => self.unix + d.as_secs_f64(),
            None => self.unix - self.at.duration_since(at).as_secs_f64(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    /// A stamp derived from an instant is that instant's wall time: within
    /// the anchor's second, before it, and past it (the anchor is read
    /// again).
    #[test]
    fn an_instant_already_read_is_stamped_with_its_wall_time() {
        let mut wall = WallAnchor::default();
        let now = Instant::now();
        let close = |a: f64, b: f64| (a - b).abs() < 0.05;
        assert!(close(wall.unix_at(now), unix_now()));
        assert!(close(wall.unix_at(now - Duration::from_millis(300)), unix_now() - 0.3));
        std::thread::sleep(REANCHOR + Duration::from_millis(20));
        let later = Instant::now();
        assert!(close(wall.unix_at(later), unix_now()));
        assert!(wall.at >= later, "read again after its second");
    }
}
