//! The domain words everything else is written in: regions, kinds, memory
//! types, the closed failure vocabulary, a failure, and the states of the
//! lifecycle and of a group.
//! The label values the metrics export are the `as_str()` of these types
//! (re-exported by `telemetry::names`).

use std::fmt;

mod blind;
mod dir_refusal;
mod ending;
mod runtime;
mod transport;
mod xfer;
pub use blind::Blind;
pub use dir_refusal::DirRefusal;
pub use ending::{Ended, How};
pub use runtime::{InterposerStatus, NixlStatus, NIXL_SYS_VERSION, REVISION};
pub use transport::{Transport, TransportScope};
pub use xfer::{BlockLens, NotifDirection, PeerOp, Transfer, XferOp, XferOutcome, OUTCOME_ERROR, OUTCOME_OK};

/// Why a registration step failed: the closed vocabulary of the `reason` label.
///
/// Adding a variant is a design change: update the docs/metrics.md table, the runbooks
/// and the dashboards with it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Reason {
    NixlUnavailable,
    NixlConfig,
    PluginUnavailable,
    BackendInitFailed,
    CudaUnavailable,
    AllocationFailed,
    InvalidAddress,
    ZeroLength,
    UnmappedAddress,
    OverlappingRegions,
    DuplicateRegions,
    MemTypeMismatch,
    DeviceMismatch,
    MemlockLimit,
    NixlInvalidParam,
    NixlNotFound,
    NixlBackendError,
    InvalidArgument,
    Timeout,
    PeerLost,
    PeerInvalidated,
    RepostActive,
    MetadataMismatch,
    NixlError,
    Unknown,
}

impl Reason {
    /// Every reason, in the order docs/metrics.md documents them.
    pub const ALL: [Reason; 25] = [
        Reason::NixlUnavailable,
        Reason::NixlConfig,
        Reason::PluginUnavailable,
        Reason::BackendInitFailed,
        Reason::CudaUnavailable,
        Reason::AllocationFailed,
        Reason::InvalidAddress,
        Reason::ZeroLength,
        Reason::UnmappedAddress,
        Reason::OverlappingRegions,
        Reason::DuplicateRegions,
        Reason::MemTypeMismatch,
        Reason::DeviceMismatch,
        Reason::MemlockLimit,
        Reason::NixlInvalidParam,
        Reason::NixlNotFound,
        Reason::NixlBackendError,
        Reason::InvalidArgument,
        Reason::Timeout,
        Reason::PeerLost,
        Reason::PeerInvalidated,
        Reason::RepostActive,
        Reason::MetadataMismatch,
        Reason::NixlError,
        Reason::Unknown,
    ];

