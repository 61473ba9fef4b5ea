//! NIXL's own batched registration, the peer the agent is measured
//! against: one NIXL agent with a UCX backend created through NIXL's C API
//! (nixl-agent-sys's `CAgent`, the same calls nixl-sys makes), every region
//! registered in one `nixl_capi_register_mem` call and released in one.

use nixl_agent::{MemType, Region};
use nixl_agent_sys::capi::{Backends, CAgent, Registered};
use std::sync::Arc;

/// One NIXL agent with a UCX backend (no progress or listen thread).
pub struct BatchAgent {
    // Field order is drop order: the backends' options before the agent.
    on: Arc<Backends>,
    agent: CAgent,
}

/// A registered descriptor list; `BatchAgent::deregister` releases it.
pub struct Batch(Registered);

impl BatchAgent {
    /// The agent `name` on the C API `common::load_nixl` loaded.
    pub fn new(name: &str) -> Result<BatchAgent, String> {
        let agent = CAgent::new(name)?;
        agent.create_backend("UCX").map_err(|e| e.to_string())?;
        let on = Arc::new(agent.backends(&["UCX".to_string()]).map_err(|e| e.to_string())?);
        Ok(BatchAgent { on, agent })
    }

    /// Registers every region in one call (descriptor list built inside).
    pub fn register(&self, regions: &[Region]) -> Result<Batch, String> {
        self.agent
            .register(MemType::Dram, regions, &self.on)
            .map(Batch)
            .map_err(|e| e.to_string())
    }

    /// Deregisters a whole list in one call.
    pub fn deregister(&self, mut batch: Batch) -> Result<(), String> {
        batch.0.deregister().map_err(|e| e.to_string())
    }
}
