//! Validation of a group's regions before NIXL sees them.
//!
//! Pure logic over facts gathered at the edge (the process's memory map, CUDA
//! pointer attributes, RLIMIT_MEMLOCK), passed in through [`MemoryProbe`] so
//! every rule is unit-tested without NIXL or CUDA.

use crate::model::{MemType, Reason};
use crate::plan::{GroupSpec, Region};

/// What CUDA says about a pointer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DevicePointer {
    /// True when the pointer is device memory (not host or unregistered).
    pub is_device: bool,
    /// The CUDA ordinal the memory lives on (meaningful when `is_device`).
    pub device: u32,
}

/// RLIMIT_MEMLOCK as it applies to this process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Memlock {
    /// Soft limit in bytes; `None` when unlimited.
    pub soft_limit: Option<u64>,
    /// True when the process may exceed the limit anyway (CAP_IPC_LOCK).
    pub exempt: bool,
    /// What the process has locked or pinned now, whoever did it (VmLck +
    /// VmPin of /proc/self/status: mlock and RDMA registrations alike, both
    /// counted against RLIMIT_MEMLOCK); `None` when unreadable.
    pub locked_bytes: Option<u64>,
}

impl Memlock {
    /// The limit that registration must respect, if any.
    pub fn enforced_limit(&self) -> Option<u64> {
        if self.exempt {
            None
        } else {
            self.soft_limit
        }
    }
}

/// For unit tests of the lifecycle: nothing mapped, no CUDA, no memlock
/// limit (validation is off in those tests or only the memlock rule runs).
#[cfg(any(test, feature = "testing"))]
pub struct NullProbe;

#[cfg(any(test, feature = "testing"))]
impl MemoryProbe for NullProbe {
    fn mapped_ranges(&self) -> Result<Vec<(usize, usize)>, String> {
        Ok(vec![])
    }
    fn device_pointer(&self, _: usize, _: u32) -> Result<DevicePointer, Reason> {
        Err(Reason::CudaUnavailable)
    }
    fn memlock(&self) -> Memlock {
        Memlock {
            soft_limit: None,
            exempt: true,
            locked_bytes: None,
        }
    }
}

/// Facts about memory that validation needs, gathered at the edge.
pub trait MemoryProbe {
    /// Mapped address ranges of the process, sorted, adjacent ranges merged.
    fn mapped_ranges(&self) -> Result<Vec<(usize, usize)>, String>;
    /// The index of the first region not (fully) mapped, if any. The default
    /// reads [`Self::mapped_ranges`] once; a probe may answer per region
    /// more cheaply (the system probe asks the kernel, one call each).
    fn first_unmapped(&self, regions: &[Region]) -> Result<Option<usize>, String> {
        let ranges = self.mapped_ranges()?;
        Ok(regions.iter().position(|r| !is_mapped(&ranges, r)))
    }
    /// CUDA's view of a pointer, asked of the pointer itself (its memory
    /// type and its own device ordinal); `Err(CudaUnavailable)` without a
    /// driver. Never makes, binds or retains a CUDA context: in observe mode
    /// it runs on the serving process's thread. `device` is what the
    /// descriptor says, for the caller to compare with the answer.
    fn device_pointer(&self, addr: usize, device: u32) -> Result<DevicePointer, Reason>;
    /// The memlock limit of the process.
    fn memlock(&self) -> Memlock;
}

/// What a group expects of its regions.
struct Expect {
    mem_type: MemType,
    device: u32,
}

/// Why a group was refused before registration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejection {
    pub reason: Reason,
    /// Index of the offending region, when one region is to blame.
    pub region: Option<usize>,
    pub message: String,
}

fn reject(reason: Reason, region: Option<usize>, message: String) -> Rejection {
    Rejection {
        reason,
        region,
        message,
    }
}

