//! A batched registration straight through NIXL's C API: one
//! `nixl_capi_register_mem` call with a descriptor list of every region, one
//! `nixl_capi_deregister_mem` for all of them. nixl-sys 1.5.2 only registers
//! one descriptor per call (and keeps its agent handle private), so this is
//! what the agent would gain from a batched call on its single NIXL agent.

use nixl_agent::Region;
use std::ffi::{c_char, c_int, c_uint, c_void, CString};
use std::path::Path;

type Status = c_int;
type Handle = *mut c_void;

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

const DRAM: c_int = 0;

type Unary = unsafe extern "C" fn(Handle) -> Status;
type CreateAgent = unsafe extern "C" fn(*const c_char, *const AgentConfig, *mut Handle) -> Status;
type GetPluginParams = unsafe extern "C" fn(Handle, *const c_char, *mut Handle, *mut Handle) -> Status;
type CreateBackend = unsafe extern "C" fn(Handle, *const c_char, Handle, *mut Handle) -> Status;
type CreateOptArgs = unsafe extern "C" fn(*mut Handle) -> Status;
type Pair = unsafe extern "C" fn(Handle, Handle) -> Status;
type CreateDlist = unsafe extern "C" fn(c_int, *mut Handle) -> Status;
type AddDesc = unsafe extern "C" fn(Handle, usize, usize, u64, *const c_void, usize) -> Status;
type Triple = unsafe extern "C" fn(Handle, Handle, Handle) -> Status;

struct Api {
    create_agent: CreateAgent,
    destroy_agent: Unary,
    get_plugin_params: GetPluginParams,
    destroy_mem_list: Unary,
    destroy_params: Unary,
    create_backend: CreateBackend,
    destroy_backend: Unary,
    create_opt_args: CreateOptArgs,
    destroy_opt_args: Unary,
    opt_args_add_backend: Pair,
    create_reg_dlist: CreateDlist,
    destroy_reg_dlist: Unary,
    reg_dlist_add_desc: AddDesc,
    register_mem: Triple,
    deregister_mem: Triple,
}

fn check(what: &str, status: Status) -> Result<(), String> {
    if status == 0 {
        Ok(())
    } else {
        Err(format!("{what} returned status {status}"))
    }
}

impl Api {
    /// Resolves the C API from the libnixl_capi.so already loaded by
    /// `common::load_nixl` (RTLD_NOLOAD: never loads a second copy).
    fn resolve(lib: &Path) -> Result<Api, String> {
        let path = CString::new(lib.display().to_string()).map_err(|e| e.to_string())?;
        // Safety: dlopen of an already-loaded library by path; checked for null.
        let handle = unsafe { libc::dlopen(path.as_ptr(), libc::RTLD_NOW | libc::RTLD_NOLOAD) };
        if handle.is_null() {
            return Err(format!("{} is not loaded", lib.display()));
        }
        macro_rules! sym {
            ($name:literal, $ty:ty) => {{
                let name = CString::new($name).unwrap();
                // Safety: dlsym on a live handle; a null result is an error.
                let p = unsafe { libc::dlsym(handle, name.as_ptr()) };
                if p.is_null() {
                    return Err(format!("{} not found in {}", $name, lib.display()));
                }
                // Safety: the symbol is the C function declared in nixl-sys's
                // wrapper.h with exactly this signature.
                unsafe { std::mem::transmute::<*mut c_void, $ty>(p) }
            }};
        }
        Ok(Api {
            create_agent: sym!("nixl_capi_create_configured_agent", CreateAgent),
            destroy_agent: sym!("nixl_capi_destroy_agent", Unary),
            get_plugin_params: sym!("nixl_capi_get_plugin_params", GetPluginParams),
            destroy_mem_list: sym!("nixl_capi_destroy_mem_list", Unary),
            destroy_params: sym!("nixl_capi_destroy_params", Unary),
            create_backend: sym!("nixl_capi_create_backend", CreateBackend),
            destroy_backend: sym!("nixl_capi_destroy_backend", Unary),
            create_opt_args: sym!("nixl_capi_create_opt_args", CreateOptArgs),
            destroy_opt_args: sym!("nixl_capi_destroy_opt_args", Unary),
            opt_args_add_backend: sym!("nixl_capi_opt_args_add_backend", Pair),
            create_reg_dlist: sym!("nixl_capi_create_reg_dlist", CreateDlist),
            destroy_reg_dlist: sym!("nixl_capi_destroy_reg_dlist", Unary),
            reg_dlist_add_desc: sym!("nixl_capi_reg_dlist_add_desc", AddDesc),
            register_mem: sym!("nixl_capi_register_mem", Triple),
            deregister_mem: sym!("nixl_capi_deregister_mem", Triple),
        })
    }
}

