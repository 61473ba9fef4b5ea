//! Memory the binary allocates for its groups: one anonymous mapping per DRAM
//! group (page aligned, one VMA however many regions), CUDA buffers per VRAM
//! group. Freed on drop, after the lifecycle has deregistered the regions.

use super::cuda::{self, VramArea};
use crate::model::Failure;
use crate::model::Region;
use crate::model::{MemType, Reason};

/// What keeps a group's allocated memory alive (held for its drop; the
/// data path's endpoints also fill and read a DRAM mapping through it).
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

impl MmapArea {
    fn check(&self, offset: usize, len: usize) -> Result<(), String> {
        match offset.checked_add(len) {
            Some(end) if end <= self.len => Ok(()),
            _ => Err(format!("{len} bytes at {offset} do not fit a mapping of {}", self.len)),
        }
    }

    /// Writes `bytes` at `offset` of the mapping.
    pub fn write(&mut self, offset: usize, bytes: &[u8]) -> Result<(), String> {
        self.check(offset, bytes.len())?;
        // Safety: [ptr+offset, +len) lies inside the mapping this value owns
        // (checked above) and `bytes` is another allocation. Copied through
        // raw pointers, no reference into the mapping is made: a peer's NIXL
        // may write into it (the exchange is sequential, so not while we
        // fill or read).
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), self.ptr.cast::<u8>().add(offset), bytes.len()) };
        Ok(())
    }

    /// Reads `len` bytes at `offset` of the mapping.
    pub fn read(&self, offset: usize, len: usize) -> Result<Vec<u8>, String> {
        self.check(offset, len)?;
        let mut out = vec![0u8; len];
        // Safety: as in `write`: inside the mapping (checked above), into a
        // fresh vector, through raw pointers.
        unsafe { std::ptr::copy_nonoverlapping(self.ptr.cast::<u8>().add(offset), out.as_mut_ptr(), len) };
        Ok(out)
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
