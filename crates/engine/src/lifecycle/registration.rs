//! One group's registration on a [`Registrar`]: what the driver does per
//! attempt and per deregistration, and what `check` and the benchmark call
//! directly — so none of them re-implements an attempt or its recording.

use super::group::{register_all, release_all, Refused, Released};
use super::Registrar;
use crate::event::{CallKind, Event, GroupDecl, GroupId, Holding, Leaves, Source};
use crate::model::{AgentId, Failure, GroupFailure, GroupLabels, Region};
use crate::plan::{GroupSpec, RegionSource};
use crate::record::{self, Mark, Recorder};
use crate::validate;
use std::collections::HashSet;
use std::time::{Duration, Instant};
use tracing::field::Empty;

/// How a group of a plan is declared to the recorder.
pub fn declaration(spec: &GroupSpec) -> GroupDecl {
    let labels = spec.labels();
    GroupDecl {
        group: labels.group.clone(),
        kind: labels.kind.clone(),
        labels: Some(labels),
        backends: spec.backends.clone(),
        required: spec.required,
        validate: spec.validate,
        planned: spec.totals(),
        source: Source::Planned,
    }
}

/// Backends already created (or found on the caller's NIXL agent).
#[derive(Debug, Default)]
pub struct CreatedBackends(HashSet<String>);

/// How a group's NIXL calls are marked in the recording's in-flight table
/// and recorded: the id the ledger handed out when the group was declared
/// (none: a group the recording never declared, as `check`'s) and the
/// per-call deadline (none: marked, not held to one). Only NIXL calls are marked — never allocation, validation or
/// freeing memory, which are nixl-agent's own work.
#[derive(Debug, Clone, Copy, Default)]
pub struct Watch {
    pub group: Option<GroupId>,
    pub deadline: Option<Duration>,
}

impl Watch {
    fn mark(&self, rec: &Recorder, kind: CallKind) -> Mark {
        rec.calls().begin(kind, self.group, Instant::now(), self.deadline)
    }
}

/// A group's memory and registration handles across attempts.
pub struct Registration<R: Registrar> {
    labels: GroupLabels,
    regions: Option<Vec<Region>>,
    backing: Option<R::Backing>,
    /// One handle per registration call that holds part of the group (one
    /// when the group was registered in one call).
    handles: Vec<R::Handle>,
    descriptors: usize,
    bytes: u64,
    /// What NIXL may still hold after a rollback or a deregistration that
    /// failed, in registration order: released before anything is
    /// registered again, and kept out of the registered count.
    stuck: Released<R::Handle>,
    watch: Watch,
}

impl<R: Registrar> Registration<R> {
    pub fn new(spec: &GroupSpec) -> Self {
        Registration {
            labels: spec.labels(),
            regions: None,
            backing: None,
            handles: Vec::new(),
            descriptors: 0,
            bytes: 0,
            stuck: Released::default(),
            watch: Watch::default(),
        }
    }

    /// Marks this group's NIXL calls with `watch`.
    pub fn with_watch(mut self, watch: Watch) -> Self {
        self.watch = watch;
        self
    }

    pub fn labels(&self) -> &GroupLabels {
        &self.labels
    }

    /// How this group's NIXL calls are marked.
    pub fn watch(&self) -> Watch {
        self.watch
    }

    /// What NIXL holds (or may still hold) for the group now.
    pub fn holding(&self) -> Holding {
        let registered = if self.descriptors == 0 { 0 } else { self.bytes };
        Holding {
            descriptors: self.descriptors + self.stuck.failed,
            bytes: registered + self.stuck.failed_bytes,
        }
    }

    /// Frees the memory nixl-agent allocated (after deregistration) — or
    /// keeps it, when NIXL may still hold regions of it.
    pub fn free(&mut self) {
        if self.stuck.failed > 0 || self.descriptors > 0 {
            tracing::warn!(
                group = %self.labels.group,
                "memory kept: NIXL may still hold regions of this group, so it is not freed before exit"
            );
            self.keep();
            return;
        }
        self.backing = None;
    }

    /// Keeps the memory nixl-agent allocated for the life of the process,
    /// whatever is dropped: NIXL may still hold regions of it after a
    /// failed deregistration, and a peer may still write into them. The
    /// kernel reclaims it at exit.
    pub fn keep(&mut self) {
        if let Some(b) = self.backing.take() {
            std::mem::forget(b);
        }
    }

