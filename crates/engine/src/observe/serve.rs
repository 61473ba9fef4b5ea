//! An observer's faces toward its front-ends: its recording as an axum
//! router for the caller's own server, and its recording published into a
//! pod directory. (Observe mode itself knows nothing of HTTP or pods; the
//! front-ends call these.)

use super::Observer;
use crate::http::{self, AppState};
use crate::status::Status;
use axum::Router;
use std::sync::Arc;

impl Observer {
    /// /metrics, /livez, /readyz, /v1/status, the dashboard and the rules
    /// of this observer's recording, for the caller's own axum server. (A
    /// front-end builds the router; observe mode knows nothing of HTTP.)
    pub fn router(&self) -> Router {
        let rec = self.recorder();
        http::router(AppState {
            metrics: rec.metrics().clone(),
            ledger: rec.ledger().clone(),
        })
    }

    /// [`Observer::status`] for another thread (a pod publisher).
    #[doc(hidden)]
    pub fn status_source(&self) -> impl Fn() -> Arc<Status> + Send + Sync + 'static {
        let ledger = self.recorder().ledger().clone();
        move || ledger.snapshot()
    }

    /// Publishes this recording into the pod directory `dir` as rank
    /// `rank`, for `nixl-agent pod` to serve; ends when the returned
    /// publisher is finished (`Publisher::finish`, saying how the process
    /// ends) or dropped (an exit): the rank's file keeps what it counted,
    /// with an end record, for the pod to serve until the rank is claimed
    /// again or the retention passes. A rank another live process holds is not
    /// taken: the publisher claims the lowest free slot and publishes the
    /// conflict there (`Publisher::conflict`), which the pod counts and
    /// names.
    /// A directory that is not safe to write (see `docs/kubernetes.md`) is
    /// refused: this recording says so (`/readyz?verbose`,
    /// `nixl_agent_pod_dir_refused`) and is not ready.
    pub fn publish(&self, dir: &std::path::Path, rank: u32) -> std::io::Result<crate::pod::publish::Publisher> {
        self.publish_as(dir, crate::pod::claim::Wish::Explicit(rank))
    }

    /// [`Observer::publish`] for the slot `wish` asks for; the directory
    /// used, or refused, is recorded.
    #[doc(hidden)]
    pub fn publish_as(
        &self,
        dir: &std::path::Path,
        wish: crate::pod::claim::Wish,
    ) -> std::io::Result<crate::pod::publish::Publisher> {
        let started = crate::pod::publish::Publisher::start(dir, wish, self.metrics().clone(), self.status_source());
        let shown = dir.display().to_string();
        match &started {
            Ok(p) => {
                // A failure reaches the rank's file before the call that
                // failed returns: the process may die of it right after.
                self.recorder().subscribe(p.sink());
                self.recorder()
                    .emit(&crate::event::Event::PodDirectory(crate::event::PodDirectory {
                        dir: &shown,
                        rank: Some(p.rank()),
                        refused: None,
                    }));
            }
            Err(e) => {
                if let Some(r) = crate::pod::claim::refusal(e) {
                    self.recorder()
                        .emit(&crate::event::Event::PodDirectory(crate::event::PodDirectory {
                            dir: &shown,
                            rank: None,
                            refused: Some((r.reason, &r.detail)),
                        }));
                }
            }
        }
        started
    }
}