/// One NIXL agent with a UCX backend, created through the C API with the
/// agent's configuration (no progress or listen thread).
pub struct BatchAgent {
    api: Api,
    agent: Handle,
    backend: Handle,
    opts: Handle,
}

/// A registered descriptor list; `BatchAgent::deregister` releases it.
pub struct Batch(Handle);

impl BatchAgent {
    pub fn new(lib: &Path, name: &str) -> Result<BatchAgent, String> {
        let api = Api::resolve(lib)?;
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
        let c_name = CString::new(name).map_err(|e| e.to_string())?;
        let ucx = CString::new("UCX").unwrap();
        let mut agent: Handle = std::ptr::null_mut();
        let (mut mems, mut params, mut backend, mut opts): (Handle, Handle, Handle, Handle) = (
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
        );
        // Safety: C API calls with valid out-pointers, in the order nixl-sys
        // uses them; every status is checked before a handle is used.
        unsafe {
            check("create agent", (api.create_agent)(c_name.as_ptr(), &cfg, &mut agent))?;
            check(
                "get UCX params",
                (api.get_plugin_params)(agent, ucx.as_ptr(), &mut mems, &mut params),
            )?;
            let created = (api.create_backend)(agent, ucx.as_ptr(), params, &mut backend);
            (api.destroy_mem_list)(mems);
            (api.destroy_params)(params);
            check("create UCX backend", created)?;
            check("create opt args", (api.create_opt_args)(&mut opts))?;
            check("select UCX", (api.opt_args_add_backend)(opts, backend))?;
        }
        Ok(BatchAgent {
            api,
            agent,
            backend,
            opts,
        })
    }

    /// Registers every region in one call (descriptor list built inside).
    pub fn register(&self, regions: &[Region]) -> Result<Batch, String> {
        let mut dlist: Handle = std::ptr::null_mut();
        // Safety: a fresh descriptor list filled with the regions; the
        // memory behind them outlives the registration (caller's arena).
        unsafe {
            check("create dlist", (self.api.create_reg_dlist)(DRAM, &mut dlist))?;
            for r in regions {
                check(
                    "add desc",
                    (self.api.reg_dlist_add_desc)(dlist, r.addr, r.len, u64::from(r.device), std::ptr::null(), 0),
                )?;
            }
            if let Err(e) = check("register", (self.api.register_mem)(self.agent, dlist, self.opts)) {
                (self.api.destroy_reg_dlist)(dlist);
                return Err(e);
            }
        }
        Ok(Batch(dlist))
    }

    /// Deregisters a whole list in one call.
    pub fn deregister(&self, batch: Batch) -> Result<(), String> {
        // Safety: the list was registered on this agent and is released once.
        unsafe {
            let r = (self.api.deregister_mem)(self.agent, batch.0, self.opts);
            (self.api.destroy_reg_dlist)(batch.0);
            check("deregister", r)
        }
    }
}

impl Drop for BatchAgent {
    fn drop(&mut self) {
        // Safety: handles created in `new`, destroyed once, agent last.
        unsafe {
            (self.api.destroy_opt_args)(self.opts);
            (self.api.destroy_backend)(self.backend);
            (self.api.destroy_agent)(self.agent);
        }
    }
}
