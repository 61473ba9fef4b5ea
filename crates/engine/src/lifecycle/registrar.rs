//! [`NixlRegistrar`]: the real NIXL behind the lifecycle's `Registrar` trait.

use crate::lifecycle::group::at_region;
use crate::lifecycle::{At, ListFailure, Registrar, Unreleased};
use crate::model::{Failure, Reason, Region, RuntimeFacts};
use crate::nixl::capi::{self, CAgent};
use crate::nixl::memory::{self, Backing};
use crate::nixl::Descriptor;
use crate::nixl::StderrTap;
use crate::nixl::{reason_of, SystemProbe};
use crate::nixl::{LoadError, Loaded};
use crate::plan::GroupSpec;
use crate::record::{Capture, NoCapture};
use crate::validate::MemoryProbe;
use nixl_sys::{Agent, Backend, NixlError, OptArgs, RegistrationHandle};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

fn failure(e: NixlError, what: &str) -> Failure {
    Failure::new(
        reason_of(&e),
        format!("{what}: {e} (NIXL/UCX print the cause on stderr)"),
    )
}

/// The NIXL agent registrations go to.
enum On {
    /// One nixl-agent created through the C API: a group is one call.
    Own(CAgent),
    /// The caller's, through nixl-sys, whose `register_memory` takes one
    /// descriptor (and whose agent handle is private): a group is one call
    /// a region.
    Given(Agent),
}

/// Registration options for one backend set, built once.
enum BackendOpts {
    Own(Arc<capi::Backends>),
    Given(OptArgs),
}

struct LiveRegistrar {
    on: On,
    plugins: Vec<String>,
    /// Backends of the caller's agent (nixl-sys handles).
    backends: HashMap<String, Backend>,
    /// Registration options per backend set (a plan has one or two sets; a
    /// linear scan beats hashing a joined name per call).
    opts: Vec<(Vec<String>, BackendOpts)>,
}

/// What one registration call holds.
pub enum HeldRegions {
    /// A list registered in one call on nixl-agent's own agent.
    List(capi::Registered),
    /// Regions registered one by one on the caller's agent.
    Regions(Vec<(Region, RegistrationHandle)>),
}

impl std::fmt::Debug for HeldRegions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HeldRegions::List(l) => write!(f, "HeldRegions::List({} regions)", l.regions().len()),
            HeldRegions::Regions(r) => write!(f, "HeldRegions::Regions({} regions)", r.len()),
        }
    }
}

#[cfg(test)]
impl HeldRegions {
    /// See [`capi::Registered::claiming`].
    pub fn claiming(self, regions: &[Region]) -> HeldRegions {
        match self {
            HeldRegions::List(l) => HeldRegions::List(l.claiming(regions).expect("a descriptor list")),
            HeldRegions::Regions(_) => panic!("only a list can claim other regions"),
        }
    }
}

/// Registers on a NIXL agent: one nixl-agent creates (the binary, `check`)
/// or the serving process's own (embedding). Owns the backends it created
/// and the memory it allocated. Lives on the lifecycle thread only.
pub struct NixlRegistrar {
    name: String,
    loaded: Result<Loaded, LoadError>,
    /// The caller's NIXL agent, when registrations go there.
    given: Option<Agent>,
    live: Option<LiveRegistrar>,
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

    /// NIXL's own serialized description of the agent's local memory (what
    /// a peer would load): tests count its descriptors.
    #[cfg(test)]
    pub fn local_md(&self) -> Option<Vec<u8>> {
        match &self.live.as_ref()?.on {
            On::Own(c) => c.local_md().ok(),
            On::Given(a) => a.get_local_md().ok(),
        }
    }

    fn live(&mut self) -> Result<&mut LiveRegistrar, Failure> {
        self.live
            .as_mut()
            .ok_or_else(|| Failure::new(Reason::NixlUnavailable, "NIXL agent not created"))
    }
}

impl LiveRegistrar {
    /// The options for `backends`, built on first use.
    fn opts(&mut self, backends: &[String]) -> Result<&BackendOpts, Failure> {
        if let Some(i) = self.opts.iter().position(|(b, _)| b == backends) {
            return Ok(&self.opts[i].1);
        }
        let opts = match &self.on {
            On::Own(c) => BackendOpts::Own(Arc::new(c.backends(backends).map_err(|e| {
                Failure::new(e.reason(), format!("selecting backends {}: {e}", backends.join(",")))
            })?)),
            On::Given(_) => {
                let mut opts = OptArgs::new().map_err(|e| failure(e, "creating NIXL options"))?;
                for b in backends {
                    let backend = self
                        .backends
                        .get(b)
                        .ok_or_else(|| Failure::new(Reason::NixlNotFound, format!("backend {b} not created")))?;
                    opts.add_backend(backend).map_err(|e| failure(e, "selecting backend"))?;
                }
                BackendOpts::Given(opts)
            }
        };
        self.opts.push((backends.to_vec(), opts));
        Ok(&self.opts[self.opts.len() - 1].1)
    }
}

