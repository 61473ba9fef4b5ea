//! The metric registry, a projection of the ledger. Families are created
//! from [`names::FAMILIES`]; a group's series are created when the group is
//! declared, so they are 0 from the first scrape, not absent.
//!
//! Gauges are copied from the ledger's state — never derived from an event
//! — inside the ledger's write ([`Metrics::on`] runs there), so a gauge and
//! /v1/status always say the same; counters and histograms count the
//! event in that same write. The HTTP layer only encodes the registry.

use super::names::{self, Family};
use crate::event::Event;
use crate::ledger::{Applied, Ledger, State};
use crate::model::{GroupLabels, GroupState};
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

/// One group's series, resolved once under the labels the ledger holds for
/// it: an observed call then costs an index, not a label hash per family.
struct Series {
    labels: Arc<GroupLabels>,
    /// The per-attempt families exist once the labels are fixed (a group
    /// expected before its first call has only its gauges until then).
    counted: Option<Counted>,
    registered_descriptors: IntGauge,
    registered_bytes: IntGauge,
    group_registered: IntGauge,
    /// One gauge per `GroupState`, in `GroupState::ALL` order.
    state: Vec<IntGauge>,
}

struct Counted {
    attempts: prometheus::IntCounter,
    descriptors: prometheus::Histogram,
    duration: prometheus::Histogram,
    deregistrations: prometheus::IntCounter,
}

