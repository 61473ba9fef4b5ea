//! Observe mode: the serving process keeps making its own registration
//! calls on its own NIXL agents (Dynamo's block manager does; so does every
//! Python framework through `nixl_agent_instrument`), and nixl-agent records
//! each one — attempt, descriptors, bytes, duration, reason — on the same
//! recording path as the lifecycle. The calls on nixl-sys are made by
//! `observed_agent` and `observed_xfer`; this module holds what is pure:
//! groups that appear on first use, their cap and label rules, which agent
//! a call is on. What each group and agent holds is the ledger's. Nothing
//! here changes a call or its result (ARCHITECTURE.md).

use crate::config::{self, DEFAULT_BACKEND};
use crate::event::{CallKind, Event, GroupDecl, GroupId, Leaves, Source};
use crate::ledger::Applied;
use crate::model::{AgentId, Failure, GroupFailure, GroupLabels, Hooked, Kind, MemType, Phase, Region, RuntimeFacts};
use crate::record::{self, Capture, NoCapture, Recorder};
use crate::status::{NixlStatus, Status};
use crate::telemetry::metrics::BuildInfo;
use crate::telemetry::Metrics;
use crate::validate::{self, MemoryProbe, Rejection};
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Calls on a group beyond the cap, or with a name that breaks the label
/// rules or belongs to a group of the lifecycle's plan, are recorded under
/// this group.
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
    /// find (the call still goes to NIXL unchanged). Whether an address is
    /// mapped is one `msync(MS_ASYNC)` per run of touching regions (no read
    /// of `/proc/self/maps`; `crate::nixl::SystemProbe`). Off in this
    /// default, which a Rust embedder gets; the Python instrumentation turns
    /// it on (`NIXL_AGENT_VALIDATE=record` unless told otherwise).
    pub validate: bool,
    /// Refuse a call that validation rejects before it reaches NIXL, with a
    /// message naming the region and the reason. Implies `validate`. Only
    /// front-ends that can raise their own error honour it (Python's
    /// `enforce` mode, through [`Observer::check`] / [`Observer::enforcing`]);
    /// `ObservedAgent::register` records the finding and never refuses.
    pub enforce: bool,
    /// Most groups recorded by name; further names go to [`OVERFLOW_GROUP`].
    pub max_groups: usize,
    /// The `backend` label of a call that does not say which backends it
    /// uses, on an agent whose backends were not reported.
    pub backends: Vec<String>,
    /// With no expected group: not ready until at least one call has
    /// registered (a serving process with no framework the defaults know,
    /// unless the operator said `NIXL_AGENT_EXPECT=none`).
    pub require_registration: bool,
    /// A deadline on every observed NIXL call: a call past it makes /livez
    /// fail and `nixl_agent_lifecycle_stuck` 1 until it returns (the
    /// recording's one watchdog thread looks: a lifecycle's, when the
    /// observer shares its recording). `None`: no deadline for this
    /// observer's calls.
    pub call_timeout: Option<Duration>,
    /// A transfer in flight longer than this counts as stalled (once); the
    /// transfer watchdog starts with the first transfer posted.
    pub transfer_stall_after: Duration,
    /// How long NIXL's refusals to create a request to a peer whose
    /// metadata has not arrived are `peer_pending` rather than errors,
    /// from the first one.
    pub peer_wait: Duration,
}

impl Default for ObserveSettings {
    fn default() -> Self {
        ObserveSettings {
            expect: Vec::new(),
            validate: false,
            enforce: false,
            max_groups: DEFAULT_MAX_GROUPS,
            backends: vec![DEFAULT_BACKEND.to_string()],
            require_registration: false,
            call_timeout: None,
            transfer_stall_after: xfer_calls::DEFAULT_STALL_AFTER,
            peer_wait: xfer_calls::DEFAULT_PEER_WAIT,
        }
    }
}

/// A group readiness waits for, declared before its first call. Its
/// memory type, device and backend labels come from that call.
#[derive(Debug, Clone)]
pub struct Expected {
    pub group: String,
    pub kind: Kind,
}

