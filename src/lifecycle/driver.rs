//! Runs the state machine against a [`Registrar`] on one dedicated thread.
//!
//! NIXL calls block, so they never run on the async runtime: this thread owns
//! the NIXL agent, every registration handle and every allocation. It talks to
//! the rest of the agent through a control channel (in) and the status board
//! and metrics (out, via events). Each step is a tracing span:
//! `nixl.lifecycle` ⊃ `nixl.preflight`, `nixl.backend.create`,
//! `nixl.group.register` (one per attempt), `nixl.group.deregister`.

use super::group::{register_all, release_all, GroupFailure};
use super::machine::{Action, GroupState, Input, Machine, Phase};
use super::{Failure, Registrar};
use crate::config::RetryConfig;
use crate::diagnose;
use crate::plan::{Plan, Region, RegionSource};
use crate::status::StatusBoard;
use crate::telemetry::events;
use crate::telemetry::metrics::{GroupLabels, Metrics};
use crate::telemetry::names::{MemType, Reason};
use crate::validate;
use std::collections::{HashSet, VecDeque};
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender};
use std::time::{Duration, Instant};
use tracing::field::Empty;

/// Longest a retry timer waits, whatever the backoff says.
const MAX_WAIT: Duration = Duration::from_secs(24 * 3600);

/// Messages to the lifecycle thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Control {
    /// Stop registering, deregister everything, return.
    Shutdown,
    /// Deregister and register again one group (by index) or all of them.
    Reregister(Option<usize>),
}

/// What the drain did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DrainReport {
    pub deregistered: usize,
    pub failed: usize,
    pub elapsed: Duration,
}

struct Slot<R: Registrar> {
    regions: Option<Vec<Region>>,
    backing: Option<R::Backing>,
    handles: Vec<R::Handle>,
    bytes: u64,
}

/// The lifecycle thread's state.
pub struct Driver<R: Registrar> {
    registrar: R,
    plan: Plan,
    machine: Machine,
    metrics: Metrics,
    board: StatusBoard,
    labels: Vec<GroupLabels>,
    slots: Vec<Slot<R>>,
    backends_up: HashSet<String>,
    timers: Vec<(Instant, usize)>,
    control: Receiver<Control>,
    started: Instant,
    was_ready: bool,
    ever_ready: bool,
}

/// Starts the lifecycle thread. `make_registrar` runs on that thread, so the
/// registrar need not be `Send`.
pub fn spawn<R, F>(
    make_registrar: F,
    plan: Plan,
    retry: RetryConfig,
    metrics: Metrics,
    board: StatusBoard,
    started: Instant,
) -> std::io::Result<(Sender<Control>, std::thread::JoinHandle<DrainReport>)>
where
    R: Registrar,
    F: FnOnce() -> R + Send + 'static,
{
    let (tx, rx) = std::sync::mpsc::channel();
    let handle = std::thread::Builder::new()
        .name("nixl-lifecycle".into())
        .spawn(move || {
            let registrar = make_registrar();
            Driver::new(registrar, plan, retry, metrics, board, rx, started).run()
        })?;
    Ok((tx, handle))
}

impl<R: Registrar> Driver<R> {
    pub fn new(
        registrar: R,
        plan: Plan,
        retry: RetryConfig,
        metrics: Metrics,
        board: StatusBoard,
        control: Receiver<Control>,
        started: Instant,
    ) -> Self {
        let required: Vec<bool> = plan.groups.iter().map(|g| g.required).collect();
        let labels = plan.groups.iter().map(GroupLabels::of).collect();
        let slots = plan
            .groups
            .iter()
            .map(|_| Slot {
                regions: None,
                backing: None,
                handles: Vec::new(),
                bytes: 0,
            })
            .collect();
        Driver {
            registrar,
            machine: Machine::new(&required, retry),
            plan,
            metrics,
            board,
            labels,
            slots,
            backends_up: HashSet::new(),
            timers: Vec::new(),
            control,
            started,
            was_ready: false,
            ever_ready: false,
        }
    }