    /// The label value.
    pub const fn as_str(self) -> &'static str {
        match self {
            Reason::NixlUnavailable => "nixl_unavailable",
            Reason::NixlConfig => "nixl_config",
            Reason::PluginUnavailable => "plugin_unavailable",
            Reason::BackendInitFailed => "backend_init_failed",
            Reason::CudaUnavailable => "cuda_unavailable",
            Reason::AllocationFailed => "allocation_failed",
            Reason::InvalidAddress => "invalid_address",
            Reason::ZeroLength => "zero_length",
            Reason::UnmappedAddress => "unmapped_address",
            Reason::OverlappingRegions => "overlapping_regions",
            Reason::DuplicateRegions => "duplicate_regions",
            Reason::MemTypeMismatch => "mem_type_mismatch",
            Reason::DeviceMismatch => "device_mismatch",
            Reason::MemlockLimit => "memlock_limit",
            Reason::NixlInvalidParam => "nixl_invalid_param",
            Reason::NixlNotFound => "nixl_not_found",
            Reason::NixlBackendError => "nixl_backend_error",
            Reason::InvalidArgument => "invalid_argument",
            Reason::Timeout => "timeout",
            Reason::PeerLost => "peer_lost",
            Reason::PeerInvalidated => "peer_invalidated",
            Reason::RepostActive => "repost_active",
            Reason::MetadataMismatch => "metadata_mismatch",
            Reason::NixlError => "nixl_error",
            Reason::Unknown => "unknown",
        }
    }

    /// One line for operators: what the reason means and where to look.
    pub const fn describe(self) -> &'static str {
        match self {
            Reason::NixlUnavailable => {
                "libnixl_capi.so was not found or could not be loaded, or no NIXL agent could be created"
            }
            Reason::NixlConfig => {
                "NIXL is loaded but refuses to create any agent because of its configuration: NIXL_CONFIG_FILE names a file that is missing, unreadable or not TOML, $HOME/.nixl.cfg cannot be looked up (a HOME the user may not search) or read, or a NIXL variable read at agent creation has a value NIXL refuses (NIXL_TELEMETRY_ENABLE, NIXL_TELEMETRY_DIR)"
            }
            Reason::PluginUnavailable => "the group's backend has no plugin in the NIXL plugin directory",
            Reason::BackendInitFailed => "the backend plugin exists but NIXL could not create the backend",
            Reason::CudaUnavailable => "a VRAM group needs a CUDA driver and device, and none was found",
            Reason::AllocationFailed => "the agent could not allocate the group's regions (binary-owned memory only)",
            Reason::InvalidAddress => "a region starts at address 0 with a non-zero length",
            Reason::ZeroLength => "a region has length 0",
            Reason::UnmappedAddress => "a DRAM region is not (fully) mapped in the process",
            Reason::OverlappingRegions => "two regions of the group overlap",
            Reason::DuplicateRegions => {
                "one registration list holds the same region twice: NIXL (1.5, UCX) accepts it and the process dies with SIGSEGV when that list is deregistered"
            }
            Reason::MemTypeMismatch => {
                "a region's memory is not of the group's mem_type (e.g. a host pointer in a VRAM group)"
            }
            Reason::DeviceMismatch => "a VRAM region lives on another device than the group's device",
            Reason::MemlockLimit => "registering the group would pin more bytes than RLIMIT_MEMLOCK allows",
            Reason::NixlInvalidParam => "NIXL rejected the registration as an invalid parameter",
            Reason::NixlNotFound => "NIXL reported that a backend or descriptor was not found",
            Reason::NixlBackendError => "the NIXL backend (e.g. UCX) failed the registration; its stderr says why",
            Reason::InvalidArgument => {
                "the caller passed NIXL's Python API something it cannot take (wrong type or shape, unknown mem type or backend name, empty list)"
            }
            Reason::Timeout => "a lifecycle step did not finish within its deadline (the group's `last_reason` while the call runs; the attempt counts with the reason it ends with)",
            Reason::PeerLost => {
                "the remote agent of a transfer went away: NIXL reported a remote disconnect (the peer process died, its NIC or link failed, or UCX's keep-alive gave up)"
            }
            Reason::PeerInvalidated => {
                "NIXL refused a stale handle: the remote agent was removed or its metadata loaded again after the request (or its prepared descriptor list) was made (NIXL_ERR_NOT_FOUND, \"was invalidated or re-registered\")"
            }
            Reason::RepostActive => {
                "the program posted a transfer request again while its last posting was still in flight (nixlRepostActiveError); that posting goes on"
            }
            Reason::MetadataMismatch => {
                "NIXL refused a remote agent's metadata or a transfer's descriptors as not matching what it knows (corrupted, truncated or stale metadata, another NIXL version)"
            }
            Reason::NixlError => {
                "NIXL reported a failed transfer without a cause (its Python API's \"ERR\"); what NIXL/UCX printed is in the log"
            }
            Reason::Unknown => "an error the agent does not classify; see the log and /v1/status",
        }
    }
}