impl Expected {
    pub fn new(group: &str, kind: Kind) -> Expected {
        Expected {
            group: group.to_string(),
            kind,
        }
    }
}

/// A group name in use, with the labels of its last call (reused while the
/// next call carries the same).
struct Named {
    name: String,
    /// The id the ledger handed out for it.
    group: GroupId,
    labels: Arc<GroupLabels>,
    attempts: u32,
}

struct Inner {
    rec: Recorder,
    settings: ObserveSettings,
    /// The groups in use, searched by name (at most `max_groups` and
    /// `other`: a scan of short names beats hashing them on every call).
    names: Mutex<Vec<Named>>,
    overflow_logged: AtomicBool,
    seen_nixl: AtomicBool,
    probe: Box<dyn MemoryProbe + Send + Sync>,
    /// Set once, before or after the observer is shared.
    capture: std::sync::OnceLock<Box<dyn Capture + Send + Sync>>,
    hook_failures: Mutex<HashSet<Hooked>>,
    /// The backends each agent was seen creating (its calls' `backend`
    /// label when a call does not name them).
    agent_backends: Mutex<HashMap<AgentId, Arc<[String]>>>,
    /// Set once an agent reported a backend (then `agent_backends` is read).
    any_agent_backends: AtomicBool,
    /// Agents that created a backend whose name cannot be a label (not in
    /// `agent_backends`): what they created is not known whole.
    unlabelled_backends: Mutex<HashSet<AgentId>>,
    default_backends: Vec<String>,
    /// Set once the transfer watchdog was started.
    xfer_watch: AtomicBool,
    /// The transports of each peer's transfers, when learned.
    transports: transports::Learned,
    /// What a post is timed with, in the recording's nanoseconds.
    post_clock: post_clock::PostClock,
    /// The peers whose metadata NIXL has been waiting for.
    peer_wait: xfer_calls::PeerWait,
}

/// Records registration calls the caller makes itself. Cheap to clone and
/// `Send + Sync`: one observer serves every thread and agent of the process.
#[derive(Clone)]
pub struct Observer(Arc<Inner>);

/// One registration call of the caller's, described for recording.
#[derive(Debug, Clone, Copy)]
pub struct Call<'a> {
    /// The NIXL agent the call is made on.
    pub agent: AgentId,
    pub group: &'a str,
    pub kind: &'a Kind,
    pub mem_type: MemType,
    /// The device of the call's regions (the CUDA ordinal; 0 for DRAM).
    pub device: u32,
    /// The backends the call names, if it names them.
    pub backends: Option<&'a [String]>,
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
    group: GroupId,
    labels: Arc<GroupLabels>,
    attempt: record::Attempted,
    /// The call in flight, for the watchdog, until it ends.
    _mark: record::Mark,
}

/// An observed NIXL call in flight (a deregistration), for the watchdog:
/// the call is watched until this is dropped.
#[must_use = "the call is watched until the mark is dropped"]
pub struct CallMark {
    _mark: record::Mark,
    started: Instant,
}

impl CallMark {
    /// When the call was marked: the clock its duration is measured from,
    /// so a recorded call reads the clock once on each side.
    pub fn started(&self) -> Instant {
        self.started
    }
}

/// A NIXL call in flight on this thread (a post), marked without moving a
/// reference count; dropped on the thread that marked it.
#[must_use = "the call is watched until the mark is dropped"]
pub struct LocalCallMark {
    _mark: record::LocalMark,
    /// The recording's start, which the mark's nanoseconds count from.
    base: Instant,
    /// The post clock's reading when the call began.
    ticks: u64,
}

impl LocalCallMark {
    /// When the call was marked (see [`CallMark::started`]).
    pub fn started(&self) -> Instant {
        self.base + Duration::from_nanos(self.nanos())
    }

    /// The same, in nanoseconds since the recording's start.
    pub(crate) fn nanos(&self) -> u64 {
        self._mark.nanos()
    }
}

