//! The accept loop: a cap on open connections, a deadline for request
//! headers (slowloris, idle keep-alive), a cap on header bytes, a deadline
//! per request and a body limit — so /livez, /readyz and /metrics keep
//! answering whatever other clients do.

use crate::config::{HttpConfig, MAX_BODY_BYTES};
use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::{watch, Semaphore};

/// Serves `router` on `listener` until `stop` turns true; then stops
/// accepting and lets open connections finish their current request.
pub async fn serve(listener: TcpListener, router: Router, limits: HttpConfig, mut stop: watch::Receiver<bool>) {
    let router = router
        .layer(tower_http::limit::RequestBodyLimitLayer::new(MAX_BODY_BYTES))
        .layer(tower_http::timeout::TimeoutLayer::with_status_code(
            axum::http::StatusCode::REQUEST_TIMEOUT,
            limits.request_timeout,
        ));
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    let mut over_cap_logged = false;
    loop {
        let (stream, _) = tokio::select! {
            _ = stopped(&mut stop) => return,
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    // EMFILE and friends: back off instead of spinning.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let Ok(permit) = slots.clone().try_acquire_owned() else {
            if !over_cap_logged {
                tracing::warn!(
                    max_connections = limits.max_connections,
                    "connection cap reached; closing new connections"
                );
                over_cap_logged = true;
            }
            drop(stream);
            continue;
        };
        over_cap_logged = false;
        let _ = stream.set_nodelay(true);
        let svc = TowerToHyperService::new(router.clone());
        let mut stop = stop.clone();
        let limits = limits.clone();
        tokio::spawn(async move {
            let _permit = permit;
            let mut builder = hyper::server::conn::http1::Builder::new();
            builder
                .timer(TokioTimer::new())
                .header_read_timeout(limits.header_read_timeout)
                .max_buf_size(limits.max_header_bytes.max(8192) as usize);
            let conn = builder.serve_connection(TokioIo::new(stream), svc);
            tokio::pin!(conn);
            tokio::select! {
                _ = conn.as_mut() => {}
                _ = stopped(&mut stop) => {
                    conn.as_mut().graceful_shutdown();
                    let _ = tokio::time::timeout(Duration::from_secs(1), conn).await;
                }
            }
        });
    }
}

/// Resolves once `stop` is true (or its sender is gone), holding no guard.
async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await.map(|_| ());
}
