//! The metric registry, a projection of the ledger. Families are created
//! from [`names::FAMILIES`]; a group's series are created when the group is
//! declared, so they are 0 from the first scrape, not absent.
//!
//! Gauges are copied from the ledger's state — never derived from an event
//! — inside the ledger's write ([`Metrics::on`] runs there), so a gauge and
//! /v1/status always say the same; counters and histograms count the
//! event in that same write. The HTTP layer only encodes the registry.

use super::exemplars::{Exemplar, Exemplars};
use super::families::{pair, RenderedFamily};
use super::names::{self, Family, Kept};
use crate::event::Event;
use crate::ledger::groups::Group;
use crate::ledger::{Applied, Ledger, State};
use crate::model::GroupState;
use prometheus::core::Desc;
use prometheus::proto::{LabelPair, MetricFamily};
use prometheus::{IntGaugeVec, Opts, Registry};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// Upper bounds of the registration duration histogram, in seconds: from
/// 25 µs to a minute, about 4× apart, 9 bounds (the series budget: 12
/// series a group). Measured (bench/results/latest.md, python.md): an
/// observed Python call of one region takes ~5 µs, an attempt of the default
/// plan 0.06–0.15 ms, 4,096 regions ~3.5 ms, 16,384 ~15 ms; 10 s is the
/// NixlRegistrationSlow threshold.
pub const DURATION_BUCKETS: &[f64] = &[0.000025, 0.0001, 0.0005, 0.0025, 0.01, 0.1, 1.0, 10.0, 60.0];
/// Upper bounds of the descriptors-per-attempt histogram: 8× apart, up to
/// the 1M regions of a KV cache registered per block.
pub const DESCRIPTOR_BUCKETS: &[f64] = &[1.0, 8.0, 64.0, 512.0, 4096.0, 32768.0, 262144.0, 1048576.0];
/// Upper bounds of the transfer duration histogram, in seconds: decades
/// from 10 µs (a small DRAM transfer completing within `transfer()`) to 10 s,
/// and a minute (past the stall threshold): 8 bounds, 11 series an op (the
/// SGLang shape's budget of 160 series a rank holds with them).
pub const TRANSFER_DURATION_BUCKETS: &[f64] = &[0.00001, 0.0001, 0.001, 0.01, 0.1, 1.0, 10.0, 60.0];

pub use crate::model::{NIXL_SYS_VERSION, REVISION};

/// Version facts exported as `nixl_agent_build_info`.
#[derive(Debug, Clone)]
pub struct BuildInfo {
    pub version: &'static str,
    pub revision: &'static str,
    /// The NIXL runtime loaded (from the wheel's dist-info).
    pub nixl_version: String,
    /// The nixl-sys binding compiled in.
    pub nixl_sys_version: &'static str,
    /// What this recording is for (`names::ROLE_*`).
    pub role: &'static str,
}

impl BuildInfo {
    /// This build's version and revision with the given NIXL runtime version.
    pub fn current(nixl_version: Option<&str>) -> BuildInfo {
        BuildInfo {
            version: env!("CARGO_PKG_VERSION"),
            revision: REVISION,
            nixl_version: nixl_version.unwrap_or("unknown").to_string(),
            nixl_sys_version: NIXL_SYS_VERSION,
            role: names::ROLE_AGENT,
        }
    }

    /// The same with another role.
    pub fn with_role(mut self, role: &'static str) -> BuildInfo {
        self.role = role;
        self
    }
}

/// The label values of a group's series, from its typed labels (empty
/// until its first call fixes them, for a group expected before it).
struct Values<'a> {
    group: &'a str,
    kind: &'a str,
    mem_type: &'static str,
    backend: &'a str,
    device: String,
}