/// Checks every rule for one group. `pinned_bytes` is what the agent already
/// holds registered in DRAM, counted against RLIMIT_MEMLOCK with this group.
pub fn validate_group(
    spec: &GroupSpec,
    regions: &[Region],
    probe: &dyn MemoryProbe,
    pinned_bytes: u64,
) -> Result<(), Rejection> {
    validate_regions(spec.mem_type, spec.device, regions, probe, pinned_bytes)
}

/// [`validate_group`] for regions that belong to no plan (observe mode):
/// the same checks against the group's memory type and device.
pub fn validate_regions(
    mem_type: MemType,
    device: u32,
    regions: &[Region],
    probe: &dyn MemoryProbe,
    pinned_bytes: u64,
) -> Result<(), Rejection> {
    let spec = Expect { mem_type, device };
    // One walk: each region's own checks, whether the list is in address
    // order without overlaps (usual: then nothing more is compared), and
    // its bytes.
    let mut ordered = true;
    let mut bytes = 0u64;
    let mut prev_end = 0usize;
    for (i, r) in regions.iter().enumerate() {
        if r.len == 0 {
            return Err(reject(
                Reason::ZeroLength,
                Some(i),
                format!("region {i} at {:#x} has length 0", r.addr),
            ));
        }
        if r.addr == 0 {
            return Err(reject(
                Reason::InvalidAddress,
                Some(i),
                format!("region {i} has a null address with length {}", r.len),
            ));
        }
        if r.end().is_none() {
            return Err(reject(
                Reason::InvalidAddress,
                Some(i),
                format!("region {i} at {:#x} + {} wraps the address space", r.addr, r.len),
            ));
        }
        if r.device != spec.device {
            return Err(reject(
                Reason::DeviceMismatch,
                Some(i),
                format!(
                    "region {i} names device {} but the group is on device {}",
                    r.device, spec.device
                ),
            ));
        }
        ordered &= i == 0 || prev_end <= r.addr;
        prev_end = r.addr + r.len;
        bytes = bytes.saturating_add(r.len as u64);
    }
    if !ordered {
        check_overlap(regions)?;
    }
    match spec.mem_type {
        MemType::Dram => {
            let unmapped = probe.first_unmapped(regions).map_err(|e| {
                reject(
                    Reason::Unknown,
                    None,
                    format!("cannot read the process memory map: {e}"),
                )
            })?;
            if let Some(i) = unmapped {
                let r = &regions[i];
                return Err(reject(
                    Reason::UnmappedAddress,
                    Some(i),
                    format!("region {i} [{:#x}, +{}) is not mapped in this process", r.addr, r.len),
                ));
            }
            let memlock = probe.memlock();
            if let Some(limit) = memlock.enforced_limit() {
                // The larger of what the kernel says the process holds and
                // what nixl-agent itself registered (a transport that does
                // not pin, as on CPU-only hosts, leaves the kernel's at 0).
                let (already, figure) = match memlock.locked_bytes {
                    Some(l) if l >= pinned_bytes => (l, "VmLck+VmPin of the process"),
                    _ => (pinned_bytes, "DRAM nixl-agent registered"),
                };
                if already.saturating_add(bytes) > limit {
                    return Err(reject(
                        Reason::MemlockLimit,
                        None,
                        format!(
                            "registering {bytes} bytes on top of {already} bytes already locked ({figure}) exceeds RLIMIT_MEMLOCK of {limit} bytes; raise it (ulimit -l unlimited, LimitMEMLOCK=infinity, --ulimit memlock=-1)"
                        ),
                    ));
                }
            }
        }
        MemType::Vram => {
            for (i, r) in regions.iter().enumerate() {
                let p = probe.device_pointer(r.addr, spec.device).map_err(|reason| {
                    reject(
                        reason,
                        Some(i),
                        format!("cannot query CUDA about region {i} at {:#x}", r.addr),
                    )
                })?;
                if !p.is_device {
                    return Err(reject(
                        Reason::MemTypeMismatch,
                        Some(i),
                        format!("region {i} at {:#x} is not device memory but the group is VRAM", r.addr),
                    ));
                }
                if p.device != spec.device {
                    return Err(reject(
                        Reason::DeviceMismatch,
                        Some(i),
                        format!(
                            "region {i} at {:#x} lives on device {} but the group is on device {}",
                            r.addr, p.device, spec.device
                        ),
                    ));
                }
            }
        }
    }
    Ok(())
}

