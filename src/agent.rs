//! Starting and stopping the whole agent: the entry point for the binary and
//! for serving processes that embed the library.
//!
//! ```no_run
//! # async fn f() -> Result<(), Box<dyn std::error::Error>> {
//! use nixl_agent::{Agent, Config, GroupSpec, Kind, MemType, Plan, Region};
//! let aux = vec![0u8; 1 << 16]; // the serving process's own buffer
//! let plan = Plan { groups: vec![GroupSpec::provided(
//!     "aux", Kind::Aux, MemType::Dram, vec![Region::new(aux.as_ptr() as usize, aux.len(), 0)])] };
//! let agent = Agent::start(Config::default(), plan).await?;
//! // ... serve; then, before freeing `aux`:
//! agent.shutdown().await?;
//! # Ok(()) }
//! ```

use crate::config::{Config, ConfigError, ProcessEnv};
use crate::http::{self, AppState};
use crate::lifecycle::driver::{self, Control, DrainReport};
use crate::nixl::{self, Discovery, NixlRegistrar, NotFound, StderrTap};
use crate::plan::Plan;
use crate::status::{NixlStatus, Status, StatusBoard};
use crate::telemetry::metrics::BuildInfo;
use crate::telemetry::Metrics;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::mpsc::Sender;
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// Why the agent did not start. Nothing was registered in any case.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("cannot listen on {addr}: {source}")]
    Bind { addr: SocketAddr, source: std::io::Error },
    #[error("cannot start the lifecycle thread: {0}")]
    Thread(std::io::Error),
}

/// `reregister` named a group the plan does not have.
#[derive(Debug, thiserror::Error)]
#[error("no group named `{0}` in the plan")]
pub struct UnknownGroup(pub String);

/// Why shutdown did not finish cleanly.
#[derive(Debug, thiserror::Error)]
pub enum ShutdownError {
    #[error("drain did not finish within the {0:?} grace period")]
    GraceExceeded(Duration),
    #[error("the lifecycle thread panicked")]
    Panicked,
    #[error("interrupted by a second signal; what was not deregistered is released by the kernel at exit")]
    Interrupted,
}

/// A validated config and plan with NIXL located on disk: everything that
/// can fail without side effects, done before any thread or port exists.
pub struct Prepared {
    config: Config,
    plan: Plan,
    found: Result<Discovery, NotFound>,
    started: Instant,
    tap: Option<StderrTap>,
}

impl Prepared {
    /// Attributes what NIXL/UCX print on stderr to the attempt that failed.
    pub fn with_stderr_tap(mut self, tap: Option<StderrTap>) -> Self {
        self.tap = tap;
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

/// The agent.
pub struct Agent;

impl Agent {
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
        })
    }

    /// `prepare` then `start`: the one call an embedding process needs.
    pub async fn start(config: Config, plan: Plan) -> Result<AgentHandle, StartError> {
        Agent::prepare(config, plan)?.start().await
    }
}

impl Prepared {
    /// Binds the HTTP port, loads NIXL and starts the lifecycle thread. When
    /// it returns `Err`, nothing is running and nothing was registered.
    pub async fn start(self) -> Result<AgentHandle, StartError> {
        let Prepared {
            config,
            plan,
            found,
            started,
            tap,
        } = self;
        let addr = config.listen;
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|source| StartError::Bind { addr, source })?;
        let local_addr = listener
            .local_addr()
            .map_err(|source| StartError::Bind { addr, source })?;

        let searched = found.as_ref().err().map(|nf| nf.searched.clone()).unwrap_or_default();
        let loaded = tokio::task::spawn_blocking(move || nixl::load(found))
            .await
            .expect("NIXL loading does not panic");

        let build = BuildInfo::current(loaded.as_ref().ok().and_then(|l| l.discovery.version.as_deref()));
        let metrics = Metrics::new(&plan, &build);
        let mut initial = Status::initial(&plan);
        initial.nixl = NixlStatus::from_load(&loaded, searched);
        let board = StatusBoard::new(initial);

        let (stop_tx, stop_rx) = watch::channel(false);
        let app = http::router(AppState {
            metrics: metrics.clone(),
            status: board.subscribe(),
        });
        let server = tokio::spawn(http::server::serve(listener, app, config.http.clone(), stop_rx));

        let agent_name = config.agent_name.clone();
        let groups: Vec<String> = plan.groups.iter().map(|g| g.name.clone()).collect();
        let spawned = driver::spawn(
            move || NixlRegistrar::new(&agent_name, loaded).with_tap(tap),
            plan,
            config.retry.clone(),
            metrics.clone(),
            board.clone(),
            started,
        );
        let (control, lifecycle) = match spawned {
            Ok(v) => v,
            Err(e) => {
                let _ = stop_tx.send(true);
                let _ = server.await;
                return Err(StartError::Thread(e));
            }
        };
        tracing::info!(listen = %local_addr, "serving /metrics, /livez, /readyz, /v1/status");
        Ok(AgentHandle {
            local_addr,
            groups,
            grace: config.shutdown_grace,
            metrics,
            board,
            control,
            lifecycle: Some(lifecycle),
            server: Some((stop_tx, server)),
        })
    }
}

/// A running agent.
pub struct AgentHandle {
    local_addr: SocketAddr,
    groups: Vec<String>,
    grace: Duration,
    metrics: Metrics,
    board: StatusBoard,
    control: Sender<Control>,
    lifecycle: Option<std::thread::JoinHandle<DrainReport>>,
    server: Option<(watch::Sender<bool>, tokio::task::JoinHandle<()>)>,
}

impl AgentHandle {
    /// The address the HTTP server is bound to (useful with port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// A copy of the recorded status.
    pub fn status(&self) -> Status {
        self.board.snapshot()
    }

    /// The metrics registry.
    pub fn metrics(&self) -> &Metrics {
        &self.metrics
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

    /// Waits until the agent is ready or `timeout` passes; returns readiness.
    pub async fn wait_ready(&self, timeout: Duration) -> bool {
        let mut rx = self.board.subscribe();
        tokio::time::timeout(timeout, rx.wait_for(|s| s.ready))
            .await
            .is_ok_and(|r| r.is_ok())
    }

    /// Not ready at once, deregisters everything within the grace period,
    /// then stops the HTTP server.
    pub async fn shutdown(mut self) -> Result<DrainReport, ShutdownError> {
        let grace = self.grace;
        crate::telemetry::events::DrainStarted.emit(&self.metrics);
        self.board.begin_drain();
        let _ = self.control.send(Control::Shutdown);
        let result = match self.lifecycle.take() {
            Some(thread) => {
                let join = tokio::task::spawn_blocking(move || thread.join());
                match tokio::time::timeout(grace, join).await {
                    Ok(Ok(Ok(report))) => Ok(report),
                    Ok(_) => Err(ShutdownError::Panicked),
                    Err(_) => Err(ShutdownError::GraceExceeded(grace)),
                }
            }
            None => Ok(DrainReport::default()),
        };
        if let Some((stop, server)) = self.server.take() {
            let _ = stop.send(true);
            let _ = tokio::time::timeout(Duration::from_secs(1), server).await;
        }
        result
    }
}

impl Drop for AgentHandle {
    fn drop(&mut self) {
        // Dropped without shutdown(): still stop the lifecycle thread, which
        // deregisters on its own when its control channel closes.
        let _ = self.control.send(Control::Shutdown);
        if let Some((stop, _)) = self.server.take() {
            let _ = stop.send(true);
        }
    }
}