impl Reason {
    /// What to do about it, in one line (shown by `nixl-agent check`).
    pub const fn advice(self) -> &'static str {
        match self {
            Reason::NixlUnavailable => "install NIXL (pip install nixl-cu12) or point --nixl-lib-dir / NIXL_LIB_DIR at the folder holding libnixl_capi.so",
            Reason::NixlConfig => "run with a HOME the user can search (HOME=/tmp) or set NIXL_CONFIG_FILE to a readable TOML file, or correct the NIXL variable named; the log and /v1/status name the file or variable and what is wrong with it",
            Reason::PluginUnavailable => "check the backend name and NIXL_PLUGIN_DIR (the plugins folder beside libnixl_capi.so)",
            Reason::BackendInitFailed => "run with UCX_LOG_LEVEL=info; check UCX_TLS / UCX_NET_DEVICES and that the NIC/driver stack is present",
            Reason::CudaUnavailable => "run on a host with a CUDA driver and expose the GPU to the container (--gpus, nvidia device plugin)",
            Reason::AllocationFailed => "lower count × size or free host/GPU memory",
            Reason::InvalidAddress => "the buffer pointer is null: the serving process handed over an unallocated tensor",
            Reason::ZeroLength => "a buffer length is 0: skip empty tensors before registering",
            Reason::UnmappedAddress => "the pointer is stale or from another process: register buffers while they are allocated",
            Reason::OverlappingRegions => "two buffers of the group overlap: register each allocation once",
            Reason::DuplicateRegions => "drop the repeated (addr, len) from the list before register_memory; until then never deregister that list (the process would crash)",
            Reason::MemTypeMismatch => "use the right mem_type; for VRAM, UCX needs CUDA support (libcudart.so.12 loadable, UCX_TLS with cuda)",
            Reason::DeviceMismatch => "set the group's device to the GPU the buffers live on (CUDA_VISIBLE_DEVICES renumbers GPUs)",
            Reason::MemlockLimit => "raise the memlock limit: ulimit -l unlimited, docker --ulimit memlock=-1, systemd LimitMEMLOCK=infinity",
            Reason::NixlInvalidParam => "NIXL rejected the request: check mem_type, device ids and backend names",
            Reason::NixlNotFound => "the backend was not created or was dropped: check the backend list and its creation error",
            Reason::NixlBackendError => "read the NIXL/UCX lines attached to the failure (diagnostics); UCX_LOG_LEVEL=debug tells more",
            Reason::InvalidArgument => "fix the call: a list of (addr, len, dev, meta) tuples with a mem type, an Nx3 array, tensors or a nixlRegDList; backends created first",
            Reason::Timeout => "the step exceeded its deadline: check for a hung driver or collector",
            Reason::PeerLost => "check the peer's pod (restarted? OOM-killed?), its readiness and the link (ibstat, EFA/RDMA counters); keep the UCX backend's ucx_error_handling_mode at peer (NIXL's default) so a loss is reported instead of hanging",
            Reason::PeerInvalidated => "re-create the transfer requests and prepared descriptor lists of a peer after remove_remote_agent/add_remote_agent (a peer that restarted); the peer's entry in /v1/status says when it was re-added",
            Reason::RepostActive => "poll check_xfer_state until DONE (or release the handle) before posting it again; a framework doing this is racing its own transfers",
            Reason::MetadataMismatch => "re-fetch the peer's metadata after it restarts, and run the same NIXL version on both sides (nixl_version of nixl_agent_build_info)",
            Reason::NixlError => "read the NIXL/UCX lines in the serving process's log around the failure; UCX_LOG_LEVEL=info tells more",
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
/// (validated to `[a-z0-9_]`, at most 32 bytes): see [`Kind`].
pub const KIND_KV: &str = "kv";
pub const KIND_AUX: &str = "aux";
pub const KIND_STATE: &str = "state";

/// One contiguous memory region: what NIXL calls a descriptor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Region {
    /// Start address in the process (host pointer or CUDA device pointer).
    pub addr: usize,
    /// Length in bytes.
    pub len: usize,
    /// Device id: the CUDA ordinal for VRAM, 0 for DRAM.
    pub device: u32,
}

impl Region {
    pub fn new(addr: usize, len: usize, device: u32) -> Region {
        Region { addr, len, device }
    }

