//! Observe mode's NIXL calls: the caller's own `nixl_sys::Agent`, its own
//! descriptor and options, passed through untouched; what nixl-sys returns
//! is handed back as it is. The recording around each call is
//! [`crate::Observer`]'s.

use super::registrar::reason_of;
use crate::model::{Failure, Kind, MemType, Region};
use crate::Observer;
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

fn failure(e: &NixlError) -> Failure {
    Failure::new(reason_of(e), format!("NIXL: {e}"))
}

impl Observer {
    /// `agent.register_memory(desc, opts)`, recorded under `group`. Returns
    /// exactly what nixl-sys returned. Memory types other than DRAM and
    /// VRAM (files, blocks, objects) pass through unrecorded.
    pub fn register(
        &self,
        agent: &Agent,
        group: &str,
        kind: Kind,
        desc: &impl NixlDescriptor,
        opts: Option<&OptArgs>,
    ) -> Result<RegistrationHandle, NixlError> {
        let (mem_type, region) = region_of(desc);
        let Some(mem_type) = mem_type else {
            return agent.register_memory(desc, opts);
        };
        self.saw_agent(|| (agent.name(), plugins(agent)));
        self.record_register(
            group,
            &kind,
            mem_type,
            region,
            || agent.register_memory(desc, opts),
            failure,
        )
    }

    /// `handle.deregister()` for a region registered through
    /// [`Observer::register`] with the same `group`, `kind` and `desc`.
    pub fn deregister(
        &self,
        group: &str,
        kind: Kind,
        desc: &impl NixlDescriptor,
        handle: &mut RegistrationHandle,
    ) -> Result<(), NixlError> {
        let (mem_type, region) = region_of(desc);
        if mem_type.is_none() {
            return handle.deregister();
        }
        self.record_deregister(group, &kind, region, || handle.deregister(), failure)
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
