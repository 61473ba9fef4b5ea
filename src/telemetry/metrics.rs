//! The metric registry. Families are created from [`names::FAMILIES`] and every
//! series known in advance (per group, per reason, per backend) is created at
//! start so that it is 0 from the first scrape, not absent.
//!
//! Only [`super::events`] writes to it; the HTTP layer only encodes it.

use super::names::{self, Family, Reason};
use crate::model::{GroupLabels, GroupState};
use crate::record::Event;
use prometheus::{Gauge, GaugeVec, HistogramOpts, HistogramVec, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

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

    fn record(&self, labels: &[(&str, &str)], value: f64, ex: Exemplar) {
        let bucket = DURATION_BUCKETS
            .iter()
            .position(|b| value <= *b)
            .unwrap_or(DURATION_BUCKETS.len());
        let mut map = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let slots = map
            .entry(series_key(labels))
            .or_insert_with(|| vec![None; DURATION_BUCKETS.len() + 1]);
        slots[bucket] = Some(ex);
    }
}

/// Label pairs sorted by name, as the registry orders them.
fn series_key(labels: &[(&str, &str)]) -> String {
    let mut pairs: Vec<_> = labels.to_vec();
    pairs.sort_unstable();
    pairs.iter().map(|(k, v)| format!("{k}={v}\u{1f}")).collect()
}

/// The nixl-sys binding this build drives NIXL through (from Cargo.lock).
pub const NIXL_SYS_VERSION: &str = env!("NIXL_AGENT_NIXL_SYS_VERSION");

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
            revision: option_env!("NIXL_AGENT_REVISION").unwrap_or("unknown"),
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

/// Label tuples of the per-group families: every one carries the same
/// group labels (`names::GROUP_LABELS`), some one more (reason, state).
trait GroupSeries {
    fn group(&self) -> [&str; 5];
    fn with<'a>(&'a self, extra: &'a str) -> [&'a str; 6];
}

impl GroupSeries for GroupLabels {
    fn group(&self) -> [&str; 5] {
        [&self.group, &self.kind, self.mem_type, &self.backend, &self.device]
    }

    fn with<'a>(&'a self, extra: &'a str) -> [&'a str; 6] {
        [
            &self.group,
            &self.kind,
            self.mem_type,
            &self.backend,
            &self.device,
            extra,
        ]
    }
}

/// One group's series of the per-attempt families, resolved once: an
/// observed call then costs one map lookup, not a label hash per family.
struct Series {
    attempts: prometheus::IntCounter,
    descriptors: prometheus::Histogram,
    duration: prometheus::Histogram,
    registered_descriptors: IntGauge,
    registered_bytes: IntGauge,
    group_registered: IntGauge,
    deregistrations: prometheus::IntCounter,
    /// One gauge per `GroupState`, in `GroupState::ALL` order.
    state: Vec<IntGauge>,
    /// Observed groups have no lifecycle progress: their state follows
    /// their calls.
    observed: bool,
}

/// Every metric the agent owns, plus the process collector.
#[derive(Clone)]
pub struct Metrics {
    series: Arc<std::sync::RwLock<HashMap<String, Series>>>,
    registry: Registry,
    attempts: IntCounterVec,
    failures: IntCounterVec,
    descriptors: HistogramVec,
    duration: HistogramVec,
    registered_descriptors: IntGaugeVec,
    registered_bytes: IntGaugeVec,
    deregistrations: IntCounterVec,
    deregistration_failures: IntCounterVec,
    group_registered: IntGaugeVec,
    ready: IntGauge,
    nixl_available: IntGauge,
    backend_up: IntGaugeVec,
    last_failure: GaugeVec,
    memlock_limit: Gauge,
    memlock_exempt: IntGauge,
    group_state: IntGaugeVec,
    time_to_ready: GaugeVec,
    lifecycle_stuck: IntGauge,
    instrumentation_errors: IntCounterVec,
    accepted_invalid: IntCounterVec,
    exemplars: Exemplars,
    /// Bumped by every write; a cached exposition is reused while it holds.
    generation: Arc<std::sync::atomic::AtomicU64>,
    cache: Arc<Mutex<Vec<Cached>>>,
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

fn opts(f: &Family) -> Opts {
    Opts::new(f.name, f.help)
}

fn register<C: prometheus::core::Collector + Clone + 'static>(r: &Registry, c: C) -> C {
    r.register(Box::new(c.clone()))
        .expect("metric families are declared once");
    c
}

