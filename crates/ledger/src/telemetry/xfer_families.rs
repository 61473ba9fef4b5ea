//! The data path's metric families, rendered from the ledger's transfer
//! state at scrape time (like every family of recorded state): transfers by
//! op and outcome, failures by reason, stalls, bytes, durations, what is in
//! flight, peer events, peers lost, remote agents, notifications, and the
//! transports peers' transfers take.

use super::families::{pair, RenderedFamily};
use super::names;
use crate::ledger::State;
use crate::model::{NotifDirection, PeerOp, XferOp, XferOutcome, OUTCOME_ERROR, OUTCOME_OK};
use prometheus::proto::MetricFamily;

/// Nothing until the recording follows a caller's NIXL agent (observe mode,
/// Python): the binary and the canary move no KV. Then the series the alerts
/// and dashboards need exist at 0; the rest appear on first use.
pub(super) fn render(st: &State) -> Vec<MetricFamily> {
    let t = &st.transfers;
    if !t.observing {
        return Vec::new();
    }
    let c = &t.counts;
    let mut transfers = RenderedFamily::new(names::TRANSFERS_TOTAL);
    let mut stalled = RenderedFamily::new(names::TRANSFERS_STALLED_TOTAL);
    let mut bytes = RenderedFamily::new(names::TRANSFER_BYTES_TOTAL);
    let mut duration = RenderedFamily::new(names::TRANSFER_DURATION_SECONDS);
    let mut in_flight = RenderedFamily::new(names::TRANSFERS_IN_FLIGHT);
    let mut oldest = RenderedFamily::new(names::TRANSFER_OLDEST_IN_FLIGHT_SECONDS);
    for op in XferOp::ALL {
        let o = &c.ops[op.index()];
        let op_label = || vec![pair("op", op.as_str())];
        for outcome in XferOutcome::ALL {
            let n = o.outcomes[outcome.index()];
            // Released in flight and peer pending are rare: on first use.
            if !matches!(outcome, XferOutcome::ReleasedInFlight | XferOutcome::PeerPending) || n > 0 {
                transfers.counter(vec![pair("op", op.as_str()), pair("outcome", outcome.as_str())], n);
            }
        }
        stalled.counter(op_label(), o.stalled);
        bytes.counter(op_label(), o.bytes);
        duration.histogram(op_label(), t.duration_bounds, &o.duration);
        in_flight.gauge(op_label(), o.in_flight as f64);
        oldest.gauge(op_label(), o.oldest_seconds);
    }
    let mut failures = RenderedFamily::new(names::TRANSFER_FAILURES_TOTAL);
    for (op, reason, n) in &c.failures {
        failures.counter(vec![pair("op", op.as_str()), pair("reason", reason.as_str())], *n);
    }
    let mut peer_events = RenderedFamily::new(names::PEER_EVENTS_TOTAL);
    for (i, event) in PeerOp::ALL.iter().enumerate() {
        // On first use: most workers add a handful of peers in their life.
        for (j, outcome) in [OUTCOME_OK, OUTCOME_ERROR].iter().enumerate() {
            if c.peer_events[i][j] > 0 {
                peer_events.counter(
                    vec![pair("event", event.as_str()), pair("outcome", outcome)],
                    c.peer_events[i][j],
                );
            }
        }
    }
    let mut peer_failures = RenderedFamily::new(names::PEER_FAILURES_TOTAL);
    for (event, reason, n) in &c.peer_failures {
        peer_failures.counter(vec![pair("event", event.as_str()), pair("reason", reason.as_str())], *n);
    }
    let mut lost = RenderedFamily::new(names::PEERS_LOST_TOTAL);
    lost.counter(Vec::new(), c.peers_lost);
    let mut remote = RenderedFamily::new(names::REMOTE_AGENTS);
    remote.gauge(Vec::new(), c.remote_agents as f64);
    let mut notifications = RenderedFamily::new(names::NOTIFICATIONS_TOTAL);
    for (i, direction) in NotifDirection::ALL.iter().enumerate() {
        // Failed notification calls on first use.
        for (j, outcome) in [OUTCOME_OK, OUTCOME_ERROR].iter().enumerate() {
            if j == 0 || c.notifications[i][j] > 0 {
                notifications.counter(
                    vec![pair("direction", direction.as_str()), pair("outcome", outcome)],
                    c.notifications[i][j],
                );
            }
        }
    }
    // On first use: only with NIXL_AGENT_TRANSPORTS=1, once a peer's
    // transports are known (bounded by the closed label values).
    let mut transport = RenderedFamily::new(names::TRANSFER_TRANSPORT);
    for (op, scope, tr) in t.transport_series() {
        transport.gauge(
            vec![
                pair("op", op.as_str()),
                pair("scope", scope.as_str()),
                pair("transport", tr.as_str()),
            ],
            1.0,
        );
    }
    // In names::DATA_PATH order.
    [
        transfers,
        failures,
        stalled,
        bytes,
        duration,
        in_flight,
        oldest,
        peer_events,
        peer_failures,
        lost,
        remote,
        notifications,
        transport,
    ]
    .into_iter()
    .map(|o| o.mf)
    .collect()
}

/// The node canary's loopback round (`names::PROBE`): the interval from
/// its round thread's start; from its first round, whether the last one
/// passed, when it ended, rounds by outcome, failures by reason (on first
/// use) and the last bandwidth.
pub(super) fn render_probe(st: &State) -> Vec<MetricFamily> {
    let Some(p) = &st.process.probe else {
        return Vec::new();
    };
    // From the round thread's start: what freshness is judged against.
    let mut interval = RenderedFamily::new(names::PROBE_INTERVAL_SECONDS);
    interval.gauge(Vec::new(), p.interval_seconds);
    let (Some(ok), Some(last)) = (p.up, p.last_round_unix_seconds) else {
        return vec![interval.mf];
    };
    let mut up = RenderedFamily::new(names::PROBE_TRANSFER_UP);
    up.gauge(Vec::new(), if ok { 1.0 } else { 0.0 });
    let mut last_round = RenderedFamily::new(names::PROBE_TRANSFER_LAST_ROUND_TIMESTAMP_SECONDS);
    last_round.gauge(Vec::new(), last);
    let mut rounds = RenderedFamily::new(names::PROBE_TRANSFERS_TOTAL);
    rounds.counter(vec![pair("outcome", OUTCOME_OK)], p.rounds_ok);
    rounds.counter(vec![pair("outcome", OUTCOME_ERROR)], p.rounds_failed);
    let mut failures = RenderedFamily::new(names::PROBE_TRANSFER_FAILURES_TOTAL);
    for f in &p.failures {
        failures.counter(vec![pair("reason", f.reason.as_str())], f.count);
    }
    let mut bandwidth = RenderedFamily::new(names::PROBE_TRANSFER_BYTES_PER_SECOND);
    bandwidth.gauge(vec![pair("op", XferOp::Read.as_str())], p.read_bytes_per_second);
    bandwidth.gauge(vec![pair("op", XferOp::Write.as_str())], p.write_bytes_per_second);
    [up, rounds, failures, bandwidth, last_round, interval]
        .into_iter()
        .map(|o| o.mf)
        .collect()
}
