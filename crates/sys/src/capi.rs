//! NIXL's C API called directly, for the one thing nixl-sys 1.5 cannot do:
//! register and deregister a descriptor list in one call.
//!
//! nixl-sys builds a one-descriptor list for every `register_memory` and
//! keeps its agent handle private, so a group of N regions costs N calls
//! and its deregistration N searches of NIXL's registration list (O(N²)).
//! A NIXL agent that nixl-agent creates for itself (the binary's, `check`'s,
//! the benchmark's peer) is therefore made here, through the same
//! `libnixl_capi.so` nixl-sys uses (found by its soname, never loaded a
//! second time), and registers a whole group the way SGLang and vLLM do
//! through NIXL's Python API: one `registerMem` of a list.
//!
//! Every C call on an agent goes through its mutex: NIXL's default thread
//! sync is none, and a [`Registered`] list may be dropped on another thread
//! than the one that made it.
//!
//! # What NIXL 1.5.1 does with a list
//!
//! The lifecycle's group registration (`nixl-agent-engine`'s
//! `lifecycle::group`) rests on these, each proven on real NIXL by
//! `properties::batched` in that crate; a NIXL of another version must be
//! proven again before they are relied on:
//! - `registerMem` of a list registers it region by region and, when one
//!   fails, deregisters what it registered of that list before returning
//!   the error: a refused list leaves nothing. With several backends it is
//!   best effort (success when any backend took the list), so a group on
//!   several backends is registered once per backend.
//! - `deregisterMem` of a list first checks that every descriptor is
//!   registered and removes none when one is not: a refused batch is
//!   retried one region a call.
//! - a list naming one descriptor twice registers, but a batched
//!   `deregisterMem` of it unloads the twin's metadata twice and crashes the
//!   process (SIGSEGV in `nixlUcxEngine::unloadMD`): such a list is released
//!   one descriptor a call ([`Registered::split`]).
//!
//! [`PROVEN`] lists the versions these hold for, and is the one list: the
//! interposer's gate (`interpose::real`) reads it too. On any other version
//! the lifecycle registers one region a call through nixl-sys ([`proven`]).

use crate::model::{MemType, Reason, Region};
use std::ffi::{c_char, c_int, c_uint, c_void, CStr, CString};
use std::sync::{Arc, Mutex, OnceLock};

/// NIXL's C API status code (`nixl_capi_status_t`).
type CStatus = c_int;
type Handle = *mut c_void;

const SUCCESS: CStatus = 0;
const ERROR_INVALID_PARAM: CStatus = -1;
const ERROR_BACKEND: CStatus = -2;
const ERROR_NOT_FOUND: CStatus = -6;

/// NIXL versions whose behaviour with lists (above) and whose exported
/// `nixlAgent` methods and descriptor-list layout (the interposer's) were
/// proven on real NIXL.
pub const PROVEN: &[&str] = &["1.5.1"];

/// The variable an operator sets to the NIXL version of a build that has
/// no wheel metadata beside it (a build from source).
pub const ENV_NIXL_VERSION: &str = "NIXL_AGENT_NIXL_VERSION";

/// The NIXL version to judge by: what was `discovered` (the wheel's own
/// metadata beside the loaded library), else the operator's word
/// ([`ENV_NIXL_VERSION`]) for a build that has none.
pub fn version_of(discovered: Option<&str>) -> Option<String> {
    judged_version(discovered, std::env::var(ENV_NIXL_VERSION).ok().as_deref())
}

/// [`version_of`]'s rule: the metadata is evidence and wins; the stated
/// version only fills in where there is no metadata (a blank one is none).
fn judged_version(discovered: Option<&str>, stated: Option<&str>) -> Option<String> {
    discovered
        .or_else(|| stated.map(str::trim).filter(|v| !v.is_empty()))
        .map(str::to_string)
}

