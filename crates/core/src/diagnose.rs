//! Reading what NIXL and UCX print on stderr during a failed call, and
//! mapping well-known messages to the closed reason vocabulary.
//!
//! nixl-sys only returns `BackendError`; the real cause is in lines such as
//! `UCX  ERROR undefined address with nonzero length requires
//! UCP_MEM_MAP_ALLOCATE flag` or `VRAM memory is detected as host by UCX`.
//! Pure functions: the capture itself is the tap in nixl-agent-sys (`stderr`).

use crate::model::Reason;

mod capture;
pub mod nixl_config;
pub mod proto;

pub use capture::{Capture, NoCapture};

/// Longest captured line kept, in bytes.
pub const MAX_LINE: usize = 512;
/// Most lines kept per failed call.
pub const MAX_LINES: usize = 32;

/// Known messages, most specific first.
const PATTERNS: &[(&str, Reason)] = &[
    ("detected as host", Reason::MemTypeMismatch),
    ("not configured with cuda", Reason::MemTypeMismatch),
    ("undefined address with nonzero length", Reason::InvalidAddress),
    ("max locked memory", Reason::MemlockLimit),
    ("rlimit_memlock", Reason::MemlockLimit),
    ("ulimit -l", Reason::MemlockLimit),
    ("cannot allocate memory", Reason::MemlockLimit),
    ("enomem", Reason::MemlockLimit),
    ("plugin file does not exist", Reason::PluginUnavailable),
    ("unsupported backend", Reason::PluginUnavailable),
    ("invalid device", Reason::DeviceMismatch),
    ("device ordinal", Reason::DeviceMismatch),
];

/// The reason the captured lines point at, if they match a known message.
pub fn classify(lines: &[String]) -> Option<Reason> {
    PATTERNS.iter().find_map(|(needle, reason)| {
        lines
            .iter()
            .any(|l| l.to_ascii_lowercase().contains(needle))
            .then_some(*reason)
    })
}

/// Refines a generic NIXL backend error with what the backend printed.
/// Specific reasons found by the agent itself are kept as they are.
pub fn refine(reason: Reason, lines: &[String]) -> Reason {
    match reason {
        Reason::NixlBackendError | Reason::NixlInvalidParam | Reason::Unknown => classify(lines).unwrap_or(reason),
        other => other,
    }
}

/// The thread id in a glog line (`E1130 15:17:19.574804    4699 file.cpp:659] ...`).
pub fn glog_thread(line: &str) -> Option<u64> {
    let mut parts = line.split_whitespace();
    let head = parts.next()?;
    let level = head.chars().next()?;
    if !matches!(level, 'I' | 'W' | 'E' | 'F') || head.len() != 5 || !head[1..].bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    parts.next()?; // time
    parts.next()?.parse().ok()
}

/// Keeps a line for attribution: trimmed, bounded, and dropped when it is a
/// glog line from another thread than the one inside the NIXL call.
pub fn keep(line: &str, caller_tid: u64) -> Option<String> {
    let line = line.trim_end();
    if line.is_empty() {
        return None;
    }
    if glog_thread(line).is_some_and(|tid| tid != caller_tid) {
        return None;
    }
    let mut end = line.len().min(MAX_LINE);
    while !line.is_char_boundary(end) {
        end -= 1;
    }
    Some(line[..end].to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &[&str]) -> Vec<String> {
        s.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn real_messages_map_to_reasons() {
        let null = v(&[
            "[1796051839.574782] [vm:4699 :0]          ucp_mm.c:1221 UCX  ERROR undefined address with nonzero length requires UCP_MEM_MAP_ALLOCATE flag",
            "E1130 15:17:19.574804    4699 ucx_utils.cpp:659] nixlUcxContext scratch: failed to ucp_mem_map: Invalid parameter",
        ]);
        assert_eq!(classify(&null), Some(Reason::InvalidAddress));
        let vram = v(&["E1130 15:17:19.575114    4699 ucx_utils.cpp:674] nixlUcxContext scratch: VRAM memory is detected as host by UCX. UCX is likely not configured with CUDA/ROCm support. VRAM registration cannot proceed."]);
        assert_eq!(classify(&vram), Some(Reason::MemTypeMismatch));
        assert_eq!(
            classify(&v(&["ibv_reg_mr failed: Cannot allocate memory"])),
            Some(Reason::MemlockLimit)
        );
        assert_eq!(classify(&v(&["something else"])), None);
    }

    #[test]
    fn refine_only_generic_errors() {
        let null = v(&["UCX  ERROR undefined address with nonzero length"]);
        assert_eq!(refine(Reason::NixlBackendError, &null), Reason::InvalidAddress);
        assert_eq!(refine(Reason::NixlBackendError, &[]), Reason::NixlBackendError);
        assert_eq!(refine(Reason::UnmappedAddress, &null), Reason::UnmappedAddress);
    }

    #[test]
    fn glog_lines_from_other_threads_are_not_attributed() {
        let line = "E1130 15:17:19.574855    4699 nixl_agent.cpp:483] registerMem: registration failed";
        assert_eq!(glog_thread(line), Some(4699));
        assert!(keep(line, 4699).is_some());
        assert!(keep(line, 4700).is_none());
        assert!(
            keep("[1.2] [vm:4699 :0] ucp_mm.c:1221 UCX  ERROR x", 1).is_some(),
            "UCX lines carry no tid"
        );
        assert!(keep("   ", 1).is_none());
        assert_eq!(keep(&"é".repeat(600), 1).unwrap().len(), MAX_LINE);
        assert_eq!(glog_thread("Error: E1130"), None);
    }
}
