//! The snapshot's shape: what the ledger (`crate::ledger`) publishes and
//! every projection reads — /v1/status as it is, /readyz and /livez through
//! [`Status::checks`] and [`Status::liveness_failure`], the metric gauges,
//! rank files. Pure data and the derivations over it, written once:
//! readiness ([`ready`], which the ledger applies to its tables and
//! [`Status::derive_ready`] to a snapshot), liveness
//! ([`Status::liveness_failure`]) and a group's state ([`observed_state`]).
//! [`document`]: the /v1/status document that carries it, one schema for a
//! process and a pod.

use crate::event::{CallKey, Source};
use crate::model::{AgentId, DirRefusal, Failure, GroupState, Phase, Reason};
use serde::Serialize;

pub mod document;

/// Names of the checks /readyz?verbose lists.
pub const CHECK_NIXL: &str = "nixl";
pub const CHECK_GROUP_PREFIX: &str = "group:";
pub const CHECK_DRAINING: &str = "shutdown";
pub const CHECK_LIFECYCLE: &str = "lifecycle";
/// Observe mode with no expected group: at least one call has registered.
pub const CHECK_REGISTERED: &str = "registered";
/// Its failure word.
pub const NOTHING_REGISTERED: &str = "nothing_registered";
/// The pod directory this process was given: written, or refused.
pub const CHECK_POD_DIR: &str = "pod_dir";
/// The interposer under `libnixl.so`: recording, or refusing this build.
pub const CHECK_INTERPOSER: &str = "interposer";

/// An observed group is as good as its last registration call, and holds
/// what its successful calls registered on agents still alive: the one rule
/// for its state, which every projection shows.
pub fn observed_state(last_ok: Option<bool>, live_calls: usize) -> GroupState {
    match last_ok {
        None => GroupState::Pending,
        Some(false) => GroupState::Failed,
        Some(true) if live_calls > 0 => GroupState::Registered,
        Some(true) => GroupState::Deregistered,
    }
}

/// What readiness is decided from: the ledger's tables, or a snapshot.
#[derive(Debug, Clone, Copy)]
pub struct Readiness {
    pub nixl: bool,
    /// A NIXL call is past its deadline.
    pub stuck: bool,
    pub lifecycle_dead: bool,
    pub phase: Phase,
    pub required_registered: bool,
    pub awaits_registration: bool,
    pub anything_registered: bool,
    pub pod_refused: bool,
    /// The interposer records nothing of this process's NIXL calls, and
    /// no front-end records instead: what depends on seeing them does not
    /// hold readiness back.
    pub blind: bool,
}

/// Ready: NIXL is up, the lifecycle runs, every required group is
/// registered (and one group at least, when readiness awaits a
/// registration), and the pod directory was not refused. The one rule.
/// An interposer that cannot prove the loaded NIXL fails open, loudly
/// (`nixl_agent_interposer_blind`, the `interposer` check's note): what
/// only its recording could tell (NIXL up, the groups registered) does not
/// hold readiness back, so it never takes serving out of rotation.
pub fn ready(r: Readiness) -> bool {
    let seen = r.blind || (r.nixl && r.required_registered && (!r.awaits_registration || r.anything_registered));
    seen && !r.stuck && !r.lifecycle_dead && r.phase == Phase::Running && !r.pod_refused
}

pub use crate::model::NixlStatus;

/// One backend.
#[derive(Debug, Clone, Serialize)]
pub struct BackendStatus {
    pub name: String,
    pub up: bool,
    pub reason: Option<Reason>,
    pub error: Option<String>,
}

/// One NIXL agent the recording follows.
#[derive(Debug, Clone, Serialize)]
pub struct AgentStatus {
    /// The recording's identity for it (not NIXL's name).
    pub id: AgentId,
    pub name: String,
    /// `nixl-agent` when it created the agent, `caller` when it is the
    /// serving process's own.
    pub owner: &'static str,
    /// What the ledger holds registered on it now (observed calls).
    pub descriptors: usize,
    pub bytes: u64,
    /// The agent went away (collected, dropped): what it held is released.
    pub released: bool,
}

