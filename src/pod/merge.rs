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
    /// The rank this process was told and could not have (another live
    /// process held it): it published here instead.
    pub conflict: Option<u32>,
    pub status: Value,
    pub metrics: String,
    /// The same exposition in OpenMetrics, with exemplars (absent in files
    /// of older versions).
    pub openmetrics: Option<String>,
}

/// Why a rank file's content is not taken.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unfit {
    /// Not JSON, not this format's version, a field missing.
    NotARankFile,
    /// Its `rank` is not the one its file name says.
    NameMismatch(u32),
    /// A line of its exposition is not a sample, a comment or empty.
    BadExposition(usize),
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
            conflict: v["conflict"]["wanted"].as_u64().and_then(|w| u32::try_from(w).ok()),
            metrics: v["metrics"].as_str()?.to_string(),
            openmetrics: v["openmetrics"].as_str().map(str::to_string),
            status: v["status"].clone(),
        })
    }

    /// The rank file `rank-<named>.json`'s text, checked: its content names
    /// the same rank, and each exposition parses line by line (one bad line
    /// would break the whole pod's scrape).
    pub fn checked(text: &str, named: u32, alive: bool) -> Result<Rank, Unfit> {
        let r = Rank::parse(text, alive).ok_or(Unfit::NotARankFile)?;
        if r.rank != named {
            return Err(Unfit::NameMismatch(r.rank));
        }
        check_exposition(&r.metrics).map_err(Unfit::BadExposition)?;
        if let Some(om) = &r.openmetrics {
            check_exposition(om).map_err(Unfit::BadExposition)?;
        }
        Ok(r)
    }
}

/// `Ok` when every line of a text or OpenMetrics exposition is empty, a
/// comment, or a sample `name{label="value",...} value [timestamp]` (with an
/// OpenMetrics exemplar after ` # `); else the first bad line (1-based).
pub fn check_exposition(text: &str) -> Result<(), usize> {
    for (i, line) in text.lines().enumerate() {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let sample = line.split(" # ").next().unwrap_or(line);
        if !valid_sample(sample) {
            return Err(i + 1);
        }
    }
    Ok(())
}

fn valid_sample(line: &str) -> bool {
    let b = line.as_bytes();
    let mut i = 0;
    let name_char =
        |c: u8, first: bool| c.is_ascii_alphabetic() || c == b'_' || c == b':' || (!first && c.is_ascii_digit());
    if b.is_empty() || !name_char(b[0], true) {
        return false;
    }
    while i < b.len() && name_char(b[i], i == 0) {
        i += 1;
    }
    if i < b.len() && b[i] == b'{' {
        i += 1;
        loop {
            if i < b.len() && b[i] == b'}' {
                i += 1;
                break;
            }
            let start = i;
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_') {
                i += 1;
            }
            if i == start || b[start].is_ascii_digit() || i + 1 >= b.len() || b[i] != b'=' || b[i + 1] != b'"' {
                return false;
            }
            i += 2;
            loop {
                match b.get(i) {
                    None | Some(b'\n') => return false,
                    Some(b'\\') => i += 2,
                    Some(b'"') => break,
                    Some(_) => i += 1,
                }
            }
            i += 1;
            match b.get(i) {
                Some(b',') => i += 1,
                Some(b'}') => {}
                _ => return false,
            }
        }
    }
    let rest = &line[i.min(line.len())..];
    let mut parts = rest.strip_prefix(' ').unwrap_or("\u{0}").split(' ');
    let value_ok = parts
        .next()
        .is_some_and(|v| matches!(v, "+Inf" | "-Inf" | "NaN") || (!v.is_empty() && v.parse::<f64>().is_ok()));
    let ts_ok = match parts.next() {
        None => true,
        Some(t) => t.parse::<f64>().is_ok(),
    };
    value_ok && ts_ok && parts.next().is_none()
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
            // `# EOF` (once, at the end of the merge) and other comments.
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
/// each sample labelled with its rank, one HELP/TYPE per family. In
/// OpenMetrics (`own` and every rank's OpenMetrics exposition, with their
/// exemplars, one `# EOF`) when `openmetrics` and every rank has one;
/// `None` then means some rank has none (serve text instead).
pub fn merge_format(own: &str, ranks: &[Rank], openmetrics: bool) -> Option<String> {
    if !openmetrics {
        return Some(merge(own, ranks));
    }
    let bodies: Option<Vec<&str>> = ranks.iter().map(|r| r.openmetrics.as_deref()).collect();
    let bodies = bodies?;
    let mut families: Vec<(String, Family)> = Vec::new();
    read_into(&mut families, own, None);
    for (r, body) in ranks.iter().zip(bodies) {
        read_into(&mut families, body, Some(r));
    }
    let mut out = render(families);
    out.push_str("# EOF\n");
    Some(out)
}

pub fn merge(own: &str, ranks: &[Rank]) -> String {
    let mut families: Vec<(String, Family)> = Vec::new();
    read_into(&mut families, own, None);
    for r in ranks {
        read_into(&mut families, &r.metrics, Some(r));
    }
    render(families)
}

fn render(families: Vec<(String, Family)>) -> String {
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
    pub failure: Option<String>,
}