impl Metrics {
    /// Builds the registry; per-group series are created when a group is
    /// declared ([`Event::GroupDeclared`]).
    pub fn new(build: &BuildInfo) -> Metrics {
        let r = Registry::new();
        let counter = |name| {
            register(
                &r,
                IntCounterVec::new(opts(Family::get(name)), Family::get(name).labels).unwrap(),
            )
        };
        let int_gauge_vec = |name| {
            register(
                &r,
                IntGaugeVec::new(opts(Family::get(name)), Family::get(name).labels).unwrap(),
            )
        };
        let histogram = |name, buckets: &[f64]| {
            let f = Family::get(name);
            let o = HistogramOpts::new(f.name, f.help).buckets(buckets.to_vec());
            register(&r, HistogramVec::new(o, f.labels).unwrap())
        };
        let m = Metrics {
            attempts: counter(names::REGISTRATION_ATTEMPTS_TOTAL),
            failures: counter(names::REGISTRATION_FAILURES_TOTAL),
            descriptors: histogram(names::REGISTRATION_DESCRIPTORS, DESCRIPTOR_BUCKETS),
            duration: histogram(names::REGISTRATION_DURATION_SECONDS, DURATION_BUCKETS),
            registered_descriptors: int_gauge_vec(names::REGISTERED_DESCRIPTORS),
            registered_bytes: int_gauge_vec(names::REGISTERED_BYTES),
            deregistrations: counter(names::DEREGISTRATIONS_TOTAL),
            deregistration_failures: counter(names::DEREGISTRATION_FAILURES_TOTAL),
            group_registered: int_gauge_vec(names::GROUP_REGISTERED),
            ready: register(&r, IntGauge::with_opts(opts(Family::get(names::READY))).unwrap()),
            nixl_available: register(
                &r,
                IntGauge::with_opts(opts(Family::get(names::NIXL_AVAILABLE))).unwrap(),
            ),
            backend_up: int_gauge_vec(names::BACKEND_UP),
            last_failure: register(
                &r,
                GaugeVec::new(
                    opts(Family::get(names::LAST_FAILURE_TIMESTAMP_SECONDS)),
                    Family::get(names::LAST_FAILURE_TIMESTAMP_SECONDS).labels,
                )
                .unwrap(),
            ),
            memlock_limit: register(
                &r,
                Gauge::with_opts(opts(Family::get(names::MEMLOCK_LIMIT_BYTES))).unwrap(),
            ),
            memlock_exempt: register(
                &r,
                IntGauge::with_opts(opts(Family::get(names::MEMLOCK_EXEMPT))).unwrap(),
            ),
            group_state: int_gauge_vec(names::GROUP_STATE),
            // No labels, no sample until set: absent until first readiness.
            time_to_ready: register(
                &r,
                GaugeVec::new(opts(Family::get(names::TIME_TO_READY_SECONDS)), &[]).unwrap(),
            ),
            lifecycle_stuck: register(
                &r,
                IntGauge::with_opts(opts(Family::get(names::LIFECYCLE_STUCK))).unwrap(),
            ),
            // Appear on first use: most processes never wrap a foreign call.
            instrumentation_errors: counter(names::INSTRUMENTATION_ERRORS_TOTAL),
            accepted_invalid: counter(names::ACCEPTED_INVALID_TOTAL),
            registry: r.clone(),
            series: Default::default(),
            exemplars: Exemplars::default(),
            generation: Default::default(),
            cache: Default::default(),
        };
        int_gauge_vec(names::BUILD_INFO)
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
            m.registry
                .register(Box::new(c.clone()))
                .expect("trace counters register once per registry");
        }
        #[cfg(target_os = "linux")]
        m.registry
            .register(Box::new(prometheus::process_collector::ProcessCollector::for_self()))
            .expect("process collector registers once");

