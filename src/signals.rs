//! Process signals for the binary: SIGTERM/SIGINT stop the agent (a second
//! one cuts the drain short), SIGUSR1 re-registers every group.
//!
//! The handlers are installed once, before the lifecycle starts: a signal
//! that arrives while NIXL loads or the first groups register is queued and
//! handled by a drain, never by the default action (death without one).

use crate::agent::LifecycleHandle;

/// SIGTERM/SIGINT (stop) and SIGUSR1 (re-register every group). Not SIGHUP:
/// UCX takes SIGHUP as its debug signal (UCX_DEBUG_SIGNO) once a backend exists.
pub struct Signals {
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
    hup: tokio::signal::unix::Signal,
}

impl Default for Signals {
    fn default() -> Self {
        Signals::new()
    }
}

impl Signals {
    pub fn new() -> Signals {
        use tokio::signal::unix::{signal, SignalKind};
        let term = signal(SignalKind::terminate()).expect("SIGTERM handler installs");
        let int = signal(SignalKind::interrupt()).expect("SIGINT handler installs");
        let hup = signal(SignalKind::user_defined1()).expect("SIGUSR1 handler installs");
        Signals { term, int, hup }
    }

    /// Waits for a stop signal, re-registering on every SIGUSR1 meanwhile.
    pub async fn next_stop(&mut self, agent: &LifecycleHandle) {
        loop {
            tokio::select! {
                _ = self.hup.recv() => {
                    tracing::info!(signal = "SIGUSR1", "re-registering every group");
                    let _ = agent.reregister(None);
                }
                _ = self.term.recv() => return tracing::info!(signal = "SIGTERM", "shutting down"),
                _ = self.int.recv() => return tracing::info!(signal = "SIGINT", "shutting down"),
            }
        }
    }

    pub async fn next_stop_only(&mut self) {
        tokio::select! {
            _ = self.term.recv() => tracing::info!(signal = "SIGTERM", "shutting down"),
            _ = self.int.recv() => tracing::info!(signal = "SIGINT", "shutting down"),
        }
    }
}
