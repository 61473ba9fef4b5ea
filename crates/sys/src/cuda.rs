//! CUDA through cudarc, loaded at run time. cudarc panics when libcuda is
//! absent, so every entry point checks [`driver_present`] first.

use crate::model::Reason;
use crate::validate::DevicePointer;
use cudarc::driver::{sys, CudaContext, CudaSlice, DevicePtr};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

/// The primary context of `device`, retained for the life of the process.
///
/// UCX's CUDA memory domains keep using the context that was current when
/// they first saw device memory; if the agent released the last reference
/// (e.g. freeing a VRAM group), the primary context would be destroyed and
/// later host registrations fail with "context is destroyed" (seen on an
/// H200 in `nixl-agent check`). Retaining it once avoids that.
pub fn context(device: u32) -> Result<Arc<CudaContext>, (Reason, String)> {
    static CONTEXTS: OnceLock<Mutex<HashMap<u32, Arc<CudaContext>>>> = OnceLock::new();
    if !driver_present() {
        return Err((
            Reason::CudaUnavailable,
            "no CUDA driver (libcuda.so) could be loaded".to_string(),
        ));
    }
    let mut map = CONTEXTS
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    if let Some(c) = map.get(&device) {
        c.bind_to_thread()
            .map_err(|e| (Reason::CudaUnavailable, format!("binding device {device}: {e}")))?;
        return Ok(c.clone());
    }
    let ctx = CudaContext::new(device as usize)
        .map_err(|e| (Reason::CudaUnavailable, format!("cuda context on device {device}: {e}")))?;
    map.insert(device, ctx.clone());
    Ok(ctx)
}

/// Whether libcuda can be loaded and initialised; computed once.
pub fn driver_present() -> bool {
    static PRESENT: OnceLock<bool> = OnceLock::new();
    *PRESENT.get_or_init(|| {
        // Safety: is_culib_present only tries to dlopen libcuda and reports
        // whether it succeeded; it has no preconditions.
        let present = unsafe { sys::is_culib_present() };
        present && cudarc::driver::result::init().is_ok()
    })
}

/// CUDA's view of a pointer, asked of the pointer itself: its memory type
/// and its own device ordinal (unified addressing answers these with no
/// current context). Nothing here makes, binds, retains or switches a
/// context: the calling thread — a serving process's, in observe mode —
/// keeps the context it had, and no GPU gets a context on our account.
/// `_device` (what the descriptor says) is not asked about: the caller
/// compares it with the pointer's own ordinal.
pub fn pointer(addr: usize, _device: u32) -> Result<DevicePointer, Reason> {
    if !driver_present() {
        return Err(Reason::CudaUnavailable);
    }
    let mut mem_type: u32 = 0;
    // Safety: the driver is initialised (driver_present); the out pointer is
    // a live u32, the size CU_POINTER_ATTRIBUTE_MEMORY_TYPE writes. Any
    // address may be queried: unknown ones return an error, not UB.
    let res = unsafe {
        sys::cuPointerGetAttribute(
            (&mut mem_type as *mut u32).cast(),
            sys::CUpointer_attribute::CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
            addr as sys::CUdeviceptr,
        )
    };
    if res != sys::CUresult::CUDA_SUCCESS || mem_type != sys::CUmemorytype::CU_MEMORYTYPE_DEVICE as u32 {
        return Ok(DevicePointer {
            is_device: false,
            device: 0,
        });
    }
    let mut ordinal: i32 = -1;
    // Safety: as above; DEVICE_ORDINAL writes an int.
    let res = unsafe {
        sys::cuPointerGetAttribute(
            (&mut ordinal as *mut i32).cast(),
            sys::CUpointer_attribute::CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
            addr as sys::CUdeviceptr,
        )
    };
    if res != sys::CUresult::CUDA_SUCCESS || ordinal < 0 {
        return Err(Reason::Unknown);
    }
    Ok(DevicePointer {
        is_device: true,
        device: ordinal as u32,
    })
}

