//! Every metric name and every closed label value the agent exports.
//!
//! Nothing else in the crate spells a metric name or a `reason`, `kind` or
//! `mem_type` value as a string literal: dashboards, alerts, the docs/metrics.md
//! tables and the tests all check against this file.

pub use crate::model::{
    DirRefusal, Hooked, MemType, NotifDirection, PeerOp, Reason, XferOp, XferOutcome, KIND_AUX, KIND_KV, KIND_STATE,
    OUTCOME_ERROR, OUTCOME_OK,
};

/// Prefix shared by every metric the agent owns.
pub const PREFIX: &str = "nixl_agent_";

/// The labels every per-group family carries, in this order (some add one
/// more: `reason` or `state`), so that any two can be joined on them.
pub const GROUP_LABELS: &[&str] = &["group", "kind", "mem_type", "backend", "device"];
/// A group's labels and the closed `reason` of what failed.
pub const GROUP_REASON_LABELS: &[&str] = &["group", "kind", "mem_type", "backend", "device", "reason"];
/// A group's labels and one of its states.
pub const GROUP_STATE_LABELS: &[&str] = &["group", "kind", "mem_type", "backend", "device", "state"];

/// Declares each family once: `NAME = "metric_name": declaration,` makes
/// the name's constant and the family's entry in [`FAMILIES`], in the
/// order docs/metrics.md lists them (its table is generated from them:
/// [`markdown_table`]).
macro_rules! families {
    ($($id:ident = $name:literal: $decl:expr,)*) => {
        $(pub const $id: &str = $name;)*
        /// Every metric family the agent exports under its own prefix: its
        /// type, labels and help text, which recordings export it, who keeps
        /// it, and whether it is absent until first used. Declared once.
        pub const FAMILIES: &[Family] = &[$($decl.named($name),)*];
    };
}

