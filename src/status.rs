//! The recorded state that HTTP handlers read: a snapshot published through a
//! `tokio::sync::watch` channel by the lifecycle, never computed on request.

use crate::lifecycle::machine::{GroupState, Phase};
use crate::nixl::{LoadError, Loaded};
use crate::plan::Plan;
use crate::telemetry::names::{self, Reason};
use serde::Serialize;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
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
    pub plugin_dir: Option<String>,
    pub plugins: Vec<String>,
    /// The CUDA runtime preloaded for UCX's CUDA transports (GPU hosts).
    pub cudart: Option<String>,
    /// Where the agent looked, when nothing was found.
    pub searched: Vec<String>,
    pub reason: Option<Reason>,
    pub error: Option<String>,
}

impl NixlStatus {
    /// What loading NIXL told: the library and which step found it, or the
    /// error and every place searched (`searched` when loading had none).
    pub fn from_load(loaded: &Result<Loaded, LoadError>, searched: Vec<String>) -> NixlStatus {
        let path = |p: &std::path::Path| p.display().to_string();
        match loaded {
            Ok(l) => NixlStatus {
                library: Some(path(&l.discovery.library)),
                found_by: Some(l.discovery.found_by.as_str().to_string()),
                version: l.discovery.version.clone(),
                plugin_dir: l.plugin_dir.as_deref().map(path),
                cudart: l.cudart.as_deref().map(path),
                ..NixlStatus::default()
            },
            Err(e) => NixlStatus {
                searched: if e.searched.is_empty() {
                    searched
                } else {
                    e.searched.clone()
                },
                error: Some(e.message.clone()),
                ..NixlStatus::default()
            },
        }
    }
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
    pub next_retry_seconds: Option<f64>,
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
    /// The snapshot before anything has run.
    pub fn initial(plan: &Plan) -> Status {
        Status {
            version: env!("CARGO_PKG_VERSION"),
            phase: Phase::Starting,
            ready: false,
            time_to_ready_seconds: None,
            memlock_limit_bytes: None,
            nixl: NixlStatus::default(),
            backends: plan
                .backends()
                .into_iter()
                .map(|name| BackendStatus {
                    name,
                    up: false,
                    reason: None,
                    error: None,
                })
                .collect(),
            groups: plan
                .groups
                .iter()
                .map(|g| {
                    let (planned_descriptors, planned_bytes) = g.totals();
                    GroupStatus {
                        name: g.name.clone(),
                        kind: g.kind.as_str().to_string(),
                        mem_type: g.mem_type.as_str(),
                        device: g.device,
                        backends: g.backends.clone(),
                        required: g.required,
                        validate: g.validate,
                        state: GroupState::Pending,
                        descriptors: 0,
                        bytes: 0,
                        planned_descriptors,
                        planned_bytes,
                        attempts: 0,
                        consecutive_failures: 0,
                        last_reason: None,
                        last_error: None,
                        last_diagnostics: Vec::new(),
                        failed_region: None,
                        next_retry_seconds: None,
                    }
                })
                .collect(),
        }
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
}

impl StatusBoard {
    pub fn new(initial: Status) -> StatusBoard {
        StatusBoard {
            tx: watch::Sender::new(initial),
            draining: Arc::new(AtomicBool::new(false)),
        }
    }

    /// Latches not-ready at once; called the moment shutdown is requested.
    pub fn begin_drain(&self) {
        self.draining.store(true, Ordering::SeqCst);
        self.tx.send_modify(|s| {
            s.ready = false;
            if !matches!(s.phase, Phase::Stopped) {
                s.phase = Phase::Draining;
            }
        });
    }

    pub fn is_draining(&self) -> bool {
        self.draining.load(Ordering::SeqCst)
    }

    pub fn update(&self, f: impl FnOnce(&mut Status)) {
        self.tx.send_modify(f);
    }

    pub fn subscribe(&self) -> watch::Receiver<Status> {
        self.tx.subscribe()
    }

    /// A copy of the current snapshot.
    pub fn snapshot(&self) -> Status {
        self.tx.borrow().clone()
    }
}
