//! [`Descriptor`]: a region as nixl-sys wants to see it, for the
//! registrar and for embedders that describe plain memory to NIXL (or to
//! [`crate::Observer`]) without writing an `unsafe fn` of their own.

use crate::model::{MemType, Region};

/// One region of host or device memory, by address. Holding one does not
/// keep the memory alive: whoever registers it must.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Descriptor {
    region: Region,
    mem_type: MemType,
}

impl Descriptor {
    pub fn new(region: Region, mem_type: MemType) -> Descriptor {
        Descriptor { region, mem_type }
    }

    /// A DRAM descriptor over a byte slice the caller owns.
    pub fn host(buf: &[u8]) -> Descriptor {
        Descriptor::new(Region::new(buf.as_ptr() as usize, buf.len(), 0), MemType::Dram)
    }

    pub fn region(&self) -> Region {
        self.region
    }
}

impl nixl_sys::MemoryRegion for Descriptor {
    // Safety (of the contract): the pointer is only handed to NIXL for
    // registration, never dereferenced by Rust. Validity of the memory is
    // the caller's promise (and what validation checks when enabled).
    unsafe fn as_ptr(&self) -> *const u8 {
        self.region.addr as *const u8
    }

    fn size(&self) -> usize {
        self.region.len
    }
}

impl nixl_sys::NixlDescriptor for Descriptor {
    fn mem_type(&self) -> nixl_sys::MemType {
        match self.mem_type {
            MemType::Dram => nixl_sys::MemType::Dram,
            MemType::Vram => nixl_sys::MemType::Vram,
        }
    }

    fn device_id(&self) -> u64 {
        u64::from(self.region.device)
    }
}

/// The address a nixl-sys descriptor describes, as a number (never
/// dereferenced): what observe mode records of a caller's descriptor.
pub fn addr_of(desc: &impl nixl_sys::NixlDescriptor) -> usize {
    // Safety: `as_ptr` only reports the descriptor's address; it is
    // recorded as a number, never dereferenced (nixl-sys reads the same
    // pointer for the registration itself).
    (unsafe { desc.as_ptr() }) as usize
}
