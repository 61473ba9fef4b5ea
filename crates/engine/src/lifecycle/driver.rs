//! Runs the state machine against a [`Registrar`] on one dedicated thread.
//!
//! NIXL calls block, so they never run on the async runtime: this thread owns
//! the registrar (and through it the NIXL agent's registration handles and
//! every allocation). It talks to the rest of the agent through a control
//! channel (in) and a [`Recorder`] (out): the driver decides what happens and
//! describes it as events; it does not know how metrics, status or logs
//! record them. Spans: `nixl.preflight`, `nixl.backend.create`,
//! `nixl.group.register` (one per attempt, opened by [`record::attempt`]),
//! `nixl.group.deregister`, `nixl.drain`.

use super::machine::{Action, Input, Machine, Phase};
use super::registration::{declaration, CreatedBackends, Registration, Watch};
use super::Registrar;
use crate::config::RetryConfig;
use crate::event::{CallKind as Operation, Event, GroupProgress};
use crate::model::{MemType, Reason};
use crate::plan::Plan;
use crate::record::Recorder;
use std::collections::VecDeque;
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
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DrainReport {
    pub deregistered: usize,
    pub failed: usize,
    pub elapsed: Duration,
    /// Groups that still hold registrations after the drain (deregistration
    /// failed), with how many descriptors each: empty after a clean drain.
    pub still_registered: Vec<(String, usize)>,
}

/// The lifecycle thread's state.
pub struct Driver<R: Registrar> {
    registrar: R,
    plan: Plan,
    machine: Machine,
    rec: Recorder,
    slots: Vec<Registration<R>>,
    backends: CreatedBackends,
    timers: Vec<(Instant, usize)>,
    control: Receiver<Control>,
    /// Each NIXL call is marked in the recording's in-flight table, held
    /// to this deadline by the recording's watchdog.
    deadline: Option<Duration>,
}

/// Starts the lifecycle thread. `make_registrar` runs on that thread, so the
/// registrar need not be `Send`.
/// Every NIXL call is held to `deadline` by the recording's watchdog; a
/// thread that panics is recorded as [`Event::LifecycleDied`].
pub fn spawn<R, F>(
    make_registrar: F,
    plan: Plan,
    retry: RetryConfig,
    rec: Recorder,
    deadline: Duration,
) -> std::io::Result<(Sender<Control>, std::thread::JoinHandle<DrainReport>)>
where
    R: Registrar,
    F: FnOnce() -> R + Send + 'static,
{
    // Declared before the thread runs, so the first scrape sees every
    // group's series at 0 (declaring again in `Driver::new` is a no-op).
    for spec in &plan.groups {
        rec.emit(&Event::GroupDeclared(&declaration(spec)));
    }
    rec.watch_calls(deadline);
    let (tx, rx) = std::sync::mpsc::channel();
    let handle = std::thread::Builder::new()
        .name("nixl-lifecycle".into())
        .spawn(move || {
            // Its NIXL calls are recorded here: an interposer in the
            // process passes them through (counted once).
            nixl_agent_sys::interpose::quiet_thread();
            let died = rec.clone();
            let run = std::panic::AssertUnwindSafe(move || {
                let registrar = make_registrar();
                Driver::new(registrar, plan, retry, rec, rx)
                    .with_deadline(deadline)
                    .run()
            });
            match std::panic::catch_unwind(run) {
                Ok(report) => report,
                Err(panic) => {
                    died.emit(&Event::LifecycleDied);
                    std::panic::resume_unwind(panic)
                }
            }
        })?;
    Ok((tx, handle))
}

impl<R: Registrar> Driver<R> {
    /// Declares the plan's groups to the recorder (idempotent).
    pub fn new(registrar: R, plan: Plan, retry: RetryConfig, rec: Recorder, control: Receiver<Control>) -> Self {
        let required: Vec<bool> = plan.groups.iter().map(|g| g.required).collect();
        let slots = plan
            .groups
            .iter()
            .map(|spec| {
                let declared = rec.emit(&Event::GroupDeclared(&declaration(spec)));
                Registration::new(spec).with_watch(Watch {
                    group: declared.group,
                    deadline: None,
                })
            })
            .collect();
        Driver {
            registrar,
            machine: Machine::new(&required, retry),
            plan,
            rec,
            slots,
            backends: CreatedBackends::default(),
            timers: Vec::new(),
            control,
            deadline: None,
        }
    }

    /// Holds every NIXL call to `deadline` (the recording's watchdog looks;
    /// without it calls are marked in flight, with no deadline).
    pub fn with_deadline(mut self, deadline: Duration) -> Self {
        self.deadline = Some(deadline);
        self.slots = std::mem::take(&mut self.slots)
            .into_iter()
            .map(|s| {
                let watch = Watch {
                    deadline: Some(deadline),
                    ..s.watch()
                };
                s.with_watch(watch)
            })
            .collect();
        self
    }