    /// One recorded attempt: backends and allocation first (inside the
    /// attempt's span, outside its duration), then validation and NIXL.
    /// `pinned` is what other groups already pin (for the memlock check).
    pub fn attempt(
        &mut self,
        r: &mut R,
        rec: &Recorder,
        spec: &GroupSpec,
        attempt: u32,
        backends: &mut CreatedBackends,
        pinned: u64,
    ) -> Result<(), GroupFailure> {
        let (descriptors, bytes) = spec.totals();
        let mut a = record::attempt(&self.labels, attempt, descriptors, bytes, r.capture());
        let watch = self.watch;
        let result = ensure_backends(r, rec, spec, backends, |kind| watch.mark(rec, kind))
            .and_then(|()| self.prepare(r, spec))
            .and_then(|()| {
                a.start_clock();
                self.register(r, rec, spec, pinned)
            });
        let regions = self.regions.as_deref().unwrap_or_default();
        let leaves = Leaves::Group(self.holding());
        a.finish(
            rec,
            self.watch.group,
            AgentId::LIFECYCLE,
            &self.labels,
            r.capture(),
            result,
            leaves,
            |i| regions.get(i).copied(),
        )
    }

    /// Allocates the group's memory once (the binary's groups), or takes
    /// the provided regions.
    fn prepare(&mut self, r: &mut R, spec: &GroupSpec) -> Result<(), GroupFailure> {
        if self.regions.is_some() {
            return Ok(());
        }
        let regions = match &spec.source {
            RegionSource::Provided(regions) => regions.clone(),
            RegionSource::Allocate { count, size } => {
                let (regions, backing) = r.allocate(spec, *count, *size).map_err(GroupFailure::whole)?;
                self.backing = Some(backing);
                regions
            }
        };
        self.regions = Some(regions);
        Ok(())
    }

    /// Releases what an earlier rollback or deregistration left, then
    /// validation, then the registrar's group registration (all or
    /// nothing), once per backend: NIXL's `registerMem` succeeds when any
    /// of its backends takes the list, and its `deregisterMem` then fails
    /// on the others, so a group on two backends is two registrations,
    /// each of which holds what it says.
    fn register(&mut self, r: &mut R, rec: &Recorder, spec: &GroupSpec, pinned: u64) -> Result<(), GroupFailure> {
        if self.stuck.failed > 0 {
            self.release_stuck(r, rec);
            if let Some(first) = &self.stuck.first {
                return Err(GroupFailure {
                    reason: first.reason,
                    region: None,
                    message: format!(
                        "{} regions NIXL may still hold from an earlier registration of this group could not be \
                         released ({first}); they are not registered again on top",
                        self.stuck.failed
                    ),
                    rolled_back: 0,
                    diagnostics: vec![],
                });
            }
        }
        let regions = self.regions.as_deref().unwrap_or_default();
        if spec.validate {
            validate::validate_group(spec, regions, r.probe(), pinned).map_err(|v| GroupFailure {
                reason: v.reason,
                region: v.region,
                message: v.message,
                rolled_back: 0,
                diagnostics: vec![],
            })?;
        }
        let mut handles = Vec::new();
        for one in per_backend(spec) {
            let spec = one.as_ref().unwrap_or(spec);
            let t0 = Instant::now();
            let mark = self.watch.mark(rec, CallKind::Register);
            let outcome = register_all(r, spec, regions);
            drop(mark);
            let Refused { mut failure, held } = match outcome {
                Ok(h) => {
                    handles.extend(h);
                    continue;
                }
                Err(refused) => refused,
            };
            if spec.backends.len() == 1 && one.is_some() {
                failure.message = format!("backend {}: {}", spec.backends[0], failure.message);
            }
            // What other backends took is rolled back too.
            let mut left = held;
            if !handles.is_empty() {
                let mark = self.watch.mark(rec, CallKind::Register);
                let more = release_all(r, std::mem::take(&mut handles));
                drop(mark);
                if let Some(e) = &more.first {
                    failure.message.push_str(&format!(
                        "; rollback on the other backends also failed for {} regions: {e}",
                        more.failed
                    ));
                }
                left.absorb(more);
            }
            if !left.is_clean() {
                self.left_behind(rec, failure.rolled_back, left, t0);
            }
            return Err(failure);
        }
        self.handles = handles;
        self.descriptors = regions.len();
        self.bytes = regions.iter().fold(0u64, |a, r| a.saturating_add(r.len as u64));
        Ok(())
    }