families! {
    REGISTRATION_ATTEMPTS_TOTAL = "nixl_agent_registration_attempts_total":
        Family::counter(GROUP_LABELS, "Registration attempts per group, successful or not."),
    REGISTRATION_FAILURES_TOTAL = "nixl_agent_registration_failures_total":
        Family::counter(GROUP_REASON_LABELS, "Failed registration attempts per group, by closed failure reason.").on_first_use(),
    REGISTRATION_DESCRIPTORS = "nixl_agent_registration_descriptors":
        Family::histogram(GROUP_LABELS, "Descriptors (regions) submitted per registration attempt."),
    REGISTRATION_DURATION_SECONDS = "nixl_agent_registration_duration_seconds":
        Family::histogram(GROUP_LABELS, "Wall time of one registration attempt: validation plus NIXL registration (and rollback). Backend creation and allocation are not timed; an attempt that failed before reaching NIXL is not observed."),
    REGISTERED_DESCRIPTORS = "nixl_agent_registered_descriptors":
        Family::gauge(GROUP_LABELS, "Descriptors registered with NIXL now."),
    REGISTERED_BYTES = "nixl_agent_registered_bytes":
        Family::gauge(GROUP_LABELS, "Bytes registered with NIXL now."),
    DEREGISTRATIONS_TOTAL = "nixl_agent_deregistrations_total":
        Family::counter(GROUP_LABELS, "Deregistrations of a group's registered regions: at drain, before each re-registration (SIGUSR1 or reregister()), and each observed deregister call. Undoing a failed attempt's partial registration is counted only when it fails, as is each later try to release what it left."),
    DEREGISTRATION_FAILURES_TOTAL = "nixl_agent_deregistration_failures_total":
        Family::counter(GROUP_REASON_LABELS, "Group deregistrations that reported an error, by closed reason.").on_first_use(),
    GROUP_REGISTERED = "nixl_agent_group_registered":
        Family::gauge(GROUP_LABELS, "1 while every region of the group is registered (a group of no regions: after its successful attempt), else 0."),
    GROUP_STATE = "nixl_agent_group_state":
        Family::gauge(GROUP_STATE_LABELS, "1 for the state the group is in (pending, registering, registered, failed, gave_up, deregistered), 0 for the others: a group that gave up stays visible after the alert windows."),
    READY = "nixl_agent_ready":
        Family::gauge(&[], "1 while NIXL is available and every required group is registered (what /readyz reports)."),
    NIXL_AVAILABLE = "nixl_agent_nixl_available":
        Family::gauge(&[], "1 when the NIXL runtime library was found, loaded and an agent was created."),
    NIXL_FAILURES_TOTAL = "nixl_agent_nixl_failures_total":
        Family::counter(&["reason"], "Failed loads of the NIXL runtime and failed creations of a NIXL agent, by closed reason (nixl_unavailable, nixl_config); absent until the first."),
    BACKEND_UP = "nixl_agent_backend_up":
        Family::gauge(&["backend"], "1 when a NIXL agent created the backend, 0 when its creation failed; absent until either."),
    LAST_FAILURE_TIMESTAMP_SECONDS = "nixl_agent_last_failure_timestamp_seconds":
        Family::gauge(GROUP_REASON_LABELS, "Unix time of the group's last failed attempt with this reason.").on_first_use(),
    MEMLOCK_LIMIT_BYTES = "nixl_agent_memlock_limit_bytes":
        Family::gauge(&[], "Soft RLIMIT_MEMLOCK of the process in bytes (+Inf when unlimited)."),
    MEMLOCK_EXEMPT = "nixl_agent_memlock_exempt":
        Family::gauge(&[], "1 when the process holds CAP_IPC_LOCK, so RLIMIT_MEMLOCK does not limit what it pins, else 0."),
    TIME_TO_READY_SECONDS = "nixl_agent_time_to_ready_seconds":
        Family::gauge(&[], "Seconds from agent start to first readiness; absent until the first readiness.").on_first_use(),
    LIFECYCLE_STUCK = "nixl_agent_lifecycle_stuck":
        Family::gauge(&[], "1 while a NIXL call, the lifecycle's or an observed one, is past its deadline (nixl_call_timeout) or the lifecycle thread died (/livez fails), else 0."),
    OLDEST_CALL_SECONDS = "nixl_agent_oldest_call_seconds":
        Family::gauge(&["operation"], "Age of the oldest NIXL call in flight, the lifecycle's or an observed one, by operation (preflight, register, deregister, drain; under the interposer also post_xfer, create_xfer, make_connection, load_remote_md, fetch_remote_md), as the watchdog last saw it (at most a second ago); absent while none is in flight.").on_first_use(),
    BUILD_INFO = "nixl_agent_build_info":
        Family::gauge(&["version", "revision", "nixl_version", "nixl_sys_version", "role"], "Always 1; labels carry the agent version, git revision, NIXL runtime version, nixl-sys binding version and role (agent, canary, embedded, observer, pod).").registry(),
    TRACE_SPANS_DROPPED_TOTAL = "nixl_agent_trace_spans_dropped_total":
        Family::counter(&[], "Spans dropped because the OTLP export queue was full (collector down or slow).").registry(),
    TRACE_EXPORT_FAILURES_TOTAL = "nixl_agent_trace_export_failures_total":
        Family::counter(&[], "OTLP export requests that failed.").registry(),
    RANK_UP = "nixl_agent_rank_up":
        Family::gauge(&["rank"], "Pod agent (nixl-agent pod): 1 while a live process holds the rank's slot (its lock, tested without taking it) and touches its file, 0 once it does not.").pod(),
    RANKS_EXPECTED = "nixl_agent_ranks_expected":
        Family::gauge(&[], "Pod agent (nixl-agent pod): how many ranks the pod's readiness waits for.").pod(),
    RANK_CONFLICTS_TOTAL = "nixl_agent_rank_conflicts_total":
        Family::counter(&[], "Pod agent: processes told a rank another live process held (each published under a free rank with the conflict; the pod is not ready while one lives).").pod(),
    POD_FILES_REJECTED_TOTAL = "nixl_agent_pod_files_rejected_total":
        Family::counter(&["reason"], "Pod agent: files of the pod directory not taken as a rank, by reason (name, not_regular, too_large, unreadable, not_a_rank_file, name_mismatch, bad_exposition, rank_label, duplicate_series, conflicting_metadata, foreign_family); counted once per version of a file.").pod(),
    RANK_EXITS_TOTAL = "nixl_agent_pod_rank_exits_total":
        Family::counter(&["rank", "how"], "Pod agent: processes of a rank that ended, by how (exited: it wrote its end record at a normal interpreter exit; exception: it did so after an uncaught exception; died: no end record, as after a signal, os._exit or kill -9). 0 for every rank the pod expects, from its start.").pod(),
    PUBLISH_FAILURES_TOTAL = "nixl_agent_pod_publish_failures_total":
        Family::counter(&["cause"], "Writes of this rank's file to the pod directory that failed, by cause (no_space, permission, other); the heartbeat goes on on the last file written, and the pod reads the rank as stale, never as dead.").registry().on_first_use(),
    PREVIOUS_RUN_FAILURES = "nixl_agent_previous_run_registration_failures":
        Family::gauge(&["group", "backend", "reason"], "The registration failures the previous process of this rank recorded before it ended, by group, backend and reason (read from the rank's file when this process claimed the slot); absent when it had none.").registry().on_first_use(),
    PREVIOUS_RUN_END = "nixl_agent_previous_run_end_timestamp_seconds":
        Family::gauge(&["how"], "When the previous process of this rank ended (Unix seconds: its end record's time, else its file's last write) and how (exited, exception, died). Absent when this rank had no previous process.").registry().on_first_use(),
    POD_DIR_REFUSED = "nixl_agent_pod_dir_refused":
        Family::gauge(&["reason"], "1 when this process was told a pod directory it will not write (reason: link, not_a_directory, not_owner, writable_by_others, unusable) and runs alone; absent otherwise."),
    INTERPOSER_BLIND = "nixl_agent_interposer_blind":
        Family::gauge(&["reason"], "1 while the interposer preloaded into this process records none of its NIXL calls, because it could not prove the loaded NIXL (reason: no_nixl, undefined_methods, no_self_test, layout_mismatch), and no front-end records instead; readiness is left as it is. Absent otherwise.").on_first_use(),
    POD_WATCH_SECONDS = "nixl_agent_pod_watch_pass_seconds":
        Family::gauge(&[], "Pod agent: how long the directory watcher's last pass over the rank files took.").pod(),
    POD_WATCH_LAST_PASS = "nixl_agent_pod_watch_last_pass_timestamp_seconds":
        Family::gauge(&[], "Pod agent: when the directory watcher last completed a pass (Unix seconds); time() minus it is how stale the pod's view is. Reported only: a slow or stalled watcher never fails /livez by itself.").pod(),
    ACCEPTED_INVALID_TOTAL = "nixl_agent_accepted_invalid_total":
        Family::counter(GROUP_REASON_LABELS, "Observed registrations NIXL accepted although validation rejects one of their regions (null, zero length, overlap, unmapped, wrong device), by the reason validation found.").on_first_use(),
    INSTRUMENTATION_ERRORS_TOTAL = "nixl_agent_instrumentation_errors_total":
        Family::counter(&["operation"], "Failures inside nixl-agent's own wrapping of a NIXL call (Python instrumentation), by wrapped operation; the program's call went ahead untouched.").on_first_use(),
    NIXL_CALLS_TOTAL = "nixl_agent_nixl_calls_total":
        Family::counter(&["method", "status"], "NIXL calls of the methods with no metric of their own (queryMem; Python's query_memory), under either front-end, each once, by method (its name in NIXL's C++ API) and status (NIXL's name of the status it returned or raised as, or exception when NIXL threw); calls of the other methods are counted by their own families. Appears on first use.").on_first_use(),
    TRANSFERS_TOTAL = "nixl_agent_transfers_total":
        Family::counter(&["op", "outcome"], "Transfer requests that ended, by op (read, write) and outcome (released_in_flight and peer_pending on first use): done (NIXL said DONE, from transfer() or the first check_xfer_state/get_xfer_status that saw it), error (refused at creation or post, or reported failed by a status poll; the reason is in nixl_agent_transfer_failures_total), released_in_flight (the handle was released or collected before anyone saw it end), peer_pending (creation refused only because the peer's metadata has not arrived yet, NIXL's documented retry, within NIXL_AGENT_PEER_WAIT of the first such refusal, 60 s by default; past it the refusal is an error). Counted once per posting, when it ends.").data_path(),
    TRANSFER_FAILURES_TOTAL = "nixl_agent_transfer_failures_total":
        Family::counter(&["op", "reason"], "Transfers that ended in error, by op and closed reason (peer_lost for a remote disconnect, nixl_not_found for a peer never added, metadata_mismatch, nixl_backend_error, nixl_error when NIXL said only ERR).").data_path().on_first_use(),
    TRANSFERS_STALLED_TOTAL = "nixl_agent_transfers_stalled_total":
        Family::counter(&["op"], "Transfers found in flight longer than the stall threshold (NIXL_AGENT_TRANSFER_STALL_AFTER, default 30 s); each is counted once, whatever it does afterwards.").data_path(),
    TRANSFER_BYTES_TOTAL = "nixl_agent_transfer_bytes_total":
        Family::counter(&["op"], "Bytes of the local descriptors of transfers that completed (done), by op.").data_path(),
    TRANSFER_DURATION_SECONDS = "nixl_agent_transfer_duration_seconds":
        Family::histogram(&["op"], "Time from post (transfer()) to completion of transfers that completed, by op: NIXL's own measure (xferDuration) when a Python agent captures NIXL telemetry (nixl_agent_config(capture_telemetry=True)), else until the program observed DONE (its poll interval included).").data_path(),
    TRANSFERS_IN_FLIGHT = "nixl_agent_transfers_in_flight":
        Family::gauge(&["op"], "Transfers posted and not yet seen to end, by op.").data_path(),
    TRANSFER_OLDEST_IN_FLIGHT_SECONDS = "nixl_agent_transfer_oldest_in_flight_seconds":
        Family::gauge(&["op"], "Age of the oldest transfer in flight, by op, as of the transfer watchdog's last look (at most a second ago); 0 when none is in flight.").data_path(),
    PEER_EVENTS_TOTAL = "nixl_agent_peer_events_total":
        Family::counter(&["event", "outcome"], "Calls about remote agents, by event (add: add_remote_agent/loadRemoteMD, or metadata that arrived another way, through NIXL's listener or a fetch, counted once when NIXL first shows it: check_remote_metadata found it or a request to it was made; remove, fetch: fetch_remote_metadata, check: check_remote_metadata found it, connect: make_connection) and outcome (ok, error).").data_path().on_first_use(),
    PEER_FAILURES_TOTAL = "nixl_agent_peer_failures_total":
        Family::counter(&["event", "reason"], "Failed calls about remote agents, by event and closed reason (metadata_mismatch for metadata NIXL refuses, nixl_not_found, nixl_backend_error).").data_path().on_first_use(),
    PEERS_LOST_TOTAL = "nixl_agent_peers_lost_total":
        Family::counter(&[], "Transfers or status polls on which NIXL reported the remote agent disconnected (reason peer_lost).").data_path(),
    REMOTE_AGENTS = "nixl_agent_remote_agents":
        Family::gauge(&[], "Remote agents whose metadata is loaded on the process's live NIXL agents (added and not removed).").data_path(),
    NOTIFICATIONS_TOTAL = "nixl_agent_notifications_total":
        Family::counter(&["direction", "outcome"], "Notifications by direction (send: send_notif/genNotif, receive: each message NIXL delivered through getNotifs, whether the program took it with get_new_notifs, update_notifs or check_remote_xfer_done) and outcome (ok; error, on first use, counts failed calls).").data_path(),
    TRANSFER_TRANSPORT = "nixl_agent_transfer_transport":
        Family::gauge(&["op", "scope", "transport"], "1 for each transport UCX picked for the transfers of some peer of this process, by op, UCX's scope of the endpoint (self, intra-node, inter-node) and transport (tcp, cma, cuda_ipc, rc_mlx5, ... closed, other for the rest); only with NIXL_AGENT_TRANSPORTS=1, from UCX's protocol report at each peer's first transfer. tcp where shared memory, CUDA IPC or RDMA was expected is a fall-back.").data_path().on_first_use(),
    PROBE_TRANSFER_UP = "nixl_agent_probe_transfer_up":
        Family::gauge(&[], "Node canary only: 1 when its last loopback round (two NIXL agents of its own, WRITE and READ of 4 KiB and 1 MiB, compared byte for byte) succeeded, 0 when it failed; absent before the first round.").probe(),
    PROBE_TRANSFERS_TOTAL = "nixl_agent_probe_transfers_total":
        Family::counter(&["outcome"], "Node canary only: loopback rounds by outcome (ok, error), one per probe_interval, half an interval after the registrations.").probe(),
    PROBE_TRANSFER_FAILURES_TOTAL = "nixl_agent_probe_transfer_failures_total":
        Family::counter(&["reason"], "Node canary only: loopback rounds that failed, by closed reason (on first use).").probe().on_first_use(),
    PROBE_TRANSFER_BYTES_PER_SECOND = "nixl_agent_probe_transfer_bytes_per_second":
        Family::gauge(&["op"], "Node canary only: the last successful round's bandwidth of the 1 MiB transfer, by op (read, write).").probe(),
    PROBE_TRANSFER_LAST_ROUND_TIMESTAMP_SECONDS = "nixl_agent_probe_transfer_last_round_timestamp_seconds":
        Family::gauge(&[], "Node canary only: Unix time the last loopback round ended, ok or not; absent before the first round. It stops moving when the canary's round thread hangs or dies.").probe(),
    PROBE_INTERVAL_SECONDS = "nixl_agent_probe_interval_seconds":
        Family::gauge(&[], "Node canary only: probe_interval, the time between two loopback rounds; present from when the round thread starts.").probe(),
}

