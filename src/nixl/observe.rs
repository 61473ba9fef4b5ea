//! Observe mode's NIXL side: the observer's system probe, and the caller's
//! own `nixl_sys::Agent` with its own descriptors and options, passed
//! through untouched; what nixl-sys returns is handed back as it is. The
//! recording around each call is [`crate::observe::Observer`]'s.

use super::registrar::reason_of;
use super::SystemProbe;
use crate::model::{AgentId, Failure, Kind, MemType, Region};
use crate::observe::{Call, ObserveSettings, Observer};
use nixl_sys::{Agent, NixlDescriptor, NixlError, OptArgs, RegistrationHandle};

fn region_of(desc: &impl NixlDescriptor) -> (Option<MemType>, Region) {
    let mem_type = match desc.mem_type() {
        nixl_sys::MemType::Dram => Some(MemType::Dram),
        nixl_sys::MemType::Vram => Some(MemType::Vram),
        _ => None,
    };
    // Safety: `as_ptr` only reports the descriptor's address; it is
    // recorded as a number, never dereferenced (nixl-sys reads the same
    // pointer for the registration itself).
    let addr = unsafe { desc.as_ptr() } as usize;
    let device = u32::try_from(desc.device_id()).unwrap_or(u32::MAX);
    (mem_type, Region::new(addr, desc.size(), device))
}

mod xfer;

pub use xfer::ObservedXfer;

fn failure(e: &NixlError) -> Failure {
    Failure::new(reason_of(e), format!("NIXL: {e}"))
}

impl Observer {
    /// An observer with a recording of its own; serve it with
    /// `nixl_agent::serve` or encode [`Observer::metrics`].
    pub fn new(settings: ObserveSettings) -> Observer {
        Observer::with_probe(settings, Box::new(SystemProbe))
    }

    /// Follows the caller's NIXL agent `agent` as an identity of its own:
    /// record its calls through the returned handle. Dropping the handle
    /// says the agent is gone (drop it with the agent): what the recording
    /// holds for it is released and readiness follows.
    pub fn agent(&self, agent: &Agent) -> ObservedAgent {
        let id = AgentId::fresh();
        self.saw_agent(id, &agent.name(), || plugins(agent));
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
    observer: Observer,
    agent: Agent,
    id: AgentId,
}

impl ObservedAgent {
    /// The agent's identity in the recording (`/v1/status` `agents`).
    pub fn id(&self) -> AgentId {
        self.id
    }

    /// `agent.register_memory(desc, opts)`, recorded under `group`. Returns
    /// exactly what nixl-sys returned. Memory types other than DRAM and
    /// VRAM (files, blocks, objects) pass through unrecorded.
    pub fn register(
        &self,
        group: &str,
        kind: Kind,
        desc: &impl NixlDescriptor,
        opts: Option<&OptArgs>,
    ) -> Result<RegistrationHandle, NixlError> {
        let (mem_type, region) = region_of(desc);
        let Some(mem_type) = mem_type else {
            return self.agent.register_memory(desc, opts);
        };
        let regions = [region];
        let call = Call {
            agent: self.id,
            group,
            kind: &kind,
            mem_type,
            device: self.observer.device_of(mem_type, &regions),
            backends: None,
            regions: &regions,
        };
        self.observer
            .record_register(&call, || self.agent.register_memory(desc, opts), failure)
    }

    /// `handle.deregister()` for a region registered through
    /// [`ObservedAgent::register`] with the same `desc`.
    pub fn deregister(&self, desc: &impl NixlDescriptor, handle: &mut RegistrationHandle) -> Result<(), NixlError> {
        let (mem_type, region) = region_of(desc);
        if mem_type.is_none() {
            return handle.deregister();
        }
        let mark = self.observer.deregistration_started();
        let t0 = std::time::Instant::now();
        let result = handle.deregister();
        let elapsed = t0.elapsed();
        drop(mark);
        self.observer
            .deregistered(self.id, region, 1, elapsed, result.as_ref().err().map(failure));
        result
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
