//! `nixl-agent pod`: the pod's agent. A task reads the pod directory every
//! [`super::PUBLISH_EVERY`] and records what it found (a [`PodView`] in a
//! `watch` channel); the handlers only read that view. /metrics merges the
//! ranks' expositions with a `rank` label beside the pod's own
//! (`nixl_agent_ready` for the pod, `nixl_agent_rank_up{rank}`), /readyz is
//! 200 when every expected rank is alive and ready, /v1/status lists them.

use super::merge::{self, Check, Rank};
use crate::config::HttpConfig;
use crate::http::{self, ALERT_RULES_PATH, DASHBOARD_PATH};
use crate::telemetry::exposition::{self, Format};
use crate::telemetry::metrics::BuildInfo;
use crate::telemetry::names::{self, Family};
use axum::extract::{RawQuery, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use prometheus::{IntGauge, IntGaugeVec, Opts, Registry};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::SystemTime;
use tokio::sync::watch;

/// What the pod's agent last read from the directory.
#[derive(Debug, Clone, Default)]
pub struct PodView {
    pub expected: u32,
    pub ranks: Vec<Rank>,
    pub ready: bool,
    pub checks: Vec<Check>,
    pub metrics: String,
}

/// The pod's own series.
struct Own {
    registry: Registry,
    ready: IntGauge,
    rank_up: IntGaugeVec,
}

fn opts(name: &str) -> Opts {
    let f = Family::get(name);
    Opts::new(f.name, f.help)
}

impl Own {
    fn new(expected: u32) -> Own {
        let registry = Registry::new();
        let ready = IntGauge::with_opts(opts(names::READY)).expect("valid");
        let rank_up = IntGaugeVec::new(opts(names::RANK_UP), Family::get(names::RANK_UP).labels).expect("valid");
        let ranks = IntGauge::with_opts(opts(names::RANKS_EXPECTED)).expect("valid");
        let b = BuildInfo::current(None).with_role(names::ROLE_POD);
        let build = IntGaugeVec::new(opts(names::BUILD_INFO), Family::get(names::BUILD_INFO).labels).expect("valid");
        build
            .with_label_values(&[b.version, b.revision, &b.nixl_version, b.nixl_sys_version, b.role])
            .set(1);
        ranks.set(i64::from(expected));
        for c in [
            Box::new(ready.clone()) as Box<dyn prometheus::core::Collector>,
            Box::new(rank_up.clone()),
            Box::new(ranks),
            Box::new(build),
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
        }
    }
}

/// Reads every rank file of `dir`.
pub fn read_dir(dir: &Path, now: SystemTime) -> Vec<Rank> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut ranks: Vec<Rank> = entries
        .filter_map(Result::ok)
        .filter(|e| {
            let n = e.file_name();
            let n = n.to_string_lossy();
            n.starts_with("rank-") && n.ends_with(".json")
        })
        .filter_map(|e| {
            let modified = e.metadata().ok()?.modified().ok()?;
            let alive = match now.duration_since(modified) {
                Ok(age) => age < super::STALE_AFTER,
                // A modification time in the future (a clock step, a file
                // planted by hand): within a second it is a write that
                // raced this read; beyond it, it never counts as alive.
                Err(ahead) => ahead.duration() <= std::time::Duration::from_secs(1),
            };
            Rank::parse(&std::fs::read_to_string(e.path()).ok()?, alive)
        })
        .collect();
    ranks.sort_by_key(|r| r.rank);
    ranks
}

fn view(dir: &Path, expected: u32, own: &Own) -> PodView {
    let ranks = read_dir(dir, SystemTime::now());
    let (ready, checks) = merge::readiness(expected, &ranks);
    own.ready.set(i64::from(ready));
    own.rank_up.reset();
    for r in &ranks {
        own.rank_up
            .with_label_values(&[r.rank.to_string()])
            .set(i64::from(r.alive));
    }
    let metrics = merge::merge(&exposition::encode(&own.registry, Format::Text), &ranks);
    PodView {
        expected,
        ranks,
        ready,
        checks,
        metrics,
    }
}

