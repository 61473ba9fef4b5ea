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

use super::lint::{self, Bad, Types};
use serde_json::Value;
use std::collections::HashMap;
use std::sync::Arc;

/// One rank, as the pod's agent last read it. The texts are shared: a file
/// read once is served from memory until it changes.
#[derive(Debug, Clone)]
pub struct Rank {
    pub rank: u32,
    pub pid: u32,
    /// A live process holds the rank's slot (its lock, tested without
    /// taking it): a file nobody holds is a dead rank's, whatever it says.
    pub held: bool,
    /// Held, and the file was touched recently: its process is alive.
    pub alive: bool,
    pub ready: bool,
    /// Why its own /livez fails, as it published it
    /// ([`crate::status::Status::liveness_failure`] of its recording).
    pub liveness_failure: Option<Arc<str>>,
    /// The rank this process was told and could not have (another live
    /// process held it): it published here instead.
    pub conflict: Option<u32>,
    pub status: Arc<Value>,
    pub metrics: Arc<str>,
    /// The same exposition in OpenMetrics, with exemplars (absent in files
    /// of older versions).
    pub openmetrics: Option<Arc<str>>,
    /// The TYPE of each family it publishes (both expositions).
    pub types: Arc<Types>,
    /// Its process's end record, written as it exited (`None`: it has not
    /// ended, or it died without one).
    pub ended: Option<crate::model::Ended>,
    /// When its content was written (Unix seconds).
    pub written_unix: f64,
    /// Its publisher's run id: one process of the rank from the next, even
    /// with the same pid.
    pub run: u64,
    /// When its file was last written or touched (Unix seconds; the
    /// reader's, 0 until read from a directory).
    pub touched_unix: f64,
}

impl Rank {
    /// How its process ended, when no live process holds its slot: its end
    /// record's, else died. `None` while its slot is held.
    pub fn how_ended(&self) -> Option<crate::model::How> {
        if self.held {
            return None;
        }
        Some(self.ended.as_ref().map_or(crate::model::How::Died, |e| e.how))
    }

    /// In words, for readiness and log lines: how and when its process
    /// ended, when it has.
    pub fn ending_words(&self) -> Option<String> {
        let how = self.how_ended()?;
        let at = self.ended.as_ref().map_or(self.touched_unix, |e| e.at_unix);
        let what = match &self.ended {
            Some(e) => e.describe(),
            None => how.describe().to_string(),
        };
        Some(format!("pid {} {what} at {}", self.pid, crate::units::rfc3339(at)))
    }
}

/// Why a rank file's content is not taken.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unfit {
    /// Not JSON, not this format's version, a field missing.
    NotARankFile,
    /// Its `rank` is not the one its file name says (its slot).
    NameMismatch(u32),
    /// Its exposition would break the pod's scrape ([`lint`]).
    Exposition(Bad),
}

impl Rank {
    /// A rank file's text; `None` when it is not one.
    pub fn parse(text: &str, alive: bool) -> Option<Rank> {
        let v: Value = serde_json::from_str(text).ok()?;
        if v["version"].as_u64()? != u64::from(super::FILE_VERSION) || !v["status"].is_object() {
            return None;
        }
        Some(Rank {
            rank: u32::try_from(v["rank"].as_u64()?).ok()?,
            pid: u32::try_from(v["pid"].as_u64().unwrap_or(0)).unwrap_or(0),
            held: alive,
            alive,
            ready: v["ready"].as_bool().unwrap_or(false),
            liveness_failure: v["liveness_failure"].as_str().map(Arc::from),
            conflict: v["conflict"]["wanted"].as_u64().and_then(|w| u32::try_from(w).ok()),
            metrics: v["metrics"].as_str()?.into(),
            openmetrics: v["openmetrics"].as_str().map(Arc::from),
            status: Arc::new(v["status"].clone()),
            types: Arc::default(),
            ended: serde_json::from_value(v["ended"].clone()).ok(),
            written_unix: v["written_unix"].as_f64().unwrap_or(0.0),
            run: v["run"].as_u64().unwrap_or(0),
            touched_unix: 0.0,
        })
    }