/// Every metric the agent owns, plus the process collector.
#[derive(Clone)]
pub struct Metrics {
    /// By the ledger's group index.
    series: Arc<Mutex<Vec<Option<Series>>>>,
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
    pub(crate) fn new(build: &BuildInfo) -> Metrics {
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

    /// The metrics projection, run inside the ledger's write: counts what
    /// the event counts, then copies the gauges the event touched from the
    /// state.
    pub(crate) fn on(&self, e: &Event<'_>, st: &State, a: &Applied) {
        self.touch();
        let mut all_groups = false;
        match e {
            Event::GroupDeclared(d) => {
                for b in &d.backends {
                    self.backend_up.with_label_values(&[b]);
                }
            }
            Event::MemlockObserved { exempt, .. } => self.memlock_exempt.set(i64::from(*exempt)),
            Event::Attempted(at) => {
                let Some(i) = a.group else { return };
                let mut series = self.series.lock().unwrap_or_else(|e| e.into_inner());
                let s = self.series_of(&mut series, st, i, a.labeled);
                if let Some(c) = &s.counted {
                    c.attempts.inc();
                    c.descriptors.observe(at.descriptors as f64);
                    // An attempt that never reached NIXL has no duration to observe.
                    if let Some(d) = at.elapsed {
                        c.duration.observe(d.as_secs_f64());
                        self.exemplar(&s.labels, d.as_secs_f64());
                    }
                }
                if let Err(f) = at.outcome {
                    let l = s.labels.with(f.reason.as_str());
                    self.failures.with_label_values(&l).inc();
                    self.last_failure.with_label_values(&l).set(unix_now());
                }
            }
            Event::Deregistered { failure, .. } | Event::CallDeregistered { failure, .. } => {
                let Some(i) = a.group else { return };
                let mut series = self.series.lock().unwrap_or_else(|e| e.into_inner());
                let s = self.series_of(&mut series, st, i, false);
                if let Some(c) = &s.counted {
                    c.deregistrations.inc();
                }
                if let Some(f) = failure {
                    self.deregistration_failures
                        .with_label_values(&s.labels.with(f.reason.as_str()))
                        .inc();
                }
            }
            Event::AcceptedInvalid { reason, .. } => {
                if let Some(i) = a.group {
                    self.accepted_invalid
                        .with_label_values(&st.labels(i).with(reason.as_str()))
                        .inc();
                }
            }
            Event::InstrumentationFailed { operation, .. } => {
                self.instrumentation_errors
                    .with_label_values(&[operation.as_str()])
                    .inc();
            }
            Event::Progress { .. } | Event::AgentReleased { .. } | Event::DrainStarted => all_groups = true,
            _ => {}
        }
        if all_groups {
            self.project_groups(st, 0..st.meta.len());
        } else if let Some(i) = a.group {
            self.project_groups(st, i..i + 1);
        }
        self.project(st, a);
    }

    /// Copies the process-wide gauges from the state.
    pub(crate) fn project(&self, st: &State, a: &Applied) {
        self.touch();
        let s = &st.status;
        self.ready.set(i64::from(s.ready));
        self.nixl_available.set(i64::from(s.nixl.available));
        self.lifecycle_stuck
            .set(i64::from(s.stuck.is_some() || s.lifecycle_dead));
        self.memlock_limit
            .set(s.memlock_limit_bytes.map_or(f64::INFINITY, |b| b as f64));
        // Label lookups only when what they show can have changed.
        if let (Some(_), Some(t)) = (a.time_to_ready, s.time_to_ready_seconds) {
            self.time_to_ready.with_label_values::<&str>(&[]).set(t);
        }
        if a.backends {
            for b in &s.backends {
                self.backend_up.with_label_values(&[&b.name]).set(i64::from(b.up));
            }
        }
    }

    /// Every gauge from the ledger's current state (a fresh registry).
    pub(crate) fn project_all(&self, ledger: &Ledger) {
        ledger.read(|st| {
            self.project_groups(st, 0..st.meta.len());
            self.project(
                st,
                &Applied {
                    backends: true,
                    ..Applied::default()
                },
            );
        });
    }

    /// Group `i`'s series, created (or moved from placeholder labels to the
    /// fixed ones) as the ledger's labels say.
    fn series_of<'s>(&self, series: &'s mut Vec<Option<Series>>, st: &State, i: usize, relabel: bool) -> &'s Series {
        if series.len() <= i {
            series.resize_with(i + 1, || None);
        }
        let labels = st.labels(i);
        let stale = series[i]
            .as_ref()
            .is_some_and(|s| relabel || !Arc::ptr_eq(&s.labels, labels));
        if stale {
            if let Some(old) = series[i].take() {
                self.remove(&old);
            }
        }
        if series[i].is_none() {
            let fixed = st.meta[i].labels.is_some();
            series[i] = Some(self.create(labels.clone(), fixed));
        }
        series[i].as_ref().expect("created above")
    }

    fn create(&self, l: Arc<GroupLabels>, fixed: bool) -> Series {
        // Failure series appear with the first failure (the rules count a
        // series that appears as an increase): pre-creating one per reason
        // would cost 36 series a group, most never used.
        let counted = fixed.then(|| Counted {
            attempts: self.attempts.with_label_values(&l.group()),
            descriptors: self.descriptors.with_label_values(&l.group()),
            duration: self.duration.with_label_values(&l.group()),
            deregistrations: self.deregistrations.with_label_values(&l.group()),
        });
        Series {
            counted,
            registered_descriptors: self.registered_descriptors.with_label_values(&l.group()),
            registered_bytes: self.registered_bytes.with_label_values(&l.group()),
            group_registered: self.group_registered.with_label_values(&l.group()),
            state: GroupState::ALL
                .iter()
                .map(|st| self.group_state.with_label_values(&l.with(st.as_str())))
                .collect(),
            labels: l,
        }
    }

    /// Removes a group's placeholder series (its labels were fixed).
    fn remove(&self, s: &Series) {
        let l = &s.labels;
        let _ = self.registered_descriptors.remove_label_values(&l.group());
        let _ = self.registered_bytes.remove_label_values(&l.group());
        let _ = self.group_registered.remove_label_values(&l.group());
        for st in GroupState::ALL {
            let _ = self.group_state.remove_label_values(&l.with(st.as_str()));
        }
        if s.counted.is_some() {
            let _ = self.attempts.remove_label_values(&l.group());
            let _ = self.descriptors.remove_label_values(&l.group());
            let _ = self.duration.remove_label_values(&l.group());
            let _ = self.deregistrations.remove_label_values(&l.group());
        }
    }

    /// Copies groups' gauges from the state.
    fn project_groups(&self, st: &State, range: std::ops::Range<usize>) {
        let mut series = self.series.lock().unwrap_or_else(|e| e.into_inner());
        for i in range {
            let s = self.series_of(&mut series, st, i, false);
            let g = &st.status.groups[i];
            s.registered_descriptors.set(g.descriptors as i64);
            s.registered_bytes.set(g.bytes as i64);
            s.group_registered.set(i64::from(g.state == GroupState::Registered));
            for (gauge, state) in s.state.iter().zip(GroupState::ALL) {
                gauge.set(i64::from(state == g.state));
            }
        }
    }

    /// Encodes every metric; OpenMetrics carries exemplars.
    pub fn encode(&self, format: super::exposition::Format) -> String {
        super::exposition::encode_with(&self.registry, format, Some(&self.exemplars))
    }

    /// What /metrics serves: the last encoding while no metric was written
    /// and it is younger than [`CACHE_TTL`], else a fresh one. A scrape then
    /// costs a clone of a reference-counted buffer, not an encode.
    pub(crate) fn exposition(&self, format: super::exposition::Format) -> bytes::Bytes {
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
    pub(crate) fn generation(&self) -> u64 {
        self.generation.load(std::sync::atomic::Ordering::Acquire)
    }

    fn touch(&self) {
        self.generation.fetch_add(1, std::sync::atomic::Ordering::Release);
    }

    /// The trace behind a duration observation, when one is sampled.
    fn exemplar(&self, l: &GroupLabels, seconds: f64) {
        let Some((trace, span)) = super::traces::current_ids() else {
            return;
        };
        let labels = [
            ("group", l.group.as_str()),
            ("kind", &l.kind),
            ("mem_type", l.mem_type),
            ("backend", &l.backend),
            ("device", &l.device),
        ];
        let ex = Exemplar {
            trace_id: trace.to_string(),
            span_id: span.to_string(),
            value: seconds,
            unix_seconds: unix_now(),
        };
        self.exemplars.record(&labels, seconds, ex);
    }
}