/// Whether `version` is one of [`PROVEN`] (`None`: unknown, not proven).
pub fn proven(version: Option<&str>) -> bool {
    version.is_some_and(|v| PROVEN.contains(&v))
}

/// `nixl_capi_agent_config_t` (nixl-sys 1.5.1 `wrapper.h`).
#[repr(C)]
struct AgentConfig {
    enable_prog_thread: bool,
    enable_listen_thread: bool,
    listen_port: c_int,
    thread_sync: c_int,
    num_workers: c_uint,
    pthr_delay_us: u64,
    lthr_delay_us: u64,
    capture_telemetry: bool,
}

// Safety: a C function of wrapper.h; callers pass the handles it declares.
type Unary = unsafe extern "C" fn(Handle) -> CStatus;
// Safety: a C function of wrapper.h; callers pass the handles it declares.
type CreateAgent = unsafe extern "C" fn(*const c_char, *const AgentConfig, *mut Handle) -> CStatus;
// Safety: a C function of wrapper.h; callers pass the handles it declares.
type OutHandle = unsafe extern "C" fn(Handle, *mut Handle) -> CStatus;
// Safety: a C function of wrapper.h; callers pass the handles it declares.
type ListSize = unsafe extern "C" fn(Handle, *mut usize) -> CStatus;
// Safety: a C function of wrapper.h; callers pass the handles it declares.
type ListGet = unsafe extern "C" fn(Handle, usize, *mut *const c_char) -> CStatus;
// Safety: a C function of wrapper.h; callers pass the handles it declares.
type PluginParams = unsafe extern "C" fn(Handle, *const c_char, *mut Handle, *mut Handle) -> CStatus;
// Safety: a C function of wrapper.h; callers pass the handles it declares.
type CreateBackend = unsafe extern "C" fn(Handle, *const c_char, Handle, *mut Handle) -> CStatus;
// Safety: a C function of wrapper.h; callers pass the handles it declares.
type Create = unsafe extern "C" fn(*mut Handle) -> CStatus;
// Safety: a C function of wrapper.h; callers pass the handles it declares.
type Pair = unsafe extern "C" fn(Handle, Handle) -> CStatus;
// Safety: a C function of wrapper.h; callers pass the handles it declares.
type CreateDlist = unsafe extern "C" fn(c_int, *mut Handle) -> CStatus;
// Safety: a C function of wrapper.h; callers pass the handles it declares.
type AddDesc = unsafe extern "C" fn(Handle, usize, usize, u64, *const c_void, usize) -> CStatus;
// Safety: a C function of wrapper.h; callers pass the handles it declares.
type Triple = unsafe extern "C" fn(Handle, Handle, Handle) -> CStatus;
// Safety: a C function of wrapper.h; callers pass the handles it declares.
type LocalMd = unsafe extern "C" fn(Handle, *mut *mut c_void, *mut usize) -> CStatus;

/// The C functions, resolved once from the loaded library.
struct Api {
    create_agent: CreateAgent,
    destroy_agent: Unary,
    plugins: OutHandle,
    string_list_size: ListSize,
    string_list_get: ListGet,
    destroy_string_list: Unary,
    plugin_params: PluginParams,
    destroy_mem_list: Unary,
    destroy_params: Unary,
    create_backend: CreateBackend,
    destroy_backend: Unary,
    create_opt_args: Create,
    destroy_opt_args: Unary,
    opt_args_add_backend: Pair,
    create_reg_dlist: CreateDlist,
    destroy_reg_dlist: Unary,
    reg_dlist_add_desc: AddDesc,
    register_mem: Triple,
    deregister_mem: Triple,
    #[cfg_attr(not(test), allow(dead_code))]
    local_md: LocalMd,
}

fn api() -> Result<&'static Api, String> {
    static API: OnceLock<Result<Api, String>> = OnceLock::new();
    API.get_or_init(Api::resolve).as_ref().map_err(Clone::clone)
}

