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

pub const REGISTRATION_ATTEMPTS_TOTAL: &str = "nixl_agent_registration_attempts_total";
pub const REGISTRATION_FAILURES_TOTAL: &str = "nixl_agent_registration_failures_total";
pub const REGISTRATION_DESCRIPTORS: &str = "nixl_agent_registration_descriptors";
pub const REGISTRATION_DURATION_SECONDS: &str = "nixl_agent_registration_duration_seconds";
pub const REGISTERED_DESCRIPTORS: &str = "nixl_agent_registered_descriptors";
pub const REGISTERED_BYTES: &str = "nixl_agent_registered_bytes";
pub const DEREGISTRATIONS_TOTAL: &str = "nixl_agent_deregistrations_total";
pub const DEREGISTRATION_FAILURES_TOTAL: &str = "nixl_agent_deregistration_failures_total";
pub const GROUP_REGISTERED: &str = "nixl_agent_group_registered";
pub const GROUP_STATE: &str = "nixl_agent_group_state";
pub const MEMLOCK_EXEMPT: &str = "nixl_agent_memlock_exempt";
pub const READY: &str = "nixl_agent_ready";
pub const NIXL_AVAILABLE: &str = "nixl_agent_nixl_available";
pub const NIXL_FAILURES_TOTAL: &str = "nixl_agent_nixl_failures_total";
pub const BACKEND_UP: &str = "nixl_agent_backend_up";
pub const LAST_FAILURE_TIMESTAMP_SECONDS: &str = "nixl_agent_last_failure_timestamp_seconds";
pub const MEMLOCK_LIMIT_BYTES: &str = "nixl_agent_memlock_limit_bytes";
pub const TIME_TO_READY_SECONDS: &str = "nixl_agent_time_to_ready_seconds";
pub const LIFECYCLE_STUCK: &str = "nixl_agent_lifecycle_stuck";
pub const OLDEST_CALL_SECONDS: &str = "nixl_agent_oldest_call_seconds";
pub const BUILD_INFO: &str = "nixl_agent_build_info";
pub const TRACE_SPANS_DROPPED_TOTAL: &str = "nixl_agent_trace_spans_dropped_total";
pub const TRACE_EXPORT_FAILURES_TOTAL: &str = "nixl_agent_trace_export_failures_total";
pub const ACCEPTED_INVALID_TOTAL: &str = "nixl_agent_accepted_invalid_total";
pub const RANK_UP: &str = "nixl_agent_rank_up";
pub const RANKS_EXPECTED: &str = "nixl_agent_ranks_expected";
pub const RANK_CONFLICTS_TOTAL: &str = "nixl_agent_rank_conflicts_total";
pub const POD_FILES_REJECTED_TOTAL: &str = "nixl_agent_pod_files_rejected_total";
pub const POD_WATCH_SECONDS: &str = "nixl_agent_pod_watch_pass_seconds";
pub const RANK_EXITS_TOTAL: &str = "nixl_agent_pod_rank_exits_total";
pub const PUBLISH_FAILURES_TOTAL: &str = "nixl_agent_pod_publish_failures_total";
pub const PREVIOUS_RUN_FAILURES: &str = "nixl_agent_previous_run_registration_failures";
pub const PREVIOUS_RUN_END: &str = "nixl_agent_previous_run_end_timestamp_seconds";
pub const POD_WATCH_LAST_PASS: &str = "nixl_agent_pod_watch_last_pass_timestamp_seconds";
pub const POD_DIR_REFUSED: &str = "nixl_agent_pod_dir_refused";
pub const INTERPOSER_BLIND: &str = "nixl_agent_interposer_blind";
pub const INSTRUMENTATION_ERRORS_TOTAL: &str = "nixl_agent_instrumentation_errors_total";
pub const NIXL_CALLS_TOTAL: &str = "nixl_agent_nixl_calls_total";
pub const TRANSFERS_TOTAL: &str = "nixl_agent_transfers_total";
pub const TRANSFER_FAILURES_TOTAL: &str = "nixl_agent_transfer_failures_total";
pub const TRANSFERS_STALLED_TOTAL: &str = "nixl_agent_transfers_stalled_total";
pub const TRANSFER_BYTES_TOTAL: &str = "nixl_agent_transfer_bytes_total";
pub const TRANSFER_DURATION_SECONDS: &str = "nixl_agent_transfer_duration_seconds";
pub const TRANSFERS_IN_FLIGHT: &str = "nixl_agent_transfers_in_flight";
pub const TRANSFER_OLDEST_IN_FLIGHT_SECONDS: &str = "nixl_agent_transfer_oldest_in_flight_seconds";
pub const PEER_EVENTS_TOTAL: &str = "nixl_agent_peer_events_total";
pub const PEER_FAILURES_TOTAL: &str = "nixl_agent_peer_failures_total";
pub const PEERS_LOST_TOTAL: &str = "nixl_agent_peers_lost_total";
pub const REMOTE_AGENTS: &str = "nixl_agent_remote_agents";
pub const NOTIFICATIONS_TOTAL: &str = "nixl_agent_notifications_total";
pub const TRANSFER_TRANSPORT: &str = "nixl_agent_transfer_transport";
pub const PROBE_TRANSFER_UP: &str = "nixl_agent_probe_transfer_up";
pub const PROBE_TRANSFERS_TOTAL: &str = "nixl_agent_probe_transfers_total";
pub const PROBE_TRANSFER_FAILURES_TOTAL: &str = "nixl_agent_probe_transfer_failures_total";
pub const PROBE_TRANSFER_BYTES_PER_SECOND: &str = "nixl_agent_probe_transfer_bytes_per_second";
pub const PROBE_TRANSFER_LAST_ROUND_TIMESTAMP_SECONDS: &str = "nixl_agent_probe_transfer_last_round_timestamp_seconds";
pub const PROBE_INTERVAL_SECONDS: &str = "nixl_agent_probe_interval_seconds";

