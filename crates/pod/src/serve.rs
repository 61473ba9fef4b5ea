//! `nixl-agent pod`: the pod's agent. A task makes a pass over the pod
//! directory every [`super::PUBLISH_EVERY`] ([`Watcher`]: files re-read and
//! ranks merged again only when they changed) and records what it found (a
//! [`PodView`] in a `watch` channel); the handlers only read that view. /metrics merges the
//! ranks' expositions with a `rank` label beside the pod's own
//! (`nixl_agent_ready` for the pod, `nixl_agent_rank_up{rank}`), /readyz is
//! 200 when every expected rank is alive and ready, /livez 503 while a live
//! rank's own /livez would be (each rank's verdict, named by rank),
//! /v1/status is the one document ([`crate::status::document`]) with every
//! rank. The watcher's own health is reported (/v1/status `watcher`,
//! `nixl_agent_pod_watch_last_pass_timestamp_seconds`), never by itself a
//! reason for /livez to fail: in a zero-configuration pod the server is a
//! serving rank, and a slow pass over a directory is no reason to restart
//! it.

use super::merge::{self, Merged, Rank, RankCheck};
use super::read::{DirRead, Reader, Version};
use crate::config::HttpConfig;
use crate::http::{self, ALERT_RULES_PATH, DASHBOARD_PATH};
use crate::status::document::{self, Document, RankConflict, RankEntry, RejectedFile, Shape, WatcherHealth};
use crate::telemetry::exposition::{self, Format};
use crate::telemetry::metrics::BuildInfo;
use crate::telemetry::names::{self, Family};
use axum::extract::{RawQuery, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use prometheus::{IntGauge, IntGaugeVec, Opts, Registry};
use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::SystemTime;
use tokio::sync::watch;

/// What the pod's agent last read from the directory.
#[derive(Debug, Clone)]
pub struct PodView {
    /// The directory served.
    pub dir: String,
    pub ranks: Vec<Rank>,
    /// Files of the directory not taken as a rank, and why (at most
    /// [`super::read::MAX_REJECTED`]).
    pub rejected: Vec<Rejected>,
    /// Rejected files not listed.
    pub rejected_left_out: usize,
    pub ready: bool,
    pub checks: Vec<RankCheck>,
    /// Why /livez fails: each live rank's own verdict, named by rank
    /// ([`document::liveness_failures`]).
    pub liveness_failures: Vec<String>,
    /// The shape served: a sidecar (its size said) or a zero-configuration
    /// pod.
    pub shape: Shape,
    pub metrics: String,
    /// The same, in OpenMetrics with the ranks' exemplars (`None`: some rank
    /// published none; text is served).
    pub openmetrics: Option<String>,
    /// When the watcher completed the pass this view comes from.
    pub at: std::time::Instant,
    /// How long that pass took.
    pub pass_seconds: f64,
}

impl Default for PodView {
    fn default() -> Self {
        PodView {
            dir: String::new(),
            ranks: Vec::new(),
            rejected: Vec::new(),
            rejected_left_out: 0,
            ready: false,
            checks: Vec::new(),
            liveness_failures: Vec::new(),
            shape: Shape::ZeroConfigPod,
            metrics: String::new(),
            openmetrics: None,
            at: std::time::Instant::now(),
            pass_seconds: 0.0,
        }
    }
}
pub use super::read::Rejected;

/// What a pod agent counted already, kept only for what is still there
/// (so bounded by the directory's bound): rejected files with the version
/// counted, conflicts as (rank, pid).
type CountedRejects = (HashMap<String, Version>, HashSet<(u32, u32)>);

/// The pod's own series.
struct Own {
    registry: Registry,
    ready: IntGauge,
    rank_up: IntGaugeVec,
    ranks_expected: IntGauge,
    conflicts: prometheus::IntCounter,
    rejected: prometheus::IntCounterVec,
    /// Processes of a rank that ended, by how.
    exits: prometheus::IntCounterVec,
    watch_age: prometheus::Gauge,
    last_pass: prometheus::Gauge,
    /// What was counted already: (file, its version) rejected, (rank, pid)
    /// in conflict.
    counted: std::sync::Mutex<CountedRejects>,
}

fn opts(name: &str) -> Opts {
    let f = Family::get(name);
    Opts::new(f.name, f.help)
}

impl Own {
    fn new(expected: Option<u32>) -> Own {
        let registry = Registry::new();
        let ready = IntGauge::with_opts(opts(names::READY)).expect("valid");
        let rank_up = IntGaugeVec::new(opts(names::RANK_UP), Family::get(names::RANK_UP).labels).expect("valid");
        let ranks = IntGauge::with_opts(opts(names::RANKS_EXPECTED)).expect("valid");
        let b = BuildInfo::current(None).with_role(names::ROLE_POD);
        let build = IntGaugeVec::new(opts(names::BUILD_INFO), Family::get(names::BUILD_INFO).labels).expect("valid");
        build
            .with_label_values(&[b.version, b.revision, &b.nixl_version, b.nixl_sys_version, b.role])
            .set(1);
        ranks.set(i64::from(expected.unwrap_or(0)));
        let conflicts = prometheus::IntCounter::with_opts(opts(names::RANK_CONFLICTS_TOTAL)).expect("valid");
        let rejected = prometheus::IntCounterVec::new(
            opts(names::POD_FILES_REJECTED_TOTAL),
            Family::get(names::POD_FILES_REJECTED_TOTAL).labels,
        )
        .expect("valid");
        for r in names::POD_REJECT_REASONS {
            rejected.with_label_values(&[r]);
        }
        let exits = prometheus::IntCounterVec::new(
            opts(names::RANK_EXITS_TOTAL),
            Family::get(names::RANK_EXITS_TOTAL).labels,
        )
        .expect("valid");
        // Every expected rank's from the start: an alert's increase() sees
        // the first exit.
        for rank in 0..expected.unwrap_or(0) {
            for how in names::RANK_EXIT_HOWS {
                exits.with_label_values(&[rank.to_string().as_str(), how]);
            }
        }
        let watch_age = prometheus::Gauge::with_opts(opts(names::POD_WATCH_SECONDS)).expect("valid");
        let last_pass = prometheus::Gauge::with_opts(opts(names::POD_WATCH_LAST_PASS)).expect("valid");
        for c in [
            Box::new(ready.clone()) as Box<dyn prometheus::core::Collector>,
            Box::new(rank_up.clone()),
            Box::new(ranks.clone()),
            Box::new(build),
            Box::new(conflicts.clone()),
            Box::new(rejected.clone()),
            Box::new(exits.clone()),
            Box::new(watch_age.clone()),
            Box::new(last_pass.clone()),
        ] {
            registry.register(c).expect("families register once");
        }
        #[cfg(target_os = "linux")]
        registry
            .register(Box::new(prometheus::process_collector::ProcessCollector::for_self()))
            .expect("process collector registers once");
        Own {
            registry,
            ready,
            rank_up,
            ranks_expected: ranks,
            conflicts,
            rejected,
            exits,
            watch_age,
            last_pass,
            counted: Default::default(),
        }
    }
}

/// One rank's exposition made ready to merge, and for which version of its
/// file and liveness.
struct PreparedRank {
    key: (Version, bool),
    text: Merged,
    openmetrics: Option<Merged>,
}

/// The watcher's state between passes: the pod's own series, the files as
/// last read, the ranks' merge as last made (text, OpenMetrics).
pub struct Watcher {
    own: Own,
    reader: Reader,
    /// Each rank's exposition made ready to merge, per (version, alive):
    /// text and OpenMetrics.
    each: HashMap<u32, PreparedRank>,
    merged: Option<(Merged, Option<Merged>)>,
    dir: PathBuf,
    expected: Option<u32>,
    /// Each rank's life between passes (logged as it changes).
    life: super::life::Life,
}

impl Watcher {
    /// The watcher's own families (not the ranks'), in text.
    #[cfg(any(test, feature = "testing"))]
    pub fn own_text(&self) -> String {
        exposition::encode(&self.own.registry, Format::Text)
    }

    #[cfg(any(test, feature = "testing"))]
    pub fn new(dir: PathBuf, expected: Option<u32>) -> Watcher {
        Watcher::with_retention(dir, expected, super::RETENTION)
    }

    /// A watcher that serves a rank whose process ended for `retention`.
    pub fn with_retention(dir: PathBuf, expected: Option<u32>, retention: std::time::Duration) -> Watcher {
        Watcher {
            own: Own::new(expected),
            reader: Reader::new(retention),
            each: HashMap::new(),
            merged: None,
            dir,
            expected,
            life: super::life::Life::default(),
        }
    }

    /// One pass: the directory read (files re-read only when changed), the
    /// pod's series updated, the ranks merged again only when a rank
    /// changed, joined with the pod's own exposition.
    pub fn pass(&mut self, openmetrics_wanted: bool) -> PodView {
        let t0 = std::time::Instant::now();
        let DirRead {
            ranks,
            versions,
            rejected,
            left_out,
            changed,
            expired,
        } = self.reader.pass(&self.dir, SystemTime::now());
        let own = &self.own;
        let named_rejects: Vec<(u32, String)> = rejected
            .iter()
            .filter_map(|r| r.rank.map(|n| (n, format!("{} ({})", r.reason, r.detail))))
            .collect();
        let (ready, mut checks) = merge::readiness(self.expected, &ranks, &named_rejects);
        for change in self.life.pass(&ranks) {
            if let super::life::Change::Ended { rank, how, .. } = change {
                own.exits
                    .with_label_values(&[rank.to_string().as_str(), how.as_str()])
                    .inc();
            }
        }
        for c in checks.iter_mut() {
            if c.failure.as_deref() != Some(merge::NOT_PUBLISHED) {
                continue;
            }
            if let Some(words) = expired.iter().find(|r| r.rank == c.rank).and_then(Rank::ending_words) {
                c.failure = Some(format!(
                    "ended: {words}; no process has claimed the rank since, and its counters are no longer served (the retention passed)"
                ));
            } else if self.life.removed().contains(&c.rank) {
                c.failure = Some(merge::REMOVED.to_string());
            }
        }
        own.ready.set(i64::from(ready));
        if self.expected.is_none() {
            own.ranks_expected.set(checks.len() as i64);
        }
        own.rank_up.reset();
        for r in &ranks {
            own.rank_up
                .with_label_values(&[r.rank.to_string()])
                .set(i64::from(r.alive));
        }
        {
            let mut counted = own.counted.lock().unwrap_or_else(|e| e.into_inner());
            let mut files = HashMap::with_capacity(rejected.len());
            for r in &rejected {
                if counted.0.get(&r.file) != Some(&r.version) {
                    own.rejected.with_label_values(&[r.reason]).inc();
                }
                files.insert(r.file.clone(), r.version);
            }
            counted.0 = files;
            let live: HashSet<(u32, u32)> = ranks
                .iter()
                .filter(|r| r.conflict.is_some())
                .map(|r| (r.rank, r.pid))
                .collect();
            own.conflicts.inc_by(live.difference(&counted.1).count() as u64);
            counted.1 = live;
        }
        let pass_seconds = t0.elapsed().as_secs_f64();
        own.watch_age.set(pass_seconds);
        own.last_pass.set(
            SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0.0, |d| d.as_secs_f64()),
        );
        let liveness_failures = document::liveness_failures(
            ranks
                .iter()
                .map(|r| (Some(r.rank), r.alive, r.liveness_failure.as_deref())),
        );
        if changed || self.merged.is_none() {
            // Only a rank whose file or liveness changed is read again.
            self.each.retain(|n, _| ranks.iter().any(|r| r.rank == *n));
            for (r, v) in ranks.iter().zip(&versions) {
                let key = (*v, r.alive);
                if self.each.get(&r.rank).is_none_or(|p| p.key != key) {
                    let prepared = PreparedRank {
                        key,
                        text: Merged::of_rank(r, false).unwrap_or_default(),
                        openmetrics: Merged::of_rank(r, true),
                    };
                    self.each.insert(r.rank, prepared);
                }
            }
            let each: Vec<&PreparedRank> = ranks.iter().filter_map(|r| self.each.get(&r.rank)).collect();
            let om: Option<Vec<&Merged>> = each.iter().map(|p| p.openmetrics.as_ref()).collect();
            self.merged = Some((Merged::of_ranks(each.iter().map(|p| &p.text)), om.map(Merged::of_ranks)));
        }
        let (text, om) = self.merged.as_ref().expect("merged above");
        let metrics = text.with_own(&exposition::encode(&own.registry, Format::Text), false);
        let openmetrics = om
            .as_ref()
            .filter(|_| openmetrics_wanted)
            .map(|m| m.with_own(&exposition::encode(&own.registry, Format::OpenMetrics), true));
        PodView {
            dir: self.dir.display().to_string(),
            ranks,
            rejected,
            rejected_left_out: left_out,
            ready,
            checks,
            liveness_failures,
            shape: if self.expected.is_some() {
                Shape::Sidecar
            } else {
                Shape::ZeroConfigPod
            },
            metrics,
            openmetrics,
            at: std::time::Instant::now(),
            pass_seconds,
        }
    }
}