/// Keeps `tx` up to date with the directory until every receiver is gone.
pub async fn watch_dir(dir: PathBuf, expected: u32, tx: watch::Sender<Arc<PodView>>) {
    let own = Own::new(expected);
    let mut tick = tokio::time::interval(super::PUBLISH_EVERY);
    loop {
        tick.tick().await;
        let d = dir.clone();
        let v = view(&d, expected, &own);
        if tx.send(Arc::new(v)).is_err() {
            return;
        }
    }
}

type PodState = watch::Receiver<Arc<PodView>>;

/// The pod's endpoints, reading the last view.
pub fn router(view: PodState) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .route("/livez", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .route("/v1/status", get(status))
        .route(DASHBOARD_PATH, get(http::dashboard))
        .route(ALERT_RULES_PATH, get(http::alert_rules))
        .with_state(view)
}

async fn metrics(State(v): State<PodState>) -> Response {
    let body = v.borrow().metrics.clone();
    ([(header::CONTENT_TYPE, Format::Text.content_type())], body).into_response()
}

async fn readyz(State(v): State<PodState>, RawQuery(q): RawQuery) -> Response {
    let view = v.borrow().clone();
    let mut body = String::new();
    if http::wants_verbose(q.as_deref()) {
        for c in &view.checks {
            match c.failure {
                None => body.push_str(&format!("[+]rank:{} ok\n", c.rank)),
                Some(why) => body.push_str(&format!("[-]rank:{} failed: {why}\n", c.rank)),
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

async fn status(State(v): State<PodState>) -> Response {
    let view = v.borrow().clone();
    let ranks: Vec<serde_json::Value> = view
        .ranks
        .iter()
        .map(|r| serde_json::json!({"rank": r.rank, "pid": r.pid, "alive": r.alive, "ready": r.ready, "status": r.status}))
        .collect();
    let body = serde_json::json!({"ranks_expected": view.expected, "ready": view.ready, "ranks": ranks});
    ([(header::CONTENT_TYPE, "application/json")], body.to_string()).into_response()
}

/// Serves the pod directory on `listener` until `stop` turns true.
pub async fn serve(
    listener: tokio::net::TcpListener,
    dir: PathBuf,
    expected: u32,
    limits: HttpConfig,
    stop: watch::Receiver<bool>,
) {
    let (tx, rx) = watch::channel(Arc::new(PodView::default()));
    let watcher = tokio::spawn(watch_dir(dir, expected, tx));
    http::server::serve(listener, router(rx), limits, stop).await;
    watcher.abort();
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// A rank file whose modification time is in the future is stale, not
    /// alive for ever; one just written is alive.
    #[test]
    fn a_future_modification_time_is_not_alive() {
        let dir = tempfile::tempdir().unwrap();
        let o = crate::observe::Observer::new(crate::observe::ObserveSettings::default());
        let publisher = o.publish(dir.path(), 0).unwrap();
        drop(publisher);
        // The publisher's thread may touch the file once more as it stops.
        std::thread::sleep(Duration::from_millis(700));
        let path = dir.path().join(super::super::file_name(0));
        let now = SystemTime::now();
        std::fs::File::options()
            .write(true)
            .open(&path)
            .unwrap()
            .set_modified(now)
            .unwrap();
        let ranks = read_dir(dir.path(), now);
        assert_eq!(ranks.len(), 1);
        assert!(ranks[0].alive, "just written");
        std::fs::File::options()
            .write(true)
            .open(&path)
            .unwrap()
            .set_modified(now + Duration::from_secs(3600))
            .unwrap();
        let ranks = read_dir(dir.path(), now);
        assert!(!ranks[0].alive, "an hour in the future is stale");
    }
}