impl<'a> Values<'a> {
    fn of(g: &'a Group) -> Values<'a> {
        let fixed = g.fixed.as_ref();
        Values {
            group: &g.name,
            kind: g.kind.as_str(),
            mem_type: fixed.map_or("", |l| l.mem_type.as_str()),
            backend: fixed.map_or("", |l| l.backend.as_str()),
            device: fixed.map(|l| l.device.to_string()).unwrap_or_default(),
        }
    }
}

/// The labels of a group's series, sorted by name as the registry sorts
/// them, with one more (`reason`, `state`) when given.
fn group_labels(l: &Values<'_>, extra: Option<(&'static str, &str)>) -> Vec<LabelPair> {
    let mut pairs: Vec<(&str, &str)> = vec![
        ("group", l.group),
        ("kind", l.kind),
        ("mem_type", l.mem_type),
        ("backend", l.backend),
        ("device", &l.device),
    ];
    if let Some(e) = extra {
        pairs.push(e);
    }
    pairs.sort_unstable_by_key(|p| p.0);
    pairs.into_iter().map(|(k, v)| pair(k, v)).collect()
}

/// The families the ledger's state is rendered into, with their descs.
struct LedgerCollector {
    ledger: Ledger,
    descs: Vec<Desc>,
}

impl LedgerCollector {
    fn new(ledger: Ledger) -> LedgerCollector {
        // Every family rendered from the ledger (the rest are the build
        // info, the trace counters, a rank's own series and the process
        // collector).
        let descs = names::FAMILIES
            .iter()
            .filter(|f| f.kept == Kept::Ledger)
            .map(|f| {
                Desc::new(
                    f.name.to_string(),
                    f.help.to_string(),
                    f.labels.iter().map(|l| l.to_string()).collect(),
                    HashMap::new(),
                )
                .expect("families are valid")
            })
            .collect();
        LedgerCollector { ledger, descs }
    }
}

impl prometheus::core::Collector for LedgerCollector {
    fn desc(&self) -> Vec<&Desc> {
        self.descs.iter().collect()
    }

    fn collect(&self) -> Vec<MetricFamily> {
        self.ledger.read(render)
    }
}

