//! Command-line interface: flags, and how they layer over the config file
//! and the environment (file < environment < flags).

use crate::config::{Config, ConfigError, Env, LogFormat, ENV_CONFIG};
use clap::{Parser, Subcommand};
use std::net::SocketAddr;
use std::path::PathBuf;

/// Performs NIXL memory registration and makes every attempt observable.
#[derive(Debug, Parser)]
#[command(name = "nixl-agent", version, about, long_about = None)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,
    #[command(flatten)]
    pub opts: Opts,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Register the plan, serve /metrics, /livez, /readyz and /v1/status,
    /// and deregister everything on SIGTERM/SIGINT (the default command)
    Run {
        #[command(flatten)]
        opts: Opts,
    },
    /// Print the effective configuration (file, environment and flags
    /// applied) as TOML and exit
    Config {
        #[command(flatten)]
        opts: Opts,
    },
    /// Check the NIXL runtime, UCX, memlock and CUDA, and register and
    /// deregister every group of the plan once; exit 0 when every required
    /// check passed, 1 when one failed, 2 on bad usage or config
    Check(CheckArgs),
    /// Serve a pod's ranks: the directory every rank of the pod publishes to
    /// (NIXL_AGENT_MULTIPROC_DIR), merged /metrics with a rank label, /readyz
    /// ready when every rank is alive and ready
    Pod {
        /// The pod directory the ranks publish to
        #[arg(long, value_name = "DIR", env = "NIXL_AGENT_MULTIPROC_DIR")]
        dir: PathBuf,
        /// How many ranks readiness waits for (0 .. RANKS-1)
        #[arg(long, value_name = "RANKS", env = crate::pod::ENV_RANKS, default_value_t = 1,
              value_parser = clap::value_parser!(u32).range(1..=crate::pod::MAX_RANKS as i64))]
        ranks: u32,
        /// How long a rank whose process ended (exited or died) keeps its
        /// counters on /metrics when no process claims the rank again
        #[arg(long, value_name = "DURATION", env = crate::pod::ENV_RETENTION, default_value = "15m",
              value_parser = parse_retention)]
        retention: std::time::Duration,
        #[command(flatten)]
        opts: PodOpts,
    },
    /// Run COMMAND with every NIXL call it makes recorded, from any language
    /// (C++, Rust on nixl-sys, Python), with no change to it: the
    /// interposer is preloaded and COMMAND replaces this process. It serves
    /// or publishes as an instrumented Python process does (NIXL_AGENT_*)
    Instrument {
        /// The command and its arguments
        #[arg(
            trailing_var_arg = true,
            allow_hyphen_values = true,
            required = true,
            value_name = "COMMAND"
        )]
        command: Vec<std::ffi::OsString>,
    },
    /// Print the Prometheus alerting rules for your scrape selector and
    /// runbook location (alerts/nixl-agent.rules.yml is the default output)
    Rules {
        /// Label matchers every rule selects with, as inside `{}`
        #[arg(long, value_name = "MATCHERS", default_value = crate::rules::DEFAULT_SELECTOR)]
        selector: String,
        /// Absolute URL of docs/runbooks.md; each alert links to
        /// `<URL>#<alertname>`
        #[arg(long, value_name = "URL", default_value = crate::rules::DEFAULT_RUNBOOK_URL_BASE)]
        runbook_url_base: String,
    },
}

/// `nixl-agent check`'s flags.
#[derive(Debug, Clone, clap::Args)]
pub struct CheckArgs {
    /// Print the report as JSON (progress still goes to stderr)
    #[arg(long)]
    pub json: bool,
    /// Skip the loopback transfer (two NIXL agents in this process moving
    /// bytes with WRITE and READ through each backend of the plan)
    #[arg(long)]
    pub no_transfer: bool,
    /// Wait for a peer node's `check --peer` on ADDR, then move bytes both
    /// ways between the two nodes
    #[arg(long, value_name = "ADDR", conflicts_with = "peer")]
    pub serve: Option<SocketAddr>,
    /// Connect to a peer node's `check --serve ADDR` and move bytes both
    /// ways between the two nodes
    #[arg(long, value_name = "ADDR")]
    pub peer: Option<SocketAddr>,
    /// How long the peer check may take, waiting for the peer included
    #[arg(long, value_name = "DURATION", default_value = "60s", value_parser = parse_duration)]
    pub peer_timeout: std::time::Duration,
    /// TOML config file [env: NIXL_AGENT_CONFIG]: its plan is checked;
    /// without one, the embedded default plan
    #[arg(long, value_name = "PATH")]
    pub config: Option<PathBuf>,
    /// Directory holding libnixl_capi.so [env: NIXL_LIB_DIR]
    #[arg(long, value_name = "DIR")]
    pub nixl_lib_dir: Option<PathBuf>,
}

/// A retention: a duration from 1s to 24h.
fn parse_retention(s: &str) -> Result<std::time::Duration, String> {
    let env = std::collections::HashMap::from([(crate::pod::ENV_RETENTION.to_string(), s.to_string())]);
    crate::pod::retention_from_env(&env).map_err(|e| e.to_string())
}