/// Ready when each of ranks `0..expected` has a live process that is
/// ready, and no live process holds a rank it was not told (a conflict:
/// two processes asked for one rank). `rejected`: rank files not taken,
/// with why (named instead of "no process has published this rank").
/// `expected: None`: the ranks present (zero-configuration pods, whose
/// size nobody said).
pub fn readiness(expected: Option<u32>, ranks: &[Rank], rejected: &[(u32, String)]) -> (bool, Vec<Check>) {
    let mut numbers: Vec<u32> = match expected {
        Some(n) => (0..n).collect(),
        None => ranks
            .iter()
            .map(|r| r.rank)
            .chain(rejected.iter().map(|(n, _)| *n))
            .collect(),
    };
    for r in ranks.iter().filter(|r| r.alive && r.conflict.is_some()) {
        numbers.push(r.rank);
    }
    numbers.sort_unstable();
    numbers.dedup();
    let checks: Vec<Check> = numbers
        .into_iter()
        .map(|rank| {
            let failure = match ranks.iter().find(|r| r.rank == rank) {
                None => Some(match rejected.iter().find(|(n, _)| *n == rank) {
                    Some((_, why)) => format!("its file was rejected: {why}"),
                    None => "no process has published this rank".to_string(),
                }),
                Some(r) if !r.alive => Some("its process stopped publishing (dead)".to_string()),
                Some(Rank {
                    conflict: Some(wanted),
                    pid,
                    ..
                }) => Some(format!(
                    "conflict: pid {pid} was told rank {wanted}, which another live process holds"
                )),
                Some(r) if !r.ready => Some("not ready: see /v1/status".to_string()),
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
            conflict: None,
            status: Value::Null,
            openmetrics: None,
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
        let (ready, checks) = readiness(Some(2), &[rank(0, true, true), rank(1, false, true)], &[]);
        assert!(!ready);
        assert_eq!(
            checks[1].failure.as_deref(),
            Some("its process stopped publishing (dead)")
        );
    }

    #[test]
    fn every_expected_rank_must_be_there_and_ready() {
        assert!(readiness(Some(2), &[rank(0, true, true), rank(1, true, true)], &[]).0);
        assert!(!readiness(Some(3), &[rank(0, true, true), rank(1, true, true)], &[]).0);
        assert!(!readiness(Some(1), &[rank(0, true, false)], &[]).0);
    }

    #[test]
    fn with_no_size_said_the_ranks_present_are_the_pod() {
        assert!(readiness(None, &[rank(0, true, true), rank(3, true, true)], &[]).0);
        let (ready, checks) = readiness(None, &[rank(0, true, true), rank(3, false, true)], &[]);
        assert!(!ready);
        assert_eq!(checks.iter().map(|c| c.rank).collect::<Vec<_>>(), [0, 3]);
        assert!(!readiness(None, &[rank(0, true, true)], &[(1, "too_large".into())]).0);
    }

    #[test]
    fn a_conflict_is_named_and_keeps_the_pod_unready() {
        let mut told = rank(2, true, true);
        told.conflict = Some(0);
        told.pid = 77;
        let (ready, checks) = readiness(Some(2), &[rank(0, true, true), rank(1, true, true), told], &[]);
        assert!(!ready);
        assert_eq!(
            checks[2].failure.as_deref(),
            Some("conflict: pid 77 was told rank 0, which another live process holds")
        );
        let (_, checks) = readiness(
            Some(2),
            &[rank(0, true, true)],
            &[(1, "bad_exposition (line 3)".into())],
        );
        assert_eq!(
            checks[1].failure.as_deref(),
            Some("its file was rejected: bad_exposition (line 3)")
        );
    }

    #[test]
    fn expositions_are_checked_line_by_line() {
        let good =
            "# HELP a b\n# TYPE a counter\na_total{x=\"1\",y=\"a \\\"q\\\" b\"} 3\nb 1.5e3 1700000000\nc{} +Inf\n\
                    d_bucket{le=\"0.1\"} 2 # {trace_id=\"ab\"} 0.05 1.7e9\n# EOF\n";
        assert_eq!(check_exposition(good), Ok(()));
        for (bad, line) in [
            ("a 1\nnot a sample\n", 2),
            ("a{x=1} 2\n", 1),
            ("a{x=\"1\" 2\n", 1),
            ("a 1 2 3\n", 1),
            ("1a 2\n", 1),
            ("a\n", 1),
            ("a{x=\"unterminated} 1\n", 1),
        ] {
            assert_eq!(check_exposition(bad), Err(line), "{bad:?}");
        }
    }

    #[test]
    fn openmetrics_merges_with_exemplars_and_one_eof() {
        let mut a = rank(0, true, true);
        a.openmetrics = Some(
            "# HELP c x\n# TYPE c counter\nc_total 1\n# HELP h d\n# TYPE h histogram\nh_bucket{le=\"1\"} 1 # {trace_id=\"t\"} 0.5\n# EOF\n"
                .into(),
        );
        let mut b = a.clone();
        b.rank = 1;
        let own = "# HELP nixl_agent_ready r\n# TYPE nixl_agent_ready gauge\nnixl_agent_ready 1\n# EOF\n";
        let m = merge_format(own, &[a.clone(), b], true).unwrap();
        assert_eq!(m.matches("# EOF").count(), 1, "{m}");
        assert!(m.ends_with("# EOF\n"));
        assert!(
            m.contains("h_bucket{rank=\"1\",le=\"1\"} 1 # {trace_id=\"t\"} 0.5"),
            "{m}"
        );
        // A rank without OpenMetrics: the caller serves text.
        assert!(merge_format(own, &[a, rank(2, true, true)], true).is_none());
    }
}