/// The primary context of `device`, after checking that a driver and the
/// device are there.
fn present_device(device: u32) -> Result<Arc<CudaContext>, (Reason, String)> {
    if !driver_present() {
        return Err((
            Reason::CudaUnavailable,
            "no CUDA driver (libcuda.so) could be loaded".to_string(),
        ));
    }
    let n = CudaContext::device_count().map_err(|e| (Reason::CudaUnavailable, format!("cuDeviceGetCount: {e}")))?;
    if device as i64 >= n as i64 {
        return Err((
            Reason::DeviceMismatch,
            format!("device {device} requested but {n} CUDA device(s) present"),
        ));
    }
    context(device)
}

/// Device memory the agent allocated for a VRAM group.
pub struct VramArea {
    _ctx: Arc<CudaContext>,
    _slices: Vec<CudaSlice<u8>>,
}

/// Allocates `count` device buffers of `size` bytes on `device`.
pub fn allocate(device: u32, count: usize, size: usize) -> Result<(Vec<usize>, VramArea), (Reason, String)> {
    let ctx = present_device(device)?;
    let stream = ctx.default_stream();
    let mut addrs = Vec::with_capacity(count);
    let mut slices = Vec::with_capacity(count);
    for _ in 0..count {
        let s = stream.alloc_zeros::<u8>(size).map_err(|e| {
            (
                Reason::AllocationFailed,
                format!("cuMemAlloc of {size} bytes on device {device}: {e}"),
            )
        })?;
        let (ptr, _sync) = s.device_ptr(&stream);
        addrs.push(ptr as usize);
        drop(_sync);
        slices.push(s);
    }
    stream
        .synchronize()
        .map_err(|e| (Reason::Unknown, format!("cuda synchronize: {e}")))?;
    Ok((
        addrs,
        VramArea {
            _ctx: ctx,
            _slices: slices,
        },
    ))
}

/// One device buffer whose bytes can be written and read back from the
/// host: the data-path check's VRAM endpoint.
pub struct VramBuffer {
    stream: Arc<cudarc::driver::CudaStream>,
    slice: CudaSlice<u8>,
    addr: usize,
}

impl VramBuffer {
    /// `len` zeroed bytes on `device` (its primary context, retained).
    pub fn new(device: u32, len: usize) -> Result<VramBuffer, (Reason, String)> {
        let ctx = present_device(device)?;
        let stream = ctx.default_stream();
        let slice = stream.alloc_zeros::<u8>(len).map_err(|e| {
            (
                Reason::AllocationFailed,
                format!("cuMemAlloc of {len} bytes on device {device}: {e}"),
            )
        })?;
        let (ptr, sync) = slice.device_ptr(&stream);
        let addr = ptr as usize;
        drop(sync);
        stream
            .synchronize()
            .map_err(|e| (Reason::Unknown, format!("cuda synchronize: {e}")))?;
        Ok(VramBuffer { stream, slice, addr })
    }

    pub fn addr(&self) -> usize {
        self.addr
    }

    /// Copies `bytes` to `offset` of the buffer and waits for the copy.
    pub fn write(&mut self, offset: usize, bytes: &[u8]) -> Result<(), String> {
        let mut view = self.slice.slice_mut(offset..offset + bytes.len());
        self.stream
            .memcpy_htod(bytes, &mut view)
            .and_then(|()| self.stream.synchronize())
            .map_err(|e| format!("copy to device: {e}"))
    }

