//! [`NixlRegistrar`]: the real NIXL behind the lifecycle's `Registrar` trait.

use super::descriptor::Descriptor;
use super::loader::{LoadError, Loaded};
use super::memory::{self, Backing};
use super::probe::SystemProbe;
use super::stderr::StderrTap;
use crate::lifecycle::Registrar;
use crate::model::{Failure, Reason, Region, RuntimeFacts};
use crate::plan::GroupSpec;
use crate::record::{Capture, NoCapture};
use crate::validate::MemoryProbe;
use nixl_sys::{Agent, AgentConfig, Backend, NixlError, OptArgs, RegistrationHandle};
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// Maps a nixl-sys error to the closed reason vocabulary.
pub fn reason_of(e: &NixlError) -> Reason {
    match e {
        NixlError::InvalidParam | NixlError::StringConversionError(_) => Reason::NixlInvalidParam,
        NixlError::BackendError => Reason::NixlBackendError,
        NixlError::NotFound => Reason::NixlNotFound,
        NixlError::InvalidDataPointer => Reason::InvalidAddress,
        NixlError::FailedToCreateBackend => Reason::BackendInitFailed,
        NixlError::RegDescListCreationFailed | NixlError::RegDescAddFailed | NixlError::IndexOutOfBounds => {
            Reason::NixlInvalidParam
        }
        // NIXL refused a transfer request; nixl-sys keeps no cause.
        NixlError::FailedToCreateXferRequest | NixlError::FailedToCreateXferDlistHandle => Reason::NixlError,
        NixlError::NoTelemetry => Reason::Unknown,
    }
}

fn failure(e: NixlError, what: &str) -> Failure {
    Failure::new(
        reason_of(&e),
        format!("{what}: {e} (NIXL/UCX print the cause on stderr)"),
    )
}

struct Live {
    agent: Agent,
    plugins: Vec<String>,
    backends: HashMap<String, Backend>,
    /// Registration options per backend set, built once.
    /// Registration options per backend set, built once (a plan has one or
    /// two sets; a linear scan beats hashing a joined name per region).
    opts: Vec<(Vec<String>, OptArgs)>,
}

/// Registers on a NIXL agent: one nixl-agent creates (the binary, `check`)
/// or the serving process's own (embedding). Owns the backends it created
/// and the memory it allocated. Lives on the lifecycle thread only.
pub struct NixlRegistrar {
    name: String,
    loaded: Result<Loaded, LoadError>,
    /// The caller's NIXL agent, when registrations go there.
    given: Option<Agent>,
    live: Option<Live>,
    probe: SystemProbe,
    tap: Option<StderrTap>,
}

impl NixlRegistrar {
    /// `loaded` is the outcome of [`super::load`]; an error surfaces at
    /// preflight as `nixl_unavailable`.
    pub fn new(agent_name: &str, loaded: Result<Loaded, LoadError>) -> NixlRegistrar {
        NixlRegistrar {
            name: agent_name.to_string(),
            loaded,
            given: None,
            live: None,
            probe: SystemProbe,
            tap: None,
        }
    }

    /// Registers on the caller's NIXL agent instead of creating one: the
    /// backends it already has are used, missing ones are created on it.
    pub fn on_agent(agent: Agent, loaded: Result<Loaded, LoadError>) -> NixlRegistrar {
        let mut r = NixlRegistrar::new(&agent.name(), loaded);
        r.given = Some(agent);
        r
    }

    /// Attributes what NIXL/UCX print during failed calls, through the tap.
    pub fn with_tap(mut self, tap: Option<StderrTap>) -> Self {
        self.tap = tap;
        self
    }

    /// The NIXL agent, for an embedding process that wants to use the
    /// registrations for transfers (after preflight succeeded).
    #[cfg(test)]
    pub fn agent(&self) -> Option<&Agent> {
        self.live.as_ref().map(|l| &l.agent)
    }

    fn live(&mut self) -> Result<&mut Live, Failure> {
        self.live
            .as_mut()
            .ok_or_else(|| Failure::new(Reason::NixlUnavailable, "NIXL agent not created"))
    }
}

impl Registrar for NixlRegistrar {
    type Handle = RegistrationHandle;
    type Backing = Backing;