    /// Runs until shutdown is requested (or the control channel closes) and
    /// everything is drained.
    pub fn run(mut self) -> DrainReport {
        let root = tracing::info_span!("nixl.lifecycle", groups = self.plan.groups.len());
        let _root = root.enter();
        let mut report = DrainReport::default();
        let mut queue: VecDeque<Action> = self.step(Input::Start).into();
        let mut later: Vec<Input> = Vec::new();
        loop {
            while let Some(action) = queue.pop_front() {
                // A shutdown preempts queued work between two NIXL calls;
                // other requests wait until the queue is done.
                if self.machine.phase() != Phase::Draining {
                    if let Ok(msg) = self.control.try_recv() {
                        let inputs = self.inputs_for(msg);
                        if inputs.contains(&Input::ShutdownRequested) {
                            queue.clear();
                            queue.extend(self.step(Input::ShutdownRequested));
                            continue;
                        }
                        later.extend(inputs);
                    }
                }
                match action {
                    Action::Preflight => {
                        let r = self.preflight();
                        queue.extend(self.step(Input::PreflightFinished(r)));
                    }
                    Action::Register { group, attempt } => {
                        let result = self.attempt(group, attempt);
                        queue.extend(self.step(Input::AttemptFinished { group, result }));
                    }
                    Action::ScheduleRetry { group, after } => {
                        let now = Instant::now();
                        self.timers
                            .push((now.checked_add(after).unwrap_or(now + MAX_WAIT), group));
                        let attempt = self.machine.attempts(group);
                        events::RetryScheduled {
                            group: &self.labels[group].group,
                            attempt,
                            after,
                        }
                        .emit();
                        self.board
                            .update(|s| s.groups[group].next_retry_seconds = Some(after.as_secs_f64()));
                    }
                    Action::Deregister { group } => {
                        self.timers.retain(|(_, g)| *g != group);
                        self.deregister(group);
                    }
                    Action::Drain => {
                        report = self.drain();
                        queue.extend(self.step(Input::DrainFinished));
                    }
                    Action::Stop => return report,
                }
            }
            let inputs = if later.is_empty() {
                self.wait()
            } else {
                std::mem::take(&mut later)
            };
            for input in inputs {
                queue.extend(self.step(input));
            }
        }
    }

    /// The machine inputs a control message stands for.
    fn inputs_for(&self, msg: Control) -> Vec<Input> {
        match msg {
            Control::Shutdown => vec![Input::ShutdownRequested],
            Control::Reregister(Some(group)) if group < self.plan.groups.len() => {
                vec![Input::ReregisterRequested { group }]
            }
            Control::Reregister(Some(_)) => vec![],
            Control::Reregister(None) => (0..self.plan.groups.len())
                .map(|group| Input::ReregisterRequested { group })
                .collect(),
        }
    }

    /// Blocks until a control message or the next retry timer.
    fn wait(&mut self) -> Vec<Input> {
        loop {
            let now = Instant::now();
            if let Some(pos) = self.timers.iter().position(|(at, _)| *at <= now) {
                let (_, group) = self.timers.swap_remove(pos);
                return vec![Input::RetryDue { group }];
            }
            let msg = match self.timers.iter().map(|(at, _)| *at).min() {
                Some(at) => self.control.recv_timeout(at.saturating_duration_since(now)),
                None => self.control.recv().map_err(|_| RecvTimeoutError::Disconnected),
            };
            match msg {
                Ok(msg) => return self.inputs_for(msg),
                Err(RecvTimeoutError::Disconnected) => return vec![Input::ShutdownRequested],
                Err(RecvTimeoutError::Timeout) => continue,
            }
        }
    }

    /// Feeds the machine and publishes what changed.
    fn step(&mut self, input: Input) -> Vec<Action> {
        let actions = self.machine.handle(input);
        let ready = self.machine.ready() && !self.board.is_draining();
        if ready != self.was_ready {
            let time_to_ready = (ready && !self.ever_ready).then(|| self.started.elapsed());
            self.ever_ready |= ready;
            self.was_ready = ready;
            events::ReadinessChanged { ready, time_to_ready }.emit(&self.metrics);
            if let Some(t) = time_to_ready {
                self.board.update(|s| s.time_to_ready_seconds = Some(t.as_secs_f64()));
            }
        }
        let m = &self.machine;
        self.board.update(|s| {
            s.phase = m.phase();
            s.ready = ready;
            for (i, g) in s.groups.iter_mut().enumerate() {
                g.state = m.group_state(i);
                g.attempts = m.attempts(i);
                g.consecutive_failures = m.consecutive_failures(i);
                if g.state != GroupState::Failed {
                    g.next_retry_seconds = None;
                }
            }
        });
        actions
    }

