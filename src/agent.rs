//! Starting and stopping the lifecycle: the entry point for the binary and
//! for serving processes that hand their buffers to nixl-agent.
//!
//! Two ways to embed it (observe mode, the third entry point, is
//! [`crate::Observer`]):
//! - on the serving process's own NIXL agent ([`Prepared::on_agent`]): the
//!   registrations are the ones the process then transfers with;
//! - on a NIXL agent of nixl-agent's own (the default, what the binary does,
//!   which owns no serving memory).
//!
//! ```no_run
//! # async fn f(agent: nixl_sys::Agent) -> Result<(), Box<dyn std::error::Error>> {
//! use nixl_agent::{Config, GroupSpec, Kind, Lifecycle, MemType, Plan, Region};
//! let aux = vec![0u8; 1 << 16]; // the serving process's own buffer
//! let plan = Plan { groups: vec![GroupSpec::provided(
//!     "aux", Kind::Aux, MemType::Dram, vec![Region::new(aux.as_ptr() as usize, aux.len(), 0)])] };
//! let running = Lifecycle::prepare(Config::default(), plan)?
//!     .on_agent(agent)      // register on the process's own NIXL agent
//!     .without_server()     // mount running.router() in the process's server
//!     .start()
//!     .await?;
//! // ... transfer with `agent`; then, before freeing `aux`:
//! running.shutdown().await?;
//! # Ok(()) }
//! ```

use crate::canary::{self, Canary};
use crate::config::{Config, ConfigError, ProcessEnv};
use crate::datapath::MEMORY_BACKENDS;
// Re-exported at the crate root as `nixl_agent::Router`, on purpose.
use crate::http::{self, AppState};
use crate::lifecycle::driver::{self, Control, DrainReport};
use crate::lifecycle::registrar::NixlRegistrar;
use crate::nixl::{self, Discovery, NotFound, StderrTap};
use crate::observe::{GroupConflict, ObserveSettings, Observer};
use crate::plan::Plan;
use crate::record::Recorder;
use crate::status::Status;
use crate::telemetry::metrics::BuildInfo;
use crate::telemetry::names;
use crate::telemetry::Metrics;
use axum::Router;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::mpsc::{Sender, SyncSender};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// Why the lifecycle did not start. Nothing was registered in any case.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("cannot listen on {addr}: {source}; {}", crate::config::LISTEN_FIX)]
    Bind { addr: SocketAddr, source: std::io::Error },
    #[error("cannot start the lifecycle thread: {0}")]
    Thread(std::io::Error),
}

/// `reregister` named a group the plan does not have.
#[derive(Debug, thiserror::Error)]
#[error("no group named `{0}` in the plan")]
pub struct UnknownGroup(pub String);

/// Why shutdown did not finish cleanly. Each variant says what NIXL may
/// still hold: the caller must not free those buffers.
#[derive(Debug, thiserror::Error)]
pub enum ShutdownError {
    #[error("drain did not finish within the {grace:?} grace period; still registered: {}", list(.still_registered))]
    GraceExceeded {
        grace: Duration,
        /// Groups with descriptors still registered, and how many.
        still_registered: Vec<(String, usize)>,
    },
    #[error("deregistration failed; still registered: {}", list(.0))]
    LeftRegistered(Vec<(String, usize)>),
    #[error("the lifecycle thread panicked; what it registered is unknown")]
    Panicked,
    #[error("interrupted by a second signal; what was not deregistered is released by the kernel at exit")]
    Interrupted,
}

fn list(groups: &[(String, usize)]) -> String {
    if groups.is_empty() {
        return "nothing".to_string();
    }
    let parts: Vec<String> = groups.iter().map(|(g, n)| format!("{g} ({n} descriptors)")).collect();
    parts.join(", ")
}

/// A validated config and plan with NIXL located on disk: everything that
/// can fail without side effects, done before any thread or port exists.
pub struct Prepared {
    config: Config,
    plan: Plan,
    found: Result<Discovery, NotFound>,
    started: Instant,
    tap: Option<StderrTap>,
    agent: Option<nixl_sys::Agent>,
    serve: bool,
}

impl Prepared {
    /// Attributes what NIXL/UCX print on stderr to the attempt that failed.
    /// Off unless asked for: an embedding process keeps its own fds 1 and 2.
    pub fn with_stderr_tap(mut self, tap: Option<StderrTap>) -> Self {
        self.tap = tap;
        self
    }

    /// Registers on the caller's NIXL agent: its backends are used (missing
    /// ones are created on it), and nixl-agent creates no NIXL agent at all.
    pub fn on_agent(mut self, agent: nixl_sys::Agent) -> Self {
        self.agent = Some(agent);
        self
    }