/// Families whose series appear with their first event instead of at 0
/// from the start: failures (one series per reason that happened, not per
/// reason that could), and what only exists after something happened. The
/// rules count a failure series that appears as an increase. Everything
/// else a group has exists from its declaration (the series budget is in
/// docs/metrics.md, "Metrics").
pub const ON_FIRST_USE: &[&str] = &select::<{ count(Select::OnFirstUse) }>(Select::OnFirstUse);

/// The data path's families: exported only by a recording that follows a
/// caller's NIXL agent (observe mode, the Python instrumentation) — the
/// binary and the canary move no KV.
pub const DATA_PATH: &[&str] = &select::<{ count(Select::Scope(Scope::DataPath)) }>(Select::Scope(Scope::DataPath));

/// The node canary's loopback round: the interval once its round thread
/// started, the rest once the first round ran.
pub const PROBE: &[&str] = &select::<{ count(Select::Scope(Scope::Probe)) }>(Select::Scope(Scope::Probe));

/// Families only `nixl-agent pod` exports (the pod's own series).
pub const POD_ONLY: &[&str] = &select::<{ count(Select::Scope(Scope::Pod)) }>(Select::Scope(Scope::Pod));

/// The `reason` of `nixl_agent_pod_files_rejected_total`: why a file of a
/// pod directory is not taken as a rank.
pub const POD_REJECT_NAME: &str = "name";
pub const POD_REJECT_NOT_REGULAR: &str = "not_regular";
pub const POD_REJECT_TOO_LARGE: &str = "too_large";
pub const POD_REJECT_UNREADABLE: &str = "unreadable";
pub const POD_REJECT_NOT_A_RANK_FILE: &str = "not_a_rank_file";
pub const POD_REJECT_NAME_MISMATCH: &str = "name_mismatch";
pub const POD_REJECT_BAD_EXPOSITION: &str = "bad_exposition";
pub const POD_REJECT_RANK_LABEL: &str = "rank_label";
pub const POD_REJECT_DUPLICATE_SERIES: &str = "duplicate_series";
pub const POD_REJECT_CONFLICTING_METADATA: &str = "conflicting_metadata";
pub const POD_REJECT_FOREIGN_FAMILY: &str = "foreign_family";
/// Every one of them, exported as 0 before the first.
pub const POD_REJECT_REASONS: [&str; 11] = [
    POD_REJECT_NAME,
    POD_REJECT_NOT_REGULAR,
    POD_REJECT_TOO_LARGE,
    POD_REJECT_UNREADABLE,
    POD_REJECT_NOT_A_RANK_FILE,
    POD_REJECT_NAME_MISMATCH,
    POD_REJECT_BAD_EXPOSITION,
    POD_REJECT_RANK_LABEL,
    POD_REJECT_DUPLICATE_SERIES,
    POD_REJECT_CONFLICTING_METADATA,
    POD_REJECT_FOREIGN_FAMILY,
];