/// Regions that are not in address order without overlaps: the first
/// repeated or overlapping pair, if any.
fn check_overlap(regions: &[Region]) -> Result<(), Rejection> {
    // By (address, length): a region listed twice sits beside its twin.
    let mut order: Vec<usize> = (0..regions.len()).collect();
    order.sort_by_key(|&i| (regions[i].addr, regions[i].len, i));
    let mut first_overlap = None;
    for pair in order.windows(2) {
        let (a, b) = (&regions[pair[0]], &regions[pair[1]]);
        let (lo, hi) = (pair[0].min(pair[1]), pair[0].max(pair[1]));
        if a.addr == b.addr && a.len == b.len {
            // NIXL accepts this list and crashes when it is deregistered:
            // the finding that matters most, whatever else overlaps.
            return Err(reject(
                Reason::DuplicateRegions,
                Some(hi),
                format!(
                    "region {hi} repeats region {lo} [{:#x}, +{}): NIXL accepts the list, and deregistering it crashes the process (SIGSEGV)",
                    regions[lo].addr, regions[lo].len
                ),
            ));
        }
        // Ends cannot overflow: checked above.
        if first_overlap.is_none() && a.addr + a.len > b.addr {
            first_overlap = Some((lo, hi));
        }
    }
    match first_overlap {
        Some((lo, hi)) => Err(reject(
            Reason::OverlappingRegions,
            Some(hi),
            format!(
                "region {hi} [{:#x}, +{}) overlaps region {lo} [{:#x}, +{})",
                regions[hi].addr, regions[hi].len, regions[lo].addr, regions[lo].len
            ),
        )),
        None => Ok(()),
    }
}

fn is_mapped(ranges: &[(usize, usize)], r: &Region) -> bool {
    let end = r.addr + r.len;
    // The last range starting at or before addr must cover the whole region.
    let idx = ranges.partition_point(|&(start, _)| start <= r.addr);
    idx > 0 && ranges[idx - 1].1 >= end
}

/// Parses /proc/self/maps into sorted ranges with adjacent ones merged.
pub fn parse_maps(text: &str) -> Vec<(usize, usize)> {
    let mut out: Vec<(usize, usize)> = text
        .lines()
        .filter_map(|l| {
            let range = l.split_whitespace().next()?;
            let (a, b) = range.split_once('-')?;
            Some((usize::from_str_radix(a, 16).ok()?, usize::from_str_radix(b, 16).ok()?))
        })
        .collect();
    out.sort_unstable();
    let mut merged: Vec<(usize, usize)> = Vec::with_capacity(out.len());
    for (s, e) in out {
        match merged.last_mut() {
            Some(last) if s <= last.1 => last.1 = last.1.max(e),
            _ => merged.push((s, e)),
        }
    }
    merged
}

/// True when the `CapEff:` line of /proc/self/status holds CAP_IPC_LOCK (14).
/// VmLck + VmPin of a /proc/self/status text, in bytes.
pub fn locked_bytes(status: &str) -> Option<u64> {
    let kib = |key: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
    };
    let lck = kib("VmLck:")?;
    Some(lck.saturating_add(kib("VmPin:").unwrap_or(0)).saturating_mul(1024))
}

pub fn has_ipc_lock(status: &str) -> bool {
    const CAP_IPC_LOCK: u32 = 14;
    status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
        .is_some_and(|caps| caps & (1 << CAP_IPC_LOCK) != 0)
}

#[cfg(test)]
mod tests;
