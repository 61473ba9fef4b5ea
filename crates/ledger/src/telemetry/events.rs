//! The log subscriber: one line per event, structured fields first, then a
//! short sentence. Written inside the span that is current when the event
//! is emitted, so a line about an attempt is also an event of its span.
//! Error text goes here (and to /v1/status), never into a label.

use crate::event::{Event, GroupDecl, Source};
use crate::ledger::Applied;
use crate::model::Reason;

/// The log line of a readiness flip, if the write made one.
pub fn readiness(a: &Applied) {
    match (a.ready, a.time_to_ready) {
        (Some(true), Some(t)) => tracing::info!(time_to_ready_ms = t.as_millis() as u64, "ready"),
        (Some(ready), _) => tracing::info!(ready, "readiness changed"),
        (None, _) => {}
    }
}

/// The log line of a transfer that failed, was released in flight or
/// stalled (a success is never logged).
pub fn transfer(t: &crate::ledger::TracedXfer) {
    let outcome = t.outcome.map_or("in_flight", crate::model::XferOutcome::as_str);
    let seconds = t.posted.map(|p| t.ended.saturating_duration_since(p).as_secs_f64());
    match t.outcome {
        Some(crate::model::XferOutcome::Done) => {}
        None => tracing::warn!(
            op = t.op.as_str(),
            peer = %t.peer,
            bytes = t.bytes,
            seconds,
            "transfer stalled: {}",
            t.message.as_deref().unwrap_or("in flight past the stall threshold")
        ),
        Some(_) => tracing::warn!(
            op = t.op.as_str(),
            outcome,
            stage = t.stage,
            reason = t.reason.map(Reason::as_str),
            peer = %t.peer,
            bytes = t.bytes,
            seconds,
            error = t.message.as_deref(),
            "transfer did not complete"
        ),
    }
}

/// Writes the log line of one event (and of the readiness flip it caused).
pub fn on(e: &Event<'_>, applied: &Applied) {
    line(e, applied);
    readiness(applied);
}

