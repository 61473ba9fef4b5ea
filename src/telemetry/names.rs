//! Every metric name and every closed label value the agent exports.
//!
//! Nothing else in the crate spells a metric name or a `reason`, `kind` or
//! `mem_type` value as a string literal: dashboards, alerts, the README table
//! and the tests all check against this file.

use std::fmt;

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
pub const READY: &str = "nixl_agent_ready";
pub const NIXL_AVAILABLE: &str = "nixl_agent_nixl_available";
pub const BACKEND_UP: &str = "nixl_agent_backend_up";
pub const LAST_FAILURE_TIMESTAMP_SECONDS: &str = "nixl_agent_last_failure_timestamp_seconds";
pub const MEMLOCK_LIMIT_BYTES: &str = "nixl_agent_memlock_limit_bytes";
pub const TIME_TO_READY_SECONDS: &str = "nixl_agent_time_to_ready_seconds";
pub const BUILD_INFO: &str = "nixl_agent_build_info";
pub const TRACE_SPANS_DROPPED_TOTAL: &str = "nixl_agent_trace_spans_dropped_total";
pub const TRACE_EXPORT_FAILURES_TOTAL: &str = "nixl_agent_trace_export_failures_total";

/// Every metric family the agent exports under its own prefix, with its type
/// and help text. The README metrics table is checked against this list.
pub const FAMILIES: &[Family] = &[
    Family::new(
        REGISTRATION_ATTEMPTS_TOTAL,
        Type::Counter,
        &["group", "kind", "mem_type", "backend"],
        "Registration attempts per group, successful or not.",
    ),
    Family::new(
        REGISTRATION_FAILURES_TOTAL,
        Type::Counter,
        &["group", "kind", "mem_type", "backend", "reason"],
        "Failed registration attempts per group, by closed failure reason.",
    ),
    Family::new(
        REGISTRATION_DESCRIPTORS,
        Type::Histogram,
        &["group", "kind", "mem_type", "backend"],
        "Descriptors (regions) submitted per registration attempt.",
    ),
    Family::new(
        REGISTRATION_DURATION_SECONDS,
        Type::Histogram,
        &["group", "kind", "mem_type", "backend"],
        "Wall time of one registration attempt: validation plus NIXL registration (or rollback).",
    ),
    Family::new(
        REGISTERED_DESCRIPTORS,
        Type::Gauge,
        &["group", "kind", "mem_type", "device"],
        "Descriptors registered with NIXL now.",
    ),
    Family::new(
        REGISTERED_BYTES,
        Type::Gauge,
        &["group", "kind", "mem_type", "device"],
        "Bytes registered with NIXL now.",
    ),
    Family::new(
        DEREGISTRATIONS_TOTAL,
        Type::Counter,
        &["group", "kind", "mem_type"],
        "Group deregistrations (drain, rollback excluded).",
    ),
    Family::new(
        DEREGISTRATION_FAILURES_TOTAL,
        Type::Counter,
        &["group", "kind", "mem_type", "reason"],
        "Group deregistrations that reported an error, by closed reason.",
    ),
    Family::new(
        GROUP_REGISTERED,
        Type::Gauge,
        &["group", "kind", "mem_type"],
        "1 while every region of the group is registered, else 0.",
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
        BACKEND_UP,
        Type::Gauge,
        &["backend"],
        "1 when the NIXL backend was created, else 0.",
    ),
    Family::new(
        LAST_FAILURE_TIMESTAMP_SECONDS,
        Type::Gauge,
        &["group", "reason"],
        "Unix time of the group's last failed attempt with this reason.",
    ),
    Family::new(
        MEMLOCK_LIMIT_BYTES,
        Type::Gauge,
        &[],
        "Soft RLIMIT_MEMLOCK of the process in bytes (-1 when unlimited).",
    ),
    Family::new(
        TIME_TO_READY_SECONDS,
        Type::Gauge,
        &[],
        "Seconds from agent start to first readiness (0 until ready).",
    ),
    Family::new(
        BUILD_INFO,
        Type::Gauge,
        &["version", "revision", "nixl_version"],
        "Always 1; labels carry the agent version, git revision and NIXL runtime version.",
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
];

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

/// Why a registration step failed: the closed vocabulary of the `reason` label.
///
/// Adding a variant is a design change: update the README table, the runbooks
/// and the dashboards with it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Reason {
    NixlUnavailable,
    PluginUnavailable,
    BackendInitFailed,
    CudaUnavailable,
    AllocationFailed,
    InvalidAddress,
    ZeroLength,
    UnmappedAddress,
    OverlappingRegions,
    MemTypeMismatch,
    DeviceMismatch,
    MemlockLimit,
    NixlInvalidParam,
    NixlNotFound,
    NixlBackendError,
    Timeout,
    Unknown,
}

