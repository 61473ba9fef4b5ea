//! Exemplars: the latest sampled trace behind each bucket of the
//! registration duration histogram, kept by the registry
//! ([`super::metrics::Metrics`] records them) and written by the OpenMetrics
//! encoder ([`super::exposition`]). A leaf of `telemetry`, so the registry
//! and the encoder both import it and neither imports the other's.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// A sampled trace behind one histogram observation (OpenMetrics exemplar).
#[derive(Debug, Clone, PartialEq)]
pub struct Exemplar {
    pub trace_id: String,
    pub span_id: String,
    pub value: f64,
    pub unix_seconds: f64,
}

/// The latest exemplar per series and bucket of the duration histogram.
#[derive(Clone, Default)]
pub struct Exemplars(Arc<Mutex<HashMap<String, Vec<Option<Exemplar>>>>>);

impl Exemplars {
    /// The exemplar of bucket `bucket` (`DURATION_BUCKETS.len()` is +Inf)
    /// of the series with these label pairs.
    pub fn get(&self, labels: &[(&str, &str)], bucket: usize) -> Option<Exemplar> {
        let map = self.0.lock().unwrap_or_else(|e| e.into_inner());
        map.get(&series_key(labels))?.get(bucket)?.clone()
    }

    pub(super) fn record(&self, labels: &[(&str, &str)], bounds: &[f64], value: f64, ex: Exemplar) {
        let bucket = bounds.iter().position(|b| value <= *b).unwrap_or(bounds.len());
        let mut map = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let slots = map
            .entry(series_key(labels))
            .or_insert_with(|| vec![None; bounds.len() + 1]);
        slots[bucket] = Some(ex);
    }
}

/// Label pairs sorted by name, as the registry orders them.
fn series_key(labels: &[(&str, &str)]) -> String {
    let mut pairs: Vec<_> = labels.to_vec();
    pairs.sort_unstable();
    pairs.iter().map(|(k, v)| format!("{k}={v}\u{1f}")).collect()
}