    /// Tries once more to release what NIXL may still hold of the group.
    fn release_stuck(&mut self, r: &mut R, rec: &Recorder) {
        let stuck = std::mem::take(&mut self.stuck);
        let n = stuck.failed;
        let t0 = Instant::now();
        let mark = self.watch.mark(rec, CallKind::Deregister);
        let left = release_all(r, stuck.held);
        drop(mark);
        self.left_behind(rec, n, left, t0);
    }

    /// Records what a rollback or release left for the group: a
    /// deregistration (failed, when anything is left), and what NIXL may
    /// still hold.
    fn left_behind(&mut self, rec: &Recorder, tried: usize, left: Released<R::Handle>, t0: Instant) {
        self.stuck = left;
        rec.emit(&Event::Deregistered(crate::event::Deregistered {
            group: self.watch.group,
            labels: &self.labels,
            descriptors: tried.max(self.stuck.failed),
            failed: self.stuck.failed,
            failure: self.stuck.first.as_ref(),
            elapsed: t0.elapsed(),
            holding: self.holding(),
        }));
    }

    /// Deregisters the group's handles (and what an earlier failure left)
    /// and records it; its regions and memory stay for the next attempt.
    /// `kind` is how the calls are marked (a drain's, or one group's).
    /// Returns (deregistered, failed).
    pub fn deregister(&mut self, r: &mut R, rec: &Recorder, kind: CallKind) -> (usize, usize) {
        // What an earlier failure left is tried again with the rest.
        let n = self.holding().descriptors;
        self.descriptors = 0;
        let mut handles = std::mem::take(&mut self.stuck).held;
        handles.append(&mut self.handles);
        if handles.is_empty() {
            return (0, 0);
        }
        let labels = &self.labels;
        let span = tracing::info_span!(
            "nixl.group.deregister",
            group = %labels.group,
            kind = %labels.kind,
            mem_type = labels.mem_type.as_str(),
            descriptor_count = n,
            failed = Empty,
            "otel.status_code" = Empty,
        );
        let _e = span.enter();
        let t0 = Instant::now();
        let mark = self.watch.mark(rec, kind);
        let left = release_all(r, handles);
        drop(mark);
        span.record("failed", left.failed);
        if left.failed > 0 {
            span.record("otel.status_code", "ERROR");
        }
        let failed = left.failed;
        // A handle whose deregistration failed stays ours: NIXL may still
        // hold it, the status and the drain report say so, and the next
        // attempt or drain tries it again.
        self.stuck = left;
        rec.emit(&Event::Deregistered(crate::event::Deregistered {
            group: self.watch.group,
            labels: &self.labels,
            descriptors: n,
            failed,
            failure: self.stuck.first.as_ref(),
            elapsed: t0.elapsed(),
            holding: self.holding(),
        }));
        (n.saturating_sub(failed), failed)
    }
}

/// One spec per backend when the group names more than one (`None`: the
/// spec as it is).
fn per_backend(spec: &GroupSpec) -> Vec<Option<GroupSpec>> {
    if spec.backends.len() <= 1 {
        return vec![None];
    }
    spec.backends
        .iter()
        .map(|b| {
            let mut one = spec.clone();
            one.backends = vec![b.clone()];
            Some(one)
        })
        .collect()
}

/// Creates the group's backends that are not up yet, each in its own span.
fn ensure_backends<R: Registrar>(
    r: &mut R,
    rec: &Recorder,
    spec: &GroupSpec,
    backends: &mut CreatedBackends,
    mark: impl Fn(CallKind) -> Mark,
) -> Result<(), GroupFailure> {
    for backend in &spec.backends {
        if backends.0.contains(backend) {
            continue;
        }
        let span = tracing::info_span!("nixl.backend.create", backend = %backend, outcome = Empty, "error.type" = Empty, "otel.status_code" = Empty);
        let _e = span.enter();
        let call = mark(CallKind::Register);
        let created = r.ensure_backend(backend);
        drop(call);
        match created {
            Ok(elapsed) => {
                span.record("outcome", "success");
                backends.0.insert(backend.clone());
                rec.emit(&Event::BackendCreated(crate::event::BackendCreated {
                    backend,
                    elapsed: elapsed.unwrap_or_default(),
                }));
            }
            Err(f) => {
                span.record("outcome", "failure");
                span.record("error.type", f.reason.as_str());
                span.record("otel.status_code", "ERROR");
                rec.emit(&Event::BackendFailed(crate::event::BackendFailed {
                    backend,
                    failure: &f,
                }));
                let message = format!("backend {backend}: {}", f.message);
                return Err(GroupFailure::whole(Failure::new(f.reason, message)));
            }
        }
    }
    Ok(())
}
