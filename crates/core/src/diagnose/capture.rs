//! The capture window: what NIXL and UCX print during one call, kept for
//! the reason refinement of a failed attempt (`diagnose::reason_from_lines`).
//! The tap that fills it is `nixl_agent_sys::StderrTap`.

/// Collects what the NIXL runtime prints during an attempt.
/// Windows are the calling thread's own: `begin` and `end` on one thread.
pub trait Capture {
    fn begin(&self);
    /// The lines printed since `begin` when `wanted` (the attempt failed);
    /// otherwise the window is dropped unread, at no wait.
    fn end(&self, wanted: bool) -> Vec<String>;
    /// Waits until what was printed so far can be read; `end` then waits
    /// no more. For a front-end that must not wait holding a lock.
    fn settle(&self) {}
    /// UCX's protocol table lines printed so far and not taken yet (only a
    /// tap told to keep them has any), after what was printed is copied.
    fn protocol_tables(&self) -> Vec<String> {
        Vec::new()
    }
}

/// No capture: what NIXL prints is left alone.
pub struct NoCapture;

impl Capture for NoCapture {
    fn begin(&self) {}
    fn end(&self, _wanted: bool) -> Vec<String> {
        Vec::new()
    }
}