    /// One past the last byte, or `None` when the region wraps the address space.
    pub fn end(&self) -> Option<usize> {
        self.addr.checked_add(self.len)
    }
}

/// What the buffers of a group are for: the `kind` label.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Kind {
    /// KV cache (usually VRAM).
    Kv,
    /// Host metadata buffers used to coordinate transfer completion.
    Aux,
    /// Model state buffers (e.g. mamba/SSM state).
    State,
    /// Any other word, `[a-z0-9_]`, at most 32 bytes (checked by the plan).
    Custom(String),
}

impl Kind {
    pub fn parse(word: &str) -> Kind {
        match word {
            KIND_KV => Kind::Kv,
            KIND_AUX => Kind::Aux,
            KIND_STATE => Kind::State,
            other => Kind::Custom(other.to_string()),
        }
    }

    pub fn as_str(&self) -> &str {
        match self {
            Kind::Kv => KIND_KV,
            Kind::Aux => KIND_AUX,
            Kind::State => KIND_STATE,
            Kind::Custom(s) => s,
        }
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A failed step: a closed reason for labels, a message for people.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    pub reason: Reason,
    pub message: String,
    /// What the operator does about this failure, when it is known better
    /// than the reason's [`Reason::advice`] (the file to correct, say).
    pub fix: Option<String>,
}

impl Failure {
    pub fn new(reason: Reason, message: impl Into<String>) -> Failure {
        Failure {
            reason,
            message: message.into(),
            fix: None,
        }
    }

    /// The same failure with its own fix.
    pub fn with_fix(mut self, fix: impl Into<String>) -> Failure {
        self.fix = Some(fix.into());
        self
    }
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.reason, self.message)
    }
}

/// Where the agent as a whole is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// Loading NIXL and creating its agent.
    Starting,
    /// NIXL is up; groups are registered and retried.
    Running,
    /// NIXL could not be loaded: the agent serves probes, never ready.
    Unavailable,
    /// Shutting down: not ready, deregistering.
    Draining,
    /// Everything deregistered.
    Stopped,
}

/// Where one group is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum GroupState {
    /// Not attempted yet.
    Pending,
    /// An attempt is in flight.
    Registering,
    /// Every region is registered.
    Registered,
    /// The last attempt failed; a retry is scheduled.
    Failed,
    /// The last attempt failed and `retry.max_attempts` is spent.
    GaveUp,
    /// Deregistered during drain.
    Deregistered,
}

impl GroupState {
    pub const ALL: [GroupState; 6] = [
        GroupState::Pending,
        GroupState::Registering,
        GroupState::Registered,
        GroupState::Failed,
        GroupState::GaveUp,
        GroupState::Deregistered,
    ];

    /// The `state` label value (as /v1/status writes it).
    pub const fn as_str(self) -> &'static str {
        match self {
            GroupState::Pending => "pending",
            GroupState::Registering => "registering",
            GroupState::Registered => "registered",
            GroupState::Failed => "failed",
            GroupState::GaveUp => "gave_up",
            GroupState::Deregistered => "deregistered",
        }
    }
}

/// The label values of one group, computed once when the group is declared
/// (from a plan, or on first use in observe mode) and carried by every event
/// about it. Only values that passed the label rules get here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupLabels {
    pub group: String,
    pub kind: Kind,
    pub mem_type: MemType,
    /// The group's backends joined with `+` (`UCX`, `UCX+GDS`).
    pub backend: String,
    pub device: u32,
}

impl GroupLabels {
    pub fn new(group: &str, kind: &Kind, mem_type: MemType, backends: &[String], device: u32) -> GroupLabels {
        GroupLabels {
            group: group.to_string(),
            kind: kind.clone(),
            mem_type,
            backend: backends.join("+"),
            device,
        }
    }
}