/// Keeps `tx` up to date with the directory until every receiver is gone.
/// Each pass reads the directory on a blocking thread, never on the
/// server's async worker.
pub async fn watch_dir(
    dir: PathBuf,
    expected: Option<u32>,
    retention: std::time::Duration,
    tx: watch::Sender<Arc<PodView>>,
) {
    let mut watcher = Some(Watcher::with_retention(dir.clone(), expected, retention));
    let mut tick = tokio::time::interval(super::PUBLISH_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let mut w = watcher
            .take()
            .unwrap_or_else(|| Watcher::with_retention(dir.clone(), expected, retention));
        let Ok((w, v)) = tokio::task::spawn_blocking(move || {
            let v = w.pass(true);
            (w, v)
        })
        .await
        else {
            // The pass panicked: its state is gone; the next starts afresh.
            continue;
        };
        watcher = Some(w);
        if tx.send(Arc::new(v)).is_err() {
            return;
        }
    }
}

/// A watcher that has not completed a pass for this long has stalled
/// (reported in /v1/status, never a /livez failure by itself).
pub const WATCH_STALLED: std::time::Duration = super::PUBLISH_EVERY.saturating_mul(3);
/// A sidecar whose watcher has not completed a pass for this long is stuck
/// (a directory read that never returns): its own /livez fails. A slow
/// pass is not: passes are four a second.
pub const SIDECAR_STUCK: std::time::Duration = std::time::Duration::from_secs(60);