/// The ledger's state as metric families: gauges copied from the state,
/// counters and histograms from its counts — one moment, one truth.
fn render(st: &State) -> Vec<MetricFamily> {
    let p = &st.process;
    let mut attempts = RenderedFamily::new(names::REGISTRATION_ATTEMPTS_TOTAL);
    let mut failures = RenderedFamily::new(names::REGISTRATION_FAILURES_TOTAL);
    let mut last_failure = RenderedFamily::new(names::LAST_FAILURE_TIMESTAMP_SECONDS);
    let mut descriptors = RenderedFamily::new(names::REGISTRATION_DESCRIPTORS);
    let mut duration = RenderedFamily::new(names::REGISTRATION_DURATION_SECONDS);
    let mut registered_descriptors = RenderedFamily::new(names::REGISTERED_DESCRIPTORS);
    let mut registered_bytes = RenderedFamily::new(names::REGISTERED_BYTES);
    let mut deregistrations = RenderedFamily::new(names::DEREGISTRATIONS_TOTAL);
    let mut deregistration_failures = RenderedFamily::new(names::DEREGISTRATION_FAILURES_TOTAL);
    let mut group_registered = RenderedFamily::new(names::GROUP_REGISTERED);
    let mut group_state = RenderedFamily::new(names::GROUP_STATE);
    let mut accepted_invalid = RenderedFamily::new(names::ACCEPTED_INVALID_TOTAL);
    for g in st.groups.iter() {
        let values = Values::of(g);
        let l = &values;
        let c = &g.counts;
        let fixed = g.fixed.is_some();
        registered_descriptors.gauge(group_labels(l, None), g.holding.descriptors as f64);
        registered_bytes.gauge(group_labels(l, None), g.holding.bytes as f64);
        group_registered.gauge(
            group_labels(l, None),
            f64::from(u8::from(g.state == GroupState::Registered)),
        );
        for state in GroupState::ALL {
            group_state.gauge(
                group_labels(l, Some(("state", state.as_str()))),
                f64::from(u8::from(state == g.state)),
            );
        }
        // A group expected before its first call has only its gauges: the
        // per-attempt series carry the labels that call fixes.
        if fixed {
            attempts.counter(group_labels(l, None), c.attempts);
            descriptors.histogram(group_labels(l, None), st.bounds.descriptors, &c.descriptors);
            duration.histogram(group_labels(l, None), st.bounds.duration, &c.duration);
            deregistrations.counter(group_labels(l, None), c.deregistrations);
        }
        for r in &c.failures {
            failures.counter(group_labels(l, Some(("reason", r.reason.as_str()))), r.count);
            last_failure.gauge(group_labels(l, Some(("reason", r.reason.as_str()))), r.last_unix);
        }
        for r in &c.deregistration_failures {
            deregistration_failures.counter(group_labels(l, Some(("reason", r.reason.as_str()))), r.count);
        }
        for r in &c.accepted_invalid {
            accepted_invalid.counter(group_labels(l, Some(("reason", r.reason.as_str()))), r.count);
        }
    }
    let mut ready = RenderedFamily::new(names::READY);
    ready.gauge(Vec::new(), f64::from(u8::from(p.ready)));
    let mut nixl = RenderedFamily::new(names::NIXL_AVAILABLE);
    nixl.gauge(Vec::new(), f64::from(u8::from(p.nixl.available)));
    // Appear on first use: a healthy process never fails to load NIXL.
    let mut nixl_failures = RenderedFamily::new(names::NIXL_FAILURES_TOTAL);
    for (r, n) in &p.nixl_failures {
        nixl_failures.counter(vec![pair("reason", r.as_str())], *n);
    }
    let mut stuck = RenderedFamily::new(names::LIFECYCLE_STUCK);
    stuck.gauge(
        Vec::new(),
        f64::from(u8::from(!st.calls.stuck.is_empty() || p.lifecycle_dead)),
    );
    let mut memlock = RenderedFamily::new(names::MEMLOCK_LIMIT_BYTES);
    memlock.gauge(Vec::new(), p.memlock_limit.map_or(f64::INFINITY, |b| b as f64));
    let mut exempt = RenderedFamily::new(names::MEMLOCK_EXEMPT);
    exempt.gauge(Vec::new(), f64::from(u8::from(p.memlock_exempt)));
    // Absent until the first time readiness is reached.
    let mut ttr = RenderedFamily::new(names::TIME_TO_READY_SECONDS);
    if let Some(t) = p.time_to_ready {
        ttr.gauge(Vec::new(), t);
    }
    let mut backend_up = RenderedFamily::new(names::BACKEND_UP);
    for b in &p.backends {
        backend_up.gauge(vec![pair("backend", &b.name)], f64::from(u8::from(b.up)));
    }
    let mut oldest = RenderedFamily::new(names::OLDEST_CALL_SECONDS);
    for (op, d) in &st.calls.in_flight {
        oldest.gauge(vec![pair("operation", op.as_str())], d.as_secs_f64());
    }
    // Only in a process told a pod directory it will not write.
    let mut pod_refused = RenderedFamily::new(names::POD_DIR_REFUSED);
    if let Some(r) = p.pod.as_ref().and_then(|p| p.refused) {
        pod_refused.gauge(vec![pair("reason", r.as_str())], 1.0);
    }
    // Only in a process whose interposer records nothing, and nobody else.
    let mut blind = RenderedFamily::new(names::INTERPOSER_BLIND);
    if let Some(r) = p.nixl.blind() {
        blind.gauge(vec![pair("reason", r.as_str())], 1.0);
    }
    // Appear on first use: most processes never wrap a foreign call.
    let mut instrumentation = RenderedFamily::new(names::INSTRUMENTATION_ERRORS_TOTAL);
    for (op, n) in &st.calls.instrumentation_errors {
        instrumentation.counter(vec![pair("operation", op.as_str())], *n);
    }
    // Appear on first use: one series a method with no record of its own
    // and status that happened (closed: the table's names, NIXL's statuses).
    let mut nixl_calls = RenderedFamily::new(names::NIXL_CALLS_TOTAL);
    for ((method, status), n) in &st.calls.nixl_calls {
        nixl_calls.counter(vec![pair("method", method), pair("status", status)], *n);
    }
    let mut families: Vec<MetricFamily> = [
        attempts,
        failures,
        last_failure,
        descriptors,
        duration,
        registered_descriptors,
        registered_bytes,
        deregistrations,
        deregistration_failures,
        group_registered,
        group_state,
        accepted_invalid,
        ready,
        nixl,
        nixl_failures,
        stuck,
        memlock,
        exempt,
        ttr,
        backend_up,
        instrumentation,
        nixl_calls,
        oldest,
        pod_refused,
        blind,
    ]
    .into_iter()
    .map(|o| o.mf)
    .collect();
    families.extend(super::xfer_families::render(st));
    families.extend(super::xfer_families::render_probe(st));
    families
}