    /// The rank file `rank-<named>.json`'s text, checked: its content names
    /// the same rank (its slot), and each exposition passes [`lint`] (one
    /// bad rank would break the whole pod's scrape).
    pub fn checked(text: &str, named: u32, alive: bool) -> Result<Rank, Unfit> {
        let mut r = Rank::parse(text, alive).ok_or(Unfit::NotARankFile)?;
        if r.rank != named {
            return Err(Unfit::NameMismatch(r.rank));
        }
        let mut types = lint::lint(&r.metrics).map_err(Unfit::Exposition)?;
        if let Some(om) = &r.openmetrics {
            types.extend(lint::lint(om).map_err(Unfit::Exposition)?);
        }
        r.types = Arc::new(types);
        Ok(r)
    }
}

/// One family of the merge: its HELP and TYPE lines and sample lines.
#[derive(Default, Clone)]
struct MergedFamily {
    help: Option<String>,
    kind: Option<String>,
    samples: String,
}

/// Families merged (each sample labelled with its rank), in first-seen
/// order: one rank's made once per version of its file
/// ([`Merged::of_rank`]), the ranks' joined when one changed
/// ([`Merged::of_ranks`]), and that joined with the pod's own exposition at
/// every pass ([`Merged::with_own`]).
#[derive(Default, Clone)]
pub struct Merged {
    families: Vec<(String, MergedFamily)>,
    index: HashMap<String, usize>,
}

/// Adds `label="value"` as the first label of a sample line.
fn with_label(sample: &str, label: &str, value: &str, out: &mut String) {
    let name_end = sample.find(['{', ' ']).unwrap_or(sample.len());
    let (name, rest) = sample.split_at(name_end);
    out.push_str(name);
    out.push('{');
    out.push_str(label);
    out.push_str("=\"");
    out.push_str(value);
    out.push('"');
    match rest.strip_prefix('{') {
        Some(inner) if inner.starts_with('}') => out.push_str(inner),
        Some(inner) => {
            out.push(',');
            out.push_str(inner);
        }
        None => {
            out.push('}');
            out.push_str(rest);
        }
    }
    out.push('\n');
}

impl Merged {
    fn slot(&mut self, name: &str) -> usize {
        if let Some(i) = self.index.get(name) {
            return *i;
        }
        self.families.push((name.to_string(), MergedFamily::default()));
        self.index.insert(name.to_string(), self.families.len() - 1);
        self.families.len() - 1
    }

