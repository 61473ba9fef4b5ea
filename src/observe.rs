//! Observe mode: the serving process keeps making its own registration
//! calls on its own NIXL agent (Dynamo's block manager does), and nixl-agent
//! records each one — attempt, descriptors, bytes, duration, reason — on the
//! same recording path as the lifecycle. The calls themselves are made by
//! `crate::nixl::observe` (the FFI room); this module holds what is pure:
//! groups that appear on first use, their cap and label rules, what each
//! group holds, readiness on expected groups.
//!
//! Architecture Invariant: an observed call returns exactly what NIXL
//! returned. Nothing nixl-agent does around it (validation, a refused group
//! name, a full group table) changes the call or its result.

use crate::config::{self, DEFAULT_BACKEND};
use crate::http::{self, AppState};
use crate::model::{Failure, GroupFailure, GroupLabels, Hooked, Kind, MemType, Phase, Region, RuntimeFacts};
use crate::nixl::SystemProbe;
use crate::record::{self, Capture, Event, GroupDecl, Holding, NoCapture, Recorder};
use crate::status::{NixlStatus, Status};
use crate::telemetry::metrics::BuildInfo;
use crate::telemetry::Metrics;
use crate::validate::{self, Rejection};
use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Calls on a group beyond the cap, or with a name that breaks the label
/// rules, are recorded under this group.
pub const OVERFLOW_GROUP: &str = "other";
/// Default cap on the number of observed groups.
pub const DEFAULT_MAX_GROUPS: usize = 16;

/// How observe mode records.
#[derive(Debug, Clone)]
pub struct ObserveSettings {
    /// Groups readiness waits for; each must have a successful registration
    /// (and not be fully deregistered). Empty: ready once NIXL was seen.
    pub expect: Vec<Expected>,
    /// Run nixl-agent's region checks before each call and record what they
    /// find (the call still goes to NIXL unchanged). Costs a read of
    /// `/proc/self/maps` per call, so off by default.
    pub validate: bool,
    /// Refuse a call that validation rejects before it reaches NIXL, with a
    /// message naming the region and the reason. Implies `validate`. Only
    /// front-ends that can raise their own error honour it (Python's
    /// `enforce` mode, through [`Observer::check`] / [`Observer::enforcing`]);
    /// [`Observer::register`] records the finding and never refuses.
    pub enforce: bool,
    /// Most groups recorded by name; further names go to [`OVERFLOW_GROUP`].
    pub max_groups: usize,
    /// The `backend` label of observed groups: the backends the caller's
    /// options select (nixl-sys does not let them be read back).
    pub backends: Vec<String>,
}

impl Default for ObserveSettings {
    fn default() -> Self {
        ObserveSettings {
            expect: Vec::new(),
            validate: false,
            enforce: false,
            max_groups: DEFAULT_MAX_GROUPS,
            backends: vec![DEFAULT_BACKEND.to_string()],
        }
    }
}

/// A group readiness waits for, declared before its first call.
#[derive(Debug, Clone)]
pub struct Expected {
    pub group: String,
    pub kind: Kind,
    pub mem_type: MemType,
    pub device: u32,
}

impl Expected {
    pub fn new(group: &str, kind: Kind, mem_type: MemType) -> Expected {
        Expected {
            group: group.to_string(),
            kind,
            mem_type,
            device: 0,
        }
    }
}

struct Group {
    labels: Arc<GroupLabels>,
    /// What each successful call registered and is not deregistered yet,
    /// by its first region and descriptor count: the bytes of each. A call's
    /// regions are deregistered together (NIXL's Python API hands back the
    /// list it registered), so nothing is tracked per region.
    live: HashMap<(Region, usize), Vec<u64>>,
    descriptors: usize,
    bytes: u64,
    attempts: u32,
}

impl Group {
    fn new(labels: Arc<GroupLabels>) -> Group {
        Group {
            labels,
            live: HashMap::new(),
            descriptors: 0,
            bytes: 0,
            attempts: 0,
        }
    }

    fn holding(&self) -> Holding {
        Holding {
            descriptors: self.descriptors,
            bytes: self.bytes,
        }
    }
}