    /// Binds no port: the caller serves [`LifecycleHandle::router`] or
    /// encodes [`LifecycleHandle::metrics`] itself.
    pub fn without_server(mut self) -> Self {
        self.serve = false;
        self
    }

    /// The `plugins` folder beside the library found, for `NIXL_PLUGIN_DIR`.
    pub fn plugin_dir(&self) -> Option<PathBuf> {
        self.found
            .as_ref()
            .ok()?
            .lib_dir()
            .map(|d| d.join("plugins"))
            .filter(|p| p.is_dir())
    }
}

/// nixl-agent's registration lifecycle (plan → validate → register → ready
/// → drain). Not to be confused with a NIXL agent (`nixl_sys::Agent`).
pub struct Lifecycle;

impl Lifecycle {
    /// Validates the config and the plan, and locates NIXL. No side effects.
    pub fn prepare(config: Config, plan: Plan) -> Result<Prepared, StartError> {
        let started = Instant::now();
        config.validate()?;
        plan.check()?;
        let found = nixl::discover(config.nixl_lib_dir.as_deref(), &ProcessEnv);
        Ok(Prepared {
            config,
            plan,
            found,
            started,
            tap: None,
            agent: None,
            serve: true,
        })
    }

    /// `prepare` then `start` on a NIXL agent of nixl-agent's own, serving
    /// on `config.listen`.
    pub async fn start(config: Config, plan: Plan) -> Result<LifecycleHandle, StartError> {
        Lifecycle::prepare(config, plan)?.start().await
    }
}

impl Prepared {
    /// Binds the HTTP port (unless [`Prepared::without_server`]), loads NIXL
    /// and starts the lifecycle thread. When it returns `Err`, nothing is
    /// running and nothing was registered.
    pub async fn start(self) -> Result<LifecycleHandle, StartError> {
        let Prepared {
            config,
            plan,
            found,
            started,
            tap,
            agent,
            serve,
        } = self;
        let listener = if serve {
            let addr = config.listen;
            let l = tokio::net::TcpListener::bind(addr)
                .await
                .map_err(|source| StartError::Bind { addr, source })?;
            let local = l.local_addr().map_err(|source| StartError::Bind { addr, source })?;
            Some((l, local))
        } else {
            None
        };

        let searched = found.as_ref().err().map(|nf| nf.searched.clone()).unwrap_or_default();
        let loaded = tokio::task::spawn_blocking(move || nixl::load(found))
            .await
            .expect("NIXL loading does not panic");

        let role = match (&agent, config.probe_interval) {
            (Some(_), _) => names::ROLE_EMBEDDED,
            (None, Some(_)) => names::ROLE_CANARY,
            (None, None) => names::ROLE_AGENT,
        };
        let build =
            BuildInfo::current(loaded.as_ref().ok().and_then(|l| l.discovery.version.as_deref())).with_role(role);
        if build.nixl_version != "unknown" && build.nixl_version != build.nixl_sys_version {
            tracing::warn!(
                nixl_version = %build.nixl_version,
                nixl_sys_version = build.nixl_sys_version,
                "the NIXL runtime and the nixl-sys binding this build uses differ in version"
            );
        }
        let rec = Recorder::new(&build, nixl::status_of(&loaded, searched), started);
        let app = http::router(AppState {
            metrics: rec.metrics().clone(),
            ledger: rec.ledger().clone(),
        });
        let (stop_tx, stop_rx) = watch::channel(false);
        let server = listener.map(|(l, local)| {
            let task = tokio::spawn(http::server::serve(l, app.clone(), config.http.clone(), stop_rx));
            tracing::info!(listen = %local, "serving /metrics, /livez, /readyz, /v1/status");
            (local, task)
        });

        let agent_name = config.agent_name.clone();
        let groups: Vec<String> = plan.groups.iter().map(|g| g.name.clone()).collect();
        // The canary also proves the data path, on NIXL agents of its own.
        let mover = plan
            .backends()
            .into_iter()
            .find(|b| MEMORY_BACKENDS.contains(&b.as_str()));
        let canary = match (&agent, config.probe_interval, loaded.is_ok(), mover.as_ref()) {
            (None, Some(every), true, Some(backend)) => match Canary::spawn(rec.clone(), backend.clone()) {
                Ok(c) => {
                    rec.emit(&crate::event::Event::CanaryStarted(crate::event::CanaryStarted {
                        interval: every,
                    }));
                    Some(c)
                }
                Err(e) => {
                    tracing::warn!(error = %e, "canary transfers off: cannot start their thread");
                    None
                }
            },
            _ => None,
        };
        let make = move || match agent {
            Some(a) => NixlRegistrar::on_agent(a, loaded).with_tap(tap),
            None => NixlRegistrar::new(&agent_name, loaded).with_tap(tap),
        };
        let (control, lifecycle) =
            match driver::spawn(make, plan, config.retry.clone(), rec.clone(), config.nixl_call_timeout) {
                Ok(v) => v,
                Err(e) => {
                    let _ = stop_tx.send(true);
                    if let Some((_, task)) = server {
                        let _ = task.await;
                    }
                    return Err(StartError::Thread(e));
                }
            };
        if let Some(every) = config.probe_interval {
            let ticker = canary.as_ref().and_then(Canary::ticker);
            tokio::spawn(probe(control.clone(), ticker, every, stop_tx.subscribe()));
        }
        Ok(LifecycleHandle {
            local_addr: server.as_ref().map(|(a, _)| *a),
            groups,
            grace: config.shutdown_grace,
            rec,
            router: app,
            control,
            lifecycle: Some(lifecycle),
            stop: stop_tx,
            server: server.map(|(_, t)| t),
            canary,
        })
    }
}