type PodState = watch::Receiver<Arc<PodView>>;

/// A zero-configuration pod's port holder ([`super::local`]): while it is
/// the only rank of its address it serves its own recording (`own`)
/// unchanged; once other ranks publish beside it, the merged view of all of
/// them, as `nixl-agent pod` would. Starts the directory watcher on the
/// current runtime.
pub fn local_router(own: Router, dir: PathBuf, retention: std::time::Duration) -> Router {
    use tower::ServiceExt;
    let (tx, view) = watch::channel(Arc::new(PodView::default()));
    tokio::spawn(watch_dir(dir, None, retention, tx));
    let pod = router(view.clone());
    Router::new().fallback(move |req: axum::extract::Request| {
        let shared = view.borrow().ranks.len() > 1;
        let chosen = if shared { pod.clone() } else { own.clone() };
        async move {
            match chosen.oneshot(req).await {
                Ok(r) => r,
                Err(never) => match never {},
            }
        }
    })
}

/// The pod's endpoints, reading the last view.
pub fn router(view: PodState) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .route("/livez", get(livez))
        .route(http::LIVEZ_RANKS_PATH, get(ranks_livez))
        .route("/livez/rank/{rank}", get(rank_livez))
        .route("/readyz", get(readyz))
        .route("/v1/status", get(status))
        .route(DASHBOARD_PATH, get(http::dashboard))
        .route(ALERT_RULES_PATH, get(http::alert_rules))
        .with_state(view)
}