        m
    }

    /// The metrics subscriber: what each event changes in the registry.
    pub(crate) fn on(&self, e: &Event<'_>) {
        match e {
            Event::GroupDeclared(d) => self.declare(&d.labels, &d.backends, d.observed),
            Event::MemlockObserved { soft_limit, exempt } => {
                self.set_memlock_limit(*soft_limit);
                self.memlock_exempt.set(i64::from(*exempt));
            }
            Event::NixlLoaded(_) => self.set_nixl_available(true),
            Event::NixlUnavailable(_) => self.set_nixl_available(false),
            Event::BackendCreated { backend, .. } => self.set_backend_up(backend, true),
            Event::BackendFailed { backend, .. } => self.set_backend_up(backend, false),
            Event::Attempted(a) => {
                self.attempt(a.labels, a.descriptors, a.elapsed.map(|d| d.as_secs_f64()));
                if let Err(f) = a.outcome {
                    self.failure(a.labels, f.reason, unix_now());
                }
                // As the status board says: a group is as good as its last
                // attempt (a planned group's failed attempt rolled back; an
                // observed group's failed call leaves it incomplete).
                let registered = a.outcome.is_ok();
                self.registered(a.labels, a.holding.descriptors, a.holding.bytes, registered);
                self.observed_state(
                    a.labels,
                    if registered {
                        GroupState::Registered
                    } else {
                        GroupState::Failed
                    },
                );
            }
            Event::Deregistered {
                labels,
                failure,
                holding,
                ..
            } => {
                self.deregistered(labels, failure.map(|f| f.reason));
                let registered = holding.descriptors > 0;
                self.registered(labels, holding.descriptors, holding.bytes, registered);
                if !registered {
                    self.observed_state(labels, GroupState::Deregistered);
                }
            }
            Event::ReadinessChanged { ready, time_to_ready } => {
                self.set_ready(*ready);
                if let Some(t) = time_to_ready {
                    self.set_time_to_ready(t.as_secs_f64());
                }
            }
            Event::DrainStarted => self.set_ready(false),
            Event::Stuck { labels, .. } => {
                self.touch();
                self.lifecycle_stuck.set(1);
                if let Some(l) = labels {
                    self.failure(l, Reason::Timeout, unix_now());
                }
            }
            Event::Unstuck { .. } => {
                self.touch();
                self.lifecycle_stuck.set(0);
            }
            Event::LifecycleDied => {
                self.touch();
                self.lifecycle_stuck.set(1);
            }
            Event::AcceptedInvalid { labels, reason, .. } => {
                self.touch();
                self.accepted_invalid
                    .with_label_values(&labels.with(reason.as_str()))
                    .inc();
            }
            Event::InstrumentationFailed { operation, .. } => {
                self.touch();
                self.instrumentation_errors
                    .with_label_values(&[operation.as_str()])
                    .inc();
            }
            Event::Progress { groups, .. } => {
                self.touch();
                let map = self.series.read().unwrap_or_else(|e| e.into_inner());
                for g in groups.iter() {
                    if let Some(s) = map.get(g.group) {
                        set_state(s, g.state);
                    }
                }
            }
            Event::RetryScheduled { .. } | Event::DrainFinished { .. } => {}
        }
    }

    /// Creates a group's series at 0, so alerts and dashboards see them
    /// before the first attempt.
    fn declare(&self, l: &GroupLabels, backends: &[String], observed: bool) {
        self.touch();
        self.attempts.with_label_values(&l.group());
        self.descriptors.with_label_values(&l.group());
        self.duration.with_label_values(&l.group());
        // Failure series appear with the first failure (the rules count a
        // series that appears as an increase): pre-creating one per reason
        // would cost 36 series a group, most never used.
        let series = Series {
            attempts: self.attempts.with_label_values(&l.group()),
            descriptors: self.descriptors.with_label_values(&l.group()),
            duration: self.duration.with_label_values(&l.group()),
            registered_descriptors: self.registered_descriptors.with_label_values(&l.group()),
            registered_bytes: self.registered_bytes.with_label_values(&l.group()),
            group_registered: self.group_registered.with_label_values(&l.group()),
            deregistrations: self.deregistrations.with_label_values(&l.group()),
            state: GroupState::ALL
                .iter()
                .map(|st| self.group_state.with_label_values(&l.with(st.as_str())))
                .collect(),
            observed,
        };
        set_state(&series, GroupState::Pending);
        self.series
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .entry(l.group.clone())
            .or_insert(series);
        for b in backends {
            self.backend_up.with_label_values(&[b]);
        }
    }

    /// The registry, for the exposition encoders.
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// Encodes every metric; OpenMetrics carries exemplars.
    pub fn encode(&self, format: super::exposition::Format) -> String {
        super::exposition::encode_with(&self.registry, format, Some(&self.exemplars))
    }

    /// What /metrics serves: the last encoding while no metric was written
    /// and it is younger than [`CACHE_TTL`], else a fresh one. A scrape then
    /// costs a clone of a reference-counted buffer, not an encode.
    pub fn exposition(&self, format: super::exposition::Format) -> bytes::Bytes {
        use std::sync::atomic::Ordering;
        let generation = self.generation.load(Ordering::Acquire);
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

    /// Bumped by every write of a metric: unchanged means nothing to publish.
    pub fn generation(&self) -> u64 {
        self.generation.load(std::sync::atomic::Ordering::Acquire)
    }

    fn touch(&self) {
        self.generation.fetch_add(1, std::sync::atomic::Ordering::Release);
    }

    fn attempt(&self, l: &GroupLabels, descriptors: usize, seconds: Option<f64>) {
        self.touch();
        let observed = self.with_series(l, |s| {
            s.attempts.inc();
            s.descriptors.observe(descriptors as f64);
            // An attempt that never reached NIXL has no duration to observe.
            if let Some(seconds) = seconds {
                s.duration.observe(seconds);
            }
        });
        let (Some(seconds), true) = (seconds, observed) else {
            return;
        };
        if let Some((trace, span)) = super::traces::current_ids() {
            let labels = [
                ("group", l.group.as_str()),
                ("kind", &l.kind),
                ("mem_type", l.mem_type),
                ("backend", &l.backend),
                ("device", &l.device),
            ];
            let unix_seconds = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0.0, |d| d.as_secs_f64());
            let ex = Exemplar {
                trace_id: trace.to_string(),
                span_id: span.to_string(),
                value: seconds,
                unix_seconds,
            };
            self.exemplars.record(&labels, seconds, ex);
        }
    }

    fn failure(&self, l: &GroupLabels, reason: Reason, unix_seconds: f64) {
        self.touch();
        self.failures.with_label_values(&l.with(reason.as_str())).inc();
        self.last_failure
            .with_label_values(&l.with(reason.as_str()))
            .set(unix_seconds);
    }

    fn registered(&self, l: &GroupLabels, descriptors: usize, bytes: u64, registered: bool) {
        self.touch();
        self.with_series(l, |s| {
            s.registered_descriptors.set(descriptors as i64);
            s.registered_bytes.set(bytes as i64);
            s.group_registered.set(i64::from(registered));
        });
    }

    /// An observed group's state follows its calls (a planned group's
    /// follows the lifecycle's progress).
    fn observed_state(&self, l: &GroupLabels, state: GroupState) {
        self.with_series(l, |s| {
            if s.observed {
                set_state(s, state);
            }
        });
    }

    /// Runs `f` on the group's resolved series; `false` (and nothing
    /// recorded) for a group never declared, which no path produces.
    fn with_series(&self, l: &GroupLabels, f: impl FnOnce(&Series)) -> bool {
        let map = self.series.read().unwrap_or_else(|e| e.into_inner());
        match map.get(&l.group) {
            Some(s) => {
                f(s);
                true
            }
            None => false,
        }
    }

    fn deregistered(&self, l: &GroupLabels, failure: Option<Reason>) {
        self.touch();
        self.with_series(l, |s| s.deregistrations.inc());
        if let Some(reason) = failure {
            self.deregistration_failures
                .with_label_values(&l.with(reason.as_str()))
                .inc();
        }
    }

    fn set_ready(&self, ready: bool) {
        self.touch();
        self.ready.set(i64::from(ready));
    }

    fn set_nixl_available(&self, up: bool) {
        self.touch();
        self.nixl_available.set(i64::from(up));
    }

    fn set_backend_up(&self, backend: &str, up: bool) {
        self.touch();
        self.backend_up.with_label_values(&[backend]).set(i64::from(up));
    }

    fn set_memlock_limit(&self, bytes: Option<u64>) {
        self.touch();
        self.memlock_limit.set(bytes.map_or(f64::INFINITY, |b| b as f64));
    }

    fn set_time_to_ready(&self, seconds: f64) {
        self.touch();
        self.time_to_ready.with_label_values::<&str>(&[]).set(seconds);
    }
}