/// Records registration calls the caller makes itself. `Send + Sync`: one
/// observer serves every thread of the process.
pub struct Observer {
    rec: Recorder,
    settings: ObserveSettings,
    groups: Mutex<HashMap<String, Group>>,
    overflow_logged: AtomicBool,
    seen_nixl: AtomicBool,
    probe: SystemProbe,
    router: axum::Router,
    capture: Option<Box<dyn Capture + Send + Sync>>,
    hook_failures: Mutex<std::collections::HashSet<Hooked>>,
}

/// One registration call of the caller's, described for recording.
#[derive(Debug, Clone, Copy)]
pub struct Call<'a> {
    pub group: &'a str,
    pub kind: &'a Kind,
    pub mem_type: MemType,
    /// The device of the call's regions (the CUDA ordinal; 0 for DRAM).
    pub device: u32,
    pub regions: &'a [Region],
}

/// How a call begun with [`Observer::begin`] ended.
#[derive(Debug)]
pub enum Outcome {
    /// NIXL registered it.
    Registered,
    /// NIXL (or the API in front of it) raised; classified.
    Failed(Failure),
    /// Validation refused it before NIXL saw it (`enforce`).
    Refused,
}

/// A call being recorded: its group and its attempt's span, capture window
/// and clock. Ended by [`Observer::end`] on the thread that began it.
#[must_use = "a call is recorded by Observer::end"]
pub struct Pending {
    labels: Arc<GroupLabels>,
    attempt: record::Attempted,
}

impl Observer {
    /// An observer with a recording of its own; serve it with
    /// [`Observer::router`] or encode [`Observer::metrics`].
    pub fn new(settings: ObserveSettings) -> Observer {
        let rec = Recorder::new(
            &BuildInfo::current(None).with_role(crate::telemetry::names::ROLE_OBSERVER),
            NixlStatus::default(),
            Instant::now(),
        );
        rec.emit(&Event::Progress {
            phase: Phase::Running,
            groups: &[],
        });
        Observer::with_recorder(rec, settings)
    }

    /// An observer recording into an existing recording (a lifecycle's).
    pub(crate) fn with_recorder(rec: Recorder, settings: ObserveSettings) -> Observer {
        let seen_nixl = rec.board().snapshot().nixl.available;
        let router = http::router(AppState {
            metrics: rec.metrics().clone(),
            status: rec.board().subscribe(),
        });
        let o = Observer {
            rec,
            settings,
            groups: Mutex::new(HashMap::new()),
            overflow_logged: AtomicBool::new(false),
            seen_nixl: AtomicBool::new(seen_nixl),
            probe: SystemProbe,
            router,
            capture: None,
            hook_failures: Mutex::new(Default::default()),
        };
        {
            let mut groups = o.groups.lock().unwrap_or_else(|e| e.into_inner());
            for e in &o.settings.expect {
                let name = o.group_name(&groups, &e.group, &e.kind);
                if groups.contains_key(name.as_ref()) {
                    continue;
                }
                let labels = o.declare(&name, &e.kind, e.mem_type, e.device, true);
                groups.insert(name.into_owned(), Group::new(labels));
            }
        }
        o
    }

    /// Attributes what NIXL/UCX print during each call to it (e.g. a
    /// `StderrTap`): the failure's reason is refined by those words and they
    /// are kept with it in /v1/status.
    pub fn with_capture(mut self, capture: Box<dyn Capture + Send + Sync>) -> Observer {
        self.capture = Some(capture);
        self
    }

    /// The caller failed to create its NIXL agent (no plugins, no library):
    /// NIXL is unavailable to it.
    /// Once an agent of the caller's worked, NIXL is available: a later
    /// agent that fails to start says nothing about it.
    pub fn nixl_unavailable(&self, failure: &Failure) {
        if self.seen_nixl.load(Ordering::Acquire) {
            return;
        }
        self.rec.emit(&Event::NixlUnavailable(failure));
    }

    /// A NIXL backend the caller created (or failed to create) on its agent.
    /// The name becomes the `backend` label when it follows the label rules,
    /// else it is not recorded.
    pub fn backend(&self, name: &str, result: Result<Duration, Failure>) {
        if config::validate_backends(&[name.to_string()], "backend").is_err() {
            return;
        }
        match &result {
            Ok(elapsed) => self.rec.emit(&Event::BackendCreated {
                backend: name,
                elapsed: *elapsed,
            }),
            Err(failure) => self.rec.emit(&Event::BackendFailed { backend: name, failure }),
        }
    }

