//! One struct per thing that happens. `emit()` writes the log line and updates
//! the metrics; callers never touch a counter directly. Error text goes to the
//! log (and to /v1/status through the status board), never into a label.

use super::metrics::{GroupLabels, Metrics};
use super::names::Reason;
use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// libnixl_capi.so was found, loaded, and an agent created.
pub struct NixlLoaded<'a> {
    pub library: &'a Path,
    pub found_by: &'a str,
    pub version: Option<&'a str>,
    pub plugins: usize,
}

impl NixlLoaded<'_> {
    pub fn emit(&self, m: &Metrics) {
        m.set_nixl_available(true);
        tracing::info!(
            library = %self.library.display(),
            found_by = self.found_by,
            nixl_version = self.version.unwrap_or("unknown"),
            plugins = self.plugins,
            "NIXL runtime loaded"
        );
    }
}

/// NIXL could not be loaded or its agent could not be created.
pub struct NixlUnavailable<'a> {
    pub reason: Reason,
    pub message: &'a str,
}

impl NixlUnavailable<'_> {
    pub fn emit(&self, m: &Metrics) {
        m.set_nixl_available(false);
        tracing::error!(
            reason = self.reason.as_str(),
            error = self.message,
            "NIXL runtime unavailable; serving probes, never ready"
        );
    }
}

/// A NIXL backend was created.
pub struct BackendCreated<'a> {
    pub backend: &'a str,
    pub elapsed: Duration,
}

impl BackendCreated<'_> {
    pub fn emit(&self, m: &Metrics) {
        m.set_backend_up(self.backend, true);
        tracing::info!(
            backend = self.backend,
            elapsed_ms = self.elapsed.as_millis() as u64,
            "NIXL backend created"
        );
    }
}

/// A NIXL backend could not be created.
pub struct BackendFailed<'a> {
    pub backend: &'a str,
    pub reason: Reason,
    pub message: &'a str,
}

impl BackendFailed<'_> {
    pub fn emit(&self, m: &Metrics) {
        m.set_backend_up(self.backend, false);
        tracing::error!(
            backend = self.backend,
            reason = self.reason.as_str(),
            error = self.message,
            "NIXL backend creation failed"
        );
    }
}

/// Every region of a group is registered.
pub struct RegistrationSucceeded<'a> {
    pub labels: &'a GroupLabels,
    pub attempt: u32,
    pub descriptors: usize,
    pub bytes: u64,
    pub elapsed: Duration,
}

impl RegistrationSucceeded<'_> {
    pub fn emit(&self, m: &Metrics) {
        m.attempt(self.labels, self.descriptors, self.elapsed.as_secs_f64());
        m.registered(self.labels, self.descriptors, self.bytes);
        tracing::info!(
            group = %self.labels.group,
            kind = %self.labels.kind,
            mem_type = self.labels.mem_type,
            backend = %self.labels.backend,
            attempt = self.attempt,
            descriptors = self.descriptors,
            bytes = self.bytes,
            elapsed_us = self.elapsed.as_micros() as u64,
            "group registered"
        );
    }
}

/// An attempt failed; nothing of the group stays registered.
pub struct RegistrationFailed<'a> {
    pub labels: &'a GroupLabels,
    pub attempt: u32,
    pub descriptors: usize,
    pub reason: Reason,
    pub region: Option<usize>,
    pub message: &'a str,
    /// What NIXL/UCX printed during the attempt.
    pub diagnostics: &'a [String],
    pub rolled_back: usize,
    pub elapsed: Duration,
}

impl RegistrationFailed<'_> {
    pub fn emit(&self, m: &Metrics) {
        m.attempt(self.labels, self.descriptors, self.elapsed.as_secs_f64());
        m.failure(self.labels, self.reason, unix_now());
        m.registered(self.labels, 0, 0);
        tracing::error!(
            group = %self.labels.group,
            kind = %self.labels.kind,
            mem_type = self.labels.mem_type,
            backend = %self.labels.backend,
            attempt = self.attempt,
            descriptors = self.descriptors,
            reason = self.reason.as_str(),
            region = self.region.map(|r| r as i64).unwrap_or(-1),
            rolled_back = self.rolled_back,
            error = self.message,
            diagnostics = %self.diagnostics.join("\n"),
            "group registration failed"
        );
    }
}

/// One region was to blame for a failed attempt (a span event on the attempt).
pub struct RegionRejected<'a> {
    pub group: &'a str,
    pub index: usize,
    pub address: usize,
    pub length: usize,
    pub reason: Reason,
    pub diagnostics: &'a [String],
}

impl RegionRejected<'_> {
    pub fn emit(&self) {
        tracing::warn!(
            group = self.group,
            "region.index" = self.index,
            "region.address" = %format_args!("{:#x}", self.address),
            "region.length" = self.length,
            reason = self.reason.as_str(),
            diagnostics = %self.diagnostics.join("\n"),
            "region rejected"
        );
    }
}

/// A retry of a failed group is scheduled.
pub struct RetryScheduled<'a> {
    pub group: &'a str,
    pub attempt: u32,
    pub after: Duration,
}

impl RetryScheduled<'_> {
    pub fn emit(&self) {
        tracing::info!(
            group = self.group,
            next_attempt = self.attempt + 1,
            after_ms = self.after.as_millis() as u64,
            "retry scheduled"
        );
    }
}

/// A group's regions were deregistered during drain.
pub struct GroupDeregistered<'a> {
    pub labels: &'a GroupLabels,
    pub descriptors: usize,
    pub failed: usize,
    pub failure: Option<Reason>,
    pub elapsed: Duration,
}

impl GroupDeregistered<'_> {
    pub fn emit(&self, m: &Metrics) {
        m.deregistered(self.labels, self.failure);
        tracing::info!(
            group = %self.labels.group,
            descriptors = self.descriptors,
            failed = self.failed,
            reason = self.failure.map(Reason::as_str),
            elapsed_us = self.elapsed.as_micros() as u64,
            "group deregistered"
        );
    }
}

/// Readiness flipped.
pub struct ReadinessChanged {
    pub ready: bool,
    /// Set the first time the agent becomes ready.
    pub time_to_ready: Option<Duration>,
}

impl ReadinessChanged {
    pub fn emit(&self, m: &Metrics) {
        m.set_ready(self.ready);
        if let Some(t) = self.time_to_ready {
            m.set_time_to_ready(t.as_secs_f64());
            tracing::info!(time_to_ready_ms = t.as_millis() as u64, "ready");
        } else {
            tracing::info!(ready = self.ready, "readiness changed");
        }
    }
}

/// RLIMIT_MEMLOCK was read at start.
pub struct MemlockObserved {
    pub soft_limit: Option<u64>,
    pub exempt: bool,
}

impl MemlockObserved {
    pub fn emit(&self, m: &Metrics) {
        m.set_memlock_limit(self.soft_limit);
        tracing::debug!(
            soft_limit = self.soft_limit,
            cap_ipc_lock = self.exempt,
            "memlock limit"
        );
    }
}

/// Shutdown began: not ready from now on.
pub struct DrainStarted;

impl DrainStarted {
    pub fn emit(&self, m: &Metrics) {
        m.set_ready(false);
        tracing::info!("shutdown requested: not ready, deregistering");
    }
}

/// Drain finished.
pub struct DrainFinished {
    pub descriptors: usize,
    pub elapsed: Duration,
}

impl DrainFinished {
    pub fn emit(&self) {
        tracing::info!(
            deregistered_descriptors = self.descriptors,
            registered_descriptors = 0,
            elapsed_us = self.elapsed.as_micros() as u64,
            "drain complete"
        );
    }
}
