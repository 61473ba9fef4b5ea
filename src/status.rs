//! The recorded state that HTTP handlers read: a snapshot published through a
//! `tokio::sync::watch` channel, never computed on request. The board is a
//! subscriber of the recorder: every change comes from an event.

use crate::model::Reason;
use crate::model::{GroupState, Phase};
use crate::record::{Event, GroupDecl};
use crate::telemetry::names;
use serde::Serialize;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::watch;

/// What the agent knows about the NIXL runtime.
#[derive(Debug, Clone, Default, Serialize)]
pub struct NixlStatus {
    pub available: bool,
    /// Full path of the libnixl_capi.so that was loaded.
    pub library: Option<String>,
    /// Which discovery step found it (flag, env, wheel, opt, loader).
    pub found_by: Option<String>,
    pub version: Option<String>,
    /// The nixl-sys binding compiled in; it should match `version`.
    pub binding_version: &'static str,
    pub plugin_dir: Option<String>,
    pub plugins: Vec<String>,
    /// The NIXL agent registrations are made on.
    pub agent: Option<String>,
    /// `nixl-agent` when it created that agent, `caller` when it is the
    /// serving process's own.
    pub agent_owner: Option<&'static str>,
    /// The CUDA runtime preloaded for UCX's CUDA transports (GPU hosts).
    pub cudart: Option<String>,
    /// Where the agent looked, when nothing was found.
    pub searched: Vec<String>,
    pub reason: Option<Reason>,
    pub error: Option<String>,
}

/// One backend.
#[derive(Debug, Clone, Serialize)]
pub struct BackendStatus {
    pub name: String,
    pub up: bool,
    pub reason: Option<Reason>,
    pub error: Option<String>,
}

/// One group.
#[derive(Debug, Clone, Serialize)]
pub struct GroupStatus {
    pub name: String,
    pub kind: String,
    pub mem_type: &'static str,
    pub device: u32,
    pub backends: Vec<String>,
    pub required: bool,
    pub validate: bool,
    /// Observed (the caller registers; nixl-agent records) or planned.
    pub observed: bool,
    pub state: GroupState,
    /// Descriptors and bytes registered now.
    pub descriptors: usize,
    pub bytes: u64,
    /// Descriptors and bytes the plan asks for.
    pub planned_descriptors: usize,
    pub planned_bytes: u64,
    pub attempts: u32,
    pub consecutive_failures: u32,
    pub last_reason: Option<Reason>,
    pub last_error: Option<String>,
    /// What NIXL/UCX printed during the last failed attempt.
    pub last_diagnostics: Vec<String>,
    /// Index of the region that failed the last attempt, if one was to blame.
    pub failed_region: Option<usize>,
    /// What validation found in the last call NIXL accepted anyway
    /// (observe mode): `reason: message`.
    pub last_accepted_invalid: Option<String>,
    pub next_retry_seconds: Option<f64>,
}

/// A NIXL call past its deadline.
#[derive(Debug, Clone, Serialize)]
pub struct Stuck {
    pub operation: String,
    pub group: Option<String>,
    /// How long it had run when the deadline passed.
    pub seconds: f64,
}

/// The whole snapshot served at /v1/status.
#[derive(Debug, Clone, Serialize)]
pub struct Status {
    pub version: &'static str,
    pub phase: Phase,
    pub ready: bool,
    pub time_to_ready_seconds: Option<f64>,
    pub memlock_limit_bytes: Option<u64>,
    pub nixl: NixlStatus,
    /// A lifecycle NIXL call past `nixl_call_timeout` (/livez fails).
    pub stuck: Option<Stuck>,
    /// The lifecycle thread died (/livez fails).
    pub lifecycle_dead: bool,
    pub backends: Vec<BackendStatus>,
    pub groups: Vec<GroupStatus>,
}

/// One line of /readyz?verbose.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Check {
    pub name: String,
    /// `None` when the check passes, else the reason word shown.
    pub failure: Option<String>,
}

impl Status {
    /// The snapshot before anything has run: no group, no backend.
    pub fn empty() -> Status {
        Status {
            version: env!("CARGO_PKG_VERSION"),
            phase: Phase::Starting,
            ready: false,
            time_to_ready_seconds: None,
            memlock_limit_bytes: None,
            nixl: NixlStatus::default(),
            stuck: None,
            lifecycle_dead: false,
            backends: Vec::new(),
            groups: Vec::new(),
        }
    }

