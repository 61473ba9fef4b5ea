//! One metric family being rendered from the ledger's state at scrape time
//! (`RenderedFamily`: gauges, counters, histograms with their label pairs). The
//! registry's families ([`super::metrics`]) and the data path's
//! ([`super::xfer_families`]) are both built with it.

use super::names::{Family, Type};
use prometheus::proto::{LabelPair, Metric, MetricFamily, MetricType};

/// One label pair of a series.
pub(super) fn pair(k: &str, v: &str) -> LabelPair {
    let mut p = LabelPair::default();
    p.set_name(k.to_string());
    p.set_value(v.to_string());
    p
}

/// One family being rendered: its type and help are its declaration's
/// (`names::FAMILIES`), and each series carries exactly the label names
/// declared there (checked in debug builds, so every test checks it).
pub(super) struct RenderedFamily {
    pub(super) mf: MetricFamily,
    family: &'static Family,
}

impl RenderedFamily {
    pub(super) fn new(name: &str) -> RenderedFamily {
        let f = Family::get(name);
        let mut mf = MetricFamily::default();
        mf.set_name(f.name.to_string());
        mf.set_help(f.help.to_string());
        mf.set_field_type(match f.kind {
            Type::Counter => MetricType::COUNTER,
            Type::Gauge => MetricType::GAUGE,
            Type::Histogram => MetricType::HISTOGRAM,
        });
        RenderedFamily { mf, family: f }
    }

    /// A series of this family with these labels.
    fn metric(&self, labels: Vec<LabelPair>, kind: Type) -> Metric {
        debug_assert_eq!(self.family.kind, kind, "{}: a {kind:?} series", self.family.name);
        debug_assert!(
            labels.len() == self.family.labels.len() && labels.iter().all(|l| self.family.labels.contains(&l.name())),
            "{}: labels {:?}, declared {:?}",
            self.family.name,
            labels.iter().map(|l| l.name()).collect::<Vec<_>>(),
            self.family.labels
        );
        Metric::from_label(labels)
    }

    pub(super) fn gauge(&mut self, labels: Vec<LabelPair>, v: f64) {
        let mut g = prometheus::proto::Gauge::default();
        g.set_value(v);
        let mut m = self.metric(labels, Type::Gauge);
        m.set_gauge(g);
        self.mf.mut_metric().push(m);
    }

    pub(super) fn counter(&mut self, labels: Vec<LabelPair>, v: u64) {
        let mut c = prometheus::proto::Counter::default();
        c.set_value(v as f64);
        let mut m = self.metric(labels, Type::Counter);
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
        let mut m = self.metric(labels, Type::Histogram);
        m.set_histogram(ph);
        self.mf.mut_metric().push(m);
    }
}