/// The node canary: every `every`, deregister and register every group
/// again, as SIGUSR1 does, and half an interval later a loopback transfer
/// round, until the handle stops.
async fn probe(
    control: Sender<Control>,
    transfers: Option<SyncSender<()>>,
    every: Duration,
    mut stop: watch::Receiver<bool>,
) {
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {
                if control.send(Control::Reregister(None)).is_err() {
                    return;
                }
                if let Some(t) = &transfers {
                    // Between two registrations, never during one.
                    tokio::select! {
                        _ = tokio::time::sleep(every / 2) => { canary::tick(t); }
                        _ = stop.changed() => return,
                    }
                }
            }
            _ = stop.changed() => return,
        }
    }
}

/// A running lifecycle.
pub struct LifecycleHandle {
    local_addr: Option<SocketAddr>,
    groups: Vec<String>,
    grace: Duration,
    rec: Recorder,
    router: Router,
    control: Sender<Control>,
    lifecycle: Option<JoinHandle<DrainReport>>,
    stop: watch::Sender<bool>,
    server: Option<tokio::task::JoinHandle<()>>,
    /// The node canary's transfer rounds (the binary with probe_interval).
    canary: Option<Canary>,
}

impl LifecycleHandle {
    /// The address the HTTP server is bound to (useful with port 0); `None`
    /// when started [`Prepared::without_server`].
    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.local_addr
    }

    /// /metrics, /livez, /readyz, /v1/status, the dashboard and the rules,
    /// for the caller's own axum server (`Router::merge` or `nest`).
    pub fn router(&self) -> Router {
        self.router.clone()
    }

    /// The recorded state now: this process's own recording, the one rank
    /// of the /v1/status document (`ranks[0].status`).
    pub fn status(&self) -> Arc<Status> {
        self.rec.ledger().snapshot()
    }

    /// The metrics registry (encode it into the caller's own endpoint with
    /// [`crate::telemetry::exposition::encode`]).
    pub fn metrics(&self) -> &Metrics {
        self.rec.metrics()
    }

    /// Observe mode on the same recording: calls the caller makes itself
    /// show up beside the plan's groups, in the same metrics and status.
    /// Refused when an expected group has the name of a planned one (a
    /// name has one owner); a call naming a planned group is recorded
    /// under `other`.
    pub fn observer(&self, settings: ObserveSettings) -> Result<Observer, GroupConflict> {
        Observer::with_recorder(self.rec.clone(), settings, Box::new(nixl::SystemProbe))
    }

    /// Deregisters and registers again one group, or every group with
    /// `None` (what SIGUSR1 does). A failed group is retried at once.
    pub fn reregister(&self, group: Option<&str>) -> Result<(), UnknownGroup> {
        let index = match group {
            None => None,
            Some(name) => Some(
                self.groups
                    .iter()
                    .position(|g| g == name)
                    .ok_or_else(|| UnknownGroup(name.to_string()))?,
            ),
        };
        let _ = self.control.send(Control::Reregister(index));
        Ok(())
    }

    /// Waits until the lifecycle is ready or `timeout` passes; returns readiness.
    pub async fn wait_ready(&self, timeout: Duration) -> bool {
        self.rec.ledger().wait_for(timeout, |s| s.ready).await
    }

    /// Not ready at once, deregisters everything within the grace period,
    /// then stops the HTTP server. `Ok` means NIXL holds nothing nixl-agent
    /// registered: the caller may free its buffers. Every `Err` names what
    /// is still registered.
    pub async fn shutdown(mut self) -> Result<DrainReport, ShutdownError> {
        let grace = self.grace;
        self.rec.drain_started();
        let _ = self.control.send(Control::Shutdown);
        let result = match self.lifecycle.take() {
            Some(thread) => {
                let join = tokio::task::spawn_blocking(move || thread.join());
                match tokio::time::timeout(grace, join).await {
                    Ok(Ok(Ok(report))) if report.still_registered.is_empty() => Ok(report),
                    Ok(Ok(Ok(report))) => Err(ShutdownError::LeftRegistered(report.still_registered)),
                    Ok(_) => Err(ShutdownError::Panicked),
                    Err(_) => Err(ShutdownError::GraceExceeded {
                        grace,
                        still_registered: self.still_registered(),
                    }),
                }
            }
            None => Ok(DrainReport::default()),
        };
        let _ = self.stop.send(true);
        if let Some(c) = self.canary.take() {
            // The round in progress ends (each transfer is bounded), its
            // agents close; at most a grace period more.
            let closing = tokio::task::spawn_blocking(move || drop(c));
            if tokio::time::timeout(grace, closing).await.is_err() {
                tracing::warn!("the canary's loopback round did not end within the grace period");
            }
        }
        if let Some(server) = self.server.take() {
            let _ = tokio::time::timeout(Duration::from_secs(1), server).await;
        }
        result
    }

    /// Groups of the recorded status that hold descriptors now.
    fn still_registered(&self) -> Vec<(String, usize)> {
        still_registered(&self.status())
    }
}