/// Values of `nixl_agent_pod_rank_exits_total`'s `how` label.
pub const RANK_EXIT_HOWS: [&str; 3] = [ENDED_EXITED, ENDED_EXCEPTION, ENDED_DIED];
/// A rank's process wrote its end record at a normal exit.
pub const ENDED_EXITED: &str = crate::model::How::Exited.as_str();
/// ... after an uncaught exception.
pub const ENDED_EXCEPTION: &str = crate::model::How::Exception.as_str();
/// It left no end record: killed by a signal, `os._exit`, `abort`.
pub const ENDED_DIED: &str = crate::model::How::Died.as_str();
/// Values of `nixl_agent_pod_publish_failures_total`'s `cause` label.
pub const PUBLISH_FAILURE_CAUSES: [&str; 3] = ["no_space", "permission", "other"];

/// Metric type, as written on the `# TYPE` line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Type {
    Counter,
    Gauge,
    Histogram,
}

impl Type {
    pub const fn as_str(self) -> &'static str {
        match self {
            Type::Counter => "counter",
            Type::Gauge => "gauge",
            Type::Histogram => "histogram",
        }
    }
}

/// Which recordings export a family.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// Every recording (the binary, an embedder, an observer, a rank).
    Every,
    /// Only one that follows a caller's NIXL agent: [`DATA_PATH`].
    DataPath,
    /// Only the node canary: [`PROBE`].
    Probe,
    /// Only `nixl-agent pod`: [`POD_ONLY`].
    Pod,
}