    fn preflight(&mut self) -> Result<(), Reason> {
        let span = tracing::info_span!(
            "nixl.preflight",
            outcome = Empty,
            "error.type" = Empty,
            "otel.status_code" = Empty
        );
        let _e = span.enter();
        let memlock = self.registrar.probe().memlock();
        events::MemlockObserved {
            soft_limit: memlock.soft_limit,
            exempt: memlock.exempt,
        }
        .emit(&self.metrics);
        self.board.update(|s| s.memlock_limit_bytes = memlock.soft_limit);
        match self.registrar.preflight() {
            Ok(facts) => {
                span.record("outcome", "success");
                let snapshot = self.board.snapshot();
                let library = snapshot.nixl.library.unwrap_or_default();
                events::NixlLoaded {
                    library: std::path::Path::new(&library),
                    found_by: snapshot.nixl.found_by.as_deref().unwrap_or("unknown"),
                    version: snapshot.nixl.version.as_deref(),
                    plugins: facts.plugins.len(),
                }
                .emit(&self.metrics);
                self.board.update(|s| {
                    s.nixl.available = true;
                    s.nixl.plugins = facts.plugins;
                });
                Ok(())
            }
            Err(f) => {
                span.record("outcome", "failure");
                span.record("error.type", f.reason.as_str());
                span.record("otel.status_code", "ERROR");
                events::NixlUnavailable {
                    reason: f.reason,
                    message: &f.message,
                }
                .emit(&self.metrics);
                self.board.update(|s| {
                    s.nixl.available = false;
                    s.nixl.reason = Some(f.reason);
                    s.nixl.error = Some(f.message.clone());
                });
                Err(f.reason)
            }
        }
    }

    fn attempt(&mut self, group: usize, attempt: u32) -> Result<(), Reason> {
        let spec = &self.plan.groups[group];
        let (descriptors, planned_bytes) = spec.totals();
        let span = tracing::info_span!(
            "nixl.group.register",
            group = %spec.name,
            kind = %spec.kind,
            mem_type = spec.mem_type.as_str(),
            backend = %spec.backend_label(),
            device = spec.device,
            descriptor_count = descriptors,
            bytes = planned_bytes,
            attempt,
            outcome = Empty,
            "error.type" = Empty,
            "error.message" = Empty,
            "otel.status_code" = Empty,
            "otel.status_message" = Empty,
        );
        let _e = span.enter();
        self.registrar.capture_begin();
        // Backend creation is a one-time cost (UCX: ~0.5 s), not part of the
        // attempt's duration; the attempt is timed from allocation onwards.
        let (result, elapsed) = match self.ensure_backends(group) {
            Err(f) => (Err(f), Duration::ZERO),
            Ok(()) => {
                let t0 = Instant::now();
                let r = self.try_register(group);
                (r, t0.elapsed())
            }
        };
        let lines = self.registrar.capture_end();
        let labels = &self.labels[group];
        match result {
            Ok(()) => {
                span.record("outcome", "success");
                let slot = &self.slots[group];
                let (n, bytes) = (slot.handles.len(), slot.bytes);
                events::RegistrationSucceeded {
                    labels,
                    attempt,
                    descriptors: n,
                    bytes,
                    elapsed,
                }
                .emit(&self.metrics);
                self.board.update(|s| {
                    let g = &mut s.groups[group];
                    g.descriptors = n;
                    g.bytes = bytes;
                    g.failed_region = None;
                });
                Ok(())
            }
            Err(mut f) => {
                f.reason = diagnose::refine(f.reason, &lines);
                f.diagnostics = lines;
                span.record("outcome", "failure");
                span.record("error.type", f.reason.as_str());
                span.record("error.message", f.message.as_str());
                span.record("otel.status_code", "ERROR");
                span.record("otel.status_message", f.message.as_str());
                if let Some(i) = f.region {
                    let r = self.slots[group].regions.as_ref().and_then(|r| r.get(i)).copied();
                    events::RegionRejected {
                        group: &labels.group,
                        index: i,
                        address: r.map_or(0, |r| r.addr),
                        length: r.map_or(0, |r| r.len),
                        reason: f.reason,
                        diagnostics: &f.diagnostics,
                    }
                    .emit();
                }
                events::RegistrationFailed {
                    labels,
                    attempt,
                    descriptors,
                    reason: f.reason,
                    region: f.region,
                    message: &f.message,
                    diagnostics: &f.diagnostics,
                    rolled_back: f.rolled_back,
                    elapsed,
                }
                .emit(&self.metrics);
                self.board.update(|s| {
                    let g = &mut s.groups[group];
                    g.descriptors = 0;
                    g.bytes = 0;
                    g.last_reason = Some(f.reason);
                    g.last_error = Some(f.message.clone());
                    g.last_diagnostics = f.diagnostics.clone();
                    g.failed_region = f.region;
                });
                Err(f.reason)
            }
        }
    }