/// Whether the container this probe is on is broken.
///
/// A sidecar (`nixl-agent pod`): only whether the sidecar itself works (it
/// answers; its watcher completed a pass within [`WATCH_STALLED`]). A
/// serving rank's hung NIXL call is the serving container's to fail, on
/// its own probe ([`rank_livez`]): restarting the sidecar would restart
/// what is not broken and leave the hung process be.
///
/// A zero-configuration pod: the server is a serving rank of the one
/// serving container, so 503 while a live rank's own /livez would be,
/// each such rank named with its reason (`rank 1: NIXL register of group
/// kv past its deadline (6.6 s)`); how fresh the watcher is plays no part.
async fn livez(State(v): State<PodState>) -> Response {
    let view = v.borrow().clone();
    let failures = match view.shape {
        Shape::Sidecar if view.at.elapsed() > SIDECAR_STUCK => vec![format!(
            "the pod directory watcher has not completed a pass for {:.1} s",
            view.at.elapsed().as_secs_f64()
        )],
        Shape::Sidecar => Vec::new(),
        _ => view.liveness_failures.clone(),
    };
    if failures.is_empty() {
        return "ok\n".into_response();
    }
    let mut body = failures.join("\n");
    body.push('\n');
    (StatusCode::SERVICE_UNAVAILABLE, body).into_response()
}