/// One group.
#[derive(Debug, Clone, Serialize)]
pub struct GroupStatus {
    pub name: String,
    pub kind: String,
    /// The labels, from what the group's first call carried (a planned
    /// group's from its spec): `None` until that call.
    pub mem_type: Option<&'static str>,
    pub device: Option<String>,
    pub backend: Option<String>,
    pub backends: Vec<String>,
    pub required: bool,
    pub validate: bool,
    /// Who owns the name: the lifecycle's plan or observed calls.
    pub source: Source,
    /// Calls whose memory type, device or backend differed from the labels
    /// the first call fixed (recorded under those labels, not relabelled).
    pub differing_calls: u64,
    pub last_differing_call: Option<String>,
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
pub struct StuckCallStatus {
    /// Which call: its episode ends only when this call returns.
    #[serde(skip)]
    pub call: CallKey,
    pub operation: String,
    pub group: Option<String>,
    /// How long it had run when the deadline passed.
    pub seconds: f64,
}

/// The oldest NIXL call in flight of one operation, the lifecycle's or an
/// observed one, as the watchdog last saw it (at most a second ago).
#[derive(Debug, Clone, Serialize)]
pub struct InFlightCall {
    pub operation: &'static str,
    pub seconds: f64,
}

/// Calls of one NIXL method with no record of its own that ended with one
/// status (`nixl_agent_nixl_calls_total{method,status}`, the same counts).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NixlCallCount {
    pub method: &'static str,
    pub status: &'static str,
    pub count: u64,
}

/// The whole snapshot served at /v1/status.
#[derive(Debug, Clone, Serialize)]
pub struct Status {
    pub version: &'static str,
    /// The ledger's generation this snapshot was taken at: it grows with
    /// every event applied.
    pub generation: u64,
    pub phase: Phase,
    pub ready: bool,
    pub time_to_ready_seconds: Option<f64>,
    pub memlock_limit_bytes: Option<u64>,
    pub nixl: NixlStatus,
    /// Every NIXL call past its deadline (`nixl_call_timeout`), the
    /// lifecycle's or an observed one, in the order they passed it (/livez
    /// fails, naming each).
    pub stuck: Vec<StuckCallStatus>,
    /// NIXL calls in flight, the lifecycle's and observed ones (oldest per
    /// operation).
    pub in_flight: Vec<InFlightCall>,
    /// NIXL calls of the methods with no record of their own (`queryMem`),
    /// by method and status, in the order first seen; left out until the
    /// first, as its metric family is.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub nixl_calls: Vec<NixlCallCount>,
    /// The lifecycle thread died (/livez fails).
    pub lifecycle_dead: bool,
    /// Readiness also waits for one group to be registered (observe mode
    /// with no expected group).
    pub awaits_registration: bool,
    pub backends: Vec<BackendStatus>,
    pub groups: Vec<GroupStatus>,
    /// The NIXL agents seen: the live ones and the last few released.
    pub agents: Vec<AgentStatus>,
    /// The data path: transfers, peers, notifications.
    pub transfers: TransferStatus,
    /// The node canary's loopback rounds (`None` outside a canary, and
    /// before its round thread started).
    pub probe: Option<ProbeStatus>,
    /// The pod directory this process publishes to, or was given and
    /// refused (`None` outside a pod).
    pub pod: Option<PodStatus>,
}

/// The pod directory of this process.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PodStatus {
    pub dir: String,
    /// The rank slot it claimed there (`None` when refused).
    pub rank: Option<u32>,
    /// Why it will not write that directory: it runs alone.
    pub refused: Option<DirRefusal>,
    /// What was seen, when refused.
    pub detail: Option<String>,
}