impl Api {
    /// Resolves the C API from the libnixl_capi.so that `nixl::load` has
    /// loaded (RTLD_NOLOAD by soname, as nixl-sys's stub finds it).
    fn resolve() -> Result<Api, String> {
        let lib = c"libnixl_capi.so";
        // Safety: dlopen with RTLD_NOLOAD only returns a handle to an object
        // already loaded; the string is NUL-terminated and static.
        let handle = unsafe { libc::dlopen(lib.as_ptr(), libc::RTLD_NOW | libc::RTLD_NOLOAD) };
        if handle.is_null() {
            return Err("libnixl_capi.so is not loaded".into());
        }
        macro_rules! sym {
            ($name:literal, $ty:ty) => {{
                // Safety: dlsym on a live handle with a static C string.
                let p = unsafe { libc::dlsym(handle, $name.as_ptr()) };
                if p.is_null() {
                    return Err(format!(
                        "{} not found in libnixl_capi.so",
                        $name.to_string_lossy()
                    ));
                }
                // Safety: the symbol is the C function of nixl-sys 1.5.1's
                // wrapper.h with exactly this signature.
                unsafe { std::mem::transmute::<*mut c_void, $ty>(p) }
            }};
        }
        Ok(Api {
            create_agent: sym!(c"nixl_capi_create_configured_agent", CreateAgent),
            destroy_agent: sym!(c"nixl_capi_destroy_agent", Unary),
            plugins: sym!(c"nixl_capi_get_available_plugins", OutHandle),
            string_list_size: sym!(c"nixl_capi_string_list_size", ListSize),
            string_list_get: sym!(c"nixl_capi_string_list_get", ListGet),
            destroy_string_list: sym!(c"nixl_capi_destroy_string_list", Unary),
            plugin_params: sym!(c"nixl_capi_get_plugin_params", PluginParams),
            destroy_mem_list: sym!(c"nixl_capi_destroy_mem_list", Unary),
            destroy_params: sym!(c"nixl_capi_destroy_params", Unary),
            create_backend: sym!(c"nixl_capi_create_backend", CreateBackend),
            destroy_backend: sym!(c"nixl_capi_destroy_backend", Unary),
            create_opt_args: sym!(c"nixl_capi_create_opt_args", Create),
            destroy_opt_args: sym!(c"nixl_capi_destroy_opt_args", Unary),
            opt_args_add_backend: sym!(c"nixl_capi_opt_args_add_backend", Pair),
            create_reg_dlist: sym!(c"nixl_capi_create_reg_dlist", CreateDlist),
            destroy_reg_dlist: sym!(c"nixl_capi_destroy_reg_dlist", Unary),
            reg_dlist_add_desc: sym!(c"nixl_capi_reg_dlist_add_desc", AddDesc),
            register_mem: sym!(c"nixl_capi_register_mem", Triple),
            deregister_mem: sym!(c"nixl_capi_deregister_mem", Triple),
            local_md: sym!(c"nixl_capi_get_local_md", LocalMd),
        })
    }
}

/// A C API status that is not success, with what was being done.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallError {
    pub what: &'static str,
    pub status: i32,
}

impl CallError {
    /// The closed reason for the status (the same mapping nixl-sys makes).
    pub fn reason(&self) -> Reason {
        match self.status {
            ERROR_INVALID_PARAM => Reason::NixlInvalidParam,
            ERROR_NOT_FOUND => Reason::NixlNotFound,
            ERROR_BACKEND => Reason::NixlBackendError,
            _ => Reason::NixlBackendError,
        }
    }
}

impl std::fmt::Display for CallError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let name = match self.status {
            ERROR_INVALID_PARAM => "invalid parameter",
            ERROR_BACKEND => "backend error",
            -3 => "invalid state",
            -4 => "exception",
            ERROR_NOT_FOUND => "not found",
            _ => "error",
        };
        write!(f, "{}: {name} (status {})", self.what, self.status)
    }
}