/// A failed group attempt, after rollback: what the metrics, the status and
/// the log say about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupFailure {
    pub reason: Reason,
    /// The region to blame, when there is one.
    pub region: Option<usize>,
    pub message: String,
    /// Regions registered before the failure and deregistered again.
    pub rolled_back: usize,
    /// What NIXL/UCX printed during the attempt.
    pub diagnostics: Vec<String>,
}

impl GroupFailure {
    /// A failure of the group as a whole (no region to blame).
    pub fn whole(f: Failure) -> GroupFailure {
        GroupFailure {
            reason: f.reason,
            region: None,
            message: f.message,
            rolled_back: 0,
            diagnostics: Vec::new(),
        }
    }
}

/// The calls of a foreign NIXL API (NIXL's Python `nixl_agent`) that the
/// instrumentation wraps: the closed values of the `operation` label of
/// `nixl_agent_instrumentation_errors_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Hooked {
    /// Installing the import hook or wrapping the class.
    Import,
    /// `nixl_agent.__init__`
    Init,
    /// `nixl_agent.create_backend`
    CreateBackend,
    /// `nixl_agent.register_memory`
    RegisterMemory,
    /// `nixl_agent.deregister_memory`
    DeregisterMemory,
    /// The transfer methods (`initialize_xfer`, `make_prepped_xfer`,
    /// `prep_xfer_dlist`, `transfer`, `check_xfer_state`, handle release).
    Transfer,
    /// The peer methods (`add_remote_agent`, `remove_remote_agent`,
    /// `fetch_remote_metadata`, `check_remote_metadata`, `make_connection`).
    Peer,
    /// `send_notif`, `get_new_notifs`.
    Notification,
    /// A method counted only by method and status (`query_memory`).
    NixlCall,
}

impl Hooked {
    pub const ALL: [Hooked; 9] = [
        Hooked::Import,
        Hooked::Init,
        Hooked::CreateBackend,
        Hooked::RegisterMemory,
        Hooked::DeregisterMemory,
        Hooked::Transfer,
        Hooked::Peer,
        Hooked::Notification,
        Hooked::NixlCall,
    ];

    pub const fn as_str(self) -> &'static str {
        match self {
            Hooked::Import => "import",
            Hooked::Init => "init",
            Hooked::CreateBackend => "create_backend",
            Hooked::RegisterMemory => "register_memory",
            Hooked::DeregisterMemory => "deregister_memory",
            Hooked::Transfer => "transfer",
            Hooked::Peer => "peer",
            Hooked::Notification => "notification",
            Hooked::NixlCall => "nixl_call",
        }
    }

    pub fn parse(word: &str) -> Option<Hooked> {
        Hooked::ALL.into_iter().find(|h| h.as_str() == word)
    }
}

/// What preflight learned about the NIXL runtime and agent.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RuntimeFacts {
    pub plugins: Vec<String>,
    /// The NIXL agent's name.
    pub agent: String,
    /// Whether nixl-agent created that NIXL agent (`false`: the caller's).
    pub owned: bool,
    pub library: Option<String>,
    pub version: Option<String>,
}

/// Which NIXL agent a fact is about: an identity the recording gives each
/// agent it sees (nixl-agent's own, each `nixl_sys::Agent` an embedder hands
/// to observe mode, each Python `nixl_agent` instance). Never a label: agent
/// names are UUIDs in SGLang and vLLM.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(transparent)]
pub struct AgentId(pub u64);

impl AgentId {
    /// The NIXL agent the lifecycle registers on (its own, or the one the
    /// embedder handed it).
    pub const LIFECYCLE: AgentId = AgentId(0);

    /// A process-wide fresh identity (never 0).
    pub fn fresh() -> AgentId {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        AgentId(NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed))
    }
}