    /// Runs until shutdown is requested (or the control channel closes) and
    /// everything is drained.
    pub fn run(mut self) -> DrainReport {
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
                        // Whatever timer was pending for the group is stale now.
                        self.timers.retain(|(_, g)| *g != group);
                        let result = self.attempt(group, attempt);
                        queue.extend(self.step(Input::AttemptFinished { group, result }));
                    }
                    Action::ScheduleRetry { group, after } => {
                        let now = Instant::now();
                        self.timers
                            .push((now.checked_add(after).unwrap_or(now + MAX_WAIT), group));
                        self.rec.emit(&Event::RetryScheduled(crate::event::RetryScheduled {
                            group: self.slots[group].watch().group,
                            labels: self.slots[group].labels(),
                            attempt: self.machine.attempts(group),
                            after,
                        }));
                    }
                    Action::Deregister { group } => {
                        self.timers.retain(|(_, g)| *g != group);
                        self.deregister(group, Operation::Deregister);
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

    /// Feeds the machine and records where it went.
    fn step(&mut self, input: Input) -> Vec<Action> {
        let actions = self.machine.handle(input);
        let m = &self.machine;
        let groups: Vec<GroupProgress> = self
            .slots
            .iter()
            .enumerate()
            .filter_map(|(i, s)| Some((i, s.watch().group?)))
            .map(|(i, group)| GroupProgress {
                group,
                state: m.group_state(i),
                attempts: m.attempts(i),
                consecutive_failures: m.consecutive_failures(i),
            })
            .collect();
        self.rec.emit(&Event::Progress(crate::event::Progress {
            phase: m.phase(),
            groups: &groups,
        }));
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
        self.rec.emit(&Event::MemlockObserved(crate::event::MemlockObserved {
            soft_limit: memlock.soft_limit,
            exempt: memlock.exempt,
        }));
        let mark = (self.rec.calls()).begin(Operation::Preflight, None, Instant::now(), self.deadline);
        let created = self.registrar.preflight();
        drop(mark);
        match created {
            Ok(facts) => {
                span.record("outcome", "success");
                self.rec.emit(&Event::NixlLoaded(&facts));
                Ok(())
            }
            Err(f) => {
                span.record("outcome", "failure");
                span.record("error.type", f.reason.as_str());
                span.record("otel.status_code", "ERROR");
                self.rec.emit(&Event::NixlUnavailable(&f));
                Err(f.reason)
            }
        }
    }

    fn attempt(&mut self, group: usize, attempt: u32) -> Result<(), Reason> {
        let pinned = self.pinned_dram_bytes();
        let spec = &self.plan.groups[group];
        self.slots[group]
            .attempt(
                &mut self.registrar,
                &self.rec,
                spec,
                attempt,
                &mut self.backends,
                pinned,
            )
            .map_err(|f| f.reason)
    }

    /// DRAM bytes the plan's groups hold registered now.
    fn pinned_dram_bytes(&self) -> u64 {
        self.slots
            .iter()
            .zip(&self.plan.groups)
            .filter(|(_, g)| g.mem_type == MemType::Dram)
            .map(|(s, _)| s.holding().bytes)
            .sum()
    }

    fn deregister(&mut self, group: usize, kind: Operation) -> (usize, usize) {
        self.slots[group].deregister(&mut self.registrar, &self.rec, kind)
    }

    /// Deregisters every group, last registered first, then frees the
    /// memory of every group NIXL released. A group whose deregistration
    /// failed keeps its memory (NIXL, or a peer writing into it, may still
    /// use it) until the process exits.
    fn drain(&mut self) -> DrainReport {
        let span = tracing::info_span!("nixl.drain", descriptor_count = Empty, failed = Empty);
        let _e = span.enter();
        let t0 = Instant::now();
        let mut report = DrainReport::default();
        for group in (0..self.slots.len()).rev() {
            // Each group's call is marked on its own (`drain`), held to the
            // deadline of one call; freeing memory is not a NIXL call.
            let (ok, failed) = self.deregister(group, Operation::Drain);
            report.deregistered += ok;
            report.failed += failed;
            if failed > 0 {
                report
                    .still_registered
                    .push((self.slots[group].labels().group.clone(), failed));
            }
        }
        for slot in &mut self.slots {
            // Kept, not freed, where NIXL may still hold regions of it.
            slot.free();
        }
        report.elapsed = t0.elapsed();
        span.record("descriptor_count", report.deregistered);
        span.record("failed", report.failed);
        self.rec.emit(&Event::DrainFinished(crate::event::DrainFinished {
            deregistered: report.deregistered,
            failed: report.failed,
            still_registered: report.failed,
            elapsed: report.elapsed,
        }));
        report
    }
}

#[cfg(test)]
mod tests;
