//! A rank's exposition checked before it is merged into the pod's scrape.
//! One file that parses but would make the merged scrape invalid (a `rank`
//! label of its own, so the pod's `rank="N"` makes a duplicate label name; a
//! series twice; two TYPE lines that disagree) would make Prometheus refuse
//! the *whole* pod scrape, so such a rank is rejected whole, with a closed
//! reason ([`ExpositionProblem::reason`]), and the other ranks are served.
//!
//! What a rank may publish: `nixl_agent_*` families (but the pod's own:
//! `names::POD_ONLY`) and the `process_*` ones, each with the TYPE
//! `telemetry/names.rs` gives it when it names it; lines that are empty,
//! comments, or samples `name{label="value",...} value [timestamp]` with an
//! OpenMetrics exemplar after ` # `.

use crate::telemetry::names;
use std::collections::{HashMap, HashSet};

/// What is wrong with an exposition, and on which line (1-based).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bad {
    pub problem: ExpositionProblem,
    pub line: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExpositionProblem {
    /// Not a sample, a comment or empty (or a label name twice).
    Syntax,
    /// A `rank` label: the pod adds that one.
    RankLabel,
    /// The same name and labels twice.
    DuplicateSeries,
    /// Two HELP or TYPE lines of one family that differ, or a TYPE other
    /// than nixl-agent's for a family it names.
    ConflictingMetadata,
    /// A family that is not nixl-agent's (or is the pod's own).
    ForeignFamily,
}

impl ExpositionProblem {
    /// The `reason` label of `nixl_agent_pod_files_rejected_total`.
    pub const fn reason(self) -> &'static str {
        match self {
            ExpositionProblem::Syntax => names::POD_REJECT_BAD_EXPOSITION,
            ExpositionProblem::RankLabel => names::POD_REJECT_RANK_LABEL,
            ExpositionProblem::DuplicateSeries => names::POD_REJECT_DUPLICATE_SERIES,
            ExpositionProblem::ConflictingMetadata => names::POD_REJECT_CONFLICTING_METADATA,
            ExpositionProblem::ForeignFamily => names::POD_REJECT_FOREIGN_FAMILY,
        }
    }

    /// What the reason means, for `/readyz?verbose` and `/v1/status`.
    pub const fn describe(self) -> &'static str {
        match self {
            ExpositionProblem::Syntax => "does not parse",
            ExpositionProblem::RankLabel => "has a rank label of its own",
            ExpositionProblem::DuplicateSeries => "repeats a series",
            ExpositionProblem::ConflictingMetadata => "has HELP or TYPE lines that disagree",
            ExpositionProblem::ForeignFamily => "has a family that is not a rank's of nixl-agent",
        }
    }
}

/// The TYPE each family of an exposition declared.
pub type Types = HashMap<String, String>;

const TYPES: [&str; 9] = [
    "counter",
    "gauge",
    "histogram",
    "summary",
    "untyped",
    "unknown",
    "info",
    "stateset",
    "gaugehistogram",
];

/// Whether a rank may publish family (or sample) `name`.
fn own(name: &str) -> bool {
    let pod_only = names::POD_ONLY
        .iter()
        .any(|f| name == *f || name.strip_prefix(*f).is_some_and(|s| s.starts_with('_')));
    (name.starts_with(names::PREFIX) && !pod_only) || name.starts_with("process_")
}

/// The TYPE nixl-agent gives family `name` (an OpenMetrics counter's
/// family drops `_total`), when it names it.
fn declared(name: &str) -> Option<&'static str> {
    let total = format!("{name}_total");
    names::FAMILIES
        .iter()
        .find(|f| f.name == name || f.name == total)
        .map(|f| f.kind.as_str())
}