/// Every metric the agent owns, plus the process collector. The families
/// of recorded state are rendered from the ledger at scrape time; this
/// holds what is not state: the build info, exemplars, the scrape cache.
#[derive(Clone)]
pub struct Metrics {
    registry: Registry,
    exemplars: Exemplars,
    /// The ledger rendered: its generation keys the exposition cache
    /// (a cached exposition is reused while it holds).
    ledger: Ledger,
    cache: Arc<Mutex<Vec<Cached>>>,
    /// A pod rank's own series, registered when it first publishes.
    rank: Arc<std::sync::OnceLock<RankSeries>>,
}

/// Registration failures by (group, backend, reason): how many.
pub type FailureCounts = [(String, String, String, f64)];

/// The series of a process that publishes a pod rank: what its slot's
/// previous process left, and its own writes that failed.
struct RankSeries {
    previous_failures: prometheus::GaugeVec,
    previous_end: prometheus::GaugeVec,
    publish_failures: prometheus::IntCounterVec,
}

/// One cached exposition.
struct Cached {
    format: super::exposition::Format,
    generation: u64,
    at: std::time::Instant,
    body: bytes::Bytes,
}

/// Longest a cached exposition is served: the `process_*` values (CPU,
/// memory, open fds) change without a write, so they are at most this old.
pub const CACHE_TTL: std::time::Duration = std::time::Duration::from_secs(1);

impl Metrics {
    /// The registry of one recording: the ledger's families, the build
    /// info, the trace counters and the process collector.
    #[doc(hidden)]
    pub fn new(build: &BuildInfo, ledger: &Ledger) -> Metrics {
        let r = Registry::new();
        r.register(Box::new(LedgerCollector::new(ledger.clone())))
            .expect("the ledger's families are registered once");
        let f = Family::get(names::BUILD_INFO);
        let build_info = IntGaugeVec::new(Opts::new(f.name, f.help), f.labels).expect("valid family");
        r.register(Box::new(build_info.clone())).expect("registered once");
        build_info
            .with_label_values(&[
                build.version,
                build.revision,
                &build.nixl_version,
                build.nixl_sys_version,
                build.role,
            ])
            .set(1);
        let traces = super::traces::counters();
        for c in [&traces.dropped, &traces.export_failures] {
            r.register(Box::new(c.clone()))
                .expect("trace counters register once per registry");
        }
        #[cfg(target_os = "linux")]
        r.register(Box::new(prometheus::process_collector::ProcessCollector::for_self()))
            .expect("process collector registers once");
        Metrics {
            registry: r,
            exemplars: Exemplars::default(),
            ledger: ledger.clone(),
            cache: Default::default(),
            rank: Default::default(),
        }
    }

    fn rank_series(&self) -> &RankSeries {
        self.rank.get_or_init(|| {
            let f = Family::get(names::PREVIOUS_RUN_FAILURES);
            let previous_failures =
                prometheus::GaugeVec::new(Opts::new(f.name, f.help), f.labels).expect("valid family");
            let f = Family::get(names::PREVIOUS_RUN_END);
            let previous_end = prometheus::GaugeVec::new(Opts::new(f.name, f.help), f.labels).expect("valid family");
            let f = Family::get(names::PUBLISH_FAILURES_TOTAL);
            let publish_failures =
                prometheus::IntCounterVec::new(Opts::new(f.name, f.help), f.labels).expect("valid family");
            for c in [
                Box::new(previous_failures.clone()) as Box<dyn prometheus::core::Collector>,
                Box::new(previous_end.clone()),
                Box::new(publish_failures.clone()),
            ] {
                self.registry
                    .register(c)
                    .expect("rank series register once per registry");
            }
            RankSeries {
                previous_failures,
                previous_end,
                publish_failures,
            }
        })
    }