/// The labels every per-group family carries, in this order (some add one
/// more: `reason` or `state`), so that any two can be joined on them.
pub const GROUP_LABELS: &[&str] = &["group", "kind", "mem_type", "backend", "device"];

/// Every metric family the agent exports under its own prefix, with its type
/// and help text. The docs/metrics.md metrics table is checked against this list.
pub const FAMILIES: &[Family] = &[
    Family::new(
        REGISTRATION_ATTEMPTS_TOTAL,
        Type::Counter,
        GROUP_LABELS,
        "Registration attempts per group, successful or not.",
    ),
    Family::new(
        REGISTRATION_FAILURES_TOTAL,
        Type::Counter,
        &["group", "kind", "mem_type", "backend", "device", "reason"],
        "Failed registration attempts per group, by closed failure reason.",
    ),
    Family::new(
        REGISTRATION_DESCRIPTORS,
        Type::Histogram,
        GROUP_LABELS,
        "Descriptors (regions) submitted per registration attempt.",
    ),
    Family::new(
        REGISTRATION_DURATION_SECONDS,
        Type::Histogram,
        GROUP_LABELS,
        "Wall time of one registration attempt: validation plus NIXL registration (and rollback). Backend creation and allocation are not timed; an attempt that failed before reaching NIXL is not observed.",
    ),
    Family::new(
        REGISTERED_DESCRIPTORS,
        Type::Gauge,
        GROUP_LABELS,
        "Descriptors registered with NIXL now.",
    ),
    Family::new(
        REGISTERED_BYTES,
        Type::Gauge,
        GROUP_LABELS,
        "Bytes registered with NIXL now.",
    ),
    Family::new(
        DEREGISTRATIONS_TOTAL,
        Type::Counter,
        GROUP_LABELS,
        "Deregistrations of a group's registered regions: at drain, before each re-registration (SIGUSR1 or reregister()), and each observed deregister call. Undoing a failed attempt's partial registration is counted only when it fails, as is each later try to release what it left.",
    ),
    Family::new(
        DEREGISTRATION_FAILURES_TOTAL,
        Type::Counter,
        &["group", "kind", "mem_type", "backend", "device", "reason"],
        "Group deregistrations that reported an error, by closed reason.",
    ),
    Family::new(
        GROUP_REGISTERED,
        Type::Gauge,
        GROUP_LABELS,
        "1 while every region of the group is registered (a group of no regions: after its successful attempt), else 0.",
    ),
    Family::new(
        GROUP_STATE,
        Type::Gauge,
        &["group", "kind", "mem_type", "backend", "device", "state"],
        "1 for the state the group is in (pending, registering, registered, failed, gave_up, deregistered), 0 for the others: a group that gave up stays visible after the alert windows.",
    ),
    Family::new(
        READY,
        Type::Gauge,
        &[],
        "1 while NIXL is available and every required group is registered (what /readyz reports).",
    ),
    Family::new(
        NIXL_AVAILABLE,
        Type::Gauge,
        &[],
        "1 when the NIXL runtime library was found, loaded and an agent was created.",
    ),
    Family::new(
        NIXL_FAILURES_TOTAL,
        Type::Counter,
        &["reason"],
        "Failed loads of the NIXL runtime and failed creations of a NIXL agent, by closed reason (nixl_unavailable, nixl_config); absent until the first.",
    ),
    Family::new(
        BACKEND_UP,
        Type::Gauge,
        &["backend"],
        "1 when a NIXL agent created the backend, 0 when its creation failed; absent until either.",
    ),
    Family::new(
        LAST_FAILURE_TIMESTAMP_SECONDS,
        Type::Gauge,
        &["group", "kind", "mem_type", "backend", "device", "reason"],
        "Unix time of the group's last failed attempt with this reason.",
    ),
    Family::new(
        MEMLOCK_LIMIT_BYTES,
        Type::Gauge,
        &[],
        "Soft RLIMIT_MEMLOCK of the process in bytes (+Inf when unlimited).",
    ),
    Family::new(
        MEMLOCK_EXEMPT,
        Type::Gauge,
        &[],
        "1 when the process holds CAP_IPC_LOCK, so RLIMIT_MEMLOCK does not limit what it pins, else 0.",
    ),
    Family::new(
        TIME_TO_READY_SECONDS,
        Type::Gauge,
        &[],
        "Seconds from agent start to first readiness; absent until the first readiness.",
    ),
    Family::new(
        LIFECYCLE_STUCK,
        Type::Gauge,
        &[],
        "1 while a NIXL call, the lifecycle's or an observed one, is past its deadline (nixl_call_timeout) or the lifecycle thread died (/livez fails), else 0.",
    ),
    Family::new(
        OLDEST_CALL_SECONDS,
        Type::Gauge,
        &["operation"],
        "Age of the oldest NIXL call in flight, the lifecycle's or an observed one, by operation (preflight, register, deregister, drain; under the interposer also post_xfer, create_xfer, make_connection, load_remote_md, fetch_remote_md), as the watchdog last saw it (at most a second ago); absent while none is in flight.",
    ),
    Family::new(
        BUILD_INFO,
        Type::Gauge,
        &["version", "revision", "nixl_version", "nixl_sys_version", "role"],
        "Always 1; labels carry the agent version, git revision, NIXL runtime version, nixl-sys binding version and role (agent, canary, embedded, observer, pod).",
    ),
    Family::new(
        TRACE_SPANS_DROPPED_TOTAL,
        Type::Counter,
        &[],
        "Spans dropped because the OTLP export queue was full (collector down or slow).",
    ),
    Family::new(
        TRACE_EXPORT_FAILURES_TOTAL,
        Type::Counter,
        &[],
        "OTLP export requests that failed.",
    ),
    Family::new(
        RANK_UP,
        Type::Gauge,
        &["rank"],
        "Pod agent (nixl-agent pod): 1 while a live process holds the rank's slot (its lock, tested without taking it) and touches its file, 0 once it does not.",
    ),
    Family::new(
        RANKS_EXPECTED,
        Type::Gauge,
        &[],
        "Pod agent (nixl-agent pod): how many ranks the pod's readiness waits for.",
    ),
    Family::new(
        RANK_CONFLICTS_TOTAL,
        Type::Counter,
        &[],
        "Pod agent: processes told a rank another live process held (each published under a free rank with the conflict; the pod is not ready while one lives).",
    ),
    Family::new(
        POD_FILES_REJECTED_TOTAL,
        Type::Counter,
        &["reason"],
        "Pod agent: files of the pod directory not taken as a rank, by reason (name, not_regular, too_large, unreadable, not_a_rank_file, name_mismatch, bad_exposition, rank_label, duplicate_series, conflicting_metadata, foreign_family); counted once per version of a file.",
    ),
    Family::new(
        RANK_EXITS_TOTAL,
        Type::Counter,
        &["rank", "how"],
        "Pod agent: processes of a rank that ended, by how (exited: it wrote its end record at a normal interpreter exit; exception: it did so after an uncaught exception; died: no end record, as after a signal, os._exit or kill -9). 0 for every rank the pod expects, from its start.",
    ),
    Family::new(
        PUBLISH_FAILURES_TOTAL,
        Type::Counter,
        &["cause"],
        "Writes of this rank's file to the pod directory that failed, by cause (no_space, permission, other); the heartbeat goes on on the last file written, and the pod reads the rank as stale, never as dead.",
    ),
    Family::new(
        PREVIOUS_RUN_FAILURES,
        Type::Gauge,
        &["group", "backend", "reason"],
        "The registration failures the previous process of this rank recorded before it ended, by group, backend and reason (read from the rank's file when this process claimed the slot); absent when it had none.",
    ),
    Family::new(
        PREVIOUS_RUN_END,
        Type::Gauge,
        &["how"],
        "When the previous process of this rank ended (Unix seconds: its end record's time, else its file's last write) and how (exited, exception, died). Absent when this rank had no previous process.",
    ),
    Family::new(
        POD_DIR_REFUSED,
        Type::Gauge,
        &["reason"],
        "1 when this process was told a pod directory it will not write (reason: link, not_a_directory, not_owner, writable_by_others, unusable) and runs alone; absent otherwise.",
    ),
    Family::new(
        INTERPOSER_BLIND,
        Type::Gauge,
        &["reason"],
        "1 while the interposer preloaded into this process records none of its NIXL calls, because it could not prove the loaded NIXL (reason: no_nixl, undefined_methods, no_self_test, layout_mismatch), and no front-end records instead; readiness is left as it is. Absent otherwise.",
    ),
    Family::new(
        POD_WATCH_SECONDS,
        Type::Gauge,
        &[],
        "Pod agent: how long the directory watcher's last pass over the rank files took.",
    ),
    Family::new(
        POD_WATCH_LAST_PASS,
        Type::Gauge,
        &[],
        "Pod agent: when the directory watcher last completed a pass (Unix seconds); time() minus it is how stale the pod's view is. Reported only: a slow or stalled watcher never fails /livez by itself.",
    ),
    Family::new(
        ACCEPTED_INVALID_TOTAL,
        Type::Counter,
        &["group", "kind", "mem_type", "backend", "device", "reason"],
        "Observed registrations NIXL accepted although validation rejects one of their regions (null, zero length, overlap, unmapped, wrong device), by the reason validation found.",
    ),
    Family::new(
        INSTRUMENTATION_ERRORS_TOTAL,
        Type::Counter,
        &["operation"],
        "Failures inside nixl-agent's own wrapping of a NIXL call (Python instrumentation), by wrapped operation; the program's call went ahead untouched.",
    ),
    Family::new(
        NIXL_CALLS_TOTAL,
        Type::Counter,
        &["method", "status"],
        "NIXL calls of the methods the interposer hooks with no metric of their own (queryMem), by method (its name in NIXL's API) and status (NIXL's name of the status it returned, or exception when NIXL threw); calls of the other methods are counted by their own families. Appears on first use.",
    ),
    Family::new(
        TRANSFERS_TOTAL,
        Type::Counter,
        &["op", "outcome"],
        "Transfer requests that ended, by op (read, write) and outcome (released_in_flight and peer_pending on first use): done (NIXL said DONE, from transfer() or the first check_xfer_state/get_xfer_status that saw it), error (refused at creation or post, or reported failed by a status poll; the reason is in nixl_agent_transfer_failures_total), released_in_flight (the handle was released or collected before anyone saw it end), peer_pending (creation refused only because the peer's metadata has not arrived yet, NIXL's documented retry, within NIXL_AGENT_PEER_WAIT of the first such refusal, 60 s by default; past it the refusal is an error). Counted once per posting, when it ends.",
    ),
    Family::new(
        TRANSFER_FAILURES_TOTAL,
        Type::Counter,
        &["op", "reason"],
        "Transfers that ended in error, by op and closed reason (peer_lost for a remote disconnect, nixl_not_found for a peer never added, metadata_mismatch, nixl_backend_error, nixl_error when NIXL said only ERR).",
    ),
    Family::new(
        TRANSFERS_STALLED_TOTAL,
        Type::Counter,
        &["op"],
        "Transfers found in flight longer than the stall threshold (NIXL_AGENT_TRANSFER_STALL_AFTER, default 30 s); each is counted once, whatever it does afterwards.",
    ),
    Family::new(
        TRANSFER_BYTES_TOTAL,
        Type::Counter,
        &["op"],
        "Bytes of the local descriptors of transfers that completed (done), by op.",
    ),
    Family::new(
        TRANSFER_DURATION_SECONDS,
        Type::Histogram,
        &["op"],
        "Time from post (transfer()) to completion of transfers that completed, by op: NIXL's own measure (xferDuration) when a Python agent captures NIXL telemetry (nixl_agent_config(capture_telemetry=True)), else until the program observed DONE (its poll interval included).",
    ),
    Family::new(
        TRANSFERS_IN_FLIGHT,
        Type::Gauge,
        &["op"],
        "Transfers posted and not yet seen to end, by op.",
    ),
    Family::new(
        TRANSFER_OLDEST_IN_FLIGHT_SECONDS,
        Type::Gauge,
        &["op"],
        "Age of the oldest transfer in flight, by op, as of the transfer watchdog's last look (at most a second ago); 0 when none is in flight.",
    ),
    Family::new(
        PEER_EVENTS_TOTAL,
        Type::Counter,
        &["event", "outcome"],
        "Calls about remote agents, by event (add: add_remote_agent/loadRemoteMD, or metadata that arrived another way, through NIXL's listener or a fetch, counted once when NIXL first shows it: check_remote_metadata found it or a request to it was made; remove, fetch: fetch_remote_metadata, check: check_remote_metadata found it, connect: make_connection) and outcome (ok, error).",
    ),
    Family::new(
        PEER_FAILURES_TOTAL,
        Type::Counter,
        &["event", "reason"],
        "Failed calls about remote agents, by event and closed reason (metadata_mismatch for metadata NIXL refuses, nixl_not_found, nixl_backend_error).",
    ),
    Family::new(
        PEERS_LOST_TOTAL,
        Type::Counter,
        &[],
        "Transfers or status polls on which NIXL reported the remote agent disconnected (reason peer_lost).",
    ),
    Family::new(
        REMOTE_AGENTS,
        Type::Gauge,
        &[],
        "Remote agents whose metadata is loaded on the process's live NIXL agents (added and not removed).",
    ),
    Family::new(
        NOTIFICATIONS_TOTAL,
        Type::Counter,
        &["direction", "outcome"],
        "Notifications by direction (send: send_notif/genNotif, receive: each message NIXL delivered through getNotifs, whether the program took it with get_new_notifs, update_notifs or check_remote_xfer_done) and outcome (ok; error, on first use, counts failed calls).",
    ),
    Family::new(
        TRANSFER_TRANSPORT,
        Type::Gauge,
        &["op", "scope", "transport"],
        "1 for each transport UCX picked for the transfers of some peer of this process, by op, UCX's scope of the endpoint (self, intra-node, inter-node) and transport (tcp, cma, cuda_ipc, rc_mlx5, ... closed, other for the rest); only with NIXL_AGENT_TRANSPORTS=1, from UCX's protocol report at each peer's first transfer. tcp where shared memory, CUDA IPC or RDMA was expected is a fall-back.",
    ),
    Family::new(
        PROBE_TRANSFER_UP,
        Type::Gauge,
        &[],
        "Node canary only: 1 when its last loopback round (two NIXL agents of its own, WRITE and READ of 4 KiB and 1 MiB, compared byte for byte) succeeded, 0 when it failed; absent before the first round.",
    ),
    Family::new(
        PROBE_TRANSFERS_TOTAL,
        Type::Counter,
        &["outcome"],
        "Node canary only: loopback rounds by outcome (ok, error), one per probe_interval, half an interval after the registrations.",
    ),
    Family::new(
        PROBE_TRANSFER_FAILURES_TOTAL,
        Type::Counter,
        &["reason"],
        "Node canary only: loopback rounds that failed, by closed reason (on first use).",
    ),
    Family::new(
        PROBE_TRANSFER_BYTES_PER_SECOND,
        Type::Gauge,
        &["op"],
        "Node canary only: the last successful round's bandwidth of the 1 MiB transfer, by op (read, write).",
    ),
    Family::new(
        PROBE_TRANSFER_LAST_ROUND_TIMESTAMP_SECONDS,
        Type::Gauge,
        &[],
        "Node canary only: Unix time the last loopback round ended, ok or not; absent before the first round. It stops moving when the canary's round thread hangs or dies.",
    ),
    Family::new(
        PROBE_INTERVAL_SECONDS,
        Type::Gauge,
        &[],
        "Node canary only: probe_interval, the time between two loopback rounds; present from when the round thread starts.",
    ),
];

