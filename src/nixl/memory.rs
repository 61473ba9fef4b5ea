//! Memory the binary allocates for its groups: one anonymous mapping per DRAM
//! group (page aligned, one VMA however many regions), CUDA buffers per VRAM
//! group. Freed on drop, after the lifecycle has deregistered the regions.

use super::cuda::{self, VramArea};
use crate::lifecycle::Failure;
use crate::model::{MemType, Reason};
use crate::plan::Region;

/// What keeps a group's allocated memory alive (held for its drop, never
/// read).
#[allow(dead_code)]
pub enum Backing {
    /// The embedding process owns the memory.
    None,
    Dram(MmapArea),
    Vram(VramArea),
}

/// An anonymous private mapping, unmapped on drop.
pub struct MmapArea {
    ptr: *mut libc::c_void,
    len: usize,
}

// Safety: the mapping is owned exclusively by this value; nothing in the
// agent reads or writes through the pointer, NIXL only registers it.
unsafe impl Send for MmapArea {}

impl Drop for MmapArea {
    fn drop(&mut self) {
        // Safety: ptr/len are exactly what mmap returned, unmapped once.
        unsafe { libc::munmap(self.ptr, self.len) };
    }
}

/// The system page size.
pub fn page_size() -> usize {
    // Safety: sysconf has no preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if n > 0 {
        n as usize
    } else {
        4096
    }
}

/// Allocates `count` regions of `size` bytes (rounded up to the page size).
pub fn allocate(mem_type: MemType, device: u32, count: usize, size: usize) -> Result<(Vec<Region>, Backing), Failure> {
    let page = page_size();
    let stride = size
        .checked_next_multiple_of(page)
        .ok_or_else(|| too_large(count, size))?;
    match mem_type {
        MemType::Dram => {
            let len = stride.checked_mul(count).ok_or_else(|| too_large(count, size))?;
            // Safety: a fresh anonymous private mapping; no existing memory
            // is touched. The result is checked against MAP_FAILED.
            let ptr = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    len,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_POPULATE,
                    -1,
                    0,
                )
            };
            if ptr == libc::MAP_FAILED {
                let err = std::io::Error::last_os_error();
                return Err(Failure::new(
                    Reason::AllocationFailed,
                    format!("mmap of {len} bytes for {count} × {size}: {err}"),
                ));
            }
            let base = ptr as usize;
            let regions = (0..count).map(|i| Region::new(base + i * stride, stride, 0)).collect();
            Ok((regions, Backing::Dram(MmapArea { ptr, len })))
        }
        MemType::Vram => {
            let (addrs, area) = cuda::allocate(device, count, stride).map_err(|(r, m)| Failure::new(r, m))?;
            let regions = addrs.into_iter().map(|a| Region::new(a, stride, device)).collect();
            Ok((regions, Backing::Vram(area)))
        }
    }
}

fn too_large(count: usize, size: usize) -> Failure {
    Failure::new(
        Reason::AllocationFailed,
        format!("{count} × {size} bytes overflows the address space"),
    )
}
