//! CUDA through cudarc, loaded at run time. cudarc panics when libcuda is
//! absent, so every entry point checks [`driver_present`] first.

use crate::telemetry::names::Reason;
use crate::validate::DevicePointer;
use cudarc::driver::{sys, CudaContext, CudaSlice, DevicePtr};
use std::sync::{Arc, OnceLock};

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

/// CUDA's view of a pointer.
pub fn pointer(addr: usize) -> Result<DevicePointer, Reason> {
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
    let ctx = CudaContext::new(device as usize)
        .map_err(|e| (Reason::CudaUnavailable, format!("cuda context on device {device}: {e}")))?;
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