/// The node canary's loopback transfer rounds.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ProbeStatus {
    /// The last round moved its bytes and they compared equal (`None`
    /// before the first round).
    pub up: Option<bool>,
    /// A round is due every this many seconds (`probe_interval`).
    pub interval_seconds: f64,
    /// Unix time the last round ended, whatever its outcome (`None` before
    /// the first): a canary whose thread hangs or died stops moving it.
    pub last_round_unix_seconds: Option<f64>,
    pub rounds_ok: u64,
    pub rounds_failed: u64,
    /// Failed rounds by reason, in the order first seen.
    pub failures: Vec<ProbeFailures>,
    pub last_reason: Option<Reason>,
    pub last_error: Option<String>,
    pub last_seconds: f64,
    /// The last successful round's large transfer.
    pub read_bytes_per_second: f64,
    pub write_bytes_per_second: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct ProbeFailures {
    pub reason: Reason,
    pub count: u64,
}

impl ProbeStatus {
    /// Applies one round (the ledger's only writer of it).
    /// `now_unix`: when it ended.
    pub fn apply(&mut self, failure: Option<&Failure>, bytes_per_second: [f64; 2], seconds: f64, now_unix: f64) {
        self.up = Some(failure.is_none());
        self.last_seconds = seconds;
        self.last_round_unix_seconds = Some(now_unix);
        match failure {
            None => {
                self.rounds_ok += 1;
                self.last_reason = None;
                self.last_error = None;
                [self.read_bytes_per_second, self.write_bytes_per_second] = bytes_per_second;
            }
            Some(f) => {
                self.rounds_failed += 1;
                self.last_reason = Some(f.reason);
                self.last_error = Some(f.message.clone());
                match self.failures.iter_mut().find(|c| c.reason == f.reason) {
                    Some(c) => c.count += 1,
                    None => self.failures.push(ProbeFailures {
                        reason: f.reason,
                        count: 1,
                    }),
                }
            }
        }
    }
}

/// The data path as the ledger holds it (`crate::ledger::xfer_state`).
#[derive(Debug, Clone, Default, Serialize)]
pub struct TransferStatus {
    /// Per operation (read, write): how transfers ended, and what is in flight.
    pub ops: Vec<XferOpStatus>,
    /// Seconds in flight after which a transfer counts as stalled.
    pub stall_after_seconds: Option<f64>,
    /// The last failed transfers, newest last.
    pub recent_failures: Vec<XferFailure>,
    /// The peers seen most recently (remote agents by NIXL's name), newest
    /// last: what last happened with each.
    pub peers: Vec<PeerStatus>,
    /// Remote agents loaded on the live NIXL agents now.
    pub remote_agents: usize,
    pub peers_lost: u64,
    pub notifications_sent: u64,
    pub notifications_received: u64,
    pub notification_failures: u64,
    /// Of the notifications, those the framework marks as heartbeats
    /// (vLLM's `HB:` prefix).
    pub heartbeats_sent: u64,
    pub heartbeats_received: u64,
}

/// One operation's transfers.
#[derive(Debug, Clone, Serialize)]
pub struct XferOpStatus {
    pub op: crate::model::XferOp,
    pub done: u64,
    pub error: u64,
    pub released_in_flight: u64,
    /// Creations NIXL refused while the peer's metadata was awaited.
    pub peer_pending: u64,
    pub stalled: u64,
    /// Bytes of the transfers that completed.
    pub bytes: u64,
    pub in_flight: usize,
    /// Of those, in flight longer than `stall_after_seconds`.
    pub stalled_in_flight: usize,
    /// Age of the oldest one in flight, as of the ledger's last look (at
    /// most a second ago while any is in flight); 0 when none.
    pub oldest_in_flight_seconds: f64,
}