    fn declare(&mut self, d: &GroupDecl) {
        for b in &d.backends {
            if !self.backends.iter().any(|s| &s.name == b) {
                self.backends.push(BackendStatus {
                    name: b.clone(),
                    up: false,
                    reason: None,
                    error: None,
                });
            }
        }
        if self.groups.iter().any(|g| g.name == d.labels.group) {
            return;
        }
        self.groups.push(GroupStatus {
            name: d.labels.group.clone(),
            kind: d.labels.kind.clone(),
            mem_type: d.labels.mem_type,
            device: d.device,
            backends: d.backends.clone(),
            required: d.required,
            validate: d.validate,
            observed: d.observed,
            state: GroupState::Pending,
            descriptors: 0,
            bytes: 0,
            planned_descriptors: d.planned.0,
            planned_bytes: d.planned.1,
            attempts: 0,
            consecutive_failures: 0,
            last_reason: None,
            last_error: None,
            last_diagnostics: Vec::new(),
            failed_region: None,
            last_accepted_invalid: None,
            next_retry_seconds: None,
        });
    }

    fn group(&mut self, name: &str) -> Option<&mut GroupStatus> {
        self.groups.iter_mut().find(|g| g.name == name)
    }

    fn backend(&mut self, name: &str, up: bool, failure: Option<&crate::model::Failure>) {
        if let Some(b) = self.backends.iter_mut().find(|b| b.name == name) {
            b.up = up;
            b.reason = failure.map(|f| f.reason);
            b.error = failure.map(|f| f.message.clone());
        }
    }

    /// Ready: NIXL is up, the lifecycle runs, and every required group is
    /// registered. Derived from the snapshot, never stored apart from it.
    fn derive_ready(&self) -> bool {
        self.nixl.available
            && self.stuck.is_none()
            && !self.lifecycle_dead
            && self.phase == Phase::Running
            && self
                .groups
                .iter()
                .filter(|g| g.required)
                .all(|g| g.state == GroupState::Registered)
    }

    /// Applies one event (the status board's part of the recording path).
    fn apply(&mut self, e: &Event<'_>) {
        match e {
            Event::GroupDeclared(d) => self.declare(d),
            Event::MemlockObserved { soft_limit, .. } => self.memlock_limit_bytes = *soft_limit,
            Event::NixlLoaded(f) => {
                self.nixl.available = true;
                self.nixl.reason = None;
                self.nixl.error = None;
                self.nixl.plugins = f.plugins.clone();
                self.nixl.agent = Some(f.agent.clone());
                self.nixl.agent_owner = Some(if f.owned { "nixl-agent" } else { "caller" });
            }
            Event::NixlUnavailable(f) => {
                self.nixl.available = false;
                self.nixl.reason = Some(f.reason);
                self.nixl.error = Some(f.message.clone());
            }
            Event::BackendCreated { backend, .. } => self.backend(backend, true, None),
            Event::BackendFailed { backend, failure } => self.backend(backend, false, Some(failure)),
            Event::Attempted(a) => {
                let Some(g) = self.group(&a.labels.group) else { return };
                g.descriptors = a.holding.descriptors;
                g.bytes = a.holding.bytes;
                match a.outcome {
                    Ok(()) => g.failed_region = None,
                    Err(f) => {
                        g.last_reason = Some(f.reason);
                        g.last_error = Some(f.message.clone());
                        g.last_diagnostics = f.diagnostics.clone();
                        g.failed_region = f.region;
                    }
                }
                if g.observed {
                    // An observed group is as good as its last call.
                    g.attempts = g.attempts.saturating_add(1);
                    if a.outcome.is_ok() {
                        g.state = GroupState::Registered;
                        g.consecutive_failures = 0;
                    } else {
                        g.state = GroupState::Failed;
                        g.consecutive_failures = g.consecutive_failures.saturating_add(1);
                    }
                }
            }
            Event::RetryScheduled { labels, after, .. } => {
                if let Some(g) = self.group(&labels.group) {
                    g.next_retry_seconds = Some(after.as_secs_f64());
                }
            }
            Event::Deregistered { labels, holding, .. } => {
                let Some(g) = self.group(&labels.group) else { return };
                g.descriptors = holding.descriptors;
                g.bytes = holding.bytes;
                if g.observed && holding.descriptors == 0 {
                    g.state = GroupState::Deregistered;
                }
            }
            Event::Progress { phase, groups } => {
                if !matches!(self.phase, Phase::Draining | Phase::Stopped) || *phase == Phase::Stopped {
                    self.phase = *phase;
                }
                for p in groups.iter() {
                    let Some(g) = self.group(p.group) else { continue };
                    g.state = p.state;
                    g.attempts = p.attempts;
                    g.consecutive_failures = p.consecutive_failures;
                    if g.state != GroupState::Failed {
                        g.next_retry_seconds = None;
                    }
                }
            }
            Event::ReadinessChanged { .. } => {}
            Event::DrainStarted => {
                if self.phase != Phase::Stopped {
                    self.phase = Phase::Draining;
                }
            }
            Event::Stuck {
                operation,
                labels,
                elapsed,
            } => {
                self.stuck = Some(Stuck {
                    operation: operation.to_string(),
                    group: labels.map(|l| l.group.clone()),
                    seconds: elapsed.as_secs_f64(),
                });
                if let Some(g) = labels.and_then(|l| self.group(&l.group)) {
                    g.last_reason = Some(Reason::Timeout);
                    g.last_error = Some(format!("NIXL {operation} call past its deadline after {elapsed:?}"));
                }
            }
            Event::Unstuck { .. } => self.stuck = None,
            Event::LifecycleDied => self.lifecycle_dead = true,
            Event::AcceptedInvalid {
                labels,
                reason,
                message,
            } => {
                if let Some(g) = self.group(&labels.group) {
                    g.last_accepted_invalid = Some(format!("{reason}: {message}"));
                }
            }
            Event::DrainFinished { .. } | Event::InstrumentationFailed { .. } => {}
        }
    }