/// Checks a text or OpenMetrics exposition; the TYPE of each family.
pub fn lint(text: &str) -> Result<Types, Bad> {
    let mut types = Types::new();
    let mut helps: HashMap<&str, &str> = HashMap::new();
    let mut series: HashSet<String> = HashSet::new();
    for (i, line) in text.lines().enumerate() {
        let bad = |problem| Bad { problem, line: i + 1 };
        if line.is_empty() {
            continue;
        }
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let (name, help) = rest.split_once(' ').unwrap_or((rest, ""));
            if !metric_name(name) {
                return Err(bad(ExpositionProblem::Syntax));
            }
            if !own(name) {
                return Err(bad(ExpositionProblem::ForeignFamily));
            }
            if helps.insert(name, help).is_some_and(|h| h != help) {
                return Err(bad(ExpositionProblem::ConflictingMetadata));
            }
            continue;
        }
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap_or((rest, ""));
            if !metric_name(name) || !TYPES.contains(&kind) {
                return Err(bad(ExpositionProblem::Syntax));
            }
            if !own(name) {
                return Err(bad(ExpositionProblem::ForeignFamily));
            }
            let known = declared(name).is_some_and(|k| k != kind);
            if known
                || types
                    .insert(name.to_string(), kind.to_string())
                    .is_some_and(|k| k != kind)
            {
                return Err(bad(ExpositionProblem::ConflictingMetadata));
            }
            continue;
        }
        if line.starts_with('#') {
            continue;
        }
        let (sample, exemplar) = match line.split_once(" # ") {
            Some((s, e)) => (s, Some(e)),
            None => (line, None),
        };
        let Some((name, labels)) = parse_sample(sample, false) else {
            return Err(bad(ExpositionProblem::Syntax));
        };
        if exemplar.is_some_and(|e| parse_sample(e, true).is_none()) {
            return Err(bad(ExpositionProblem::Syntax));
        }
        if !own(name) {
            return Err(bad(ExpositionProblem::ForeignFamily));
        }
        let mut key: Vec<&(&str, &str)> = labels.iter().collect();
        key.sort_unstable();
        for w in key.windows(2) {
            if w[0].0 == w[1].0 {
                return Err(bad(ExpositionProblem::Syntax));
            }
        }
        if key.iter().any(|(k, _)| *k == "rank") {
            return Err(bad(ExpositionProblem::RankLabel));
        }
        let mut id = String::with_capacity(sample.len());
        id.push_str(name);
        for (k, v) in key {
            id.push('\u{0}');
            id.push_str(k);
            id.push('=');
            id.push_str(v);
        }
        if !series.insert(id) {
            return Err(bad(ExpositionProblem::DuplicateSeries));
        }
    }
    Ok(types)
}

fn metric_name(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && (b[0].is_ascii_alphabetic() || b[0] == b'_' || b[0] == b':')
        && b.iter().all(|c| c.is_ascii_alphanumeric() || *c == b'_' || *c == b':')
}