/// One failed transfer.
#[derive(Debug, Clone, Serialize)]
pub struct XferFailure {
    pub op: crate::model::XferOp,
    pub reason: Reason,
    pub error: String,
    pub peer: String,
    pub agent: AgentId,
    /// `create`, `post` or `status`: which call said so.
    pub stage: &'static str,
    pub unix_seconds: f64,
}

/// One peer, as last seen.
#[derive(Debug, Clone, Serialize)]
pub struct PeerStatus {
    pub name: String,
    /// The local NIXL agent it was seen from.
    pub agent: AgentId,
    /// What last happened: a peer event (add, remove, fetch, check, connect),
    /// `transfer` or `lost`.
    pub last_event: &'static str,
    pub ok: bool,
    pub reason: Option<Reason>,
    pub error: Option<String>,
    pub unix_seconds: f64,
    /// Its metadata is loaded on that agent now.
    pub loaded: bool,
    /// NIXL reported it disconnected since it was last added.
    pub lost: bool,
    /// Transfers with it that ended, by outcome, and the bytes of those done.
    pub done: u64,
    pub failed: u64,
    pub released_in_flight: u64,
    pub bytes: u64,
    /// Its failed transfers and peer calls by reason.
    pub failures: Vec<ReasonCount>,
    /// The last failure (transfer or peer call), kept when later calls succeed.
    pub last_failure: Option<PeerFailure>,
    /// Notifications exchanged with it; heartbeats (`HB:`) apart.
    pub notifications_sent: u64,
    pub notifications_received: u64,
    pub heartbeats_sent: u64,
    pub heartbeats_received: u64,
    /// When its metadata was last removed or loaded again (a request made
    /// before then is stale: `peer_invalidated`).
    pub invalidated_unix_seconds: Option<f64>,
    /// Which transports UCX picked for transfers with it, per op
    /// (`NIXL_AGENT_TRANSPORTS=1`).
    pub transports: Vec<PeerTransport>,
}

/// A reason and how often it happened.
#[derive(Debug, Clone, Serialize)]
pub struct ReasonCount {
    pub reason: Reason,
    pub count: u64,
}

/// A peer's last failure.
#[derive(Debug, Clone, Serialize)]
pub struct PeerFailure {
    pub reason: Reason,
    pub error: String,
    pub unix_seconds: f64,
}

/// The transports UCX picked for one op with a peer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PeerTransport {
    pub op: crate::model::XferOp,
    pub scope: crate::model::TransportScope,
    pub transports: Vec<crate::model::Transport>,
}

/// One line of /readyz?verbose.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Check {
    pub name: String,
    /// `None` when the check passes, else the reason word shown.
    pub failure: Option<String>,
    /// What to do about the failure, when the agent knows.
    pub fix: Option<String>,
    /// What a passing check says beside `ok` (a blind interposer: it does
    /// not hold readiness back, and says why it records nothing).
    pub note: Option<String>,
}

impl Status {
    /// The snapshot before anything has run: no group, no backend.
    pub fn empty() -> Status {
        Status {
            version: env!("CARGO_PKG_VERSION"),
            generation: 0,
            phase: Phase::Starting,
            ready: false,
            time_to_ready_seconds: None,
            memlock_limit_bytes: None,
            nixl: NixlStatus::default(),
            stuck: Vec::new(),
            in_flight: Vec::new(),
            nixl_calls: Vec::new(),
            lifecycle_dead: false,
            awaits_registration: false,
            backends: Vec::new(),
            groups: Vec::new(),
            agents: Vec::new(),
            transfers: TransferStatus::default(),
            probe: None,
            pod: None,
        }
    }

    /// The group named `name`, if declared.
    pub fn group(&self, name: &str) -> Option<&GroupStatus> {
        self.groups.iter().find(|g| g.name == name)
    }