    /// A failure inside a front-end's own wrapping of a call (never the
    /// call's): counted every time, logged the first time per operation.
    pub fn hook_failed(&self, operation: Hooked, message: &str) {
        let first = self
            .hook_failures
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(operation);
        self.rec.emit(&Event::InstrumentationFailed {
            operation,
            message,
            first,
        });
    }

    /// /metrics, /livez, /readyz, /v1/status for the caller's own server.
    pub fn router(&self) -> axum::Router {
        self.router.clone()
    }

    pub fn metrics(&self) -> &Metrics {
        self.rec.metrics()
    }

    pub fn status(&self) -> Status {
        self.rec.board().snapshot()
    }

    /// [`Observer::status`] for another thread (a `pod::publish::Publisher`).
    pub fn status_source(&self) -> impl Fn() -> Status + Send + 'static {
        let rec = self.rec.clone();
        move || rec.board().snapshot()
    }

    /// The first call on a NIXL agent tells that NIXL is up.
    /// `facts` (agent name, plugins) is only asked for the first time.
    pub fn saw_agent(&self, facts: impl FnOnce() -> (String, Vec<String>)) {
        if self.seen_nixl.load(Ordering::Acquire) || self.seen_nixl.swap(true, Ordering::AcqRel) {
            return;
        }
        let (agent, plugins) = facts();
        self.rec.nixl_loaded(&RuntimeFacts {
            plugins,
            agent,
            owned: false,
            library: None,
            version: None,
        });
    }

    fn declare(&self, name: &str, kind: &Kind, mem_type: MemType, device: u32, required: bool) -> Arc<GroupLabels> {
        let labels = Arc::new(GroupLabels::new(name, kind, mem_type, &self.settings.backends, device));
        self.rec.emit(&Event::GroupDeclared(&GroupDecl {
            labels: (*labels).clone(),
            backends: self.settings.backends.clone(),
            device,
            required,
            validate: self.settings.validate || self.settings.enforce,
            planned: (0, 0),
            observed: true,
        }));
        labels
    }

    /// The group a call is recorded under: its own name when the name
    /// follows the label rules and the cap is not reached, else
    /// [`OVERFLOW_GROUP`].
    fn group_name<'n>(&self, groups: &HashMap<String, Group>, name: &'n str, kind: &Kind) -> Cow<'n, str> {
        if groups.contains_key(name) {
            // Checked against the label rules when it was first seen.
            return Cow::Borrowed(name);
        }
        let valid =
            config::validate_group_words(name, kind.as_str(), &self.settings.backends, &|f| f.to_string()).is_ok();
        if valid && groups.len() < self.settings.max_groups {
            return Cow::Borrowed(name);
        }
        if !self.overflow_logged.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                group = OVERFLOW_GROUP,
                max_groups = self.settings.max_groups,
                "an observed group name is not a valid label or the group cap is reached; recording under `other`"
            );
        }
        Cow::Borrowed(OVERFLOW_GROUP)
    }

    /// Starts recording one registration call: declares its group on first
    /// use, opens the attempt's span and capture window, starts the clock.
    /// Follow with [`Observer::check`] (optional), the call itself, then
    /// [`Observer::end`] on the same thread.
    pub fn begin(&self, call: &Call<'_>) -> Pending {
        let (labels, attempt) = self.begin_group(call.group, call.kind, call.mem_type, call.device);
        let bytes = call.regions.iter().map(|r| r.len as u64).sum();
        let mut a = record::attempt(&labels, attempt, call.regions.len(), bytes, self.capture());
        // Timed like a lifecycle attempt: validation plus NIXL.
        a.start_clock();
        Pending { labels, attempt: a }
    }

    /// nixl-agent's region checks for the call, when validation is on:
    /// what they reject, or `None`. Takes no lock and touches nothing but
    /// the call's regions, so a front-end may run it without its
    /// interpreter lock.
    pub fn check(&self, call: &Call<'_>) -> Option<Rejection> {
        if !self.settings.validate && !self.settings.enforce {
            return None;
        }
        validate::validate_regions(call.mem_type, call.device, call.regions, &self.probe, 0).err()
    }

    /// Whether a call that [`Observer::check`] rejects is to be refused
    /// before NIXL sees it ([`ObserveSettings::enforce`]).
    pub fn enforcing(&self) -> bool {
        self.settings.enforce
    }

    /// Records how the call begun with [`Observer::begin`] ended. `finding`
    /// is what [`Observer::check`] said; it names the cause of a failure more
    /// precisely than NIXL's error code does.
    pub fn end(&self, pending: Pending, call: &Call<'_>, finding: Option<Rejection>, outcome: Outcome) {
        let Pending { labels, attempt } = pending;
        let outcome = match outcome {
            Outcome::Registered => Ok(()),
            Outcome::Refused => {
                let r = finding.clone().unwrap_or_else(|| Rejection {
                    reason: crate::model::Reason::Unknown,
                    region: None,
                    message: "refused".into(),
                });
                Err(GroupFailure {
                    reason: r.reason,
                    region: r.region,
                    message: format!("refused before NIXL (validation enforced): {}", r.message),
                    rolled_back: 0,
                    diagnostics: Vec::new(),
                })
            }
            Outcome::Failed(f) => {
                let (reason, region, message) = match &finding {
                    Some(r) => (r.reason, r.region, format!("{} (NIXL: {})", r.message, f.message)),
                    None => (f.reason, None, f.message),
                };
                Err(GroupFailure {
                    reason,
                    region,
                    message,
                    rolled_back: 0,
                    diagnostics: Vec::new(),
                })
            }
        };
        if let (Ok(()), Some(r)) = (&outcome, &finding) {
            self.rec.emit(&Event::AcceptedInvalid {
                labels: &labels,
                reason: r.reason,
                message: &r.message,
            });
        }
        let mut groups = self.groups.lock().unwrap_or_else(|e| e.into_inner());
        let holding = match groups.get_mut(&labels.group) {
            Some(g) => {
                if let (Ok(()), Some(first)) = (&outcome, call.regions.first()) {
                    let bytes = call.regions.iter().fold(0u64, |a, r| a.saturating_add(r.len as u64));
                    g.live.entry((*first, call.regions.len())).or_default().push(bytes);
                    g.bytes = g.bytes.saturating_add(bytes);
                    g.descriptors += call.regions.len();
                }
                g.holding()
            }
            None => Holding::default(),
        };
        drop(groups);
        let _ = attempt.finish(&self.rec, &labels, self.capture(), outcome, holding, |i| {
            call.regions.get(i).copied()
        });
    }

    /// Records one registration call around `call`, which performs it.
    /// `classify` maps the caller's error type into the reason vocabulary.
    /// Never refuses: `enforce` is for front-ends that can raise a message
    /// of their own.
    pub(crate) fn record_register<T, E>(
        &self,
        group: &str,
        kind: &Kind,
        mem_type: MemType,
        region: Region,
        call: impl FnOnce() -> Result<T, E>,
        classify: impl FnOnce(&E) -> Failure,
    ) -> Result<T, E> {
        let regions = [region];
        let c = Call {
            group,
            kind,
            mem_type,
            device: region.device,
            regions: &regions,
        };
        let pending = self.begin(&c);
        let finding = self.check(&c);
        let result = call();
        let outcome = match &result {
            Ok(_) => Outcome::Registered,
            Err(e) => Outcome::Failed(classify(e)),
        };
        self.end(pending, &c, finding, outcome);
        result
    }

    /// Records a deregistration call of what one registration call
    /// registered (`descriptors` regions from `first`), whichever group holds
    /// it. A list nobody recorded registering is left alone. `failure` is
    /// what the call raised, `elapsed` how long it took.
    pub fn deregistered(&self, first: Region, descriptors: usize, elapsed: Duration, failure: Option<Failure>) {
        let key = (first, descriptors);
        let mut groups = self.groups.lock().unwrap_or_else(|e| e.into_inner());
        let Some(g) = groups.values_mut().find(|g| g.live.contains_key(&key)) else {
            return;
        };
        Self::apply_deregister(&self.rec, g, key, elapsed, failure.as_ref());
    }

    /// Records one deregistration call around `call`.
    pub(crate) fn record_deregister<T, E>(
        &self,
        group: &str,
        kind: &Kind,
        region: Region,
        call: impl FnOnce() -> Result<T, E>,
        classify: impl FnOnce(&E) -> Failure,
    ) -> Result<T, E> {
        let t0 = Instant::now();
        let result = call();
        let elapsed = t0.elapsed();
        let mut groups = self.groups.lock().unwrap_or_else(|e| e.into_inner());
        let name = self.group_name(&groups, group, kind);
        let Some(g) = groups.get_mut(name.as_ref()) else {
            // Never seen registering: nothing of ours to update.
            return result;
        };
        let failure = result.as_ref().err().map(classify);
        Self::apply_deregister(&self.rec, g, (region, 1), elapsed, failure.as_ref());
        result
    }

    fn apply_deregister(
        rec: &Recorder,
        g: &mut Group,
        key: (Region, usize),
        elapsed: Duration,
        failure: Option<&Failure>,
    ) {
        let descriptors = key.1;
        if failure.is_none() {
            if let Some(calls) = g.live.get_mut(&key) {
                let bytes = calls.pop().unwrap_or(0);
                if calls.is_empty() {
                    g.live.remove(&key);
                }
                g.descriptors = g.descriptors.saturating_sub(descriptors);
                g.bytes = g.bytes.saturating_sub(bytes);
            }
        }
        rec.emit(&Event::Deregistered {
            labels: &g.labels,
            descriptors,
            failed: if failure.is_some() { descriptors } else { 0 },
            failure,
            elapsed,
            holding: g.holding(),
        });
    }

    fn capture(&self) -> &dyn Capture {
        match &self.capture {
            Some(c) => c.as_ref(),
            None => &NoCapture,
        }
    }

    /// The group's labels (declared on first use) and the attempt number.
    fn begin_group(&self, group: &str, kind: &Kind, mem_type: MemType, device: u32) -> (Arc<GroupLabels>, u32) {
        let mut groups = self.groups.lock().unwrap_or_else(|e| e.into_inner());
        let name = self.group_name(&groups, group, kind);
        if let Some(g) = groups.get_mut(name.as_ref()) {
            g.attempts = g.attempts.saturating_add(1);
            return (g.labels.clone(), g.attempts);
        }
        let kind = if name == OVERFLOW_GROUP {
            Kind::Custom(OVERFLOW_GROUP.into())
        } else {
            kind.clone()
        };
        let mut g = Group::new(self.declare(&name, &kind, mem_type, device, false));
        g.attempts = 1;
        let labels = g.labels.clone();
        groups.insert(name.into_owned(), g);
        (labels, 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_later_agent_failing_to_start_does_not_make_nixl_unavailable() {
        let o = Observer::new(ObserveSettings::default());
        o.saw_agent(|| ("a".into(), vec!["UCX".into()]));
        assert!(o.status().nixl.available);
        o.nixl_unavailable(&Failure::new(crate::model::Reason::NixlUnavailable, "no plugins"));
        assert!(o.status().nixl.available, "agent a still works");
        let fresh = Observer::new(ObserveSettings::default());
        fresh.nixl_unavailable(&Failure::new(crate::model::Reason::NixlUnavailable, "no plugins"));
        assert!(!fresh.status().nixl.available);
    }

    #[test]
    fn a_failed_call_leaves_an_observed_group_failed_in_status_and_metrics_alike() {
        let o = Observer::new(ObserveSettings {
            expect: vec![Expected::new("kv", Kind::Kv, MemType::Dram)],
            ..Default::default()
        });
        o.saw_agent(|| ("a".into(), vec![]));
        let regions = [Region::new(0x1000, 64, 0)];
        let call = Call {
            group: "kv",
            kind: &Kind::Kv,
            mem_type: MemType::Dram,
            device: 0,
            regions: &regions,
        };
        let p = o.begin(&call);
        o.end(p, &call, None, Outcome::Registered);
        assert!(o.status().ready);
        let p = o.begin(&call);
        o.end(
            p,
            &call,
            None,
            Outcome::Failed(Failure::new(crate::model::Reason::NixlBackendError, "x")),
        );
        let st = o.status();
        assert!(!st.ready);
        let text = o.metrics().encode(crate::telemetry::exposition::Format::Text);
        let registered = text
            .lines()
            .find(|l| l.starts_with("nixl_agent_group_registered{"))
            .unwrap();
        assert!(registered.ends_with(" 0"), "{registered}");
        assert_eq!(st.groups[0].descriptors, 1, "the first call's region is still held");
    }
}