/// Who keeps a family's values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kept {
    /// The ledger's state, rendered at scrape time (`metrics.rs`,
    /// `xfer_families.rs`).
    Ledger,
    /// The registry's own metric, set where it happens: the build info,
    /// the trace exporter's counters, a rank's slot, the pod agent.
    Registry,
}

/// One metric family, declared once in [`FAMILIES`].
#[derive(Debug, Clone, Copy)]
pub struct Family {
    pub name: &'static str,
    pub kind: Type,
    pub labels: &'static [&'static str],
    pub help: &'static str,
    pub scope: Scope,
    pub kept: Kept,
    /// Absent until its first event: [`ON_FIRST_USE`].
    pub on_first_use: bool,
}

impl Family {
    const fn of(kind: Type, labels: &'static [&'static str], help: &'static str) -> Self {
        Family {
            name: "",
            kind,
            labels,
            help,
            scope: Scope::Every,
            kept: Kept::Ledger,
            on_first_use: false,
        }
    }

    const fn counter(labels: &'static [&'static str], help: &'static str) -> Self {
        Family::of(Type::Counter, labels, help)
    }

    const fn gauge(labels: &'static [&'static str], help: &'static str) -> Self {
        Family::of(Type::Gauge, labels, help)
    }

    const fn histogram(labels: &'static [&'static str], help: &'static str) -> Self {
        Family::of(Type::Histogram, labels, help)
    }

    const fn named(mut self, name: &'static str) -> Self {
        self.name = name;
        self
    }

    const fn data_path(mut self) -> Self {
        self.scope = Scope::DataPath;
        self
    }

    const fn probe(mut self) -> Self {
        self.scope = Scope::Probe;
        self
    }

    /// `nixl-agent pod`'s own, kept in its registry.
    const fn pod(mut self) -> Self {
        self.scope = Scope::Pod;
        self.kept = Kept::Registry;
        self
    }

    const fn registry(mut self) -> Self {
        self.kept = Kept::Registry;
        self
    }

    const fn on_first_use(mut self) -> Self {
        self.on_first_use = true;
        self
    }

    /// The family's entry in [`FAMILIES`]; panics on a name not declared there,
    /// which is a programming error caught by the first unit test.
    pub fn get(name: &str) -> &'static Family {
        FAMILIES
            .iter()
            .find(|f| f.name == name)
            .unwrap_or_else(|| panic!("metric {name} is not declared in telemetry::names"))
    }

    /// Its row of docs/metrics.md's table.
    pub fn markdown_row(&self) -> String {
        let labels: Vec<String> = self.labels.iter().map(|l| format!("`{l}`")).collect();
        let labels = if labels.is_empty() {
            "—".to_string()
        } else {
            labels.join(", ")
        };
        format!(
            "| `{}` | {} | {} | {} |",
            self.name,
            self.kind.as_str(),
            labels,
            self.help
        )
    }
}