/// A group name an observer cannot take: a group of the lifecycle's plan
/// already has it.
#[derive(Debug, thiserror::Error)]
#[error(
    "observed group `{group}` would share its name with the lifecycle's planned group `{group}`; rename one of them"
)]
pub struct GroupConflict {
    pub group: String,
}

impl Observer {
    /// An observer with a recording of its own, validating with `probe`.
    #[cfg(test)]
    #[doc(hidden)]
    pub fn with_probe(settings: ObserveSettings, probe: Box<dyn MemoryProbe + Send + Sync>) -> Observer {
        Observer::with_runtime(settings, probe, NixlStatus::default())
    }

    /// The same, on the NIXL runtime `nixl` describes (the one the program
    /// loaded: library, version, plugin folder).
    #[doc(hidden)]
    pub fn with_runtime(
        settings: ObserveSettings,
        probe: Box<dyn MemoryProbe + Send + Sync>,
        nixl: NixlStatus,
    ) -> Observer {
        let rec = Recorder::new(
            &BuildInfo::current(nixl.version.as_deref()).with_role(crate::telemetry::names::ROLE_OBSERVER),
            nixl,
            Instant::now(),
        );
        rec.emit(&Event::Progress(crate::event::Progress {
            phase: Phase::Running,
            groups: &[],
        }));
        Observer::with_recorder(rec, settings, probe).expect("a fresh recording has no planned group")
    }

    /// An observer recording into an existing recording (a lifecycle's).
    /// Refused when an expected group has the name of a planned one.
    #[doc(hidden)]
    pub fn with_recorder(
        rec: Recorder,
        settings: ObserveSettings,
        probe: Box<dyn MemoryProbe + Send + Sync>,
    ) -> Result<Observer, GroupConflict> {
        for e in &settings.expect {
            if rec.ledger().source_of(&e.group) == Some(Source::Planned) {
                return Err(GroupConflict { group: e.group.clone() });
            }
        }
        let seen_nixl = rec.ledger().read(|st| st.nixl().available);
        let settings_backends = settings.backends.clone();
        // The monotonic clock at the recording's start: the same clock
        // read twice in a row, so off by the nanoseconds between the reads,
        // the same for every post.
        let since_start = rec.nanos(Instant::now()).unwrap_or(0);
        let post_clock =
            post_clock::PostClock::new(nixl_agent_sys::clock::monotonic_nanos().saturating_sub(since_start));
        let o = Observer(Arc::new(Inner {
            rec,
            settings,
            names: Mutex::new(Vec::new()),
            overflow_logged: AtomicBool::new(false),
            seen_nixl: AtomicBool::new(seen_nixl),
            probe,
            capture: std::sync::OnceLock::new(),
            hook_failures: Mutex::new(HashSet::new()),
            agent_backends: Mutex::new(HashMap::new()),
            any_agent_backends: AtomicBool::new(false),
            unlabelled_backends: Mutex::new(HashSet::new()),
            default_backends: settings_backends,
            xfer_watch: AtomicBool::new(false),
            transports: transports::Learned::default(),
            post_clock,
            peer_wait: xfer_calls::PeerWait::default(),
        }));
        for e in &o.0.settings.expect {
            o.declare(&e.group, &e.kind, None, true);
        }
        if o.0.settings.require_registration && o.0.settings.expect.is_empty() {
            o.0.rec.emit(&Event::AwaitRegistration);
        }
        // The recording's one watchdog (a lifecycle's, when shared) holds
        // this observer's calls to its deadline.
        if let Some(timeout) = o.0.settings.call_timeout {
            o.0.rec.watch_calls(timeout);
        }
        // The stall threshold is part of the recording from the start.
        o.0.rec.emit(&Event::XferTick(crate::event::XferTick {
            at: Instant::now(),
            stall_after: o.0.settings.transfer_stall_after,
        }));
        Ok(o)
    }

    /// Attributes what NIXL/UCX print during each call to it (e.g. a
    /// `StderrTap`): the failure's reason is refined by those words and they
    /// are kept with it in /v1/status. The first capture set stays.
    pub fn with_capture(self, capture: Box<dyn Capture + Send + Sync>) -> Observer {
        let _ = self.0.capture.set(capture);
        self
    }