/// Groups of `status` that hold descriptors.
fn still_registered(status: &Status) -> Vec<(String, usize)> {
    status
        .groups
        .iter()
        .filter(|g| g.descriptors > 0)
        .map(|g| (g.name.clone(), g.descriptors))
        .collect()
}

impl Drop for LifecycleHandle {
    /// Dropped without `shutdown()`: drains anyway. Outside an async
    /// runtime it blocks (up to the grace period) until the drain is over,
    /// so that buffers the caller frees after the drop are no longer
    /// registered. Inside one (a tokio worker, a current_thread runtime) it
    /// never blocks the runtime's thread: the wait is handed to a thread of
    /// its own, the drain deregisters everything as it would, and the
    /// server and the watchdog stop once it is over. There, await
    /// [`LifecycleHandle::shutdown`] before freeing the buffers.
    fn drop(&mut self) {
        let Some(thread) = self.lifecycle.take() else {
            let _ = self.stop.send(true);
            return;
        };
        self.rec.drain_started();
        let _ = self.control.send(Control::Shutdown);
        let wait = DrainWait {
            thread,
            end: Instant::now() + self.grace,
            grace: self.grace,
            rec: self.rec.clone(),
            // The server and the watchdog stop only once the drain is over:
            // the drain stays watched.
            stop: std::mem::replace(&mut self.stop, watch::channel(false).0),
            canary: self.canary.take(),
        };
        if tokio::runtime::Handle::try_current().is_err() {
            wait.finish();
            return;
        }
        let spawned = std::thread::Builder::new()
            .name("nixl-agent-drain".into())
            .spawn(move || wait.finish());
        if let Err(e) = spawned {
            // The drain goes on (the lifecycle thread runs it); the server
            // and the watchdog stop now, unwatched.
            tracing::warn!(error = %e, "cannot start a thread to wait for the drain; it goes on unwatched");
        }
    }
}

/// What a dropped [`LifecycleHandle`] waits for: the drain, then the stop
/// of its server, watchdog and canary.
struct DrainWait {
    thread: JoinHandle<DrainReport>,
    end: Instant,
    grace: Duration,
    rec: Recorder,
    stop: watch::Sender<bool>,
    canary: Option<Canary>,
}

impl DrainWait {
    fn finish(self) {
        while !self.thread.is_finished() && Instant::now() < self.end {
            std::thread::sleep(Duration::from_millis(1));
        }
        if !self.thread.is_finished() {
            tracing::error!(
                grace_ms = self.grace.as_millis() as u64,
                still_registered = %list(&still_registered(&self.rec.ledger().snapshot())),
                "dropped before the drain finished"
            );
        }
        // The server stops only now (the recording's watchdog, while the
        // drain runs on the lifecycle thread's recorder).
        let _ = self.stop.send(true);
        drop(self.canary);
    }
}
