//! The NIXL runtime as the process found it: what `/v1/status` shows under
//! `nixl`, and the binding compiled in.

use super::Reason;
use serde::Serialize;

/// The nixl-sys version Cargo.lock pins (the binding), reported beside the
/// NIXL runtime's own version.
pub const NIXL_SYS_VERSION: &str = env!("NIXL_AGENT_NIXL_SYS_VERSION");

/// The git revision this build was made from (`unknown` outside a checkout).
pub const REVISION: &str = env!("NIXL_AGENT_REVISION");

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
    /// What the operator does about an unavailable runtime (the variable or
    /// flag, where the wheel puts the library), when loading failed.
    pub fix: Option<String>,
    /// The interposer under `libnixl.so`, in a process it was preloaded
    /// into: whether it records NIXL's calls, and why not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub interposer: Option<InterposerStatus>,
}

impl NixlStatus {
    /// The interposer refused this build and no front-end records instead:
    /// nothing of the process's NIXL calls is seen, and why.
    pub fn blind(&self) -> Option<super::Blind> {
        self.interposer
            .as_ref()
            .filter(|i| i.refused.is_some() && i.fallback.is_none())
            .map(|i| i.blind.unwrap_or(super::Blind::NoNixl))
    }
}

/// What the interposer decided for this process's NIXL build.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct InterposerStatus {
    /// It records every `nixlAgent` call of the process.
    pub recording: bool,
    /// Why it does not (what it could not prove on the loaded NIXL).
    pub refused: Option<String>,
    /// The same, as a closed word (the metric's `reason`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub blind: Option<super::Blind>,
    /// Who records instead (`python`: the Python front-end's wrappers), if
    /// anyone. A refusal never holds readiness back either way: an
    /// observability library does not take serving out of rotation.
    pub fallback: Option<&'static str>,
}