/// The liveness of the pod's ranks, for the serving container's own probe
/// (an `httpGet` on the sidecar's port, which the pod's containers share):
/// 503 while a live rank's own /livez would be, each such rank named with
/// its reason (`rank 1: NIXL register of group kv past its deadline
/// (6.6 s)`). A rank not published yet (starting) or ended (the kubelet
/// sees its exit itself) fails nothing.
async fn ranks_livez(State(v): State<PodState>) -> Response {
    let view = v.borrow().clone();
    if view.liveness_failures.is_empty() {
        return "ok\n".into_response();
    }
    let mut body = view.liveness_failures.join("\n");
    body.push('\n');
    (StatusCode::SERVICE_UNAVAILABLE, body).into_response()
}

/// The liveness of rank `rank`'s process, for the serving container's own
/// probe (an `httpGet` on the sidecar's port, which the pod's containers
/// share): 503 while its process is alive and its own /livez would be (a
/// NIXL call past its deadline, named); 200 otherwise — not published yet
/// (starting), or ended (the kubelet sees the exit itself). 404 for a rank
/// beyond the pod's bound.
async fn rank_livez(State(v): State<PodState>, axum::extract::Path(rank): axum::extract::Path<String>) -> Response {
    let Some(rank) = rank.parse::<u32>().ok().filter(|r| (*r as usize) < super::MAX_RANKS) else {
        return (
            StatusCode::NOT_FOUND,
            format!("not a rank: ranks are 0 to {}\n", super::MAX_RANKS - 1),
        )
            .into_response();
    };
    let view = v.borrow().clone();
    let failure = view
        .ranks
        .iter()
        .find(|r| r.rank == rank && r.alive)
        .and_then(|r| r.liveness_failure.clone());
    match failure {
        None => format!("ok: rank {rank}\n").into_response(),
        Some(why) => (StatusCode::SERVICE_UNAVAILABLE, format!("rank {rank}: {why}\n")).into_response(),
    }
}