/// The plugins NIXL can load, as an agent of nixl-sys lists them.
fn plugins_of(agent: &nixl_sys::Agent) -> Result<Vec<String>, Failure> {
    let list = agent
        .get_available_plugins()
        .map_err(|e| failure(e, "listing NIXL plugins"))?;
    Ok((0..list.len().unwrap_or(0))
        .filter_map(|i| list.get(i).ok().map(str::to_string))
        .collect())
}

/// Creating nixl-agent's own NIXL agent failed.
fn agent_failed(name: &str, e: &dyn std::fmt::Display) -> Failure {
    crate::nixl_config::agent_creation_failed(&format!("creating NIXL agent {name:?}"), e)
}

impl Registrar for NixlRegistrar {
    type Handle = HeldRegions;
    type Backing = Backing;

    fn preflight(&mut self) -> Result<RuntimeFacts, Failure> {
        // On the caller's agent NIXL is loaded by definition; the load
        // result only feeds the status.
        if let (Err(e), None) = (&self.loaded, &self.given) {
            let mut msg = format!("{}; fix: {}", e.message, e.fix);
            if !e.searched.is_empty() {
                msg.push_str(&format!("; searched: {}", e.searched.join(", ")));
            }
            return Err(Failure::new(Reason::NixlUnavailable, msg));
        }
        let owned = self.given.is_none();
        let (on, plugins) = match self.given.clone() {
            Some(agent) => {
                let plugins = plugins_of(&agent)?;
                (On::Given(agent), plugins)
            }
            // A NIXL whose behaviour with lists was not proven: an agent
            // of our own through nixl-sys, one region a call.
            None if !capi::proven(
                capi::version_of(self.loaded.as_ref().ok().and_then(|l| l.discovery.version.as_deref())).as_deref(),
            ) =>
            {
                tracing::warn!(
                    target: crate::event::LOG_TARGET,
                    proven = capi::PROVEN.join(","),
                    "this NIXL version's handling of descriptor lists is not proven: registering one region a call"
                );
                let cfg = nixl_sys::AgentConfig {
                    enable_prog_thread: false,
                    ..nixl_sys::AgentConfig::default()
                };
                let agent =
                    nixl_sys::Agent::new_configured(&self.name, &cfg).map_err(|e| agent_failed(&self.name, &e))?;
                let plugins = plugins_of(&agent)?;
                (On::Given(agent), plugins)
            }
            None => {
                // No progress or listen thread: this agent only registers
                // memory, and NIXL's default progress thread busy-polls a
                // whole core when idle.
                let agent = CAgent::new(&self.name).map_err(|e| agent_failed(&self.name, &e))?;
                let plugins = agent
                    .plugins()
                    .map_err(|e| Failure::new(e.reason(), format!("listing NIXL plugins: {e}")))?;
                (On::Own(agent), plugins)
            }
        };
        self.live = Some(LiveRegistrar {
            on,
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
        match &live.on {
            On::Own(c) if c.has_backend(name) => return Ok(None),
            On::Own(_) => {}
            On::Given(_) if live.backends.contains_key(name) => return Ok(None),
            On::Given(agent) => {
                // On the caller's agent, a backend it created is used as it is.
                if let Some(backend) = agent.get_backend(name) {
                    live.backends.insert(name.to_string(), backend);
                    return Ok(None);
                }
            }
        }
        if !live.plugins.iter().any(|p| p == name) {
            return Err(Failure::new(
                Reason::PluginUnavailable,
                format!("no plugin named {name}; available: {}", live.plugins.join(", ")),
            ));
        }
        let t0 = Instant::now();
        match &live.on {
            On::Own(c) => c.create_backend(name).map_err(|e| {
                let reason = if e.what == "nixl_capi_get_plugin_params" {
                    Reason::PluginUnavailable
                } else {
                    Reason::BackendInitFailed
                };
                Failure::new(reason, format!("creating backend {name}: {e}"))
            })?,
            On::Given(agent) => {
                let (_mems, params) = agent
                    .get_plugin_params(name)
                    .map_err(|e| Failure::new(Reason::PluginUnavailable, format!("plugin {name} parameters: {e}")))?;
                let backend = agent
                    .create_backend(name, &params)
                    .map_err(|e| Failure::new(Reason::BackendInitFailed, format!("creating backend {name}: {e}")))?;
                live.backends.insert(name.to_string(), backend);
            }
        }
        Ok(Some(t0.elapsed()))
    }

    fn allocate(&mut self, spec: &GroupSpec, count: usize, size: usize) -> Result<(Vec<Region>, Backing), Failure> {
        memory::allocate(spec.mem_type, spec.device, count, size)
    }

    fn probe(&self) -> &dyn MemoryProbe {
        &self.probe
    }

    fn register(&mut self, spec: &GroupSpec, regions: &[Region]) -> Result<HeldRegions, ListFailure> {
        let whole = |f| ListFailure::new(f, At::Whole);
        let live = self.live().map_err(whole)?;
        // Built before borrowing the agent: `opts` may add to the table.
        live.opts(&spec.backends).map_err(whole)?;
        let opts = &live
            .opts
            .iter()
            .find(|(b, _)| *b == spec.backends)
            .expect("built above")
            .1;
        match (&live.on, opts) {
            (On::Own(c), BackendOpts::Own(on)) => c
                .register(spec.mem_type, regions, on)
                .map(HeldRegions::List)
                .map_err(|e| {
                    let f = Failure::new(
                        e.reason(),
                        format!(
                            "NIXL registerMem of {} regions: {e} (NIXL/UCX print the cause on stderr)",
                            regions.len()
                        ),
                    );
                    ListFailure::new(f, At::List)
                }),
            (On::Given(agent), BackendOpts::Given(opts)) => {
                let mut held = Vec::with_capacity(regions.len());
                for (i, region) in regions.iter().enumerate() {
                    let desc = Descriptor::new(*region, spec.mem_type);
                    match agent.register_memory(&desc, Some(opts)) {
                        Ok(h) => held.push((*region, h)),
                        Err(e) => {
                            // Newest first, as a release would.
                            while let Some((_, mut h)) = held.pop() {
                                let _ = h.deregister();
                            }
                            return Err(at_region(failure(e, "NIXL registerMem"), i));
                        }
                    }
                }
                Ok(HeldRegions::Regions(held))
            }
            _ => unreachable!("options are built for the agent they select on"),
        }
    }

    fn deregister(&mut self, handle: HeldRegions) -> Result<(), Unreleased<HeldRegions>> {
        match handle {
            HeldRegions::List(mut list) => {
                // A list with twins is released one descriptor a call: what
                // fails of it is already known region by region.
                let one_by_one = list.has_twins();
                let Err(e) = list.deregister() else {
                    return Ok(());
                };
                // `list` now holds exactly what NIXL may still hold.
                let regions = list.regions().len();
                let bytes = list.regions().iter().map(|r| r.len as u64).sum();
                let failure = Failure::new(e.reason(), format!("NIXL deregisterMem of {regions} regions: {e}"));
                let (held, split) = if regions > 1 && !one_by_one {
                    match list.split() {
                        Ok(parts) => (parts.into_iter().map(HeldRegions::List).collect(), true),
                        Err(list) => (vec![HeldRegions::List(list)], false),
                    }
                } else {
                    (vec![HeldRegions::List(list)], false)
                };
                Err(Unreleased {
                    failure,
                    regions,
                    bytes,
                    held,
                    split,
                })
            }
            HeldRegions::Regions(handles) => {
                let (mut failed, mut bytes) = (0, 0);
                let mut first = None;
                let mut left = Vec::new();
                for (region, mut h) in handles.into_iter().rev() {
                    if let Err(e) = h.deregister() {
                        failed += 1;
                        bytes += region.len as u64;
                        first.get_or_insert_with(|| failure(e, "NIXL deregisterMem"));
                        left.push((region, h));
                    }
                }
                left.reverse();
                match first {
                    None => Ok(()),
                    Some(failure) => Err(Unreleased {
                        failure,
                        regions: failed,
                        bytes,
                        held: vec![HeldRegions::Regions(left)],
                        split: false,
                    }),
                }
            }
        }
    }

    fn capture(&self) -> &dyn Capture {
        match &self.tap {
            Some(t) => t,
            None => &NoCapture,
        }
    }
}
