//! What the ledger counts: per group, the attempts, the distributions of
//! descriptors and durations, failures by reason, deregistrations, accepted
//! invalid calls; per process, the instrumentation's own failures. Plain
//! numbers written under the ledger's lock — the metric registry renders
//! them (with the gauges) from the same state, so a counter, a gauge and
//! /v1/status can never be read from two different moments.

use crate::model::{Hooked, Reason};

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
pub struct ReasonCount {
    pub reason: Reason,
    pub count: u64,
    pub last_unix: f64,
}

/// Adds one of `reason` to `list` (series appear on first use).
pub fn count_reason(list: &mut Vec<ReasonCount>, reason: Reason, unix: f64) {
    match list.iter_mut().find(|r| r.reason == reason) {
        Some(r) => {
            r.count += 1;
            r.last_unix = unix;
        }
        None => list.push(ReasonCount {
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
    pub failures: Vec<ReasonCount>,
    pub deregistration_failures: Vec<ReasonCount>,
    pub accepted_invalid: Vec<ReasonCount>,
}

/// The process's counts that belong to no group.
#[derive(Debug, Clone, Default)]
pub struct ProcessCounts {
    pub instrumentation_errors: Vec<(Hooked, u64)>,
    pub memlock_exempt: bool,
}

pub fn unix_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}
