//! Pods with many ranks: one scrape target and one readiness per pod.
//!
//! Every recording process of a pod (an instrumented Python rank, an
//! embedder) can publish what it recorded to a per-pod directory
//! ([`publish`]): one file per rank, replaced atomically when something
//! changed and touched twice a second as a heartbeat. `nixl-agent pod`
//! ([`serve`]) serves the directory as the pod's agent: /metrics merged with
//! a `rank` label, /readyz ready when every expected rank is alive and
//! ready, /v1/status per rank. [`merge`] and [`lint`] hold the pure part.
//!
//! Nothing in the directory is trusted, by the writer or the reader: anyone
//! who may write it (a shared `emptyDir`) could plant links, FIFOs and rank
//! files of their own. [`dir`] checks the directory before a claim, [`slot`]
//! keeps every open from following a link or blocking and tests slot locks
//! without taking them, [`read`] takes a rank only while its slot is held
//! and its exposition cannot break the pod's scrape.
//!
//! The conventions are those of `PROMETHEUS_MULTIPROC_DIR` (prometheus_client,
//! used by vLLM and SGLang) and NIXL's own `NIXL_TELEMETRY_MULTIPROC_DIR`.

// The layers below, under the names this crate's modules use.
pub(crate) use nixl_agent_admin::http;
pub(crate) use nixl_agent_core::{config, event, model, units};
pub(crate) use nixl_agent_ledger::{ledger, status, telemetry};

pub mod claim;
pub mod dir;
pub mod life;
pub mod lint;
pub mod local;
pub mod merge;
pub mod publish;
pub mod read;
pub mod serve;
pub mod slot;

use crate::config::{ConfigError, Env};
use std::time::Duration;

/// The per-pod directory every rank publishes to (an `emptyDir` shared by
/// the pod's containers).
pub const ENV_DIR: &str = "NIXL_AGENT_MULTIPROC_DIR";
/// The name of the environment variable that tells this process its rank
/// (an explicit rank: another live process holding it is a conflict).
pub const ENV_RANK_ENV: &str = "NIXL_AGENT_RANK_ENV";
/// How many ranks the pod has (`nixl-agent pod --ranks`).
pub const ENV_RANKS: &str = "NIXL_AGENT_RANKS";
/// torchrun's per-process local rank: a rank a process would like (never
/// an order). `RANK` is a global rank and is never read.
pub const LOCAL_RANK: &str = "LOCAL_RANK";
/// Most ranks a pod may have: the `rank` label stays bounded.
pub const MAX_RANKS: usize = 256;
/// A rank file not touched for this long belongs to a process that died.
pub const STALE_AFTER: Duration = Duration::from_millis(1500);
/// How long the pod serves what a rank counted after its process ended
/// (exited or died) when no process claims its slot again: long enough for
/// two scrapes and the failure alert's window and `for`.
pub const RETENTION: Duration = Duration::from_secs(15 * 60);
/// Sets [`RETENTION`] (`nixl-agent pod --retention`, and the processes of a
/// zero-configuration pod).
pub const ENV_RETENTION: &str = "NIXL_AGENT_RANK_RETENTION";
/// A live rank whose content was last written longer ago than this (it is
/// rewritten at least every 2 s) cannot write its file: stale since then.
pub const STALE_CONTENT_AFTER: Duration = Duration::from_secs(5);

/// The retention `NIXL_AGENT_RANK_RETENTION` sets (a duration from 1s to
/// 24h), else [`RETENTION`].
pub fn retention_from_env(env: &dyn Env) -> Result<Duration, ConfigError> {
    match env.var(ENV_RETENTION) {
        None => Ok(RETENTION),
        Some(v) => match crate::units::parse_duration(v.trim()) {
            Ok(d) if (Duration::from_secs(1)..=Duration::from_secs(86_400)).contains(&d) => Ok(d),
            _ => Err(ConfigError::Invalid {
                key: ENV_RETENTION.to_string(),
                message: format!("`{v}` is not a duration from 1s to 24h (e.g. 15m)"),
            }),
        },
    }
}
/// How often a publisher looks for a change, and touches its file.
pub const PUBLISH_EVERY: Duration = Duration::from_millis(250);
/// The heartbeat: the longest a publisher leaves its file untouched.
pub const HEARTBEAT: Duration = Duration::from_millis(500);