    /// What the previous process of this rank's slot left: how and when it
    /// ended, its registration failures by (group, backend, reason); `None`: no
    /// previous process (the series are cleared).
    #[doc(hidden)]
    pub fn previous_run(&self, previous: Option<(&str, f64, &FailureCounts)>) {
        let s = self.rank_series();
        s.previous_failures.reset();
        s.previous_end.reset();
        if let Some((how, ended, failures)) = previous {
            s.previous_end.with_label_values(&[how]).set(ended);
            for (group, backend, reason, n) in failures {
                s.previous_failures.with_label_values(&[group, backend, reason]).set(*n);
            }
        }
        self.bump();
    }

    /// A write of this rank's file failed, of `cause`
    /// ([`names::PUBLISH_FAILURE_CAUSES`]).
    #[doc(hidden)]
    pub fn publish_failed(&self, cause: &'static str) {
        self.rank_series().publish_failures.with_label_values(&[cause]).inc();
        self.bump();
    }

    /// Something outside the ledger changed: a cached exposition is stale.
    fn bump(&self) {
        self.cache.lock().unwrap_or_else(|e| e.into_inner()).clear();
    }

    /// The metrics projection, run inside the ledger's write: the families
    /// are rendered from the state at scrape time, so all that is left is
    /// the exemplar of a traced attempt (the scrape cache keys on the
    /// ledger's own generation).
    #[doc(hidden)]
    pub fn on(&self, e: &Event<'_>, st: &State, a: &Applied) {
        if let (Event::Attempted(at), Some(g)) = (e, a.group.and_then(|id| st.groups.get(id))) {
            if let (Some(d), Some(_)) = (at.elapsed, &g.fixed) {
                self.exemplar(&Values::of(g), d.as_secs_f64());
            }
        }
    }

    /// Encodes every metric; OpenMetrics carries exemplars.
    pub fn encode(&self, format: super::exposition::Format) -> String {
        super::exposition::encode_with(&self.registry, format, Some(&self.exemplars))
    }

    /// What /metrics serves: the last encoding while nothing was recorded
    /// and it is younger than [`CACHE_TTL`], else a fresh one. A scrape then
    /// costs a clone of a reference-counted buffer, not an encode.
    #[doc(hidden)]
    pub fn exposition(&self, format: super::exposition::Format) -> bytes::Bytes {
        let generation = self.ledger.generation();
        let mut cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(c) = cache.iter().find(|c| c.format == format) {
            if c.generation == generation && c.at.elapsed() < CACHE_TTL {
                return c.body.clone();
            }
        }
        let body = bytes::Bytes::from(self.encode(format));
        cache.retain(|c| c.format != format);
        cache.push(Cached {
            format,
            generation,
            at: std::time::Instant::now(),
            body: body.clone(),
        });
        body
    }

    /// The ledger generation last recorded: unchanged means nothing to
    /// publish.
    #[doc(hidden)]
    pub fn generation(&self) -> u64 {
        self.ledger.generation()
    }

    /// The trace behind a transfer's duration observation.
    #[doc(hidden)]
    pub fn transfer_exemplar(&self, op: crate::model::XferOp, seconds: f64, trace: &str, span: &str) {
        let ex = Exemplar {
            trace_id: trace.to_string(),
            span_id: span.to_string(),
            value: seconds,
            unix_seconds: crate::ledger::counts::unix_now(),
        };
        self.exemplars
            .record(&[("op", op.as_str())], TRANSFER_DURATION_BUCKETS, seconds, ex);
    }

    /// The trace behind a duration observation, when one is sampled.
    fn exemplar(&self, l: &Values<'_>, seconds: f64) {
        let Some((trace, span)) = super::traces::current_ids() else {
            return;
        };
        let labels = [
            ("group", l.group),
            ("kind", l.kind),
            ("mem_type", l.mem_type),
            ("backend", l.backend),
            ("device", l.device.as_str()),
        ];
        let ex = Exemplar {
            trace_id: trace.to_string(),
            span_id: span.to_string(),
            value: seconds,
            unix_seconds: crate::ledger::counts::unix_now(),
        };
        self.exemplars.record(&labels, DURATION_BUCKETS, seconds, ex);
    }
}
