//! Observe mode's NIXL side: the observer's system probe, and the caller's
//! own `nixl_sys::Agent` with its own descriptors and options, passed
//! through untouched; what nixl-sys returns is handed back as it is. The
//! recording around each call is [`crate::observe::Observer`]'s.

use crate::model::{AgentId, Failure, Kind, MemType, Reason, Region};
use crate::nixl::{addr_of, reason_of, SystemProbe};
use crate::observe::{Call, ObserveSettings, Observer};
use nixl_agent_sys::interpose::quiet;
use nixl_sys::{Agent, Backend, NixlDescriptor, NixlError, OptArgs, Params, RegistrationHandle};

fn region_of(desc: &impl NixlDescriptor) -> (Option<MemType>, Region) {
    let mem_type = match desc.mem_type() {
        nixl_sys::MemType::Dram => Some(MemType::Dram),
        nixl_sys::MemType::Vram => Some(MemType::Vram),
        _ => None,
    };
    let addr = addr_of(desc);
    let device = u32::try_from(desc.device_id()).unwrap_or(u32::MAX);
    (mem_type, Region::new(addr, desc.size(), device))
}

pub(super) fn failure(e: &NixlError) -> Failure {
    Failure::new(reason_of(e), format!("NIXL: {e}"))
}

impl Observer {
    /// An observer with a recording of its own; serve it with
    /// `nixl_agent::serve` or encode [`Observer::metrics`].
    /// Its NIXL runtime is the one the program loaded: `/v1/status` and
    /// `nixl_agent_build_info` name its library and version.
    pub fn new(settings: ObserveSettings) -> Observer {
        Observer::with_runtime(settings, Box::new(SystemProbe), crate::nixl::status_in_process())
    }

    /// Follows the caller's NIXL agent `agent` as an identity of its own:
    /// record its calls through the returned handle. Dropping the handle
    /// says the agent is gone (drop it with the agent): what the recording
    /// holds for it is released and readiness follows.
    /// The backends the agent already has are recorded as created on it
    /// (their names label its calls); create later ones through
    /// [`ObservedAgent::create_backend`].
    pub fn agent(&self, agent: &Agent) -> ObservedAgent {
        let id = AgentId::fresh();
        let plugins = plugins(agent);
        self.saw_agent(id, &agent.name(), || plugins.clone());
        for p in &plugins {
            if agent.get_backend(p).is_some() {
                self.backend(id, p, Ok(std::time::Duration::ZERO));
            }
        }
        ObservedAgent {
            observer: self.clone(),
            agent: agent.clone(),
            id,
        }
    }
}

/// One NIXL agent of the caller's, followed by an [`Observer`]: its
/// registration calls are recorded on it, and a deregistration finds the
/// registration made on the same agent.
pub struct ObservedAgent {
    pub(super) observer: Observer,
    pub(super) agent: Agent,
    pub(super) id: AgentId,
}

impl ObservedAgent {
    /// The agent's identity in the recording (`/v1/status` `agents`).
    pub fn id(&self) -> AgentId {
        self.id
    }

    /// `agent.create_backend(name, params)`, recorded: the backend is up, or
    /// down with the reason, and its name labels the agent's calls. Returns
    /// exactly what nixl-sys returned.
    pub fn create_backend(&self, name: &str, params: &Params) -> Result<Backend, NixlError> {
        let t0 = std::time::Instant::now();
        let result = quiet(|| self.agent.create_backend(name, params));
        let recorded = match &result {
            Ok(_) => Ok(t0.elapsed()),
            Err(e) => Err(Failure::new(
                Reason::BackendInitFailed,
                format!("creating backend {name}: {e}"),
            )),
        };
        self.observer.backend(self.id, name, recorded);
        result
    }

    /// `agent.register_memory(desc, opts)`, recorded under `group`. Returns
    /// what nixl-sys returned, its handle inside an [`ObservedRegistration`]
    /// that records the deregistration however it happens. Memory types
    /// other than DRAM and VRAM (files, blocks, objects) pass through
    /// unrecorded.
    ///
    /// `OptArgs` cannot be read back, so the call is labelled with the
    /// backends the agent has; to register on some of them and have the
    /// labels say which, use [`ObservedAgent::register_on`].
    pub fn register(
        &self,
        group: &str,
        kind: Kind,
        desc: &impl NixlDescriptor,
        opts: Option<&OptArgs>,
    ) -> Result<ObservedRegistration, NixlError> {
        self.register_with(group, kind, desc, opts, None)
    }