/// docs/metrics.md's table of every family, generated from [`FAMILIES`]
/// (tests/docs.rs compares; `make docs` writes it).
pub fn markdown_table() -> String {
    let mut t = String::from("| Metric | Type | Labels | Meaning |\n|---|---|---|---|\n");
    for f in FAMILIES {
        t.push_str(&f.markdown_row());
        t.push('\n');
    }
    t
}

/// A selection of [`FAMILIES`] made at compile time.
#[derive(Clone, Copy)]
enum Select {
    Scope(Scope),
    OnFirstUse,
}

const fn selected(f: &Family, s: Select) -> bool {
    match s {
        Select::OnFirstUse => f.on_first_use,
        Select::Scope(scope) => f.scope as u8 == scope as u8,
    }
}

const fn count(s: Select) -> usize {
    let (mut i, mut n) = (0, 0);
    while i < FAMILIES.len() {
        if selected(&FAMILIES[i], s) {
            n += 1;
        }
        i += 1;
    }
    n
}

/// The names of the families `s` selects, in [`FAMILIES`]' order.
const fn select<const N: usize>(s: Select) -> [&'static str; N] {
    let mut out = [""; N];
    let (mut i, mut n) = (0, 0);
    while i < FAMILIES.len() {
        if selected(&FAMILIES[i], s) {
            out[n] = FAMILIES[i].name;
            n += 1;
        }
        i += 1;
    }
    out
}

