//! The pure part of serving a pod: one rank's file read back, the ranks'
//! expositions merged into one with a `rank` label, the pod's readiness.
//!
//! Policy for a rank whose process died (its file went stale): it stops
//! counting as ready at once, and its gauges (registered bytes and
//! descriptors, ready, state...) are no longer served, so nothing says it
//! holds memory it does not. Its counters and histograms are served with
//! their last values until the rank's process starts again and replaces the
//! file (then they restart from 0, which Prometheus reads as a counter
//! reset): an `increase()` over the death keeps the failures it saw.

use serde_json::Value;
use std::collections::HashMap;

/// One rank, as the pod's agent last read it.
#[derive(Debug, Clone)]
pub struct Rank {
    pub rank: u32,
    pub pid: u32,
    /// The file was touched recently: its process is alive.
    pub alive: bool,
    pub ready: bool,
    pub status: Value,
    pub metrics: String,
}

impl Rank {
    /// A rank file's text; `None` when it is not one.
    pub fn parse(text: &str, alive: bool) -> Option<Rank> {
        let v: Value = serde_json::from_str(text).ok()?;
        if v["version"].as_u64()? != u64::from(super::publish::VERSION) {
            return None;
        }
        Some(Rank {
            rank: u32::try_from(v["rank"].as_u64()?).ok()?,
            pid: u32::try_from(v["pid"].as_u64().unwrap_or(0)).unwrap_or(0),
            alive,
            ready: v["ready"].as_bool().unwrap_or(false),
            metrics: v["metrics"].as_str()?.to_string(),
            status: v["status"].clone(),
        })
    }
}

/// One family of a text exposition: its HELP and TYPE lines and samples.
#[derive(Default)]
struct Family {
    help: Option<String>,
    kind: Option<String>,
    samples: Vec<String>,
}

/// Adds `label="value"` as the first label of a sample line.
fn with_label(sample: &str, label: &str, value: &str) -> String {
    let name_end = sample.find(['{', ' ']).unwrap_or(sample.len());
    let (name, rest) = sample.split_at(name_end);
    if let Some(inner) = rest.strip_prefix('{') {
        if inner.starts_with('}') {
            format!("{name}{{{label}=\"{value}\"{inner}")
        } else {
            format!("{name}{{{label}=\"{value}\",{inner}")
        }
    } else {
        format!("{name}{{{label}=\"{value}\"}}{rest}")
    }
}

/// Reads an exposition into `families` (in first-seen order), each sample
/// labelled `rank` when given; gauges of a dead rank are left out.
fn read_into(families: &mut Vec<(String, Family)>, text: &str, rank: Option<&Rank>) {
    let mut index: HashMap<String, usize> = families.iter().enumerate().map(|(i, (n, _))| (n.clone(), i)).collect();
    let mut current: Option<usize> = None;
    let mut slot = |families: &mut Vec<(String, Family)>, name: &str| -> usize {
        *index.entry(name.to_string()).or_insert_with(|| {
            families.push((name.to_string(), Family::default()));
            families.len() - 1
        })
    };
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let name = rest.split(' ').next().unwrap_or_default();
            let i = slot(families, name);
            families[i].1.help.get_or_insert_with(|| line.to_string());
            current = Some(i);
        } else if let Some(rest) = line.strip_prefix("# TYPE ") {
            let mut parts = rest.split(' ');
            let name = parts.next().unwrap_or_default();
            let i = slot(families, name);
            families[i].1.kind.get_or_insert_with(|| line.to_string());
            current = Some(i);
        } else if line.starts_with('#') || line.trim().is_empty() {
            continue;
        } else {
            let name = line.split(['{', ' ']).next().unwrap_or_default();
            let i = match current {
                Some(i) if name.starts_with(families[i].0.as_str()) => i,
                _ => slot(families, name),
            };
            if let Some(r) = rank {
                let gauge = families[i].1.kind.as_deref().is_some_and(|k| k.ends_with(" gauge"));
                if !r.alive && gauge {
                    continue;
                }
                families[i]
                    .1
                    .samples
                    .push(with_label(line, "rank", &r.rank.to_string()));
            } else {
                families[i].1.samples.push(line.to_string());
            }
        }
    }
}