    /// [`ObservedAgent::register`] on the named backends of this agent (as
    /// `OptArgs` with exactly those added, which NIXL is given), labelled
    /// with them. A name the agent has no backend for is NIXL's `NotFound`,
    /// before any call.
    pub fn register_on(
        &self,
        group: &str,
        kind: Kind,
        desc: &impl NixlDescriptor,
        backends: &[&str],
    ) -> Result<ObservedRegistration, NixlError> {
        let mut opts = OptArgs::new()?;
        for name in backends {
            let backend = self.agent.get_backend(name).ok_or(NixlError::NotFound)?;
            opts.add_backend(&backend)?;
        }
        let names: Vec<String> = backends.iter().map(|b| b.to_string()).collect();
        self.register_with(group, kind, desc, Some(&opts), Some(&names))
    }

    fn register_with(
        &self,
        group: &str,
        kind: Kind,
        desc: &impl NixlDescriptor,
        opts: Option<&OptArgs>,
        backends: Option<&[String]>,
    ) -> Result<ObservedRegistration, NixlError> {
        let (mem_type, region) = region_of(desc);
        let Some(mem_type) = mem_type else {
            return self
                .agent
                .register_memory(desc, opts)
                .map(|handle| ObservedRegistration {
                    handle,
                    recording: None,
                });
        };
        let regions = [region];
        let call = Call {
            agent: self.id,
            group,
            kind: &kind,
            mem_type,
            device: self.observer.device_of(mem_type, &regions),
            backends,
            regions: &regions,
        };
        let handle =
            self.observer
                .record_register(&call, || quiet(|| self.agent.register_memory(desc, opts)), failure)?;
        Ok(ObservedRegistration {
            handle,
            recording: Some((self.observer.clone(), self.id, region)),
        })
    }
}

/// A registration made through [`ObservedAgent::register`]: the nixl-sys
/// handle (it derefs to it) and what the recording knows of it. Its
/// deregistration — [`ObservedRegistration::deregister`], or dropping it,
/// which deregisters as dropping a `RegistrationHandle` does — is recorded
/// once, so the recording never says NIXL holds what it released.
pub struct ObservedRegistration {
    handle: RegistrationHandle,
    /// The observer, agent and region the registration was recorded under;
    /// `None` for memory that is not recorded, or once deregistered.
    recording: Option<(Observer, AgentId, Region)>,
}

impl std::ops::Deref for ObservedRegistration {
    type Target = RegistrationHandle;

    fn deref(&self) -> &RegistrationHandle {
        &self.handle
    }
}

impl ObservedRegistration {
    /// `handle.deregister()`, recorded (the first time only: nixl-sys makes
    /// a second call a no-op too).
    pub fn deregister(&mut self) -> Result<(), NixlError> {
        let Some((observer, agent, region)) = self.recording.take() else {
            return quiet(|| self.handle.deregister());
        };
        let mark = observer.deregistration_started();
        let result = quiet(|| self.handle.deregister());
        let elapsed = mark.started().elapsed();
        drop(mark);
        observer.deregistered(agent, region, 1, elapsed, result.as_ref().err().map(failure));
        result
    }
}

impl Drop for ObservedRegistration {
    fn drop(&mut self) {
        // Dropping nixl-sys's handle would deregister unrecorded: do it
        // here, recorded, first.
        let _ = self.deregister();
    }
}

impl Drop for ObservedAgent {
    fn drop(&mut self) {
        self.observer.agent_released(self.id);
    }
}

fn plugins(agent: &Agent) -> Vec<String> {
    match agent.get_available_plugins() {
        Ok(list) => (0..list.len().unwrap_or(0))
            .filter_map(|i| list.get(i).ok().map(str::to_string))
            .collect(),
        Err(_) => Vec::new(),
    }
}
