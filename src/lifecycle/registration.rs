//! One group's registration on a [`Registrar`]: what the driver does per
//! attempt and per deregistration, and what `check` and the benchmark call
//! directly — so none of them re-implements an attempt or its recording.

use super::group::{register_all, release_all, Released};
use super::Registrar;
use crate::event::{Event, GroupDecl, Holding, Leaves, Source};
use crate::model::{AgentId, Failure, GroupFailure, GroupLabels, Region};
use crate::plan::{GroupSpec, RegionSource};
use crate::record::{self, Recorder};
use crate::validate;
use std::collections::HashSet;
use std::time::Instant;
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
pub struct Backends(HashSet<String>);

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
        }
    }

    pub fn labels(&self) -> &GroupLabels {
        &self.labels
    }

    /// What NIXL holds for the group now.
    pub fn holding(&self) -> Holding {
        Holding {
            descriptors: self.descriptors,
            bytes: if self.descriptors == 0 { 0 } else { self.bytes },
        }
    }

    /// Frees the memory nixl-agent allocated (after deregistration).
    pub fn free(&mut self) {
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
        backends: &mut Backends,
        pinned: u64,
    ) -> Result<(), GroupFailure> {
        let (descriptors, bytes) = spec.totals();
        let mut a = record::attempt(&self.labels, attempt, descriptors, bytes, r.capture());
        let result = ensure_backends(r, rec, spec, backends)
            .and_then(|()| self.prepare(r, spec))
            .and_then(|()| {
                a.start_clock();
                self.register(r, spec, pinned)
            });
        let regions = self.regions.as_deref().unwrap_or_default();
        let leaves = Leaves::Group(self.holding());
        a.finish(
            rec,
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

    /// Validation, then the registrar's group registration (all or nothing).
    fn register(&mut self, r: &mut R, spec: &GroupSpec, pinned: u64) -> Result<(), GroupFailure> {
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
        self.handles = register_all(r, spec, regions)?;
        self.descriptors = regions.len();
        self.bytes = regions.iter().fold(0u64, |a, r| a.saturating_add(r.len as u64));
        Ok(())
    }

    /// Deregisters the group's handles and records it; its regions and
    /// memory stay for the next attempt. Returns (deregistered, failed).
    pub fn deregister(&mut self, r: &mut R, rec: &Recorder) -> (usize, usize) {
        let handles = std::mem::take(&mut self.handles);
        let n = std::mem::take(&mut self.descriptors);
        if n == 0 {
            return (0, 0);
        }
        let labels = &self.labels;
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
        let t0 = Instant::now();
        let Released {
            failed,
            failed_bytes,
            first,
        } = release_all(r, handles);
        span.record("failed", failed);
        if failed > 0 {
            span.record("otel.status_code", "ERROR");
        }
        // A handle whose deregistration failed has left our hands, but NIXL
        // may still hold it: the status and the drain report say so.
        rec.emit(&Event::Deregistered {
            labels,
            descriptors: n,
            failed,
            failure: first.as_ref(),
            elapsed: t0.elapsed(),
            holding: Holding {
                descriptors: failed,
                bytes: failed_bytes,
            },
        });
        (n - failed, failed)
    }
}

/// Creates the group's backends that are not up yet, each in its own span.
fn ensure_backends<R: Registrar>(
    r: &mut R,
    rec: &Recorder,
    spec: &GroupSpec,
    backends: &mut Backends,
) -> Result<(), GroupFailure> {
    for backend in &spec.backends {
        if backends.0.contains(backend) {
            continue;
        }
        let span = tracing::info_span!("nixl.backend.create", backend = %backend, outcome = Empty, "error.type" = Empty, "otel.status_code" = Empty);
        let _e = span.enter();
        match r.ensure_backend(backend) {
            Ok(elapsed) => {
                span.record("outcome", "success");
                backends.0.insert(backend.clone());
                rec.emit(&Event::BackendCreated {
                    backend,
                    elapsed: elapsed.unwrap_or_default(),
                });
            }
            Err(f) => {
                span.record("outcome", "failure");
                span.record("error.type", f.reason.as_str());
                span.record("otel.status_code", "ERROR");
                rec.emit(&Event::BackendFailed { backend, failure: &f });
                let message = format!("backend {backend}: {}", f.message);
                return Err(GroupFailure::whole(Failure::new(f.reason, message)));
            }
        }
    }
    Ok(())
}
