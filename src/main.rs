//! The `nixl-agent` binary: parse flags, load config, start the agent, wait
//! for SIGTERM/SIGINT, drain within the grace period. Everything else lives
//! in the library.

use clap::Parser;
use nixl_agent::cli::{Cli, Command};
use nixl_agent::config::{LogFormat, ProcessEnv};
use nixl_agent::nixl::PLUGIN_DIR_ENV;
use nixl_agent::{Agent, Plan};
use std::process::ExitCode;

/// Exit code for bad usage or bad config (as clap uses for usage errors).
const EXIT_CONFIG: u8 = 2;
/// Exit code when the agent could not start or drain cleanly.
const EXIT_FAILURE: u8 = 1;

fn main() -> ExitCode {
    let cli = Cli::parse();
    let config = match cli.opts.load_config(&ProcessEnv) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("nixl-agent: {e}");
            return ExitCode::from(EXIT_CONFIG);
        }
    };
    if let Some(Command::Config) = cli.command {
        print!(
            "{}",
            toml::to_string_pretty(&config).expect("config serializes")
        );
        return ExitCode::SUCCESS;
    }
    init_logging(config.log_format);

    let plan = Plan::from_config(&config);
    let prepared = match Agent::prepare(config, plan) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("nixl-agent: {e}");
            return ExitCode::from(EXIT_CONFIG);
        }
    };
    // NIXL reads its plugin directory from the environment in C++. Set it
    // once, here, before the runtime starts any thread, unless already set.
    if std::env::var_os(PLUGIN_DIR_ENV).is_none() {
        if let Some(dir) = prepared.plugin_dir() {
            std::env::set_var(PLUGIN_DIR_ENV, dir);
        }
    }

    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("nixl-agent: cannot start the async runtime: {e}");
            return ExitCode::from(EXIT_FAILURE);
        }
    };
    runtime.block_on(async move {
        let agent = match prepared.start().await {
            Ok(a) => a,
            Err(e) => {
                tracing::error!(error = %e, "agent did not start; nothing was registered");
                return ExitCode::from(EXIT_FAILURE);
            }
        };
        shutdown_signal().await;
        match agent.shutdown().await {
            Ok(_) => ExitCode::SUCCESS,
            Err(e) => {
                tracing::error!(error = %e, "shutdown did not complete");
                ExitCode::from(EXIT_FAILURE)
            }
        }
    })
}

async fn shutdown_signal() {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .expect("SIGTERM handler installs");
    tokio::select! {
        _ = term.recv() => tracing::info!(signal = "SIGTERM", "shutting down"),
        _ = tokio::signal::ctrl_c() => tracing::info!(signal = "SIGINT", "shutting down"),
    }
}

fn init_logging(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("NIXL_AGENT_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(ansi);
    match format {
        LogFormat::Json => builder.json().flatten_event(true).init(),
        LogFormat::Text => builder.init(),
    }
}
