//! The ledger's record of the process itself: its phase and readiness,
//! NIXL, memlock, the backends created or refused, the lifecycle thread,
//! the pod directory and the node canary — with the family of events that
//! writes it.

use super::{counts, Applied, State};
use crate::event::Event;
use crate::model::{Failure, Phase, Reason};
use crate::status::{NixlStatus, PodStatus, ProbeStatus};

/// One backend, as the last creation on an agent left it.
#[derive(Debug, Clone)]
pub struct Backend {
    pub name: String,
    pub up: bool,
    pub failure: Option<(Reason, String)>,
}

/// The process's facts.
#[derive(Debug)]
pub struct Process {
    pub phase: Phase,
    pub ready: bool,
    /// Set the first time readiness is reached.
    pub time_to_ready: Option<f64>,
    pub memlock_limit: Option<u64>,
    pub memlock_exempt: bool,
    pub nixl: NixlStatus,
    /// Failed loads of NIXL and creations of a NIXL agent, by reason.
    pub nixl_failures: Vec<(Reason, u64)>,
    /// In the order first created (or refused).
    pub backends: Vec<Backend>,
    pub lifecycle_dead: bool,
    pub awaits_registration: bool,
    pub pod: Option<PodStatus>,
    /// The node canary's rounds (`None` until its round thread starts).
    pub probe: Option<ProbeStatus>,
}

impl Process {
    pub(super) fn new(nixl: NixlStatus) -> Process {
        Process {
            phase: Phase::Starting,
            ready: false,
            time_to_ready: None,
            memlock_limit: None,
            memlock_exempt: false,
            nixl,
            nixl_failures: Vec::new(),
            backends: Vec::new(),
            lifecycle_dead: false,
            awaits_registration: false,
            pod: None,
            probe: None,
        }
    }

    fn backend(&mut self, name: &str, up: bool, failure: Option<&Failure>) {
        let i = match self.backends.iter().position(|b| b.name == name) {
            Some(i) => i,
            None => {
                self.backends.push(Backend {
                    name: name.to_string(),
                    up,
                    failure: None,
                });
                self.backends.len() - 1
            }
        };
        let b = &mut self.backends[i];
        b.up = up;
        b.failure = failure.map(|f| (f.reason, f.message.clone()));
    }
}

/// The `owner` word of an agent.
pub fn owner(owned: bool) -> &'static str {
    if owned {
        "nixl-agent"
    } else {
        "caller"
    }
}

impl State {
    /// The process family: `None` when `e` is of another.
    pub(super) fn apply_process(&mut self, e: &Event<'_>) -> Option<Applied> {
        let p = &mut self.process;
        match e {
            Event::MemlockObserved(crate::event::MemlockObserved { soft_limit, exempt }) => {
                p.memlock_limit = *soft_limit;
                p.memlock_exempt = *exempt;
            }
            Event::NixlLoaded(f) => {
                let n = &mut p.nixl;
                n.available = true;
                n.reason = None;
                n.error = None;
                n.plugins = f.plugins.clone();
                n.agent = Some(f.agent.clone());
                n.agent_owner = Some(owner(f.owned));
            }
            Event::NixlUnavailable(f) => {
                match p.nixl_failures.iter_mut().find(|(r, _)| *r == f.reason) {
                    Some((_, n)) => *n += 1,
                    None => p.nixl_failures.push((f.reason, 1)),
                }
                let n = &mut p.nixl;
                n.available = false;
                n.reason = Some(f.reason);
                n.error = Some(f.message.clone());
                // The loader's fix (where the library is) stays unless
                // this failure knows better.
                if f.fix.is_some() {
                    n.fix = f.fix.clone();
                }
            }
            Event::BackendCreated(crate::event::BackendCreated { backend, .. }) => p.backend(backend, true, None),
            Event::BackendFailed(crate::event::BackendFailed { backend, failure }) => {
                p.backend(backend, false, Some(failure))
            }
            Event::ProbeTransfer(r) => p.probe.get_or_insert_with(Default::default).apply(
                r.failure.as_ref(),
                r.bytes_per_second,
                r.elapsed.as_secs_f64(),
                counts::unix_now(),
            ),
            Event::CanaryStarted(crate::event::CanaryStarted { interval }) => {
                p.probe.get_or_insert_with(Default::default).interval_seconds = interval.as_secs_f64();
            }
            Event::DrainStarted => {
                if p.phase != Phase::Stopped {
                    p.phase = Phase::Draining;
                }
            }
            Event::LifecycleDied => p.lifecycle_dead = true,
            Event::PodDirectory(crate::event::PodDirectory { dir, rank, refused }) => {
                p.pod = Some(PodStatus {
                    dir: dir.to_string(),
                    rank: *rank,
                    refused: refused.map(|(r, _)| r),
                    detail: refused.map(|(_, d)| d.to_string()),
                });
            }
            Event::Interposed(crate::event::Interposed {
                status,
                library,
                version,
            }) => {
                p.nixl.interposer = Some((*status).clone());
                // The copy the interposer found by what it defines (a
                // renamed `libnixl-<hash>.so` included), where the
                // process's own look by file name found none.
                if p.nixl.library.is_none() {
                    p.nixl.library = library.map(str::to_string);
                    p.nixl.version = p.nixl.version.take().or_else(|| version.map(str::to_string));
                }
            }
            Event::AwaitRegistration => p.awaits_registration = true,
            Event::DrainFinished(crate::event::DrainFinished { .. }) => {}
            _ => return None,
        }
        Some(Applied::default())
    }

    /// Ready, by the one rule (`crate::status::ready`), from the tables.
    pub(super) fn derive_ready(&self) -> bool {
        let p = &self.process;
        crate::status::ready(crate::status::Readiness {
            nixl: p.nixl.available,
            stuck: !self.calls.stuck.is_empty(),
            lifecycle_dead: p.lifecycle_dead,
            phase: p.phase,
            required_registered: self.groups.required_registered(),
            awaits_registration: p.awaits_registration,
            anything_registered: self.groups.anything_registered(),
            pod_refused: p.pod.as_ref().is_some_and(|p| p.refused.is_some()),
            blind: p.nixl.blind().is_some(),
        })
    }
}