    fn ensure_backends(&mut self, group: usize) -> Result<(), GroupFailure> {
        for backend in &self.plan.groups[group].backends {
            if self.backends_up.contains(backend) {
                continue;
            }
            let span = tracing::info_span!("nixl.backend.create", backend = %backend, outcome = Empty, "error.type" = Empty, "otel.status_code" = Empty);
            let _e = span.enter();
            match self.registrar.ensure_backend(backend) {
                Ok(elapsed) => {
                    span.record("outcome", "success");
                    self.backends_up.insert(backend.clone());
                    events::BackendCreated {
                        backend,
                        elapsed: elapsed.unwrap_or_default(),
                    }
                    .emit(&self.metrics);
                    self.board.update(|s| set_backend(s, backend, true, None));
                }
                Err(f) => {
                    span.record("outcome", "failure");
                    span.record("error.type", f.reason.as_str());
                    span.record("otel.status_code", "ERROR");
                    events::BackendFailed {
                        backend,
                        reason: f.reason,
                        message: &f.message,
                    }
                    .emit(&self.metrics);
                    self.board.update(|s| set_backend(s, backend, false, Some(&f)));
                    let message = format!("backend {backend}: {}", f.message);
                    return Err(whole(Failure::new(f.reason, message)));
                }
            }
        }
        Ok(())
    }

    fn try_register(&mut self, group: usize) -> Result<(), GroupFailure> {
        let spec = &self.plan.groups[group];
        if self.slots[group].regions.is_none() {
            let regions = match &spec.source {
                RegionSource::Provided(r) => r.clone(),
                RegionSource::Allocate { count, size } => {
                    let (regions, backing) = self.registrar.allocate(spec, *count, *size).map_err(whole)?;
                    self.slots[group].backing = Some(backing);
                    regions
                }
            };
            self.slots[group].regions = Some(regions);
        }
        let regions = self.slots[group].regions.as_deref().unwrap_or_default();
        if spec.validate {
            let pinned: u64 = self
                .slots
                .iter()
                .zip(&self.plan.groups)
                .filter(|(_, g)| g.mem_type == MemType::Dram)
                .map(|(s, _)| s.bytes)
                .sum();
            validate::validate_group(spec, regions, self.registrar.probe(), pinned).map_err(|r| GroupFailure {
                reason: r.reason,
                region: r.region,
                message: r.message,
                rolled_back: 0,
                diagnostics: vec![],
            })?;
        }
        let handles = register_all(&mut self.registrar, spec, regions)?;
        let bytes = regions.iter().fold(0u64, |a, r| a.saturating_add(r.len as u64));
        let slot = &mut self.slots[group];
        slot.bytes = bytes;
        slot.handles = handles;
        Ok(())
    }

    /// Deregisters one group's handles; its regions and memory stay for the
    /// next attempt. Returns (deregistered, failed).
    fn deregister(&mut self, group: usize) -> (usize, usize) {
        let handles = std::mem::take(&mut self.slots[group].handles);
        if handles.is_empty() {
            return (0, 0);
        }
        let n = handles.len();
        let labels = &self.labels[group];
        let span = tracing::info_span!(
            "nixl.group.deregister",
            group = %labels.group,
            kind = %labels.kind,
            mem_type = labels.mem_type,
            descriptor_count = n,
            failed = Empty,
            "otel.status_code" = Empty,
        );
        let _e = span.enter();
        let g0 = Instant::now();
        let (failed, first) = release_all(&mut self.registrar, handles);
        span.record("failed", failed);
        if failed > 0 {
            span.record("otel.status_code", "ERROR");
        }
        self.slots[group].bytes = 0;
        events::GroupDeregistered {
            labels,
            descriptors: n,
            failed,
            failure: first.as_ref().map(|f| f.reason),
            elapsed: g0.elapsed(),
        }
        .emit(&self.metrics);
        self.board.update(|s| {
            s.groups[group].descriptors = 0;
            s.groups[group].bytes = 0;
        });
        (n - failed, failed)
    }

    /// Deregisters every group, last registered first, then frees memory.
    fn drain(&mut self) -> DrainReport {
        let t0 = Instant::now();
        let mut report = DrainReport::default();
        for group in (0..self.slots.len()).rev() {
            let (ok, failed) = self.deregister(group);
            report.deregistered += ok;
            report.failed += failed;
        }
        for slot in &mut self.slots {
            slot.backing = None;
        }
        report.elapsed = t0.elapsed();
        events::DrainFinished {
            descriptors: report.deregistered,
            elapsed: report.elapsed,
        }
        .emit();
        report
    }
}

fn whole(f: Failure) -> GroupFailure {
    GroupFailure {
        reason: f.reason,
        region: None,
        message: f.message,
        rolled_back: 0,
        diagnostics: vec![],
    }
}

fn set_backend(s: &mut crate::status::Status, name: &str, up: bool, failure: Option<&Failure>) {
    if let Some(b) = s.backends.iter_mut().find(|b| b.name == name) {
        b.up = up;
        b.reason = failure.map(|f| f.reason);
        b.error = failure.map(|f| f.message.clone());
    }
}
