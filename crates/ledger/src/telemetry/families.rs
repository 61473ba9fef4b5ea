//! One metric family being rendered from the ledger's state at scrape time
//! (`RenderedFamily`: gauges, counters, histograms with their label pairs). The
//! registry's families ([`super::metrics`]) and the data path's
//! ([`super::xfer_families`]) are both built with it.

use super::names::Family;
use prometheus::proto::{LabelPair, Metric, MetricFamily, MetricType};

/// One label pair of a series.
pub(super) fn pair(k: &str, v: &str) -> LabelPair {
    let mut p = LabelPair::default();
    p.set_name(k.to_string());
    p.set_value(v.to_string());
    p
}

/// One family being rendered.
pub(super) struct RenderedFamily {
    pub(super) mf: MetricFamily,
}

impl RenderedFamily {
    pub(super) fn new(name: &str, kind: MetricType) -> RenderedFamily {
        let f = Family::get(name);
        let mut mf = MetricFamily::default();
        mf.set_name(f.name.to_string());
        mf.set_help(f.help.to_string());
        mf.set_field_type(kind);
        RenderedFamily { mf }
    }

    pub(super) fn gauge(&mut self, labels: Vec<LabelPair>, v: f64) {
        let mut g = prometheus::proto::Gauge::default();
        g.set_value(v);
        let mut m = Metric::from_label(labels);
        m.set_gauge(g);
        self.mf.mut_metric().push(m);
    }

    pub(super) fn counter(&mut self, labels: Vec<LabelPair>, v: u64) {
        let mut c = prometheus::proto::Counter::default();
        c.set_value(v as f64);
        let mut m = Metric::from_label(labels);
        m.set_counter(c);
        self.mf.mut_metric().push(m);
    }

    pub(super) fn histogram(&mut self, labels: Vec<LabelPair>, bounds: &[f64], h: &crate::ledger::Histogram) {
        let mut ph = prometheus::proto::Histogram::default();
        ph.set_sample_count(h.count);
        ph.set_sample_sum(h.sum);
        let cumulative = h.cumulative(bounds);
        ph.set_bucket(
            bounds
                .iter()
                .zip(&cumulative)
                .map(|(b, c)| {
                    let mut bucket = prometheus::proto::Bucket::default();
                    bucket.set_upper_bound(*b);
                    bucket.set_cumulative_count(*c);
                    bucket
                })
                .collect(),
        );
        let mut m = Metric::from_label(labels);
        m.set_histogram(ph);
        self.mf.mut_metric().push(m);
    }
}