fn set_state(s: &Series, state: GroupState) {
    for (g, st) in s.state.iter().zip(GroupState::ALL) {
        g.set(i64::from(st == state));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{GroupFailure, Kind, MemType, Reason};
    use crate::record::{Attempt, GroupDecl, Holding};

    fn value(m: &Metrics, series: &str) -> Option<f64> {
        let text = m.encode(super::super::exposition::Format::Text);
        text.lines()
            .find(|l| l.starts_with(series))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
    }

    fn declared(observed: bool) -> (Metrics, GroupLabels) {
        let m = Metrics::new(&BuildInfo::current(None));
        let labels = GroupLabels::new("g", &Kind::Aux, MemType::Dram, &["UCX".to_string()], 0);
        m.on(&Event::GroupDeclared(&GroupDecl {
            labels: labels.clone(),
            backends: vec!["UCX".into()],
            device: 0,
            required: true,
            validate: false,
            planned: (0, 0),
            observed,
        }));
        (m, labels)
    }

    fn attempted(m: &Metrics, labels: &GroupLabels, outcome: Result<(), &GroupFailure>, held: usize) {
        m.on(&Event::Attempted(&Attempt {
            labels,
            attempt: 1,
            descriptors: held,
            bytes: held as u64,
            elapsed: None,
            outcome,
            holding: Holding {
                descriptors: held,
                bytes: held as u64,
            },
            blamed: None,
        }));
    }

    const REGISTERED: &str =
        r#"nixl_agent_group_registered{backend="UCX",device="0",group="g",kind="aux",mem_type="DRAM"}"#;

    #[test]
    fn a_group_of_no_regions_is_registered_after_its_successful_attempt() {
        let (m, l) = declared(true);
        assert_eq!(value(&m, REGISTERED), Some(0.0));
        attempted(&m, &l, Ok(()), 0);
        assert_eq!(value(&m, REGISTERED), Some(1.0));
        let state = |s: &str| {
            value(
                &m,
                &format!(
                    r#"nixl_agent_group_state{{backend="UCX",device="0",group="g",kind="aux",mem_type="DRAM",state="{s}"}}"#
                ),
            )
        };
        assert_eq!((state("registered"), state("pending")), (Some(1.0), Some(0.0)));
        let f = GroupFailure::whole(crate::model::Failure::new(Reason::ZeroLength, "x"));
        attempted(&m, &l, Err(&f), 0);
        assert_eq!(value(&m, REGISTERED), Some(0.0));
        assert_eq!((state("failed"), state("registered")), (Some(1.0), Some(0.0)));
    }

    #[test]
    fn time_to_ready_is_absent_until_ready_and_unlimited_memlock_is_inf() {
        let (m, _) = declared(false);
        assert_eq!(value(&m, "nixl_agent_time_to_ready_seconds"), None);
        m.on(&Event::ReadinessChanged {
            ready: true,
            time_to_ready: Some(std::time::Duration::from_millis(1500)),
        });
        assert_eq!(value(&m, "nixl_agent_time_to_ready_seconds"), Some(1.5));
        m.on(&Event::MemlockObserved {
            soft_limit: None,
            exempt: true,
        });
        assert_eq!(value(&m, "nixl_agent_memlock_limit_bytes"), Some(f64::INFINITY));
        assert_eq!(value(&m, "nixl_agent_memlock_exempt"), Some(1.0));
    }
}