fn parse_duration(s: &str) -> Result<std::time::Duration, String> {
    let d = crate::units::parse_duration(s)?;
    if d.is_zero() || d > crate::config::MAX_DURATION {
        return Err(format!("{s:?}: between 1ms and 24h"));
    }
    Ok(d)
}

impl CheckArgs {
    /// What `check::run` is told.
    pub fn options(&self) -> crate::check::Options {
        crate::check::Options {
            json: self.json,
            transfer: !self.no_transfer,
            peer: match (self.serve, self.peer) {
                (Some(a), _) => Some(crate::check::PeerRole::Serve(a)),
                (None, Some(a)) => Some(crate::check::PeerRole::Connect(a)),
                (None, None) => None,
            },
            peer_timeout: self.peer_timeout,
        }
    }
}

/// Runs the commands that need neither NIXL nor a plan (`config`, `rules`,
/// `pod`); `None` for `run` and `check`, which the binary runs itself.
pub fn run_other(command: Option<&Command>, config: &Config) -> Option<u8> {
    match command? {
        Command::Config { .. } => {
            print!("{}", toml::to_string_pretty(config).expect("config serializes"));
            Some(0)
        }
        Command::Rules {
            selector,
            runbook_url_base,
        } => Some(print_rules(selector, runbook_url_base)),
        Command::Pod {
            dir, ranks, retention, ..
        } => Some(run_pod(config, dir.clone(), *ranks, *retention)),
        Command::Instrument { command } => Some(crate::launch::run(command)),
        Command::Run { .. } | Command::Check(_) => None,
    }
}

/// A bad config or plan, before anything starts: one line on stderr and,
/// for `check --json`, a JSON document on stdout all the same (CI redirects
/// it to a file: an empty file says nothing). The caller exits 2.
pub fn config_failed(command: Option<&Command>, error: &dyn std::fmt::Display) {
    eprintln!("nixl-agent: {error}");
    if let Some(Command::Check(args)) = command {
        if args.json {
            println!("{}", crate::check::config_error_document(&error.to_string()));
        }
    }
}

/// `nixl-agent pod`: serves the pod directory until SIGTERM/SIGINT; the
/// exit code (0, 1 when the port cannot be bound).
pub fn run_pod(config: &Config, dir: PathBuf, ranks: u32, retention: std::time::Duration) -> u8 {
    // The binary's own log (format, NIXL_AGENT_LOG filter); no spans to export.
    let _traces = init_logs(config, None);
    let Ok(rt) = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
    else {
        eprintln!("nixl-agent: cannot start the async runtime");
        return 1;
    };
    rt.block_on(async {
        let listener = match tokio::net::TcpListener::bind(config.listen).await {
            Ok(l) => l,
            Err(e) => {
                eprintln!(
                    "nixl-agent: cannot listen on {}: {e}; {}",
                    config.listen,
                    crate::config::LISTEN_FIX
                );
                return 1;
            }
        };
        if let Ok(a) = listener.local_addr() {
            tracing::info!(listen = %a, dir = %dir.display(), ranks, "serving the pod's ranks");
        }
        let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
        let server = tokio::spawn(crate::pod::serve::serve(
            listener,
            dir,
            ranks,
            retention,
            config.http.clone(),
            stop_rx,
        ));
        let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(s) => s,
            Err(e) => {
                eprintln!("nixl-agent: cannot handle SIGTERM: {e}");
                return 1;
            }
        };
        let signal = tokio::select! {
            _ = term.recv() => "SIGTERM",
            _ = tokio::signal::ctrl_c() => "SIGINT",
        };
        tracing::info!(
            signal,
            "shutting down on {signal}: no longer serving the pod's ranks (they keep running)"
        );
        let _ = stop_tx.send(true);
        let _ = server.await;
        0
    })
}

/// `nixl-agent rules`: prints the rules; the exit code (0, or 2 naming the
/// bad flag).
pub fn print_rules(selector: &str, runbook_url_base: &str) -> u8 {
    match crate::rules::render(selector, runbook_url_base) {
        Ok(text) => {
            print!("{text}");
            0
        }
        Err(e) => {
            eprintln!("nixl-agent: {e}");
            2
        }
    }
}

/// The options of the commands that load NIXL (`run`, the default; `check`;
/// `config`, which prints them), before or after the command's name.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct Opts {
    /// TOML config file [env: NIXL_AGENT_CONFIG]; without one, the embedded
    /// default plan runs
    #[arg(long, value_name = "PATH")]
    pub config: Option<PathBuf>,
    /// HTTP listen address [env: NIXL_AGENT_LISTEN] [default: 127.0.0.1:10915]
    #[arg(long, value_name = "ADDR:PORT")]
    pub listen: Option<SocketAddr>,
    /// Directory holding libnixl_capi.so [env: NIXL_LIB_DIR]
    #[arg(long, value_name = "DIR")]
    pub nixl_lib_dir: Option<PathBuf>,
    /// Log format [env: NIXL_AGENT_LOG_FORMAT] [default: text]
    #[arg(long, value_enum)]
    pub log_format: Option<LogFormatArg>,
}

