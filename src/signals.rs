//! Process signals for the binary: SIGTERM/SIGINT stop the agent (a second
//! one cuts the drain short), SIGUSR1 re-registers every group.

use crate::agent::LifecycleHandle;

/// SIGTERM/SIGINT (stop) and SIGUSR1 (re-register every group). Not SIGHUP:
/// UCX takes SIGHUP as its debug signal (UCX_DEBUG_SIGNO) once a backend exists.
pub struct Signals {
    term: tokio::signal::unix::Signal,
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
        let hup = signal(SignalKind::user_defined1()).expect("SIGUSR1 handler installs");
        Signals { term, hup }
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
                _ = tokio::signal::ctrl_c() => return tracing::info!(signal = "SIGINT", "shutting down"),
            }
        }
    }

    pub async fn next_stop_only(&mut self) {
        tokio::select! {
            _ = self.term.recv() => tracing::info!(signal = "SIGTERM", "shutting down"),
            _ = tokio::signal::ctrl_c() => tracing::info!(signal = "SIGINT", "shutting down"),
        }
    }
}