    fn preflight(&mut self) -> Result<RuntimeFacts, Failure> {
        // On the caller's agent NIXL is loaded by definition; the load
        // result only feeds the status.
        if let (Err(e), None) = (&self.loaded, &self.given) {
            let mut msg = e.message.clone();
            if !e.searched.is_empty() {
                msg.push_str(&format!("; searched: {}", e.searched.join(", ")));
            }
            return Err(Failure::new(Reason::NixlUnavailable, msg));
        }
        let owned = self.given.is_none();
        let agent = match self.given.clone() {
            Some(agent) => agent,
            None => {
                // No progress or listen thread: this agent only registers
                // memory, and NIXL's default progress thread busy-polls a
                // whole core when idle.
                let cfg = AgentConfig {
                    enable_prog_thread: false,
                    enable_listen_thread: false,
                    ..AgentConfig::default()
                };
                Agent::new_configured(&self.name, &cfg).map_err(|e| {
                    Failure::new(
                        Reason::NixlUnavailable,
                        format!("creating NIXL agent {:?}: {e}", self.name),
                    )
                })?
            }
        };
        let list = agent
            .get_available_plugins()
            .map_err(|e| failure(e, "listing NIXL plugins"))?;
        let plugins: Vec<String> = (0..list.len().unwrap_or(0))
            .filter_map(|i| list.get(i).ok().map(str::to_string))
            .collect();
        self.live = Some(Live {
            agent,
            plugins: plugins.clone(),
            backends: HashMap::new(),
            opts: Vec::new(),
        });
        let discovery = self.loaded.as_ref().ok().map(|l| &l.discovery);
        Ok(RuntimeFacts {
            plugins,
            agent: self.name.clone(),
            owned,
            library: discovery.map(|d| d.library.display().to_string()),
            version: discovery.and_then(|d| d.version.clone()),
        })
    }

    fn ensure_backend(&mut self, name: &str) -> Result<Option<Duration>, Failure> {
        let live = self.live()?;
        if live.backends.contains_key(name) {
            return Ok(None);
        }
        // On the caller's agent, a backend it created is used as it is.
        if let Some(backend) = live.agent.get_backend(name) {
            live.backends.insert(name.to_string(), backend);
            return Ok(None);
        }
        if !live.plugins.iter().any(|p| p == name) {
            return Err(Failure::new(
                Reason::PluginUnavailable,
                format!("no plugin named {name}; available: {}", live.plugins.join(", ")),
            ));
        }
        let t0 = Instant::now();
        let (_mems, params) = live
            .agent
            .get_plugin_params(name)
            .map_err(|e| Failure::new(Reason::PluginUnavailable, format!("plugin {name} parameters: {e}")))?;
        let backend = live
            .agent
            .create_backend(name, &params)
            .map_err(|e| Failure::new(Reason::BackendInitFailed, format!("creating backend {name}: {e}")))?;
        live.backends.insert(name.to_string(), backend);
        Ok(Some(t0.elapsed()))
    }

    fn allocate(&mut self, spec: &GroupSpec, count: usize, size: usize) -> Result<(Vec<Region>, Backing), Failure> {
        memory::allocate(spec.mem_type, spec.device, count, size)
    }

    fn probe(&self) -> &dyn MemoryProbe {
        &self.probe
    }

    fn register_region(&mut self, spec: &GroupSpec, region: &Region) -> Result<RegistrationHandle, Failure> {
        let live = self.live()?;
        let slot = match live.opts.iter().position(|(b, _)| *b == spec.backends) {
            Some(i) => i,
            None => {
                let mut opts = OptArgs::new().map_err(|e| failure(e, "creating NIXL options"))?;
                for b in &spec.backends {
                    let backend = live
                        .backends
                        .get(b)
                        .ok_or_else(|| Failure::new(Reason::NixlNotFound, format!("backend {b} not created")))?;
                    opts.add_backend(backend).map_err(|e| failure(e, "selecting backend"))?;
                }
                live.opts.push((spec.backends.clone(), opts));
                live.opts.len() - 1
            }
        };
        let desc = Descriptor::new(*region, spec.mem_type);
        live.agent
            .register_memory(&desc, Some(&live.opts[slot].1))
            .map_err(|e| failure(e, "NIXL registerMem"))
    }

    fn deregister_region(&mut self, mut handle: RegistrationHandle) -> Result<(), Failure> {
        handle.deregister().map_err(|e| failure(e, "NIXL deregisterMem"))
    }

    fn capture(&self) -> &dyn Capture {
        match &self.tap {
            Some(t) => t,
            None => &NoCapture,
        }
    }
}