/// The merged view; OpenMetrics (with the ranks' exemplars) when asked for.
async fn metrics(State(v): State<PodState>, headers: axum::http::HeaderMap) -> Response {
    let accept = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok());
    let view = v.borrow().clone();
    match (Format::negotiate(accept), &view.openmetrics) {
        (Format::OpenMetrics, Some(om)) => {
            ([(header::CONTENT_TYPE, Format::OpenMetrics.content_type())], om.clone()).into_response()
        }
        _ => (
            [(header::CONTENT_TYPE, Format::Text.content_type())],
            view.metrics.clone(),
        )
            .into_response(),
    }
}

async fn readyz(State(v): State<PodState>, RawQuery(q): RawQuery) -> Response {
    let view = v.borrow().clone();
    let mut body = String::new();
    if http::wants_verbose(q.as_deref()) {
        for c in &view.checks {
            match (&c.failure, &c.note) {
                (None, None) => body.push_str(&format!("[+]rank:{} ok\n", c.rank)),
                (None, Some(note)) => body.push_str(&format!("[+]rank:{} ok ({note})\n", c.rank)),
                (Some(why), None) => body.push_str(&format!("[-]rank:{} failed: {why}\n", c.rank)),
                (Some(why), Some(note)) => body.push_str(&format!("[-]rank:{} failed: {why} ({note})\n", c.rank)),
            }
        }
    }
    body.push_str(if view.ready { "ok\n" } else { "not ready\n" });
    let code = if view.ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (code, body).into_response()
}

/// The pod's /v1/status document: the schema a lone process serves, with
/// every rank.
pub fn document(view: &PodView) -> Document<'_, &serde_json::Value> {
    let age = view.at.elapsed();
    Document {
        schema_version: document::SCHEMA_VERSION,
        shape: view.shape,
        ready: view.ready,
        live: view.liveness_failures.is_empty(),
        liveness_failures: view.liveness_failures.clone(),
        dir: Some(&view.dir),
        ranks_expected: view.checks.len(),
        ranks: view
            .ranks
            .iter()
            .map(|r| RankEntry {
                rank: Some(r.rank),
                pid: r.pid,
                held: r.held,
                alive: r.alive,
                ready: r.ready,
                liveness_failure: r.liveness_failure.as_deref(),
                conflict: r.conflict.map(|wanted| RankConflict { wanted }),
                ended: r.how_ended().map(|how| {
                    r.ended.clone().unwrap_or(crate::model::Ended {
                        how,
                        exception: None,
                        at_unix: r.touched_unix,
                    })
                }),
                stale_since_unix: r.stale_since(crate::ledger::counts::unix_now()),
                status: &*r.status,
            })
            .collect(),
        rejected: view
            .rejected
            .iter()
            .map(|r| RejectedFile {
                file: &r.file,
                reason: r.reason,
                detail: &r.detail,
            })
            .collect(),
        rejected_left_out: view.rejected_left_out,
        watcher: Some(WatcherHealth {
            last_pass_age_seconds: age.as_secs_f64(),
            last_pass_seconds: view.pass_seconds,
            stalled: age > WATCH_STALLED,
        }),
    }
}

async fn status(State(v): State<PodState>) -> Response {
    let view = v.borrow().clone();
    let body = serde_json::to_string_pretty(&document(&view)).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"));
    ([(header::CONTENT_TYPE, "application/json")], body).into_response()
}

/// Serves the pod directory on `listener` until `stop` turns true.
pub async fn serve(
    listener: tokio::net::TcpListener,
    dir: PathBuf,
    expected: u32,
    retention: std::time::Duration,
    limits: HttpConfig,
    stop: watch::Receiver<bool>,
) {
    let (tx, rx) = watch::channel(Arc::new(PodView::default()));
    let watcher = tokio::spawn(watch_dir(dir, Some(expected), retention, tx));
    http::server::serve(listener, router(rx), limits, stop).await;
    watcher.abort();
}