    /// Reads an exposition in, each sample labelled `rank` when given;
    /// gauges of a dead rank are left out.
    fn read(&mut self, text: &str, rank: Option<&Rank>) {
        let mut current: Option<usize> = None;
        let label = rank.map(|r| r.rank.to_string());
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# HELP ") {
                let i = self.slot(rest.split(' ').next().unwrap_or_default());
                self.families[i].1.help.get_or_insert_with(|| line.to_string());
                current = Some(i);
            } else if let Some(rest) = line.strip_prefix("# TYPE ") {
                let i = self.slot(rest.split(' ').next().unwrap_or_default());
                self.families[i].1.kind.get_or_insert_with(|| line.to_string());
                current = Some(i);
            } else if line.starts_with('#') || line.trim().is_empty() {
                // `# EOF` (once, at the end of the merge) and other comments.
                continue;
            } else {
                let name = line.split(['{', ' ']).next().unwrap_or_default();
                let i = match current {
                    Some(i) if name.starts_with(self.families[i].0.as_str()) => i,
                    _ => self.slot(name),
                };
                let f = &mut self.families[i].1;
                match (rank, &label) {
                    (Some(r), Some(l)) => {
                        let gauge = f.kind.as_deref().is_some_and(|k| k.ends_with(" gauge"));
                        if !gauge || r.alive {
                            with_label(line, "rank", l, &mut f.samples);
                        }
                    }
                    _ => {
                        f.samples.push_str(line);
                        f.samples.push('\n');
                    }
                }
            }
        }
    }

    /// One rank's exposition, its samples labelled with its rank (its
    /// gauges left out when it is dead); in OpenMetrics when `openmetrics`,
    /// `None` then when it has none.
    pub fn of_rank(r: &Rank, openmetrics: bool) -> Option<Merged> {
        let body = if openmetrics {
            r.openmetrics.as_deref()?
        } else {
            &*r.metrics
        };
        let mut m = Merged::default();
        m.read(body, Some(r));
        Some(m)
    }

    /// Adds `other`'s families after this one's (the first HELP and TYPE
    /// seen for a family stay).
    pub fn absorb(&mut self, other: &Merged) {
        for (name, f) in &other.families {
            let i = self.slot(name);
            let mine = &mut self.families[i].1;
            if mine.help.is_none() {
                mine.help.clone_from(&f.help);
            }
            if mine.kind.is_none() {
                mine.kind.clone_from(&f.kind);
            }
            mine.samples.push_str(&f.samples);
        }
    }

    /// The ranks' expositions merged; in OpenMetrics when `openmetrics`,
    /// `None` then when some rank has none (serve text instead).
    pub fn of_ranks<'a>(ranks: impl IntoIterator<Item = &'a Merged>) -> Merged {
        let mut m = Merged::default();
        for r in ranks {
            m.absorb(r);
        }
        m
    }

    /// The pod's /metrics: its own families (`own`, unlabelled) and every
    /// rank's, one HELP/TYPE per family (the pod's own first), one `# EOF`
    /// at the end when `openmetrics`.
    pub fn with_own(&self, own: &str, openmetrics: bool) -> String {
        let mut mine = Merged::default();
        mine.read(own, None);
        let total: usize = self.families.iter().map(|(_, f)| f.samples.len() + 200).sum();
        let mut out = String::with_capacity(total + own.len() + 16);
        let mut emit = |head: &MergedFamily, own_samples: &str, rank_samples: &str| {
            if own_samples.is_empty() && rank_samples.is_empty() {
                return;
            }
            for l in head.help.iter().chain(head.kind.iter()) {
                out.push_str(l);
                out.push('\n');
            }
            out.push_str(own_samples);
            out.push_str(rank_samples);
        };
        for (name, f) in &mine.families {
            let theirs = self.index.get(name).map(|i| &self.families[*i].1);
            let head = MergedFamily {
                help: f.help.clone().or_else(|| theirs.and_then(|t| t.help.clone())),
                kind: f.kind.clone().or_else(|| theirs.and_then(|t| t.kind.clone())),
                samples: String::new(),
            };
            emit(&head, &f.samples, theirs.map_or("", |t| t.samples.as_str()));
        }
        for (name, f) in &self.families {
            if !mine.index.contains_key(name) {
                emit(f, "", &f.samples);
            }
        }
        if openmetrics {
            out.push_str("# EOF\n");
        }
        out
    }
}

#[cfg(any(test, feature = "testing"))]
/// The pod's /metrics in one go ([`Merged::of_ranks`] then
/// [`Merged::with_own`]); `None` when OpenMetrics was asked for and some
/// rank has none.
pub fn merge_format(own: &str, ranks: &[Rank], openmetrics: bool) -> Option<String> {
    let each: Option<Vec<Merged>> = ranks.iter().map(|r| Merged::of_rank(r, openmetrics)).collect();
    Some(Merged::of_ranks(&each?).with_own(own, openmetrics))
}

#[cfg(any(test, feature = "testing"))]
/// The pod's /metrics in text.
pub fn merge(own: &str, ranks: &[Rank]) -> String {
    merge_format(own, ranks, false).unwrap_or_default()
}