impl Reason {
    /// Every reason, in the order the README documents them.
    pub const ALL: [Reason; 17] = [
        Reason::NixlUnavailable,
        Reason::PluginUnavailable,
        Reason::BackendInitFailed,
        Reason::CudaUnavailable,
        Reason::AllocationFailed,
        Reason::InvalidAddress,
        Reason::ZeroLength,
        Reason::UnmappedAddress,
        Reason::OverlappingRegions,
        Reason::MemTypeMismatch,
        Reason::DeviceMismatch,
        Reason::MemlockLimit,
        Reason::NixlInvalidParam,
        Reason::NixlNotFound,
        Reason::NixlBackendError,
        Reason::Timeout,
        Reason::Unknown,
    ];

    /// The label value.
    pub const fn as_str(self) -> &'static str {
        match self {
            Reason::NixlUnavailable => "nixl_unavailable",
            Reason::PluginUnavailable => "plugin_unavailable",
            Reason::BackendInitFailed => "backend_init_failed",
            Reason::CudaUnavailable => "cuda_unavailable",
            Reason::AllocationFailed => "allocation_failed",
            Reason::InvalidAddress => "invalid_address",
            Reason::ZeroLength => "zero_length",
            Reason::UnmappedAddress => "unmapped_address",
            Reason::OverlappingRegions => "overlapping_regions",
            Reason::MemTypeMismatch => "mem_type_mismatch",
            Reason::DeviceMismatch => "device_mismatch",
            Reason::MemlockLimit => "memlock_limit",
            Reason::NixlInvalidParam => "nixl_invalid_param",
            Reason::NixlNotFound => "nixl_not_found",
            Reason::NixlBackendError => "nixl_backend_error",
            Reason::Timeout => "timeout",
            Reason::Unknown => "unknown",
        }
    }

    /// One line for operators: what the reason means and where to look.
    pub const fn describe(self) -> &'static str {
        match self {
            Reason::NixlUnavailable => {
                "libnixl_capi.so was not found or could not be loaded, or no NIXL agent could be created"
            }
            Reason::PluginUnavailable => "the group's backend has no plugin in the NIXL plugin directory",
            Reason::BackendInitFailed => "the backend plugin exists but NIXL could not create the backend",
            Reason::CudaUnavailable => "a VRAM group needs a CUDA driver and device, and none was found",
            Reason::AllocationFailed => "the agent could not allocate the group's regions (binary-owned memory only)",
            Reason::InvalidAddress => "a region starts at address 0 with a non-zero length",
            Reason::ZeroLength => "a region has length 0",
            Reason::UnmappedAddress => "a DRAM region is not (fully) mapped in the process",
            Reason::OverlappingRegions => "two regions of the group overlap",
            Reason::MemTypeMismatch => {
                "a region's memory is not of the group's mem_type (e.g. a host pointer in a VRAM group)"
            }
            Reason::DeviceMismatch => "a VRAM region lives on another device than the group's device",
            Reason::MemlockLimit => "registering the group would pin more bytes than RLIMIT_MEMLOCK allows",
            Reason::NixlInvalidParam => "NIXL rejected the registration as an invalid parameter",
            Reason::NixlNotFound => "NIXL reported that a backend or descriptor was not found",
            Reason::NixlBackendError => "the NIXL backend (e.g. UCX) failed the registration; its stderr says why",
            Reason::Timeout => "a lifecycle step did not finish within its deadline",
            Reason::Unknown => "an error the agent does not classify; see the log and /v1/status",
        }
    }
}