/// Families whose series appear with their first event instead of at 0
/// from the start: failures (one series per reason that happened, not per
/// reason that could), and what only exists after something happened. The
/// rules count a failure series that appears as an increase. Everything
/// else a group has exists from its declaration (the series budget is in
/// docs/metrics.md, "Metrics").
pub const ON_FIRST_USE: &[&str] = &[
    OLDEST_CALL_SECONDS,
    PREVIOUS_RUN_FAILURES,
    PREVIOUS_RUN_END,
    PUBLISH_FAILURES_TOTAL,
    REGISTRATION_FAILURES_TOTAL,
    DEREGISTRATION_FAILURES_TOTAL,
    LAST_FAILURE_TIMESTAMP_SECONDS,
    TIME_TO_READY_SECONDS,
    ACCEPTED_INVALID_TOTAL,
    INSTRUMENTATION_ERRORS_TOTAL,
    NIXL_CALLS_TOTAL,
    TRANSFER_FAILURES_TOTAL,
    PEER_EVENTS_TOTAL,
    PEER_FAILURES_TOTAL,
    PROBE_TRANSFER_FAILURES_TOTAL,
    TRANSFER_TRANSPORT,
    INTERPOSER_BLIND,
];

/// The data path's families: exported only by a recording that follows a
/// caller's NIXL agent (observe mode, the Python instrumentation) — the
/// binary and the canary move no KV.
pub const DATA_PATH: &[&str] = &[
    TRANSFERS_TOTAL,
    TRANSFER_FAILURES_TOTAL,
    TRANSFERS_STALLED_TOTAL,
    TRANSFER_BYTES_TOTAL,
    TRANSFER_DURATION_SECONDS,
    TRANSFERS_IN_FLIGHT,
    TRANSFER_OLDEST_IN_FLIGHT_SECONDS,
    PEER_EVENTS_TOTAL,
    PEER_FAILURES_TOTAL,
    PEERS_LOST_TOTAL,
    REMOTE_AGENTS,
    NOTIFICATIONS_TOTAL,
    TRANSFER_TRANSPORT,
];

