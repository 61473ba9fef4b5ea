//! The real [`MemoryProbe`]: /proc/self/maps, RLIMIT_MEMLOCK with
//! CAP_IPC_LOCK, and CUDA pointer attributes.

use super::cuda;
use crate::telemetry::names::Reason;
use crate::validate::{self, DevicePointer, Memlock, MemoryProbe};

/// Reads facts about this process's memory.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemProbe;

impl MemoryProbe for SystemProbe {
    fn mapped_ranges(&self) -> Result<Vec<(usize, usize)>, String> {
        std::fs::read_to_string("/proc/self/maps")
            .map(|t| validate::parse_maps(&t))
            .map_err(|e| format!("/proc/self/maps: {e}"))
    }

    fn device_pointer(&self, addr: usize) -> Result<DevicePointer, Reason> {
        cuda::pointer(addr)
    }

    fn memlock(&self) -> Memlock {
        let mut lim = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // Safety: getrlimit writes into the live `lim` struct only.
        let rc = unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut lim) };
        let soft_limit = if rc != 0 || lim.rlim_cur == libc::RLIM_INFINITY {
            None
        } else {
            Some(lim.rlim_cur)
        };
        let exempt = std::fs::read_to_string("/proc/self/status").is_ok_and(|s| validate::has_ipc_lock(&s));
        Memlock { soft_limit, exempt }
    }
}