fn check(what: &'static str, status: CStatus) -> Result<(), CallError> {
    if status == SUCCESS {
        Ok(())
    } else {
        Err(CallError { what, status })
    }
}

struct Inner {
    api: &'static Api,
    /// The agent handle; every call on it holds this lock.
    agent: Mutex<Handle>,
    backends: Mutex<Vec<(String, Handle)>>,
}

// Safety: the handles are plain pointers into NIXL's heap objects; every
// call that uses the agent holds `agent`'s lock, and backend handles are
// only read under `backends`' lock (NIXL itself is told no thread sync).
unsafe impl Send for Inner {}
// Safety: see `Send`; all access goes through the two mutexes.
unsafe impl Sync for Inner {}

impl Drop for Inner {
    fn drop(&mut self) {
        let agent = *self.agent.get_mut().unwrap_or_else(|e| e.into_inner());
        let backends = std::mem::take(self.backends.get_mut().unwrap_or_else(|e| e.into_inner()));
        // Safety: handles created by this agent, destroyed once, the
        // backends' handle wrappers before the agent (as nixl-sys does);
        // the agent's destructor deregisters whatever it still holds.
        unsafe {
            for (_, b) in backends {
                (self.api.destroy_backend)(b);
            }
            (self.api.destroy_agent)(agent);
        }
    }
}

/// A NIXL agent made through the C API: no progress or listen thread (it
/// only registers memory), and the backends created on it.
#[derive(Clone)]
pub struct CAgent(Arc<Inner>);

/// Which backends a registration uses (NIXL's optional arguments).
pub struct Backends {
    api: &'static Api,
    opts: Handle,
}

// Safety: an opt-args object is immutable once built; NIXL only reads it.
unsafe impl Send for Backends {}
// Safety: as above.
unsafe impl Sync for Backends {}

impl Drop for Backends {
    fn drop(&mut self) {
        // Safety: created in `CAgent::backends`, destroyed once.
        unsafe {
            (self.api.destroy_opt_args)(self.opts);
        }
    }
}

impl CAgent {
    /// Creates the agent (`Err` when the library is not loaded or NIXL
    /// refused: the message says which).
    pub fn new(name: &str) -> Result<CAgent, String> {
        let api = api()?;
        let c_name = CString::new(name).map_err(|_| format!("agent name {name:?} contains NUL"))?;
        let cfg = AgentConfig {
            enable_prog_thread: false,
            enable_listen_thread: false,
            listen_port: 8888,
            thread_sync: 0,
            num_workers: 1,
            pthr_delay_us: 0,
            lthr_delay_us: 100_000,
            capture_telemetry: false,
        };
        let mut agent: Handle = std::ptr::null_mut();
        // Safety: valid C string and config, a live out-pointer.
        let status = unsafe { (api.create_agent)(c_name.as_ptr(), &cfg, &mut agent) };
        check("nixl_capi_create_configured_agent", status).map_err(|e| e.to_string())?;
        if agent.is_null() {
            return Err("nixl_capi_create_configured_agent returned no agent".into());
        }
        Ok(CAgent(Arc::new(Inner {
            api,
            agent: Mutex::new(agent),
            backends: Mutex::new(Vec::new()),
        })))
    }