    /// Copies `len` bytes at `offset` back to the host.
    pub fn read(&self, offset: usize, len: usize) -> Result<Vec<u8>, String> {
        let view = self.slice.slice(offset..offset + len);
        let mut out = vec![0u8; len];
        self.stream
            .memcpy_dtoh(&view, &mut out)
            .and_then(|()| self.stream.synchronize())
            .map_err(|e| format!("copy from device: {e}"))?;
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Observe mode asks the driver about a caller's pointer from the
    /// caller's own thread: [`pointer`] asks the pointer itself for its
    /// attributes and never makes, binds, retains or switches a context,
    /// which would move the caller's current device. Read on this file's
    /// code (comments dropped) so that it holds on machines without a GPU;
    /// `a_pointer_query_leaves_the_callers_context_alone` checks it on one.
    #[test]
    fn the_observe_paths_pointer_query_touches_no_context() {
        let src = include_str!("cuda.rs");
        let start = src.find("pub fn pointer(").expect("cuda::pointer");
        let end = start + src[start..].find("\n}\n").expect("its end");
        let code: String = src[start..end]
            .lines()
            .map(|l| l.split("//").next().unwrap_or(""))
            .collect::<Vec<_>>()
            .join("\n");
        for forbidden in [
            "context(",
            "CudaContext",
            "bind_to_thread",
            "cuCtx",
            "PrimaryCtx",
            "cuDevicePrimary",
        ] {
            assert!(!code.contains(forbidden), "cuda::pointer calls {forbidden}");
        }
        assert!(code.contains("cuPointerGetAttribute"), "the pointer is asked itself");
    }

    /// On a GPU: a VRAM pointer query from a thread whose current context
    /// is the program's own (not a primary one) leaves that context
    /// current, retains no primary context, and answers from a thread with
    /// no context at all.
    #[cfg_attr(
        not(nixl_agent_cuda),
        ignore = "GPU-only: no CUDA driver on this machine (run scripts/gpu-check.sh on a GPU host)"
    )]
    #[test]
    fn a_pointer_query_leaves_the_callers_context_alone() {
        assert!(driver_present(), "built with a CUDA driver present, but none loads now");
        let mut dev: sys::CUdevice = 0;
        let mut ctx: sys::CUcontext = std::ptr::null_mut();
        let mut dptr: sys::CUdeviceptr = 0;
        let primary_active = |dev| {
            let (mut flags, mut active) = (0u32, 0i32);
            // Safety: out pointers to live locals; `dev` is a valid ordinal.
            let r = unsafe { sys::cuDevicePrimaryCtxGetState(dev, &mut flags, &mut active) };
            assert_eq!(r, sys::CUresult::CUDA_SUCCESS);
            active
        };
        let current = || {
            let mut c: sys::CUcontext = std::ptr::null_mut();
            // Safety: out pointer to a live local.
            assert_eq!(unsafe { sys::cuCtxGetCurrent(&mut c) }, sys::CUresult::CUDA_SUCCESS);
            c
        };
        // Safety: the driver is initialised; out pointers to live locals.
        unsafe {
            assert_eq!(sys::cuDeviceGet(&mut dev, 0), sys::CUresult::CUDA_SUCCESS);
            assert_eq!(sys::cuCtxCreate_v2(&mut ctx, 0, dev), sys::CUresult::CUDA_SUCCESS);
            assert_eq!(sys::cuMemAlloc_v2(&mut dptr, 1 << 20), sys::CUresult::CUDA_SUCCESS);
        }
        let before = primary_active(dev);
        // The descriptor says device 3 (a tp_rank passed as a device id):
        // the answer is the pointer's own ordinal.
        let p = pointer(dptr as usize, 3).unwrap();
        assert!(p.is_device && p.device == 0, "{p:?}");
        assert_eq!(current(), ctx, "the calling thread's context moved");
        assert_eq!(primary_active(dev), before, "a primary context was retained");
        let addr = dptr as usize;
        let elsewhere = std::thread::spawn(move || pointer(addr, 0)).join().unwrap().unwrap();
        assert!(elsewhere.is_device && elsewhere.device == 0, "{elsewhere:?}");
        assert_eq!(primary_active(dev), before, "a primary context was retained");
        // Safety: `dptr` and `ctx` were made above and are freed once.
        unsafe {
            assert_eq!(sys::cuMemFree_v2(dptr), sys::CUresult::CUDA_SUCCESS);
            assert_eq!(sys::cuCtxDestroy_v2(ctx), sys::CUresult::CUDA_SUCCESS);
        }
    }
}