    #[doc(hidden)]
    pub fn recorder(&self) -> &Recorder {
        &self.0.rec
    }

    /// The caller failed to create its NIXL agent (no plugins, no library):
    /// NIXL is unavailable to it.
    /// Once an agent of the caller's worked, NIXL is available: a later
    /// agent that fails to start says nothing about it.
    pub fn nixl_unavailable(&self, failure: &Failure) {
        if self.0.seen_nixl.load(Ordering::Acquire) {
            return;
        }
        self.0.rec.emit(&Event::NixlUnavailable(failure));
    }

    /// A NIXL backend the caller created (or failed to create) on `agent`.
    /// The name becomes the `backend` label of that agent's calls when it
    /// follows the label rules, else it is not recorded.
    pub fn backend(&self, agent: AgentId, name: &str, result: Result<Duration, Failure>) {
        if config::validate_backends(&[name.to_string()], "backend").is_err() {
            if result.is_ok() {
                self.0
                    .unlabelled_backends
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .insert(agent);
            }
            return;
        }
        match &result {
            Ok(elapsed) => {
                let mut map = self.0.agent_backends.lock().unwrap_or_else(|e| e.into_inner());
                let mut list: Vec<String> = map.get(&agent).map(|l| l.to_vec()).unwrap_or_default();
                if !list.iter().any(|b| b == name) {
                    list.push(name.to_string());
                }
                map.insert(agent, list.into());
                drop(map);
                self.0.any_agent_backends.store(true, Ordering::Release);
                self.0.rec.emit(&Event::BackendCreated(crate::event::BackendCreated {
                    backend: name,
                    elapsed: *elapsed,
                }))
            }
            Err(failure) => self.0.rec.emit(&Event::BackendFailed(crate::event::BackendFailed {
                backend: name,
                failure,
            })),
        };
    }

    /// The backend a request of `agent` can only have been made on: the one
    /// backend the agent created, when it created exactly one (a front-end
    /// then need not ask NIXL which it chose). `None` too when the agent
    /// also created one whose name could not be recorded.
    pub fn sole_backend(&self, agent: AgentId) -> Option<Arc<[String]>> {
        if self
            .0
            .unlabelled_backends
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .contains(&agent)
        {
            return None;
        }
        let map = self.0.agent_backends.lock().unwrap_or_else(|e| e.into_inner());
        map.get(&agent).filter(|l| l.len() == 1).cloned()
    }

    /// A failure inside a front-end's own wrapping of a call (never the
    /// call's): counted every time, logged the first time per operation.
    pub fn hook_failed(&self, operation: Hooked, message: &str) {
        let first = self
            .0
            .hook_failures
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(operation);
        self.0
            .rec
            .emit(&Event::InstrumentationFailed(crate::event::InstrumentationFailed {
                operation,
                message,
                first,
            }));
    }

    /// A NIXL call the recording gives no meaning of its own (a method a
    /// front-end hooks only to count it): its method's name in NIXL's API
    /// and NIXL's name of the status it returned, or
    /// [`crate::event::NixlCalled::THREW`]. Closed values only.
    pub fn nixl_called(&self, method: &'static str, status: &'static str) {
        self.0
            .rec
            .emit(&Event::NixlCalled(crate::event::NixlCalled { method, status }));
    }

    pub fn metrics(&self) -> &Metrics {
        self.0.rec.metrics()
    }

    /// The recorded state now (the snapshot /v1/status serves).
    pub fn status(&self) -> Arc<Status> {
        self.0.rec.ledger().snapshot()
    }

    /// A NIXL agent of the caller's, now followed: the first one also tells
    /// that NIXL is up (`facts`: its name and plugins, asked for once).
    pub fn saw_agent(&self, agent: AgentId, name: &str, facts: impl FnOnce() -> Vec<String>) {
        self.0.rec.emit(&Event::AgentSeen(crate::event::AgentSeen {
            agent,
            name,
            owned: false,
        }));
        if self.0.seen_nixl.load(Ordering::Acquire) || self.0.seen_nixl.swap(true, Ordering::AcqRel) {
            return;
        }
        self.0.rec.nixl_loaded(&RuntimeFacts {
            plugins: facts(),
            agent: name.to_string(),
            owned: false,
            library: None,
            version: None,
        });
    }

