//! Pods with many ranks: one scrape target and one readiness per pod.
//!
//! Every recording process of a pod (an instrumented Python rank, an
//! embedder) can publish what it recorded to a per-pod directory
//! ([`publish`]): one file per rank, replaced atomically when something
//! changed and touched twice a second as a heartbeat. `nixl-agent pod`
//! ([`serve`]) serves the directory as the pod's agent: /metrics merged with
//! a `rank` label, /readyz ready when every expected rank is alive and
//! ready, /v1/status per rank. [`merge`] holds the pure part.
//!
//! The conventions are those of `PROMETHEUS_MULTIPROC_DIR` (prometheus_client,
//! used by vLLM and SGLang) and NIXL's own `NIXL_TELEMETRY_MULTIPROC_DIR`.

#[cfg(feature = "cli")]
pub mod merge;
pub mod publish;
#[cfg(feature = "cli")]
pub mod serve;

use crate::config::{ConfigError, Env};
use std::time::Duration;

/// The per-pod directory every rank publishes to (an `emptyDir` shared by
/// the pod's containers).
pub const ENV_DIR: &str = "NIXL_AGENT_MULTIPROC_DIR";
/// The name of the environment variable holding the rank, when it is not
/// `LOCAL_RANK` or `RANK`.
pub const ENV_RANK_ENV: &str = "NIXL_AGENT_RANK_ENV";
/// How many ranks the pod has (`nixl-agent pod --ranks`).
#[cfg(feature = "cli")]
pub const ENV_RANKS: &str = "NIXL_AGENT_RANKS";
/// The usual rank variables, in the order they are read.
pub const RANK_VARS: [&str; 2] = ["LOCAL_RANK", "RANK"];
/// Most ranks a pod may have: the `rank` label stays bounded.
pub const MAX_RANKS: usize = 256;
/// A rank file not touched for this long belongs to a process that died.
#[cfg(feature = "cli")]
pub const STALE_AFTER: Duration = Duration::from_millis(1500);
/// How often a publisher looks for a change, and touches its file.
pub const PUBLISH_EVERY: Duration = Duration::from_millis(250);
/// The heartbeat: the longest a publisher leaves its file untouched.
pub const HEARTBEAT: Duration = Duration::from_millis(500);

/// The file of a rank in the directory.
pub fn file_name(rank: u32) -> String {
    format!("rank-{rank}.json")
}

/// The rank of this process: the variable named by `NIXL_AGENT_RANK_ENV`,
/// else `LOCAL_RANK`, else `RANK`. `None` when none is set.
pub fn rank_from_env(env: &dyn Env) -> Result<Option<u32>, ConfigError> {
    let vars: Vec<String> = match env.var(ENV_RANK_ENV) {
        Some(name) => vec![name],
        None => RANK_VARS.iter().map(|s| s.to_string()).collect(),
    };
    for var in vars {
        if let Some(v) = env.var(&var) {
            return match v.trim().parse::<u32>() {
                Ok(r) if (r as usize) < MAX_RANKS => Ok(Some(r)),
                _ => Err(ConfigError::Invalid {
                    key: var,
                    message: format!("`{v}` is not a rank from 0 to {}", MAX_RANKS - 1),
                }),
            };
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn rank_comes_from_the_usual_variables_or_the_named_one() {
        assert_eq!(rank_from_env(&env(&[])).unwrap(), None);
        assert_eq!(rank_from_env(&env(&[("RANK", "3")])).unwrap(), Some(3));
        assert_eq!(
            rank_from_env(&env(&[("RANK", "3"), ("LOCAL_RANK", "1")])).unwrap(),
            Some(1)
        );
        assert_eq!(
            rank_from_env(&env(&[
                (ENV_RANK_ENV, "TP_RANK"),
                ("TP_RANK", "7"),
                ("LOCAL_RANK", "1")
            ]))
            .unwrap(),
            Some(7)
        );
        let e = rank_from_env(&env(&[("LOCAL_RANK", "x")])).unwrap_err().to_string();
        assert!(e.contains("LOCAL_RANK"), "{e}");
        assert!(rank_from_env(&env(&[("LOCAL_RANK", "999")])).is_err());
    }
}