/// The node canary's loopback round: the interval once its round thread
/// started, the rest once the first round ran.
pub const PROBE: &[&str] = &[
    PROBE_TRANSFER_UP,
    PROBE_TRANSFERS_TOTAL,
    PROBE_TRANSFER_FAILURES_TOTAL,
    PROBE_TRANSFER_BYTES_PER_SECOND,
    PROBE_TRANSFER_LAST_ROUND_TIMESTAMP_SECONDS,
    PROBE_INTERVAL_SECONDS,
];

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

/// Families only `nixl-agent pod` exports (the pod's own series).
pub const POD_ONLY: &[&str] = &[
    RANK_UP,
    RANKS_EXPECTED,
    RANK_CONFLICTS_TOTAL,
    POD_FILES_REJECTED_TOTAL,
    POD_WATCH_SECONDS,
    POD_WATCH_LAST_PASS,
    RANK_EXITS_TOTAL,
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

/// One metric family: its name, type, label names and help text.
#[derive(Debug, Clone, Copy)]
pub struct Family {
    pub name: &'static str,
    pub kind: Type,
    pub labels: &'static [&'static str],
    pub help: &'static str,
}

impl Family {
    const fn new(name: &'static str, kind: Type, labels: &'static [&'static str], help: &'static str) -> Self {
        Family {
            name,
            kind,
            labels,
            help,
        }
    }

    /// The family's entry in [`FAMILIES`]; panics on a name not declared there,
    /// which is a programming error caught by the first unit test.
    pub fn get(name: &str) -> &'static Family {
        FAMILIES
            .iter()
            .find(|f| f.name == name)
            .unwrap_or_else(|| panic!("metric {name} is not declared in telemetry::names"))
    }
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