    /// Why /livez fails, if it does.
    pub fn liveness_failure(&self) -> Option<String> {
        if self.lifecycle_dead {
            return Some("lifecycle thread died".to_string());
        }
        self.stuck.as_ref().map(|s| {
            let group = s.group.as_deref().map(|g| format!(" of group {g}")).unwrap_or_default();
            format!("lifecycle stuck: NIXL {}{group} past its deadline", s.operation)
        })
    }

    /// The checks /readyz reports, in order.
    pub fn checks(&self) -> Vec<Check> {
        let mut out = vec![Check {
            name: names::CHECK_NIXL.to_string(),
            failure: match (&self.nixl.available, self.nixl.reason) {
                (true, _) => None,
                (false, Some(r)) => Some(r.as_str().to_string()),
                (false, None) => Some("starting".to_string()),
            },
        }];
        for g in self.groups.iter().filter(|g| g.required) {
            let failure = match g.state {
                GroupState::Registered => None,
                GroupState::Failed | GroupState::GaveUp => {
                    Some(g.last_reason.map_or("failed", Reason::as_str).to_string())
                }
                other => Some(
                    serde_json::to_value(other)
                        .ok()
                        .and_then(|v| v.as_str().map(String::from))
                        .unwrap_or_default(),
                ),
            };
            out.push(Check {
                name: format!("{}{}", names::CHECK_GROUP_PREFIX, g.name),
                failure,
            });
        }
        if self.stuck.is_some() || self.lifecycle_dead {
            out.push(Check {
                name: names::CHECK_LIFECYCLE.to_string(),
                failure: Some(
                    if self.lifecycle_dead {
                        "dead"
                    } else {
                        Reason::Timeout.as_str()
                    }
                    .to_string(),
                ),
            });
        }
        if matches!(self.phase, Phase::Draining | Phase::Stopped) {
            out.push(Check {
                name: names::CHECK_DRAINING.to_string(),
                failure: Some("draining".to_string()),
            });
        }
        out
    }
}

/// Publisher side of the snapshot. Cheap to clone.
///
/// Holds the drain latch: once shutdown begins, `ready` is false for good,
/// whatever the lifecycle thread publishes afterwards.
#[derive(Clone)]
pub struct StatusBoard {
    tx: watch::Sender<Status>,
    draining: Arc<AtomicBool>,
    started: Instant,
}

/// Readiness changed with an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadyChange {
    pub ready: bool,
    /// Since the board was created, the first time it became ready.
    pub time_to_ready: Option<std::time::Duration>,
}

impl StatusBoard {
    /// `started` is what `time_to_ready_seconds` counts from.
    pub fn new(initial: Status, started: Instant) -> StatusBoard {
        StatusBoard {
            tx: watch::Sender::new(initial),
            draining: Arc::new(AtomicBool::new(false)),
            started,
        }
    }