    /// Ready, by the one rule ([`ready`]) applied to this snapshot.
    pub fn derive_ready(&self) -> bool {
        ready(Readiness {
            nixl: self.nixl.available,
            stuck: !self.stuck.is_empty(),
            lifecycle_dead: self.lifecycle_dead,
            phase: self.phase,
            required_registered: self
                .groups
                .iter()
                .filter(|g| g.required)
                .all(|g| g.state == GroupState::Registered),
            awaits_registration: self.awaits_registration,
            anything_registered: self.anything_registered(),
            pod_refused: self.pod.as_ref().is_some_and(|p| p.refused.is_some()),
            blind: self.nixl.blind().is_some(),
        })
    }

    fn anything_registered(&self) -> bool {
        self.groups.iter().any(|g| g.state == GroupState::Registered)
    }

    /// Why /livez fails, if it does: the one rule, which a lone process's
    /// /livez applies to its own recording and a pod's to each live rank's
    /// (each rank publishes this verdict in its rank file).
    pub fn liveness_failure(&self) -> Option<String> {
        if self.lifecycle_dead {
            return Some("lifecycle thread died".to_string());
        }
        if self.stuck.is_empty() {
            return None;
        }
        // One line, every stuck call (a pod prefixes it with the rank).
        let calls: Vec<String> = self
            .stuck
            .iter()
            .map(|s| {
                let group = s.group.as_deref().map(|g| format!(" of group {g}")).unwrap_or_default();
                let ran = if s.seconds >= 0.1 {
                    format!("{:.1} s", s.seconds)
                } else {
                    format!("{:.0} ms", s.seconds * 1000.0)
                };
                format!("NIXL {}{group} past its deadline ({ran})", s.operation)
            })
            .collect();
        Some(calls.join("; "))
    }

    /// The checks /readyz reports, in order.
    pub fn checks(&self) -> Vec<Check> {
        let mut out = vec![Check {
            name: CHECK_NIXL.to_string(),
            failure: match (&self.nixl.available, self.nixl.reason) {
                (true, _) => None,
                (false, Some(r)) => Some(r.as_str().to_string()),
                (false, None) => Some("starting".to_string()),
            },
            fix: self.nixl.fix.clone().filter(|_| !self.nixl.available),
            note: None,
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
                name: format!("{}{}", CHECK_GROUP_PREFIX, g.name),
                failure,
                fix: None,
                note: None,
            });
        }
        if self.awaits_registration {
            out.push(Check {
                name: CHECK_REGISTERED.to_string(),
                failure: (!self.anything_registered()).then(|| NOTHING_REGISTERED.to_string()),
                fix: None,
                note: None,
            });
        }
        if let Some(i) = &self.nixl.interposer {
            let blind = self.nixl.blind();
            out.push(Check {
                name: CHECK_INTERPOSER.to_string(),
                failure: None,
                fix: None,
                note: i.refused.as_ref().filter(|_| blind.is_some()).map(|why| {
                    format!(
                        "blind: {} ({why}); NIXL calls are not recorded; fix: see the runbook's NixlInterposerBlind (docs/runbooks.md)",
                        blind.map_or("", |b| b.as_str())
                    )
                }),
            });
        }
        if let Some(p) = &self.pod {
            out.push(Check {
                name: CHECK_POD_DIR.to_string(),
                failure: p.refused.map(|r| match &p.detail {
                    Some(d) => format!("{} ({d}); running alone", r.as_str()),
                    None => r.as_str().to_string(),
                }),
                fix: None,
                note: None,
            });
        }
        if !self.stuck.is_empty() || self.lifecycle_dead {
            out.push(Check {
                name: CHECK_LIFECYCLE.to_string(),
                failure: Some(
                    if self.lifecycle_dead {
                        "dead"
                    } else {
                        Reason::Timeout.as_str()
                    }
                    .to_string(),
                ),
                fix: None,
                note: None,
            });
        }
        if matches!(self.phase, Phase::Draining | Phase::Stopped) {
            out.push(Check {
                name: CHECK_DRAINING.to_string(),
                failure: Some("draining".to_string()),
                fix: None,
                note: None,
            });
        }
        out
    }
}