/// Format version of a rank file (written by [`publish`], read by
/// [`merge`]).
pub const FILE_VERSION: u32 = 1;

/// The file of a rank in the directory.
pub fn file_name(rank: u32) -> String {
    format!("rank-{rank}.json")
}

/// The inverse of [`file_name`]: the rank a file's name gives, exactly
/// `rank-<N>.json` with N a rank in decimal without leading zeros.
/// `Err(())`: a rank-like name that is not one (`rank-0-old.json`);
/// `Ok(None)`: not a rank file's name at all (locks, temporary files).
#[allow(clippy::result_unit_err)]
pub fn rank_of_file(name: &str) -> Result<Option<u32>, ()> {
    let Some(n) = name.strip_prefix("rank-").and_then(|r| r.strip_suffix(".json")) else {
        return Ok(None);
    };
    let canonical = !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()) && (n == "0" || !n.starts_with('0'));
    match n.parse::<u32>() {
        Ok(r) if canonical && (r as usize) < MAX_RANKS => Ok(Some(r)),
        _ => Err(()),
    }
}

/// The rank this process asks for: the variable named by
/// `NIXL_AGENT_RANK_ENV` (explicit), else `LOCAL_RANK` (a preference), else
/// none said (the framework's own rank, else the lowest free slot). A value
/// that is not a rank is named in the error.
pub fn wish_from_env(env: &dyn Env) -> Result<claim::Wish, ConfigError> {
    let parse = |var: &str, v: String| match v.trim().parse::<u32>() {
        Ok(r) if (r as usize) < MAX_RANKS => Ok(r),
        _ => Err(ConfigError::Invalid {
            key: var.to_string(),
            message: format!("`{v}` is not a rank from 0 to {}", MAX_RANKS - 1),
        }),
    };
    if let Some(name) = env.var(ENV_RANK_ENV) {
        return match env.var(&name) {
            Some(v) => Ok(claim::Wish::Explicit(parse(&name, v)?)),
            None => Ok(claim::Wish::Any),
        };
    }
    match env.var(LOCAL_RANK) {
        Some(v) => Ok(claim::Wish::Preferred(parse(LOCAL_RANK, v)?)),
        None => Ok(claim::Wish::Any),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn a_rank_is_told_by_the_named_variable_preferred_by_local_rank_and_never_rank() {
        use claim::Wish;
        assert_eq!(wish_from_env(&env(&[])).unwrap(), Wish::Any);
        // RANK is a global rank: never read.
        assert_eq!(wish_from_env(&env(&[("RANK", "17")])).unwrap(), Wish::Any);
        assert_eq!(
            wish_from_env(&env(&[("RANK", "17"), ("LOCAL_RANK", "1")])).unwrap(),
            Wish::Preferred(1)
        );
        assert_eq!(
            wish_from_env(&env(&[
                (ENV_RANK_ENV, "TP_RANK"),
                ("TP_RANK", "7"),
                ("LOCAL_RANK", "1")
            ]))
            .unwrap(),
            Wish::Explicit(7)
        );
        let e = wish_from_env(&env(&[("LOCAL_RANK", "x")])).unwrap_err().to_string();
        assert!(e.contains("LOCAL_RANK"), "{e}");
        assert!(wish_from_env(&env(&[("LOCAL_RANK", "999")])).is_err());
        let e = wish_from_env(&env(&[(ENV_RANK_ENV, "TP_RANK"), ("TP_RANK", "-1")]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("TP_RANK"), "{e}");
    }
}