/// The ranks whose TYPE for a family disagrees with an earlier rank's (in
/// rank order): merged under one TYPE line, their samples would be read as
/// the other kind. The first rank that says a TYPE keeps it.
pub fn type_conflicts(ranks: &[Rank]) -> Vec<u32> {
    let mut seen: HashMap<&str, &str> = HashMap::new();
    let mut out = Vec::new();
    for r in ranks {
        let clash = r
            .types
            .iter()
            .any(|(name, kind)| seen.get(name.as_str()).is_some_and(|k| *k != kind.as_str()));
        if clash {
            out.push(r.rank);
            continue;
        }
        for (name, kind) in r.types.iter() {
            seen.entry(name).or_insert(kind);
        }
    }
    out
}

/// Why an expected rank without a file is not ready, when nothing more is
/// known of it.
pub const NOT_PUBLISHED: &str = "no process has published this rank";
/// The same, for a rank whose file was removed while it was served.
pub const REMOVED: &str = "its file was removed; no process publishes it now";

/// One readiness check of the pod: a rank and why it is not ready.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RankCheck {
    pub rank: u32,
    pub failure: Option<String>,
    /// What else an operator should know of a rank that passes (its file
    /// is stale: its process cannot write it).
    pub note: Option<String>,
}

impl Rank {
    /// When its content was last written, if that is longer ago than
    /// [`super::STALE_CONTENT_AFTER`] while its process lives: it cannot
    /// write its file (a full or read-only directory), and what it says is
    /// as of then.
    pub fn stale_since(&self, now_unix: f64) -> Option<f64> {
        let late = now_unix - self.written_unix > super::STALE_CONTENT_AFTER.as_secs_f64();
        (self.alive && self.written_unix > 0.0 && late).then_some(self.written_unix)
    }
}