/// The pod's /metrics: its own families (unlabelled) and every rank's,
/// each sample labelled with its rank, one HELP/TYPE per family.
pub fn merge(own: &str, ranks: &[Rank]) -> String {
    let mut families: Vec<(String, Family)> = Vec::new();
    read_into(&mut families, own, None);
    for r in ranks {
        read_into(&mut families, &r.metrics, Some(r));
    }
    let mut out = String::new();
    for (_, f) in families {
        if f.samples.is_empty() {
            continue;
        }
        for l in f.help.iter().chain(f.kind.iter()) {
            out.push_str(l);
            out.push('\n');
        }
        for s in f.samples {
            out.push_str(&s);
            out.push('\n');
        }
    }
    out
}

/// One readiness check of the pod: a rank and why it is not ready.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Check {
    pub rank: u32,
    pub failure: Option<&'static str>,
}

/// Ready when each of ranks `0..expected` has a live process that is ready.
pub fn readiness(expected: u32, ranks: &[Rank]) -> (bool, Vec<Check>) {
    let checks: Vec<Check> = (0..expected)
        .map(|rank| {
            let failure = match ranks.iter().find(|r| r.rank == rank) {
                None => Some("no process has published this rank"),
                Some(r) if !r.alive => Some("its process stopped publishing (dead)"),
                Some(r) if !r.ready => Some("not ready: see /v1/status"),
                Some(_) => None,
            };
            Check { rank, failure }
        })
        .collect();
    (checks.iter().all(|c| c.failure.is_none()), checks)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rank(n: u32, alive: bool, ready: bool) -> Rank {
        Rank {
            rank: n,
            pid: 1,
            alive,
            ready,
            status: Value::Null,
            metrics: "# HELP nixl_agent_ready r\n# TYPE nixl_agent_ready gauge\nnixl_agent_ready 1\n\
                      # HELP nixl_agent_registration_attempts_total a\n# TYPE nixl_agent_registration_attempts_total counter\n\
                      nixl_agent_registration_attempts_total{group=\"kv\"} 2\n\
                      # HELP h d\n# TYPE h histogram\nh_bucket{le=\"1\"} 1\nh_sum 0.5\nh_count 1\n"
                .into(),
        }
    }

    #[test]
    fn ranks_merge_under_one_help_and_type_with_a_rank_label() {
        let own = "# HELP nixl_agent_ready r\n# TYPE nixl_agent_ready gauge\nnixl_agent_ready 0\n";
        let m = merge(own, &[rank(0, true, true), rank(1, true, true)]);
        assert_eq!(m.matches("# TYPE nixl_agent_ready gauge").count(), 1, "{m}");
        assert!(m.contains("nixl_agent_ready 0\n"));
        assert!(m.contains("nixl_agent_ready{rank=\"1\"} 1\n"));
        assert!(m.contains("nixl_agent_registration_attempts_total{rank=\"0\",group=\"kv\"} 2\n"));
        assert!(m.contains("h_bucket{rank=\"1\",le=\"1\"} 1\n") && m.contains("h_count{rank=\"0\"} 1\n"));
        // Samples of a family stay together.
        let first = m.find("nixl_agent_ready{rank=\"0\"}").unwrap();
        let second = m.find("nixl_agent_ready{rank=\"1\"}").unwrap();
        assert!(!m[first..second].contains("# TYPE"));
    }

    #[test]
    fn a_dead_rank_keeps_its_counters_and_loses_its_gauges() {
        let m = merge("", &[rank(0, true, true), rank(1, false, true)]);
        assert!(!m.contains("nixl_agent_ready{rank=\"1\"}"), "{m}");
        assert!(m.contains("nixl_agent_registration_attempts_total{rank=\"1\",group=\"kv\"} 2"));
        let (ready, checks) = readiness(2, &[rank(0, true, true), rank(1, false, true)]);
        assert!(!ready);
        assert_eq!(checks[1].failure, Some("its process stopped publishing (dead)"));
    }

    #[test]
    fn every_expected_rank_must_be_there_and_ready() {
        assert!(readiness(2, &[rank(0, true, true), rank(1, true, true)]).0);
        assert!(!readiness(3, &[rank(0, true, true), rank(1, true, true)]).0);
        assert!(!readiness(1, &[rank(0, true, false)]).0);
    }
}
