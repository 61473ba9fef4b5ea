//! The HTTP surface: /, /metrics, /livez, /readyz, /v1/status, and the
//! Grafana dashboard and Prometheus rules built into this binary.
//!
//! Handlers only read recorded state (ARCHITECTURE.md); a scrape costs one
//! registry encode.

pub mod server;

use crate::ledger::Ledger;
use crate::telemetry::exposition::Format;
use crate::telemetry::Metrics;
use axum::extract::{RawQuery, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::get;
use axum::Router;

/// What handlers can see.
#[derive(Clone)]
pub struct AppState {
    pub metrics: Metrics,
    /// The recorded state: every handler reads one snapshot of it.
    pub ledger: Ledger,
}

/// Every endpoint, with its one-line description (rendered on `/`).
pub const ENDPOINTS: &[(&str, &str)] = &[
    (
        "/metrics",
        "Prometheus metrics (OpenMetrics when the Accept header asks for it)",
    ),
    (
        "/livez",
        "200 while the lifecycle answers; 503 while a NIXL call is past nixl_call_timeout or the lifecycle thread died",
    ),
    (
        "/readyz",
        "200 when NIXL is available and every required group is registered, else 503; ?verbose lists checks",
    ),
    (
        "/v1/status",
        "JSON (docs/status.schema.json): readiness, liveness and every rank's recording — groups, backends, NIXL library, last reasons and error text",
    ),
    (DASHBOARD_PATH, "Grafana dashboard (JSON) matching this build"),
    (ALERT_RULES_PATH, "Prometheus alerting rules (YAML) matching this build"),
];

/// What a pod's server (`nixl-agent pod`, a zero-configuration pod's
/// port holder) serves besides [`ENDPOINTS`]: the probes of the serving
/// container, whose processes are the pod's ranks.
pub const POD_ENDPOINTS: &[(&str, &str)] = &[
    (
        LIVEZ_RANKS_PATH,
        "503 while a live rank's own /livez would be (a NIXL call past its deadline), naming each: the serving container's liveness probe",
    ),
    (
        "/livez/rank/{N}",
        "the same for rank N alone (a pod with one serving container per rank); 200 while it is starting or after it ended",
    ),
];

/// The serving container's liveness probe on a pod's server.
pub const LIVEZ_RANKS_PATH: &str = "/livez/ranks";

/// Where the dashboard and the rules are served.
pub const DASHBOARD_PATH: &str = "/dashboards/nixl-agent.json";
pub const ALERT_RULES_PATH: &str = "/alerts/nixl-agent.rules.yml";

/// The Grafana dashboard and the Prometheus alerting rules, embedded at build
/// time so that a Grafana sidecar or a provisioning job fetches the versions
/// that match the agent it is looking at. Served byte for byte.
pub const DASHBOARD_JSON: &str = include_str!("../../../../dashboards/nixl-agent.json");
pub const ALERT_RULES_YAML: &str = include_str!("../../../../alerts/nixl-agent.rules.yml");

pub fn router(state: AppState) -> Router {
    Router::new()
        .route("/", get(index))
        .route("/metrics", get(metrics))
        .route("/livez", get(livez))
        .route("/readyz", get(readyz))
        .route("/v1/status", get(status))
        .route(DASHBOARD_PATH, get(dashboard))
        .route(ALERT_RULES_PATH, get(alert_rules))
        .fallback(not_found)
        .with_state(state)
}

async fn index() -> Html<String> {
    let mut page =
        String::from("<!doctype html><html><head><title>nixl-agent</title></head><body><h1>nixl-agent</h1><ul>");
    for (path, what) in ENDPOINTS {
        page.push_str(&format!("<li><a href=\"{path}\">{path}</a> — {what}</li>"));
    }
    page.push_str("</ul></body></html>\n");
    Html(page)
}

async fn metrics(State(s): State<AppState>, headers: HeaderMap) -> Response {
    let accept = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok());
    let format = Format::negotiate(accept);
    let body = s.metrics.exposition(format);
    ([(header::CONTENT_TYPE, format.content_type())], body).into_response()
}

/// 200 while the lifecycle answers; 503 while a NIXL call is past its
/// deadline or the lifecycle thread died, so that a kubelet restarts a
/// process wedged in a driver call.
async fn livez(State(s): State<AppState>) -> Response {
    let failure = s.ledger.snapshot().liveness_failure();
    match failure {
        None => "ok\n".into_response(),
        Some(why) => (StatusCode::SERVICE_UNAVAILABLE, format!("{why}\n")).into_response(),
    }
}

/// Whether a /readyz query asks for the checks (`?verbose`).
pub fn wants_verbose(query: Option<&str>) -> bool {
    query.is_some_and(|q| q.split('&').any(|kv| kv == "verbose" || kv.starts_with("verbose=")))
}

async fn readyz(State(s): State<AppState>, RawQuery(query): RawQuery) -> Response {
    let verbose = wants_verbose(query.as_deref());
    let (ready, body) = {
        let st = s.ledger.snapshot();
        let ready = st.ready;
        let mut body = String::new();
        if verbose {
            for c in st.checks() {
                match c.failure {
                    None => match c.note {
                        None => body.push_str(&format!("[+]{} ok\n", c.name)),
                        Some(note) => body.push_str(&format!("[+]{} ok ({note})\n", c.name)),
                    },
                    Some(why) => match c.fix {
                        None => body.push_str(&format!("[-]{} failed: {why}\n", c.name)),
                        Some(fix) => body.push_str(&format!("[-]{} failed: {why}; fix: {fix}\n", c.name)),
                    },
                }
            }
        }
        body.push_str(if ready { "ok\n" } else { "not ready\n" });
        (ready, body)
    };
    let code = if ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (code, [(header::CONTENT_TYPE, "text/plain; charset=utf-8")], body).into_response()
}

/// The /v1/status document ([`crate::status::document`]): a pod of one,
/// this process's recording its one rank.
async fn status(State(s): State<AppState>) -> Response {
    let st = s.ledger.snapshot();
    let liveness = st.liveness_failure();
    let doc = crate::status::document::Document::process(&st, liveness.as_deref());
    let body = serde_json::to_string_pretty(&doc).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"));
    ([(header::CONTENT_TYPE, "application/json")], body).into_response()
}

pub async fn dashboard() -> Response {
    ([(header::CONTENT_TYPE, "application/json")], DASHBOARD_JSON).into_response()
}

pub async fn alert_rules() -> Response {
    ([(header::CONTENT_TYPE, "application/yaml")], ALERT_RULES_YAML).into_response()
}

async fn not_found() -> (StatusCode, &'static str) {
    (StatusCode::NOT_FOUND, "not found\n")
}
