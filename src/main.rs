//! The `nixl-agent` binary: parse flags, load config, start the agent, wait
//! for SIGTERM/SIGINT, drain within the grace period. Everything else lives
//! in the library.

use clap::Parser;
use nixl_agent::cli::{self, Cli, Command, PLUGIN_DIR_ENV};
use nixl_agent::config::ProcessEnv;
use nixl_agent::{Lifecycle, Plan, ShutdownError, StderrTap};
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// Exit code for bad usage or bad config (as clap uses for usage errors).
const EXIT_CONFIG: u8 = 2;
/// Exit code when the agent could not start or drain cleanly.
const EXIT_FAILURE: u8 = 1;
/// After a second signal, how long the drain may still run.
const FAST_EXIT: Duration = Duration::from_secs(1);
/// Least time given to flushing spans after the drain.
const MIN_TRACE_FLUSH: Duration = Duration::from_millis(200);

fn main() -> ExitCode {
    let cli = Cli::parse();
    // The command reads NIXL_AGENT_* itself: no config of ours to load.
    if let Some(Command::Instrument { command }) = &cli.command {
        return ExitCode::from(nixl_agent::launch::run(command));
    }
    let config = match cli.opts().load_config(&ProcessEnv) {
        Ok(c) => c,
        Err(e) => {
            cli::config_failed(cli.command.as_ref(), &e);
            return ExitCode::from(EXIT_CONFIG);
        }
    };
    // config, rules and pod: done without NIXL or a plan.
    if let Some(code) = cli::run_other(cli.command.as_ref(), &config) {
        return ExitCode::from(code);
    }
    let check = match &cli.command {
        Some(Command::Check(args)) => Some(args.options()),
        _ => None,
    };
    let prepared = match Lifecycle::prepare(config.clone(), Plan::from_config(&config)) {
        Ok(p) => p,
        Err(e) => {
            cli::config_failed(cli.command.as_ref(), &e);
            return ExitCode::from(EXIT_CONFIG);
        }
    };
    // NIXL reads its plugin directory from the environment in C++. Set it
    // once, here, while this is the only thread, unless already set.
    if std::env::var_os(PLUGIN_DIR_ENV).is_none() {
        if let Some(dir) = prepared.plugin_dir() {
            std::env::set_var(PLUGIN_DIR_ENV, dir);
        }
    }
    // Route fd 2 through a tap so what NIXL/UCX print is attributed to the
    // failing attempt; the agent's own logs go to the real stderr.
    // check: UCX prints which transport it picks when asked (still one thread).
    let proto = check.as_ref().is_some_and(cli::proto_info_for);
    let tap = StderrTap::install()
        .map_err(|e| eprintln!("nixl-agent: stderr capture off: {e}"))
        .ok();
    if let Some(options) = check {
        return if cli::run_check(&config, tap, &options, proto) {
            ExitCode::SUCCESS
        } else {
            ExitCode::from(EXIT_FAILURE)
        };
    }
    let traces = cli::init_logs(&config, tap.as_ref().map(StderrTap::original));
    let prepared = prepared.with_stderr_tap(tap.clone());

    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            tracing::error!(error = %e, "cannot start the async runtime");
            return ExitCode::from(EXIT_FAILURE);
        }
    };
    let (code, drained) = runtime.block_on(async {
        // Before anything starts: a signal during NIXL loading or the first
        // registrations waits for the drain instead of killing the process.
        let mut signals = cli::Signals::new();
        let agent = match prepared.start().await {
            Ok(a) => a,
            Err(e) => {
                tracing::error!(error = %e, "agent did not start; nothing was registered");
                return (EXIT_FAILURE, true);
            }
        };
        signals.next_stop(&agent).await;
        let _ = SIGNALLED.set(Instant::now());
        let drain = agent.shutdown();
        tokio::pin!(drain);
        let result = tokio::select! {
            r = &mut drain => r,
            _ = signals.next_stop_only() => {
                // A second signal: finish the NIXL call in progress, then go.
                tracing::warn!(wait_ms = FAST_EXIT.as_millis() as u64, "second signal: exiting after the current drain step");
                match tokio::time::timeout(FAST_EXIT, &mut drain).await {
                    Ok(r) => r,
                    Err(_) => Err(ShutdownError::Interrupted),
                }
            }
        };
        match result {
            Ok(_) => (0, true),
            // The drain ended, with registrations left behind: NIXL is idle.
            Err(e @ ShutdownError::LeftRegistered(_)) => {
                tracing::error!(error = %e, "shutdown did not complete");
                (EXIT_FAILURE, true)
            }
            Err(e) => {
                tracing::error!(error = %e, "shutdown did not complete");
                (EXIT_FAILURE, false)
            }
        }
    });
    // Do not wait for blocking tasks: after a drain that overran the grace
    // period the lifecycle thread may still be inside NIXL, and the process
    // exits regardless (the kernel releases what is left).
    runtime.shutdown_timeout(Duration::from_millis(100));
    if let Some(t) = traces {
        let left = config.shutdown_grace.saturating_sub(shutdown_started().elapsed());
        t.shutdown(left.max(MIN_TRACE_FLUSH));
    }
    if let Some(t) = tap {
        t.flush();
    }
    if !drained {
        // The lifecycle thread may still be inside NIXL/UCX: leave without
        // running C++ static destructors under it.
        cli::exit_now(code);
    }
    ExitCode::from(code)
}

/// When the shutdown signal arrived (process start until then).
fn shutdown_started() -> Instant {
    *SIGNALLED.get().unwrap_or(&Instant::now())
}

static SIGNALLED: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