    fn with_agent<T>(&self, f: impl FnOnce(&'static Api, Handle) -> T) -> T {
        let guard = self.0.agent.lock().unwrap_or_else(|e| e.into_inner());
        f(self.0.api, *guard)
    }

    /// The plugins NIXL found.
    pub fn plugins(&self) -> Result<Vec<String>, CallError> {
        self.with_agent(|api, agent| {
            let mut list: Handle = std::ptr::null_mut();
            // Safety: live agent, live out-pointer; the list is destroyed
            // once below, and each string is copied before that.
            unsafe {
                check("nixl_capi_get_available_plugins", (api.plugins)(agent, &mut list))?;
                let mut n = 0usize;
                let mut out = Vec::new();
                if (api.string_list_size)(list, &mut n) == SUCCESS {
                    for i in 0..n {
                        let mut s: *const c_char = std::ptr::null();
                        if (api.string_list_get)(list, i, &mut s) == SUCCESS && !s.is_null() {
                            out.push(CStr::from_ptr(s).to_string_lossy().into_owned());
                        }
                    }
                }
                (api.destroy_string_list)(list);
                Ok(out)
            }
        })
    }

    /// Whether a backend of this name was created here.
    pub fn has_backend(&self, name: &str) -> bool {
        let b = self.0.backends.lock().unwrap_or_else(|e| e.into_inner());
        b.iter().any(|(n, _)| n == name)
    }

    /// Creates backend `name` with its plugin's default parameters.
    pub fn create_backend(&self, name: &str) -> Result<(), CallError> {
        let c_name = CString::new(name).map_err(|_| CallError {
            what: "backend name contains NUL",
            status: ERROR_INVALID_PARAM,
        })?;
        let backend = self.with_agent(|api, agent| {
            let (mut mems, mut params, mut backend): (Handle, Handle, Handle) =
                (std::ptr::null_mut(), std::ptr::null_mut(), std::ptr::null_mut());
            // Safety: live agent, valid C string, live out-pointers; the
            // parameter objects are destroyed once after creation.
            unsafe {
                check(
                    "nixl_capi_get_plugin_params",
                    (api.plugin_params)(agent, c_name.as_ptr(), &mut mems, &mut params),
                )?;
                let created = (api.create_backend)(agent, c_name.as_ptr(), params, &mut backend);
                (api.destroy_mem_list)(mems);
                (api.destroy_params)(params);
                check("nixl_capi_create_backend", created)?;
            }
            Ok(backend)
        })?;
        let mut b = self.0.backends.lock().unwrap_or_else(|e| e.into_inner());
        b.push((name.to_string(), backend));
        Ok(())
    }

    /// NIXL's optional arguments naming `backends` (each created here).
    pub fn backends(&self, names: &[String]) -> Result<Backends, CallError> {
        let api = self.0.api;
        let mut opts: Handle = std::ptr::null_mut();
        // Safety: live out-pointer.
        check("nixl_capi_create_opt_args", unsafe { (api.create_opt_args)(&mut opts) })?;
        let out = Backends { api, opts };
        let created = self.0.backends.lock().unwrap_or_else(|e| e.into_inner());
        for name in names {
            let Some((_, b)) = created.iter().find(|(n, _)| n == name) else {
                return Err(CallError {
                    what: "backend not created",
                    status: ERROR_NOT_FOUND,
                });
            };
            // Safety: both handles live (the backend's until the agent goes).
            check("nixl_capi_opt_args_add_backend", unsafe {
                (api.opt_args_add_backend)(out.opts, *b)
            })?;
        }
        Ok(out)
    }

    /// Registers `regions` in one `registerMem` call. On `Err` NIXL 1.5.1
    /// has rolled back what the call registered on each backend (see
    /// "What NIXL 1.5.1 does with a list" above).
    pub fn register(&self, mem_type: MemType, regions: &[Region], on: &Arc<Backends>) -> Result<Registered, CallError> {
        let list = DescList::new(self.0.api, mem_type, regions)?;
        self.with_agent(|api, agent| {
            // Safety: live agent, list and options.
            check("nixl_capi_register_mem", unsafe {
                (api.register_mem)(agent, list.0, on.opts)
            })
        })?;
        Ok(Registered {
            agent: self.clone(),
            list: Some(list),
            on: on.clone(),
            mem_type,
            twins: has_twins(regions),
            regions: regions.into(),
            unbuilt: false,
        })
    }

    /// NIXL's serialized description of this agent's local memory.
    #[cfg_attr(not(test), allow(dead_code))]
    pub fn local_md(&self) -> Result<Vec<u8>, CallError> {
        self.with_agent(|api, agent| {
            let mut data: *mut c_void = std::ptr::null_mut();
            let mut len = 0usize;
            // Safety: live agent and out-pointers; NIXL mallocs the blob,
            // which is copied and freed once.
            unsafe {
                check("nixl_capi_get_local_md", (api.local_md)(agent, &mut data, &mut len))?;
                if data.is_null() {
                    return Ok(Vec::new());
                }
                let out = std::slice::from_raw_parts(data as *const u8, len).to_vec();
                libc::free(data);
                Ok(out)
            }
        })
    }
}

/// A NIXL registration descriptor list.
struct DescList(Handle, &'static Api);

// Safety: the list is owned by one `Registered` and only read by NIXL under
// the agent's lock.
unsafe impl Send for DescList {}
// Safety: as above.
unsafe impl Sync for DescList {}

impl DescList {
    fn new(api: &'static Api, mem_type: MemType, regions: &[Region]) -> Result<DescList, CallError> {
        let kind = match mem_type {
            MemType::Dram => 0,
            MemType::Vram => 1,
        };
        let mut h: Handle = std::ptr::null_mut();
        // Safety: live out-pointer.
        check("nixl_capi_create_reg_dlist", unsafe {
            (api.create_reg_dlist)(kind, &mut h)
        })?;
        let list = DescList(h, api);
        for r in regions {
            // Safety: a live list; the descriptor is copied by value.
            check("nixl_capi_reg_dlist_add_desc", unsafe {
                (api.reg_dlist_add_desc)(list.0, r.addr, r.len, u64::from(r.device), std::ptr::null(), 0)
            })?;
        }
        Ok(list)
    }
}

impl Drop for DescList {
    fn drop(&mut self) {
        // Safety: created in `new`, destroyed once.
        unsafe {
            (self.1.destroy_reg_dlist)(self.0);
        }
    }
}

/// One list registered in one call; dropping it deregisters it (once).
pub struct Registered {
    agent: CAgent,
    list: Option<DescList>,
    on: Arc<Backends>,
    mem_type: MemType,
    /// The list holds one descriptor twice (only without validation).
    twins: bool,
    regions: Box<[Region]>,
    /// NIXL may hold `regions` but their list could not be rebuilt after a
    /// partial release: the next deregistration builds it first.
    unbuilt: bool,
}

/// Whether `regions` holds the same descriptor twice. NIXL 1.5.1 registers
/// such a list, but a `deregisterMem` of it unloads the twin's metadata
/// twice and crashes the process (SIGSEGV in `nixlUcxEngine::unloadMD`,
/// through NIXL's Python API too); one descriptor a call is safe.
/// O(N) for a list in order, as groups carved from one allocation are.
pub fn has_twins(regions: &[Region]) -> bool {
    let key = |r: &Region| (r.addr, r.len, r.device);
    if regions.windows(2).all(|w| key(&w[0]) < key(&w[1])) {
        return false;
    }
    let mut keys: Vec<_> = regions.iter().map(key).collect();
    keys.sort_unstable();
    keys.windows(2).any(|w| w[0] == w[1])
}

impl Registered {
    /// The regions the list holds, in registration order.
    pub fn regions(&self) -> &[Region] {
        &self.regions
    }

    /// Whether the list holds a descriptor twice (released one a call).
    pub fn has_twins(&self) -> bool {
        self.twins
    }

    /// This list's agent and backends, disarmed, claiming `regions` instead
    /// (registered or not): how a test gets NIXL to refuse a deregistration.
    #[cfg(any(test, feature = "testing"))]
    pub fn claiming(mut self, regions: &[Region]) -> Result<Registered, CallError> {
        self.list = None;
        Ok(Registered {
            agent: self.agent.clone(),
            list: Some(DescList::new(self.agent.0.api, self.mem_type, regions)?),
            on: self.on.clone(),
            mem_type: self.mem_type,
            twins: has_twins(regions),
            regions: regions.into(),
            unbuilt: false,
        })
    }

    /// One handle per region of a list whose deregistration failed (no
    /// NIXL call): each can then be deregistered, and fail, on its own.
    /// All or nothing: when a part's list cannot be built, `self` comes
    /// back as it was (still armed), and no part exists to be dropped.
    pub fn split(mut self) -> Result<Vec<Registered>, Registered> {
        let api = self.agent.0.api;
        let mut lists = Vec::with_capacity(self.regions.len());
        for r in self.regions.iter() {
            match DescList::new(api, self.mem_type, std::slice::from_ref(r)) {
                Ok(l) => lists.push(l),
                Err(_) => return Err(self),
            }
        }
        self.list = None;
        Ok(self
            .regions
            .iter()
            .zip(lists)
            .map(|(r, list)| Registered {
                agent: self.agent.clone(),
                list: Some(list),
                on: self.on.clone(),
                mem_type: self.mem_type,
                twins: false,
                regions: Box::new([*r]),
                unbuilt: false,
            })
            .collect())
    }

    /// Deregisters the whole list in one `deregisterMem` call. NIXL 1.5.1
    /// checks that every descriptor is registered before it removes any,
    /// so a call that fails leaves the whole list held. A list holding
    /// twins is deregistered one descriptor a call ([`has_twins`]); when
    /// some of those fail (or a one-descriptor list cannot be built), the
    /// handle is left holding exactly those. On `Err` the handle is armed
    /// again and [`Self::regions`] is what NIXL may still hold.
    pub fn deregister(&mut self) -> Result<(), CallError> {
        let list = match self.list.take() {
            Some(list) => list,
            None if self.unbuilt => DescList::new(self.agent.0.api, self.mem_type, &self.regions)?,
            None => return Ok(()),
        };
        self.unbuilt = false;
        let agent = &self.agent;
        let on = &self.on;
        let release = |list: &DescList| {
            agent.with_agent(|api, a| {
                // Safety: live agent, list and options; what the list
                // describes was registered on this agent.
                check("nixl_capi_deregister_mem", unsafe {
                    (api.deregister_mem)(a, list.0, on.opts)
                })
            })
        };
        if !self.twins {
            return release(&list).inspect_err(|_| self.list = Some(list));
        }
        drop(list);
        let mut first = None;
        let mut left = Vec::new();
        for r in self.regions.iter().rev() {
            let one = DescList::new(agent.0.api, self.mem_type, std::slice::from_ref(r));
            if let Err(e) = one.and_then(|one| release(&one)) {
                first.get_or_insert(e);
                left.push(*r);
            }
        }
        let Some(e) = first else {
            return Ok(());
        };
        left.reverse();
        self.twins = has_twins(&left);
        self.regions = left.into();
        self.list = DescList::new(agent.0.api, self.mem_type, &self.regions).ok();
        self.unbuilt = self.list.is_none();
        Err(e)
    }
}

impl Drop for Registered {
    fn drop(&mut self) {
        let _ = self.deregister();
    }
}

#[cfg(test)]
mod proven_tests {
    use super::*;

    #[test]
    fn only_the_listed_versions_are_proven() {
        assert!(proven(Some("1.5.1")));
        assert!(!proven(Some("1.6.0")));
        assert!(!proven(Some("1.5")));
        assert!(!proven(None));
    }

    #[test]
    fn the_wheels_metadata_wins_and_the_stated_version_only_fills_in() {
        assert_eq!(judged_version(Some("1.5.1"), Some("1.6.0")).as_deref(), Some("1.5.1"));
        assert_eq!(judged_version(Some("1.6.0"), Some("1.5.1")).as_deref(), Some("1.6.0"));
        assert_eq!(judged_version(None, Some(" 1.5.1 ")).as_deref(), Some("1.5.1"));
        assert_eq!(judged_version(None, Some("  ")), None);
        assert_eq!(judged_version(None, None), None);
    }
}