impl Reason {
    /// What to do about it, in one line (shown by `nixl-agent check`).
    pub const fn advice(self) -> &'static str {
        match self {
            Reason::NixlUnavailable => "install NIXL (pip install nixl-cu12) or point --nixl-lib-dir / NIXL_LIB_DIR at the folder holding libnixl_capi.so",
            Reason::PluginUnavailable => "check the backend name and NIXL_PLUGIN_DIR (the plugins folder beside libnixl_capi.so)",
            Reason::BackendInitFailed => "run with UCX_LOG_LEVEL=info; check UCX_TLS / UCX_NET_DEVICES and that the NIC/driver stack is present",
            Reason::CudaUnavailable => "run on a host with a CUDA driver and expose the GPU to the container (--gpus, nvidia device plugin)",
            Reason::AllocationFailed => "lower count × size or free host/GPU memory",
            Reason::InvalidAddress => "the buffer pointer is null: the serving process handed over an unallocated tensor",
            Reason::ZeroLength => "a buffer length is 0: skip empty tensors before registering",
            Reason::UnmappedAddress => "the pointer is stale or from another process: register buffers while they are allocated",
            Reason::OverlappingRegions => "two buffers of the group overlap: register each allocation once",
            Reason::MemTypeMismatch => "use the right mem_type; for VRAM, UCX needs CUDA support (libcudart.so.12 loadable, UCX_TLS with cuda)",
            Reason::DeviceMismatch => "set the group's device to the GPU the buffers live on (CUDA_VISIBLE_DEVICES renumbers GPUs)",
            Reason::MemlockLimit => "raise the memlock limit: ulimit -l unlimited, docker --ulimit memlock=-1, systemd LimitMEMLOCK=infinity",
            Reason::NixlInvalidParam => "NIXL rejected the request: check mem_type, device ids and backend names",
            Reason::NixlNotFound => "the backend was not created or was dropped: check the backend list and its creation error",
            Reason::NixlBackendError => "read the NIXL/UCX lines attached to the failure (diagnostics); UCX_LOG_LEVEL=debug tells more",
            Reason::Timeout => "the step exceeded its deadline: check for a hung driver or collector",
            Reason::Unknown => "see the log and /v1/status for the error text",
        }
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Values of the `mem_type` label.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum MemType {
    #[serde(rename = "DRAM", alias = "dram")]
    Dram,
    #[serde(rename = "VRAM", alias = "vram")]
    Vram,
}

impl MemType {
    pub const ALL: [MemType; 2] = [MemType::Dram, MemType::Vram];

    pub const fn as_str(self) -> &'static str {
        match self {
            MemType::Dram => "DRAM",
            MemType::Vram => "VRAM",
        }
    }
}

impl fmt::Display for MemType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Well-known values of the `kind` label. A group may also use its own word
/// (validated to `[a-z0-9_]`, at most 32 bytes): see `plan::Kind`.
pub const KIND_KV: &str = "kv";
pub const KIND_AUX: &str = "aux";
pub const KIND_STATE: &str = "state";

/// Checks performed by `/readyz`, as written in its verbose output.
pub const CHECK_NIXL: &str = "nixl";
pub const CHECK_GROUP_PREFIX: &str = "group:";
pub const CHECK_DRAINING: &str = "shutdown";

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
            READY,
            NIXL_AVAILABLE,
            BACKEND_UP,
            LAST_FAILURE_TIMESTAMP_SECONDS,
            MEMLOCK_LIMIT_BYTES,
            TIME_TO_READY_SECONDS,
            BUILD_INFO,
            TRACE_SPANS_DROPPED_TOTAL,
            TRACE_EXPORT_FAILURES_TOTAL,
        ] {
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
        assert_eq!(seen.len(), 17);
    }
}