    /// Latches not-ready at once; called the moment shutdown is requested.
    /// `on_change` runs inside the same write when readiness drops, so a
    /// gauge set there cannot be overtaken by a concurrent event.
    pub fn begin_drain(&self, on_change: impl FnOnce(&ReadyChange)) {
        self.draining.store(true, Ordering::SeqCst);
        self.tx.send_modify(|s| {
            if s.ready {
                on_change(&ReadyChange {
                    ready: false,
                    time_to_ready: None,
                });
            }
            s.ready = false;
            if !matches!(s.phase, Phase::Stopped) {
                s.phase = Phase::Draining;
            }
        });
    }

    /// The status subscriber: applies the event and derives readiness in
    /// the same write, with the drain latch read inside it, so no event can
    /// make the snapshot ready once shutdown began.
    /// `on_change` runs inside that write when readiness flips.
    pub(crate) fn on(&self, e: &Event<'_>, on_change: impl FnOnce(&ReadyChange)) -> Option<ReadyChange> {
        let mut change = None;
        self.tx.send_modify(|s| {
            s.apply(e);
            let ready = !self.draining.load(Ordering::SeqCst) && s.derive_ready();
            if ready != s.ready {
                let first = ready && s.time_to_ready_seconds.is_none();
                let c = ReadyChange {
                    ready,
                    time_to_ready: first.then(|| self.started.elapsed()),
                };
                if let Some(t) = c.time_to_ready {
                    s.time_to_ready_seconds = Some(t.as_secs_f64());
                }
                s.ready = ready;
                on_change(&c);
                change = Some(c);
            }
        });
        change
    }

    pub fn subscribe(&self) -> watch::Receiver<Status> {
        self.tx.subscribe()
    }

    /// A copy of the current snapshot.
    pub fn snapshot(&self) -> Status {
        self.tx.borrow().clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{GroupLabels, Kind, MemType, RuntimeFacts};
    use crate::record::GroupProgress;

    fn board_with_kv() -> StatusBoard {
        let board = StatusBoard::new(Status::empty(), Instant::now());
        let labels = GroupLabels::new("kv", &Kind::Kv, MemType::Dram, &["UCX".to_string()], 0);
        let decl = GroupDecl {
            labels,
            backends: vec!["UCX".into()],
            device: 0,
            required: true,
            validate: true,
            planned: (1, 4096),
            observed: false,
        };
        board.on(&Event::GroupDeclared(&decl), |_| {});
        board.on(&Event::NixlLoaded(&RuntimeFacts::default()), |_| {});
        board
    }

    fn registered() -> [GroupProgress<'static>; 1] {
        [GroupProgress {
            group: "kv",
            state: GroupState::Registered,
            attempts: 1,
            consecutive_failures: 0,
        }]
    }

    #[test]
    fn readiness_is_derived_in_the_write_and_reports_its_flip_once() {
        let board = board_with_kv();
        let groups = registered();
        let mut flips = Vec::new();
        let change = board.on(
            &Event::Progress {
                phase: Phase::Running,
                groups: &groups,
            },
            |c| flips.push(c.ready),
        );
        assert_eq!(flips, [true]);
        assert!(change.is_some_and(|c| c.ready && c.time_to_ready.is_some()));
        assert!(board.snapshot().ready);
        let again = board.on(
            &Event::Progress {
                phase: Phase::Running,
                groups: &groups,
            },
            |_| panic!("no flip"),
        );
        assert_eq!(again, None);
    }

    /// The lifecycle thread may publish "every group registered" after
    /// shutdown began (it read the machine before the drain latch): the
    /// snapshot must stay not ready, and no ready gauge update may follow.
    #[test]
    fn nothing_published_after_the_drain_latch_makes_the_snapshot_ready() {
        let board = board_with_kv();
        board.begin_drain(|c| assert!(!c.ready));
        let groups = registered();
        let change = board.on(
            &Event::Progress {
                phase: Phase::Running,
                groups: &groups,
            },
            |c| panic!("readiness flipped to {} after the drain latch", c.ready),
        );
        assert_eq!(change, None);
        let s = board.snapshot();
        assert!(!s.ready);
        assert_eq!(
            s.phase,
            Phase::Draining,
            "a late Progress does not undo the drain phase"
        );
    }
}