    /// That agent is gone: NIXL released what it held, and so does the
    /// recording (readiness follows).
    pub fn agent_released(&self, agent: AgentId) {
        self.0
            .agent_backends
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&agent);
        self.0
            .unlabelled_backends
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&agent);
        self.0
            .rec
            .emit(&Event::AgentReleased(crate::event::AgentReleased { agent }));
    }

    /// Declares a group: what the ledger said (its id, or that it refused
    /// the name: a planned group has it).
    fn declare(&self, name: &str, kind: &Kind, labels: Option<GroupLabels>, required: bool) -> Applied {
        self.0.rec.emit(&Event::GroupDeclared(&GroupDecl {
            group: name.to_string(),
            kind: kind.clone(),
            labels,
            backends: self.0.settings.backends.clone(),
            required,
            validate: self.0.settings.validate || self.0.settings.enforce,
            planned: (0, 0),
            source: Source::Observed,
        }))
    }

    /// Whether `name` may be recorded as its own group: it follows the label
    /// rules and the cap is not reached.
    fn admissible(&self, names: &[Named], name: &str, kind: &Kind) -> bool {
        config::validate_group_words(name, kind.as_str(), &self.0.settings.backends, &|f| f.to_string()).is_ok()
            && names.len() < self.0.settings.max_groups
    }

    fn overflow_warning(&self) {
        if !self.0.overflow_logged.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                group = OVERFLOW_GROUP,
                max_groups = self.0.settings.max_groups,
                "an observed group name is not a valid label or the group cap is reached; recording under `other`"
            );
        }
    }

    /// Runs `f` with the backends a call's `backend` label says: those it
    /// names, else those its agent was seen creating, else the settings'.
    /// No lock and no reference count when no agent reported a backend
    /// (a Rust embedder's calls).
    fn with_backends<T>(&self, call: &Call<'_>, f: impl FnOnce(&[String]) -> T) -> T {
        if let Some(b) = call
            .backends
            .filter(|b| !b.is_empty() && config::validate_backends(b, "backends").is_ok())
        {
            return f(b);
        }
        if !self.0.any_agent_backends.load(Ordering::Acquire) {
            return f(&self.0.default_backends);
        }
        let map = self.0.agent_backends.lock().unwrap_or_else(|e| e.into_inner());
        match map.get(&call.agent) {
            Some(list) if !list.is_empty() => f(list),
            _ => f(&self.0.default_backends),
        }
    }

    /// The group's labels for this call (declared on first use) and the
    /// attempt number.
    fn begin_group(&self, call: &Call<'_>) -> (Arc<GroupLabels>, u32, GroupId) {
        let mut names = self.0.names.lock().unwrap_or_else(|e| e.into_inner());
        let mut name = call.group;
        if !names.iter().any(|n| n.name == name) {
            let known = self.0.rec.ledger().source_of(name);
            if known == Some(Source::Planned) {
                tracing::error!(
                    group = name,
                    recorded_as = OVERFLOW_GROUP,
                    "an observed call names a group of the lifecycle's plan; recorded under `other` so the planned group's series stay the lifecycle's"
                );
                name = OVERFLOW_GROUP;
            } else if known.is_none() && !self.admissible(&names, name, call.kind) {
                self.overflow_warning();
                name = OVERFLOW_GROUP;
            }
        }
        if let Some(n) = names.iter_mut().find(|n| n.name == name) {
            n.attempts = n.attempts.saturating_add(1);
            self.with_backends(call, |backends| {
                let l = &n.labels;
                if l.mem_type != call.mem_type || l.device != call.device || !joined(&l.backend, backends) {
                    n.labels = Arc::new(GroupLabels::new(name, &l.kind, call.mem_type, backends, call.device));
                }
            });
            return (n.labels.clone(), n.attempts, n.group);
        }
        let kind = if name == OVERFLOW_GROUP {
            Kind::Custom(OVERFLOW_GROUP.into())
        } else {
            call.kind.clone()
        };
        let labels = self.with_backends(call, |backends| {
            Arc::new(GroupLabels::new(name, &kind, call.mem_type, backends, call.device))
        });
        // An expected group is declared already (without labels); its
        // first call fixes them.
        let declared = self.declare(name, &kind, Some((*labels).clone()), false);
        // Declaring always names a group: this one, or the one a refused
        // name belongs to.
        let group = declared.group.unwrap_or(GroupId(u32::MAX));
        names.push(Named {
            name: name.to_string(),
            group,
            labels: labels.clone(),
            attempts: 1,
        });
        (labels, 1, group)
    }

    /// Starts recording one registration call: declares its group on first
    /// use, opens the attempt's span and capture window, starts the clock.
    /// Follow with [`Observer::check`] (optional), the call itself, then
    /// [`Observer::end`] on the same thread.
    pub fn begin(&self, call: &Call<'_>) -> Pending {
        let (labels, attempt, group) = self.begin_group(call);
        let bytes = call.regions.iter().fold(0u64, |a, r| a.saturating_add(r.len as u64));
        let mut a = record::attempt(&labels, attempt, call.regions.len(), bytes, self.capture());
        // Timed like a lifecycle attempt: validation plus NIXL.
        let t0 = a.start_clock();
        let mark = self
            .0
            .rec
            .calls()
            .begin(CallKind::Register, Some(group), t0, self.0.settings.call_timeout);
        Pending {
            group,
            labels,
            attempt: a,
            _mark: mark,
        }
    }

    /// The device a call is recorded under: for VRAM, the first region's
    /// own ordinal as CUDA reports it for the pointer (no context touched);
    /// otherwise, or when CUDA cannot say, the descriptor's device id. A
    /// descriptor that names another device (a rank passed as a device id)
    /// is then a `device_mismatch` finding, not the group's label.
    pub fn device_of(&self, mem_type: MemType, regions: &[Region]) -> u32 {
        let Some(first) = regions.first() else { return 0 };
        if mem_type == MemType::Vram {
            if let Ok(p) = self.0.probe.device_pointer(first.addr, first.device) {
                if p.is_device {
                    return p.device;
                }
            }
        }
        first.device
    }

    /// nixl-agent's region checks for the call, when validation is on:
    /// what they reject, or `None`. Takes no lock and touches nothing but
    /// the call's regions, so a front-end may run it without its
    /// interpreter lock.
    pub fn check(&self, call: &Call<'_>) -> Option<Rejection> {
        if !self.0.settings.validate && !self.0.settings.enforce {
            return None;
        }
        validate::validate_regions(call.mem_type, call.device, call.regions, self.0.probe.as_ref(), 0).err()
    }

    /// Whether a call that [`Observer::check`] rejects is to be refused
    /// before NIXL sees it ([`ObserveSettings::enforce`]).
    pub fn enforcing(&self) -> bool {
        self.0.settings.enforce
    }

    /// Records how the call begun with [`Observer::begin`] ended. `finding`
    /// is what [`Observer::check`] said; it names the cause of a failure more
    /// precisely than NIXL's error code does.
    pub fn end(&self, pending: Pending, call: &Call<'_>, finding: Option<Rejection>, outcome: Outcome) {
        let Pending {
            group,
            labels,
            attempt,
            _mark,
        } = pending;
        drop(_mark);
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
            self.0.rec.emit(&Event::AcceptedInvalid(crate::event::AcceptedInvalid {
                group,
                labels: &labels,
                reason: r.reason,
                message: &r.message,
            }));
        }
        let leaves = Leaves::Call {
            first: call.regions.first().copied(),
        };
        let _ = attempt.finish(
            &self.0.rec,
            Some(group),
            call.agent,
            &labels,
            self.capture(),
            outcome,
            leaves,
            |i| call.regions.get(i).copied(),
        );
    }

    /// Records one registration call around `call`, which performs it.
    /// `classify` maps the caller's error type into the reason vocabulary.
    /// Never refuses: `enforce` is for front-ends that can raise a message
    /// of their own.
    #[doc(hidden)]
    pub fn record_register<T, E>(
        &self,
        c: &Call<'_>,
        call: impl FnOnce() -> Result<T, E>,
        classify: impl FnOnce(&E) -> Failure,
    ) -> Result<T, E> {
        let pending = self.begin(c);
        let finding = self.check(c);
        let result = call();
        let outcome = match &result {
            Ok(_) => Outcome::Registered,
            Err(e) => Outcome::Failed(classify(e)),
        };
        self.end(pending, c, finding, outcome);
        result
    }

    /// The interposer's verdict on this process's NIXL build (recording, or
    /// refused and why), for `/v1/status` and `/readyz?verbose`.
    pub fn interposed(&self, status: &crate::model::InterposerStatus, library: Option<&str>, version: Option<&str>) {
        self.0.rec.emit(&Event::Interposed(crate::event::Interposed {
            status,
            library,
            version,
        }));
    }

    /// Marks a deregistration call in flight (for the watchdog); make the
    /// call, then drop the mark and record it with
    /// [`Observer::deregistered`].
    pub fn deregistration_started(&self) -> CallMark {
        self.call_started(CallKind::Deregister)
    }

    /// Marks a NIXL call of `kind` in flight: the watchdog sees it, and past
    /// the call deadline `/livez` fails naming it, until the mark is dropped.
    pub fn call_started(&self, kind: CallKind) -> CallMark {
        let started = Instant::now();
        CallMark {
            _mark: self
                .0
                .rec
                .calls()
                .begin(kind, None, started, self.0.settings.call_timeout),
            started,
        }
    }

    /// [`Observer::call_started`] for a call that returns on this thread:
    /// the data path's per-call mark (a post), cheaper to make.
    pub fn call_started_here(&self, kind: CallKind) -> LocalCallMark {
        let ticks = self.0.post_clock.now();
        let at = self.0.post_clock.nanos_at(ticks);
        LocalCallMark {
            _mark: self.0.rec.calls().begin_here(kind, at, self.0.settings.call_timeout),
            base: self.0.rec.started(),
            ticks,
        }
    }

    /// Records a deregistration call of what one registration call on
    /// `agent` registered (`descriptors` regions from `first`). A list
    /// nobody recorded registering on that agent is left alone. `failure`
    /// is what the call raised, `elapsed` how long it took.
    pub fn deregistered(
        &self,
        agent: AgentId,
        first: Region,
        descriptors: usize,
        elapsed: Duration,
        failure: Option<Failure>,
    ) {
        self.0
            .rec
            .emit(&Event::CallDeregistered(crate::event::CallDeregistered {
                agent,
                first,
                descriptors,
                failure: failure.as_ref(),
                elapsed,
            }));
    }

    /// After a failed NIXL call, before [`Observer::end`]: waits (briefly)
    /// until what NIXL printed during the call can be attributed, so that
    /// `end` itself waits no more. A front-end holding an interpreter lock
    /// calls this without it.
    pub fn settle_capture(&self) {
        self.capture().settle();
    }

    fn capture(&self) -> &dyn Capture {
        match self.0.capture.get() {
            Some(c) => c.as_ref(),
            None => &NoCapture,
        }
    }
}

/// Whether `label` is `backends` joined with `+` (without joining them).
fn joined(label: &str, backends: &[String]) -> bool {
    let mut parts = label.split('+');
    backends.iter().all(|b| parts.next() == Some(b.as_str())) && parts.next().is_none()
}

mod observed_agent;
mod observed_xfer;
mod post_clock;
mod serve;
#[cfg(test)]
mod tests;
mod transports;
mod xfer_calls;

pub use observed_agent::{ObservedAgent, ObservedRegistration};
pub use observed_xfer::ObservedXfer;

pub use crate::model::Transfer;
pub use xfer_calls::{XferPoll, DEFAULT_PEER_WAIT, DEFAULT_STALL_AFTER};