/// `nixl-agent pod`'s options: it serves HTTP and logs, and loads no NIXL.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct PodOpts {
    /// TOML config file [env: NIXL_AGENT_CONFIG] (its `listen` and `[http]`)
    #[arg(long, value_name = "PATH")]
    pub config: Option<PathBuf>,
    /// HTTP listen address [env: NIXL_AGENT_LISTEN] [default: 127.0.0.1:10915]
    #[arg(long, value_name = "ADDR:PORT")]
    pub listen: Option<SocketAddr>,
    /// Log format [env: NIXL_AGENT_LOG_FORMAT] [default: text]
    #[arg(long, value_enum)]
    pub log_format: Option<LogFormatArg>,
}

impl Cli {
    /// The options in force: the command's own over those given before it
    /// (`nixl-agent --listen A run --listen B` listens on B). `rules` takes
    /// none of its own.
    pub fn opts(&self) -> Opts {
        let own = match &self.command {
            None | Some(Command::Rules { .. } | Command::Instrument { .. }) => return self.opts.clone(),
            Some(Command::Run { opts } | Command::Config { opts }) => opts.clone(),
            Some(Command::Check(args)) => Opts {
                config: args.config.clone(),
                nixl_lib_dir: args.nixl_lib_dir.clone(),
                ..Opts::default()
            },
            Some(Command::Pod { opts, .. }) => Opts {
                config: opts.config.clone(),
                listen: opts.listen,
                nixl_lib_dir: None,
                log_format: opts.log_format,
            },
        };
        Opts {
            config: own.config.or_else(|| self.opts.config.clone()),
            listen: own.listen.or(self.opts.listen),
            nixl_lib_dir: own.nixl_lib_dir.or_else(|| self.opts.nixl_lib_dir.clone()),
            log_format: own.log_format.or(self.opts.log_format),
        }
    }
}

/// `--log-format` values (the config's `LogFormat` knows nothing of clap).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormatArg {
    Text,
    Json,
}

impl From<LogFormatArg> for LogFormat {
    fn from(a: LogFormatArg) -> LogFormat {
        match a {
            LogFormatArg::Text => LogFormat::Text,
            LogFormatArg::Json => LogFormat::Json,
        }
    }
}

impl Opts {
    /// Builds the effective config: defaults, the file, the environment,
    /// then these flags; validated.
    pub fn load_config(&self, env: &dyn Env) -> Result<Config, ConfigError> {
        let path = self.config.clone().or_else(|| env.var(ENV_CONFIG).map(PathBuf::from));
        let mut config = match path {
            Some(p) => Config::load(&p)?,
            None => Config::default(),
        };
        config.apply_env(env)?;
        if let Some(l) = self.listen {
            config.listen = l;
        }
        if let Some(d) = &self.nixl_lib_dir {
            config.nixl_lib_dir = Some(d.clone());
        }
        if let Some(f) = self.log_format {
            config.log_format = f.into();
        }
        config.validate()?;
        Ok(config)
    }
}

// What the binary needs besides the flags: one front-end API, so main.rs
// reaches no internals.
pub use crate::check::{proto_info_for, run_cli as run_check};
pub use crate::nixl::{exit_now, PLUGIN_DIR_ENV};
pub use crate::rules::{DEFAULT_RUNBOOK_URL_BASE, DEFAULT_SELECTOR};
pub use crate::signals::Signals;
pub use nixl_agent_admin::otlp::init_logs;

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    #[test]
    fn flags_beat_env_beat_file() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("a.toml");
        std::fs::write(&file, "listen = '127.0.0.1:1'\nlog_format = 'json'\n").unwrap();
        let env: HashMap<String, String> = [
            (ENV_CONFIG.to_string(), file.display().to_string()),
            ("NIXL_AGENT_LISTEN".to_string(), "127.0.0.1:2".to_string()),
        ]
        .into();
        let opts = Opts::default();
        let c = opts.load_config(&env).unwrap();
        assert_eq!((c.listen.port(), c.log_format), (2, LogFormat::Json));
        let opts = Opts {
            listen: Some("127.0.0.1:3".parse().unwrap()),
            log_format: Some(LogFormatArg::Text),
            ..Opts::default()
        };
        let c = opts.load_config(&env).unwrap();
        assert_eq!((c.listen.port(), c.log_format), (3, LogFormat::Text));
    }

    #[test]
    fn missing_file_is_named() {
        let opts = Opts {
            config: Some("/nonexistent/agent.toml".into()),
            ..Opts::default()
        };
        let e = opts.load_config(&HashMap::new()).unwrap_err().to_string();
        assert!(e.contains("/nonexistent/agent.toml"), "{e}");
    }
}