fn line(e: &Event<'_>, applied: &Applied) {
    match e {
        Event::GroupDeclared(GroupDecl { group, source, .. }) if applied.refused => tracing::error!(
            group = %group,
            source = ?source,
            "a group of this name belongs to another source (the lifecycle's plan or observed calls); not declared again"
        ),
        Event::GroupDeclared(GroupDecl {
            group,
            kind,
            source: Source::Observed,
            ..
        }) => tracing::info!(group = %group, kind = %kind, "observing a new group"),
        Event::GroupDeclared(_) => {}
        Event::AgentSeen { agent, name, owned } => {
            tracing::debug!(agent = agent.0, name = *name, owned = *owned, "NIXL agent seen")
        }
        Event::AgentReleased { agent } => tracing::info!(
            agent = agent.0,
            "NIXL agent released: what it held is no longer counted as registered"
        ),
        Event::CallDeregistered {
            agent,
            descriptors,
            failure,
            elapsed,
            ..
        } => tracing::debug!(
            agent = agent.0,
            descriptors = *descriptors,
            reason = failure.map(|f| f.reason).map(Reason::as_str),
            unmatched = applied.unmatched,
            elapsed_us = elapsed.as_micros() as u64,
            "observed deregistration"
        ),
        Event::MemlockObserved { soft_limit, exempt } => {
            tracing::debug!(soft_limit = soft_limit, cap_ipc_lock = exempt, "memlock limit")
        }
        Event::NixlLoaded(f) => tracing::info!(
            library = f.library.as_deref().unwrap_or("unknown"),
            nixl_version = f.version.as_deref().unwrap_or("unknown"),
            agent = %f.agent,
            agent_owner = if f.owned { "nixl-agent" } else { "caller" },
            plugins = f.plugins.len(),
            "NIXL runtime loaded"
        ),
        Event::NixlUnavailable(f) => tracing::error!(
            reason = f.reason.as_str(),
            error = %f.message,
            "NIXL runtime unavailable; serving probes, never ready"
        ),
        Event::BackendCreated { backend, elapsed } => tracing::info!(
            backend = *backend,
            elapsed_ms = elapsed.as_millis() as u64,
            "NIXL backend created"
        ),
        Event::BackendFailed { backend, failure } => tracing::error!(
            backend = *backend,
            reason = failure.reason.as_str(),
            error = %failure.message,
            "NIXL backend creation failed"
        ),
        Event::Attempted(a) => {
            let l = a.labels;
            let elapsed_us = a.elapsed.map_or(0, |d| d.as_micros() as u64);
            match a.outcome {
                Ok(()) => tracing::info!(
                    group = %l.group,
                    kind = %l.kind,
                    mem_type = l.mem_type.as_str(),
                    backend = %l.backend,
                    attempt = a.attempt,
                    descriptors = a.descriptors,
                    bytes = a.bytes,
                    elapsed_us,
                    "group registered"
                ),
                Err(f) => {
                    if let (Some(i), Some(r)) = (f.region, a.blamed) {
                        tracing::warn!(
                            group = %l.group,
                            "region.index" = i,
                            "region.address" = %format_args!("{:#x}", r.addr),
                            "region.length" = r.len,
                            reason = f.reason.as_str(),
                            diagnostics = %f.diagnostics.join("\n"),
                            "region rejected"
                        );
                    }
                    tracing::error!(
                        group = %l.group,
                        kind = %l.kind,
                        mem_type = l.mem_type.as_str(),
                        backend = %l.backend,
                        attempt = a.attempt,
                        descriptors = a.descriptors,
                        reason = f.reason.as_str(),
                        region = f.region.map(|r| r as i64).unwrap_or(-1),
                        rolled_back = f.rolled_back,
                        error = %f.message,
                        diagnostics = %f.diagnostics.join("\n"),
                        elapsed_us,
                        "group registration failed"
                    )
                }
            }
        }
        Event::RetryScheduled {
            labels, attempt, after, ..
        } => tracing::info!(
            group = %labels.group,
            next_attempt = attempt + 1,
            after_ms = after.as_millis() as u64,
            "retry scheduled"
        ),
        Event::Deregistered {
            labels,
            descriptors,
            failed,
            failure,
            elapsed,
            holding,
            ..
        } => tracing::info!(
            group = %labels.group,
            descriptors = *descriptors,
            failed = *failed,
            reason = failure.map(|f| f.reason).map(Reason::as_str),
            registered_descriptors = holding.descriptors,
            elapsed_us = elapsed.as_micros() as u64,
            "group deregistered"
        ),
        Event::Progress { .. } | Event::CallsInFlight { .. } => {}
        Event::Stuck {
            operation,
            group,
            elapsed,
            ..
        } => tracing::error!(
            operation = operation.as_str(),
            group = group.map(|(_, name)| name),
            elapsed_ms = elapsed.as_millis() as u64,
            reason = Reason::Timeout.as_str(),
            "a NIXL call is past its deadline: not ready, /livez failing until it returns"
        ),
        Event::Unstuck { operation, elapsed, .. } => tracing::warn!(
            operation = operation.as_str(),
            elapsed_ms = elapsed.as_millis() as u64,
            "the NIXL call past its deadline returned"
        ),
        Event::AwaitRegistration => {}
        Event::PodDirectory {
            dir,
            rank,
            refused: None,
        } => tracing::info!(dir = *dir, rank = *rank, "publishing to the pod directory"),
        Event::PodDirectory {
            dir,
            refused: Some((reason, detail)),
            ..
        } => tracing::error!(
            target: super::names::INSTRUMENT_LOG_TARGET,
            dir = *dir,
            reason = reason.as_str(),
            detail = *detail,
            "the pod directory is not safe to write: running alone, not ready (/readyz?verbose: pod_dir)"
        ),
        Event::LifecycleDied => {
            tracing::error!("the lifecycle thread died: nothing registers or drains; /livez failing")
        }
        // A crash to come: said where a serving process's default log
        // filter shows it (the instrumentation's target), before it happens.
        Event::AcceptedInvalid {
            labels,
            reason: reason @ Reason::DuplicateRegions,
            message,
            ..
        } => tracing::error!(
            target: crate::telemetry::names::INSTRUMENT_LOG_TARGET,
            group = %labels.group,
            kind = %labels.kind,
            reason = reason.as_str(),
            finding = *message,
            "NIXL accepted a registration list that holds the same region twice; deregistering that list will crash this process (SIGSEGV in NIXL): remove the repeated region before register_memory"
        ),
        Event::AcceptedInvalid {
            labels,
            reason,
            message,
            ..
        } => tracing::warn!(
            group = %labels.group,
            kind = %labels.kind,
            reason = reason.as_str(),
            finding = *message,
            "NIXL accepted a region that validation rejects"
        ),
        Event::InstrumentationFailed {
            operation,
            message,
            first,
        } => {
            if *first {
                tracing::warn!(
                    target: crate::telemetry::names::INSTRUMENT_LOG_TARGET,
                    operation = operation.as_str(),
                    error = *message,
                    "nixl-agent's wrapping of this NIXL call failed; the call went ahead untouched (counted in nixl_agent_instrumentation_errors_total, logged once)"
                )
            }
        }
        // Transfers: the failures and stalls are logged from what the
        // ledger traced (`transfer`); a success is never a line.
        Event::XferCreated(_)
        | Event::XferCreateFailed { .. }
        | Event::XferPosted { .. }
        | Event::XferEnded { .. }
        | Event::XferReleased { .. }
        | Event::XferTick { .. } => {}
        Event::Peer {
            agent,
            op,
            peer,
            failure: Some(f),
        } => tracing::warn!(
            agent = agent.0,
            event = op.as_str(),
            peer = *peer,
            reason = f.reason.as_str(),
            error = %f.message,
            "NIXL call about a remote agent failed"
        ),
        Event::Peer { agent, op, peer, .. } => {
            tracing::debug!(agent = agent.0, event = op.as_str(), peer = *peer, "remote agent")
        }
        Event::Notified {
            agent,
            direction,
            failure: Some(f),
            ..
        } => tracing::warn!(
            agent = agent.0,
            direction = direction.as_str(),
            reason = f.reason.as_str(),
            error = %f.message,
            "NIXL notification call failed"
        ),
        Event::Notified { .. } => {}
        Event::XferTransport {
            agent,
            peer,
            op,
            transport: Some((scope, transports)),
        } => {
            let words: Vec<&str> = transports.iter().map(|t| t.as_str()).collect();
            tracing::info!(
                agent = agent.0,
                peer = *peer,
                op = op.as_str(),
                scope = scope.as_str(),
                transports = %words.join(","),
                "the transports UCX picked for this peer's transfers"
            )
        }
        Event::XferTransport { .. } => {}
        Event::ProbeTransfer(r) => match &r.failure {
            None => tracing::debug!(
                elapsed_ms = r.elapsed.as_millis() as u64,
                write_bytes_per_second = r.bytes_per_second[1],
                read_bytes_per_second = r.bytes_per_second[0],
                "canary loopback transfer ok"
            ),
            Some(f) => tracing::warn!(
                reason = f.reason.as_str(),
                error = %f.message,
                "canary loopback transfer failed: this node's data path is broken"
            ),
        },
        Event::CanaryStarted { interval } => tracing::info!(
            interval_ms = interval.as_millis() as u64,
            "canary transfers: a loopback round every probe interval, half an interval after the registrations"
        ),
        Event::DrainStarted => tracing::info!("shutdown requested: not ready, deregistering"),
        Event::DrainFinished {
            deregistered,
            failed,
            still_registered,
            elapsed,
        } => {
            if *still_registered == 0 {
                tracing::info!(
                    deregistered_descriptors = *deregistered,
                    failed = *failed,
                    registered_descriptors = *still_registered,
                    elapsed_us = elapsed.as_micros() as u64,
                    "drain complete"
                )
            } else {
                tracing::error!(
                    deregistered_descriptors = *deregistered,
                    failed = *failed,
                    registered_descriptors = *still_registered,
                    elapsed_us = elapsed.as_micros() as u64,
                    "drain left registrations behind"
                )
            }
        }
    }
}