/// Values of `build_info`'s `role` label: what this recording is for.
/// The binary registering a plan for a serving process.
pub const ROLE_AGENT: &str = "agent";
/// The binary as a node canary (`probe_interval` set).
pub const ROLE_CANARY: &str = "canary";
/// The lifecycle on the serving process's own NIXL agent (library).
pub const ROLE_EMBEDDED: &str = "embedded";
/// Observe mode: the serving process's own calls (Rust or Python).
pub const ROLE_OBSERVER: &str = "observer";
/// `nixl-agent pod`: serves the ranks of a pod.
pub const ROLE_POD: &str = "pod";

/// The `status` of `nixl_agent_nixl_calls_total` for a call NIXL threw out
/// of instead of returning (the others are NIXL's status names).
pub const NIXL_CALL_THREW: &str = crate::event::NixlCalled::THREW;

pub use crate::event::INSTRUMENT_LOG_TARGET;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_prefixed_unique_and_conventional() {
        let mut seen = std::collections::HashSet::new();
        for f in FAMILIES {
            assert!(f.name.starts_with(PREFIX), "{}", f.name);
            assert!(seen.insert(f.name), "duplicate {}", f.name);
            match f.kind {
                Type::Counter => assert!(f.name.ends_with("_total"), "{}", f.name),
                _ => assert!(!f.name.ends_with("_total"), "{}", f.name),
            }
            assert!(!f.help.is_empty());
        }
        for name in [
            REGISTRATION_ATTEMPTS_TOTAL,
            REGISTRATION_FAILURES_TOTAL,
            REGISTRATION_DESCRIPTORS,
            REGISTRATION_DURATION_SECONDS,
            REGISTERED_DESCRIPTORS,
            REGISTERED_BYTES,
            DEREGISTRATIONS_TOTAL,
            DEREGISTRATION_FAILURES_TOTAL,
            GROUP_REGISTERED,
            GROUP_STATE,
            MEMLOCK_EXEMPT,
            READY,
            NIXL_AVAILABLE,
            NIXL_FAILURES_TOTAL,
            BACKEND_UP,
            LAST_FAILURE_TIMESTAMP_SECONDS,
            MEMLOCK_LIMIT_BYTES,
            TIME_TO_READY_SECONDS,
            LIFECYCLE_STUCK,
            BUILD_INFO,
            TRACE_SPANS_DROPPED_TOTAL,
            TRACE_EXPORT_FAILURES_TOTAL,
            INSTRUMENTATION_ERRORS_TOTAL,
            NIXL_CALLS_TOTAL,
            ACCEPTED_INVALID_TOTAL,
            RANK_UP,
            RANKS_EXPECTED,
            RANK_CONFLICTS_TOTAL,
            POD_FILES_REJECTED_TOTAL,
            POD_WATCH_SECONDS,
            POD_WATCH_LAST_PASS,
            POD_DIR_REFUSED,
            INTERPOSER_BLIND,
            RANK_EXITS_TOTAL,
            PUBLISH_FAILURES_TOTAL,
            PREVIOUS_RUN_FAILURES,
            PREVIOUS_RUN_END,
        ]
        .iter()
        .chain(DATA_PATH)
        .chain(PROBE)
        {
            Family::get(name);
        }
    }

    #[test]
    fn reasons_are_snake_case_and_complete() {
        let mut seen = std::collections::HashSet::new();
        for r in Reason::ALL {
            let s = r.as_str();
            assert!(s.chars().all(|c| c.is_ascii_lowercase() || c == '_'), "{s}");
            assert!(seen.insert(s));
            assert!(!r.describe().is_empty());
            assert!(!r.advice().is_empty());
            // serde and as_str agree, so /v1/status and the label never differ.
            assert_eq!(serde_json::to_string(&r).unwrap(), format!("\"{s}\""));
        }
        assert_eq!(seen.len(), Reason::ALL.len());
    }
}
