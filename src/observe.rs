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
use crate::model::{Failure, GroupFailure, GroupLabels, Kind, MemType, Phase, Region, RuntimeFacts};
use crate::nixl::SystemProbe;
use crate::record::{self, Event, GroupDecl, Holding, NoCapture, Recorder};
use crate::status::{NixlStatus, Status};
use crate::telemetry::metrics::BuildInfo;
use crate::telemetry::Metrics;
use crate::validate;
use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

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
    /// What is registered now, with how many registrations each.
    live: HashMap<Region, u32>,
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
}

impl Observer {
    /// An observer with a recording of its own; serve it with
    /// [`Observer::router`] or encode [`Observer::metrics`].
    pub fn new(settings: ObserveSettings) -> Observer {
        let rec = Recorder::new(&BuildInfo::current(None), NixlStatus::default(), Instant::now());
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

    /// The first call on a NIXL agent tells that NIXL is up.
    /// `facts` (agent name, plugins) is only asked for the first time.
    pub(crate) fn saw_agent(&self, facts: impl FnOnce() -> (String, Vec<String>)) {
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
            validate: self.settings.validate,
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

    /// Records one registration call around `call`, which performs it.
    /// `classify` maps the caller's error type into the reason vocabulary.
    pub(crate) fn record_register<T, E>(
        &self,
        group: &str,
        kind: &Kind,
        mem_type: MemType,
        region: Region,
        call: impl FnOnce() -> Result<T, E>,
        classify: impl FnOnce(&E) -> Failure,
    ) -> Result<T, E> {
        let (labels, attempt) = self.begin(group, kind, mem_type, region.device);
        let mut a = record::attempt(&labels, attempt, 1, region.len as u64, &NoCapture);
        // Timed like a lifecycle attempt: validation plus NIXL.
        a.start_clock();
        let finding = if self.settings.validate {
            validate::validate_regions(mem_type, region.device, &[region], &self.probe, 0).err()
        } else {
            None
        };
        let result = call();
        let outcome = match &result {
            Ok(_) => Ok(()),
            Err(e) => {
                let f = classify(e);
                // Validation names the cause more precisely than NIXL's code.
                let (reason, message) = match &finding {
                    Some(r) => (r.reason, format!("{} (NIXL: {})", r.message, f.message)),
                    None => (f.reason, f.message),
                };
                Err(GroupFailure {
                    reason,
                    region: Some(0),
                    message,
                    rolled_back: 0,
                    diagnostics: Vec::new(),
                })
            }
        };
        if let (Ok(()), Some(r)) = (&outcome, &finding) {
            tracing::warn!(group = %labels.group, reason = r.reason.as_str(), finding = %r.message, "NIXL accepted a region that validation rejects");
        }
        let mut groups = self.groups.lock().unwrap_or_else(|e| e.into_inner());
        let holding = match groups.get_mut(&labels.group) {
            Some(g) => {
                if outcome.is_ok() {
                    *g.live.entry(region).or_insert(0) += 1;
                    g.descriptors += 1;
                    g.bytes = g.bytes.saturating_add(region.len as u64);
                }
                g.holding()
            }
            None => Holding::default(),
        };
        let _ = a.finish(&self.rec, &labels, &NoCapture, outcome, holding, |_| Some(region));
        result
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
        if failure.is_none() {
            if let Some(n) = g.live.get_mut(&region) {
                *n -= 1;
                if *n == 0 {
                    g.live.remove(&region);
                }
                g.descriptors -= 1;
                g.bytes = g.bytes.saturating_sub(region.len as u64);
            }
        }
        self.rec.emit(&Event::Deregistered {
            labels: &g.labels,
            descriptors: 1,
            failed: usize::from(failure.is_some()),
            failure: failure.as_ref(),
            elapsed,
            holding: g.holding(),
        });
        result
    }

    /// The group's labels (declared on first use) and the attempt number.
    fn begin(&self, group: &str, kind: &Kind, mem_type: MemType, device: u32) -> (Arc<GroupLabels>, u32) {
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
