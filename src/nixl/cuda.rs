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

/// CUDA's view of a pointer, asked from `device`'s primary context (pointer
/// queries need a current context on the thread; with unified addressing
/// any device's would answer, so the group's own is used and no other GPU's
/// context is created or retained on its behalf).
pub fn pointer(addr: usize, device: u32) -> Result<DevicePointer, Reason> {
    if !driver_present() {
        return Err(Reason::CudaUnavailable);
    }
    let _ = context(device);
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

/// Device memory the agent allocated for a VRAM group.
pub struct VramArea {
    _ctx: Arc<CudaContext>,
    _slices: Vec<CudaSlice<u8>>,
}

/// Allocates `count` device buffers of `size` bytes on `device`.
pub fn allocate(device: u32, count: usize, size: usize) -> Result<(Vec<usize>, VramArea), (Reason, String)> {
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
    let ctx = context(device)?;
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