/// Ready when each of ranks `0..expected` has a live process that is
/// ready, and no live process holds a rank it was not told (a conflict:
/// two processes asked for one rank). `rejected`: rank files not taken,
/// with why (named instead of "no process has published this rank").
/// `expected: None`: the ranks present (zero-configuration pods, whose
/// size nobody said), but for those whose process exited cleanly (its end
/// record, no uncaught exception): a forked helper that ended is no rank
/// the pod waits for, while one that raised or died is a broken pod. Its
/// counters are served all the same.
pub fn readiness(expected: Option<u32>, ranks: &[Rank], rejected: &[(u32, String)]) -> (bool, Vec<RankCheck>) {
    let now = crate::ledger::counts::unix_now();
    let mut numbers: Vec<u32> = match expected {
        Some(n) => (0..n).collect(),
        None => ranks
            .iter()
            .filter(|r| r.how_ended() != Some(crate::model::How::Exited))
            .map(|r| r.rank)
            .chain(rejected.iter().map(|(n, _)| *n))
            .collect(),
    };
    for r in ranks.iter().filter(|r| r.alive && r.conflict.is_some()) {
        numbers.push(r.rank);
    }
    numbers.sort_unstable();
    numbers.dedup();
    let checks: Vec<RankCheck> = numbers
        .into_iter()
        .map(|rank| {
            let failure = match ranks.iter().find(|r| r.rank == rank) {
                None => Some(match rejected.iter().find(|(n, _)| *n == rank) {
                    Some((_, why)) => format!("its file was rejected: {why}"),
                    None => NOT_PUBLISHED.to_string(),
                }),
                Some(r) if !r.held => Some(format!(
                    "ended: {}; no live process holds its slot (its counters are served until one does or the retention passes)",
                    r.ending_words().unwrap_or_default()
                )),
                Some(r) if !r.alive => Some(format!(
                    "pid {} holds its slot but stopped touching its file (hung or stopped)",
                    r.pid
                )),
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
            let note = ranks
                .iter()
                .find(|r| r.rank == rank)
                .and_then(|r| r.stale_since(now))
                .map(|t| {
                    format!(
                        "its file is stale since {}: its process holds its slot and beats, but cannot write it (see its nixl_agent_pod_publish_failures_total)",
                        crate::units::rfc3339(t)
                    )
                });
            RankCheck { rank, failure, note }
        })
        .collect();
    (checks.iter().all(|c| c.failure.is_none()), checks)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a rank file says reaches the pod's document exactly: JSON is
    /// read with round-trip precision (serde_json's `float_roundtrip`).
    /// Its default reading is off by an ULP for some values — a Unix time
    /// in microseconds, as the canary's last round is stamped — so a pod
    /// (or a test) comparing /v1/status with /metrics saw them disagree.
    #[test]
    fn a_ranks_floats_reach_the_pod_exactly() {
        for text in [
            "1796301816.6334605",
            "1796301495.196416",
            "4406762850.550753",
            "0.073786389",
            "0.1",
        ] {
            let want: f64 = text.parse().unwrap();
            let v: Value = serde_json::from_str(text).unwrap();
            assert_eq!(v.as_f64().map(f64::to_bits), Some(want.to_bits()), "{text}");
        }
    }

    fn rank(n: u32, alive: bool, ready: bool) -> Rank {
        Rank {
            rank: n,
            pid: 1,
            held: alive,
            alive,
            ready,
            liveness_failure: None,
            conflict: None,
            status: Arc::new(Value::Object(Default::default())),
            openmetrics: None,
            types: Arc::default(),
            ended: None,
            written_unix: 0.0,
            run: 0,
            touched_unix: 0.0,
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
        let dead = checks[1].failure.as_deref().unwrap_or_default();
        assert!(
            dead.starts_with("ended: pid 1 died without an end record (a signal, os._exit, abort or kill -9) at 1970-01-01T00:00:00Z; no live process holds its slot"),
            "{dead}"
        );
        // Its slot held, its file no longer touched: a hung process.
        let mut hung = rank(1, false, true);
        hung.held = true;
        let (_, checks) = readiness(Some(2), &[rank(0, true, true), hung], &[]);
        assert_eq!(
            checks[1].failure.as_deref(),
            Some("pid 1 holds its slot but stopped touching its file (hung or stopped)")
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

    /// A rank file whose exposition carries a `rank` label of its own
    /// (merged, `rank="1",rank="x"`: Prometheus refuses the whole scrape)
    /// is not taken; nor one that names another slot.
    #[test]
    fn a_rank_file_is_checked_against_its_slot_and_the_pods_scrape() {
        let file = |rank: u32, metrics: &str| {
            serde_json::json!({"version": 1, "rank": rank, "pid": 1, "ready": true, "status": {}, "metrics": metrics})
                .to_string()
        };
        let good = "# HELP nixl_agent_ready r\n# TYPE nixl_agent_ready gauge\nnixl_agent_ready 1\n";
        let r = Rank::checked(&file(1, good), 1, true).unwrap();
        assert_eq!(r.types["nixl_agent_ready"], "gauge");
        assert_eq!(
            Rank::checked(&file(2, good), 1, true).unwrap_err(),
            Unfit::NameMismatch(2)
        );
        let injected = "nixl_agent_ready{rank=\"x\"} 1\n";
        match Rank::checked(&file(1, injected), 1, true) {
            Err(Unfit::Exposition(b)) => assert_eq!(b.problem, lint::ExpositionProblem::RankLabel),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_rank_whose_type_disagrees_with_an_earlier_ranks_is_named() {
        let mut a = rank(0, true, true);
        a.types = Arc::new([("nixl_agent_x".to_string(), "gauge".to_string())].into());
        let mut b = rank(1, true, true);
        b.types = Arc::new([("nixl_agent_x".to_string(), "counter".to_string())].into());
        let c = rank(2, true, true);
        assert_eq!(type_conflicts(&[a, b, c]), [1]);
    }

    #[test]
    fn openmetrics_merges_with_exemplars_and_one_eof() {
        let mut a = rank(0, true, true);
        a.openmetrics = Some(Arc::from(
            "# HELP c x\n# TYPE c counter\nc_total 1\n# HELP h d\n# TYPE h histogram\nh_bucket{le=\"1\"} 1 # {trace_id=\"t\"} 0.5\n# EOF\n",
        ));
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
