//! The events of the NIXL runtime and the process around it: NIXL loaded
//! or unavailable, a backend created or refused, the memlock limit, the
//! node canary's rounds, the pod directory, each with its log line.

use super::{INSTRUMENT_LOG_TARGET, LOG_TARGET};
use crate::model::{DirRefusal, Failure, RuntimeFacts};
use std::time::Duration;

pub(super) fn nixl_loaded(f: &RuntimeFacts) {
    tracing::info!(
        target: LOG_TARGET,
        library = f.library.as_deref().unwrap_or("unknown"),
        nixl_version = f.version.as_deref().unwrap_or("unknown"),
        agent = %f.agent,
        agent_owner = if f.owned { "nixl-agent" } else { "caller" },
        plugins = f.plugins.len(),
        "NIXL runtime loaded"
    )
}

pub(super) fn nixl_unavailable(f: &Failure) {
    tracing::error!(
        target: LOG_TARGET,
        reason = f.reason.as_str(),
        error = %f.message,
        fix = f.fix.as_deref().unwrap_or(f.reason.advice()),
        "NIXL runtime unavailable; serving probes, never ready"
    )
}

/// A NIXL backend created, and how long NIXL took.
#[derive(Debug)]
pub struct BackendCreated<'a> {
    pub backend: &'a str,
    pub elapsed: Duration,
}

impl BackendCreated<'_> {
    pub(super) fn log(&self) {
        tracing::info!(
            target: LOG_TARGET,
            backend = self.backend,
            elapsed_ms = self.elapsed.as_millis() as u64,
            "NIXL backend created"
        )
    }
}

/// A NIXL backend NIXL refused to create.
#[derive(Debug)]
pub struct BackendFailed<'a> {
    pub backend: &'a str,
    pub failure: &'a Failure,
}

impl BackendFailed<'_> {
    pub(super) fn log(&self) {
        tracing::error!(
            target: LOG_TARGET,
            backend = self.backend,
            reason = self.failure.reason.as_str(),
            error = %self.failure.message,
            "NIXL backend creation failed"
        )
    }
}

/// The memlock limit this process runs under (`exempt`: CAP_IPC_LOCK).
#[derive(Debug)]
pub struct MemlockObserved {
    pub soft_limit: Option<u64>,
    pub exempt: bool,
}

impl MemlockObserved {
    pub(super) fn log(&self) {
        tracing::debug!(target: LOG_TARGET, soft_limit = self.soft_limit, cap_ipc_lock = self.exempt, "memlock limit")
    }
}

/// The node canary's round thread started: a round is due every
/// `interval` from now on (its freshness is judged against it).
#[derive(Debug)]
pub struct CanaryStarted {
    pub interval: Duration,
}

impl CanaryStarted {
    pub(super) fn log(&self) {
        tracing::info!(
            target: LOG_TARGET,
            interval_ms = self.interval.as_millis() as u64,
            "canary transfers: a loopback round every probe interval, half an interval after the registrations"
        )
    }
}

/// One loopback round of the node canary.
#[derive(Debug, Clone)]
pub struct ProbeRound {
    /// The failure that ended it, `None` when every transfer completed
    /// and its bytes compared equal.
    pub failure: Option<Failure>,
    /// Bandwidth of the large transfer, [read, write] (`XferOp::index`).
    pub bytes_per_second: [f64; 2],
    pub elapsed: Duration,
}

impl ProbeRound {
    pub(super) fn log(&self) {
        match &self.failure {
            None => tracing::debug!(
                target: LOG_TARGET,
                elapsed_ms = self.elapsed.as_millis() as u64,
                write_bytes_per_second = self.bytes_per_second[1],
                read_bytes_per_second = self.bytes_per_second[0],
                "canary loopback transfer ok"
            ),
            Some(f) => tracing::warn!(
                target: LOG_TARGET,
                reason = f.reason.as_str(),
                error = %f.message,
                "canary loopback transfer failed: this node's data path is broken"
            ),
        }
    }
}

/// The interposer's verdict: recording every `nixlAgent` call of the
/// process, or refusing this NIXL build (`status.refused`), which the
/// program's stderr was told in one line.
#[derive(Debug)]
pub struct Interposed<'a> {
    pub status: &'a crate::model::InterposerStatus,
    pub library: Option<&'a str>,
    pub version: Option<&'a str>,
}

impl Interposed<'_> {
    pub(super) fn log(&self) {
        match &self.status.refused {
            None => tracing::info!(
                target: LOG_TARGET,
                library = self.library.unwrap_or("unknown"),
                nixl_version = self.version.unwrap_or("unknown"),
                "the interposer records every NIXL call of this process"
            ),
            // The program's stderr was told in one line already: the events'
            // target, which an instrumented process logs only when asked.
            Some(why) => tracing::warn!(
                target: LOG_TARGET,
                library = self.library.unwrap_or("unknown"),
                fallback = self.status.fallback.unwrap_or("none"),
                refused = why.as_str(),
                "the interposer does not record this NIXL build (/readyz?verbose: interposer)"
            ),
        }
    }
}

/// The pod directory this process publishes to as `rank`, or one it was
/// given and will not write (`refused`, with what was seen): it runs
/// alone, and is not ready while that lasts.
#[derive(Debug)]
pub struct PodDirectory<'a> {
    pub dir: &'a str,
    pub rank: Option<u32>,
    pub refused: Option<(DirRefusal, &'a str)>,
}

impl PodDirectory<'_> {
    pub(super) fn log(&self) {
        match self.refused {
            None => {
                tracing::info!(target: LOG_TARGET, dir = self.dir, rank = self.rank, "publishing to the pod directory")
            }
            Some((reason, detail)) => tracing::error!(
                target: INSTRUMENT_LOG_TARGET,
                dir = self.dir,
                reason = reason.as_str(),
                detail,
                "the pod directory is not safe to write: running alone, not ready (/readyz?verbose: pod_dir)"
            ),
        }
    }
}