/// `name{label="value",...} value [timestamp]` (an exemplar's has no
/// name): the name and labels (values as written, escapes kept).
fn parse_sample(line: &str, exemplar: bool) -> Option<(&str, Vec<(&str, &str)>)> {
    let b = line.as_bytes();
    let name_end = line.find(['{', ' ']).unwrap_or(line.len());
    let name = &line[..name_end];
    if exemplar != name.is_empty() || (!exemplar && !metric_name(name)) {
        return None;
    }
    let mut i = name_end;
    let mut labels = Vec::new();
    if b.get(i) == Some(&b'{') {
        i += 1;
        loop {
            if b.get(i) == Some(&b'}') {
                i += 1;
                break;
            }
            let start = i;
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_') {
                i += 1;
            }
            if i == start || b[start].is_ascii_digit() || b.get(i) != Some(&b'=') || b.get(i + 1) != Some(&b'"') {
                return None;
            }
            let key = &line[start..i];
            i += 2;
            let vstart = i;
            loop {
                match b.get(i) {
                    None | Some(b'\n') => return None,
                    Some(b'\\') => i += 2,
                    Some(b'"') => break,
                    Some(_) => i += 1,
                }
            }
            labels.push((key, line.get(vstart..i)?));
            i += 1;
            match b.get(i) {
                Some(b',') => i += 1,
                Some(b'}') => {}
                _ => return None,
            }
        }
    } else if exemplar {
        return None;
    }
    let mut parts = line.get(i..)?.strip_prefix(' ')?.split(' ');
    let value_ok = parts
        .next()
        .is_some_and(|v| matches!(v, "+Inf" | "-Inf" | "NaN") || (!v.is_empty() && v.parse::<f64>().is_ok()));
    let ts_ok = parts.next().is_none_or(|t| t.parse::<f64>().is_ok());
    (value_ok && ts_ok && parts.next().is_none()).then_some((name, labels))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn problem(text: &str) -> Option<(ExpositionProblem, usize)> {
        lint(text).err().map(|b| (b.problem, b.line))
    }

    #[test]
    fn samples_comments_and_exemplars_pass() {
        let good = "# HELP nixl_agent_a b\n# TYPE nixl_agent_a counter\n\
                    nixl_agent_a_total{x=\"1\",y=\"a \\\"q\\\" b\"} 3\nnixl_agent_b 1.5e3 1700000000\n\
                    nixl_agent_c{} +Inf\nprocess_open_fds 9\n\
                    nixl_agent_d_bucket{le=\"0.1\"} 2 # {trace_id=\"ab\"} 0.05 1.7e9\n# EOF\n";
        let types = lint(good).unwrap();
        assert_eq!(types["nixl_agent_a"], "counter");
    }

    #[test]
    fn each_line_is_checked() {
        for (bad, line) in [
            ("nixl_agent_a 1\nnot a sample\n", 2),
            ("nixl_agent_a{x=1} 2\n", 1),
            ("nixl_agent_a{x=\"1\" 2\n", 1),
            ("nixl_agent_a 1 2 3\n", 1),
            ("1a 2\n", 1),
            ("nixl_agent_a\n", 1),
            ("nixl_agent_a{x=\"unterminated} 1\n", 1),
            ("nixl_agent_a{x=\"1\",x=\"2\"} 1\n", 1),
            ("nixl_agent_a 1 # {t=\"x\" 1\n", 1),
            ("# TYPE nixl_agent_a sideways\n", 1),
        ] {
            assert_eq!(problem(bad), Some((ExpositionProblem::Syntax, line)), "{bad:?}");
        }
    }

    #[test]
    fn what_would_break_the_pods_scrape_is_named() {
        for (bad, p, line) in [
            ("nixl_agent_ready{rank=\"x\"} 1\n", ExpositionProblem::RankLabel, 1),
            (
                "nixl_agent_a{g=\"1\"} 1\nnixl_agent_a{g=\"2\"} 1\nnixl_agent_a{g=\"1\"} 2\n",
                ExpositionProblem::DuplicateSeries,
                3,
            ),
            (
                "nixl_agent_a{x=\"1\",y=\"2\"} 1\nnixl_agent_a{y=\"2\",x=\"1\"} 1\n",
                ExpositionProblem::DuplicateSeries,
                2,
            ),
            (
                "# TYPE nixl_agent_x gauge\n# TYPE nixl_agent_x counter\n",
                ExpositionProblem::ConflictingMetadata,
                2,
            ),
            (
                "# HELP nixl_agent_x a\n# HELP nixl_agent_x b\n",
                ExpositionProblem::ConflictingMetadata,
                2,
            ),
            (
                "# TYPE nixl_agent_ready counter\n",
                ExpositionProblem::ConflictingMetadata,
                1,
            ),
            ("up 1\n", ExpositionProblem::ForeignFamily, 1),
            ("# TYPE node_load1 gauge\n", ExpositionProblem::ForeignFamily, 1),
            ("nixl_agent_rank_up{x=\"1\"} 1\n", ExpositionProblem::ForeignFamily, 1),
            (
                "nixl_agent_pod_files_rejected_total 1\n",
                ExpositionProblem::ForeignFamily,
                1,
            ),
        ] {
            assert_eq!(problem(bad), Some((p, line)), "{bad:?}");
        }
        // The pod's own families are the pod's; its `ready` is a rank's too.
        assert!(lint("# TYPE nixl_agent_ready gauge\nnixl_agent_ready 1\n").is_ok());
        // An OpenMetrics counter's family drops `_total`.
        assert!(lint("# TYPE nixl_agent_registration_attempts counter\n").is_ok());
    }
}
