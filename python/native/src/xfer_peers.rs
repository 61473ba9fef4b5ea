//! The data path's calls about peers and notifications, as NIXL's
//! methods handed them over after the call (`_xfer.wrap`): a remote agent
//! added, removed or its metadata fetched or sent; notifications sent or
//! received (returned by `get_new_notifs`, or added to the agent's own map
//! by `update_notifs` and `check_remote_xfer_done`), heartbeats told apart.
//! Recorded on the observer; nothing here is called before NIXL's own
//! method.

use crate::xfer_args::{failure_of, name_of};
use crate::{arg, finish, guarded, running, Soft};
use nixl_agent::{Hooked, NotifDirection, PeerOp};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyString, PyTuple};

/// A peer method returned (`result`: `add_remote_agent`'s name) or raised.
#[pyfunction]
#[pyo3(signature = (agent, event, args, kwargs, result, error))]
pub(crate) fn peer(
    agent: &Bound<'_, PyAny>,
    event: &str,
    args: &Bound<'_, PyTuple>,
    kwargs: Option<&Bound<'_, PyDict>>,
    result: &Bound<'_, PyAny>,
    error: &Bound<'_, PyAny>,
) -> PyResult<()> {
    guarded(Hooked::Peer, || {
        let r = running()?;
        let op = PeerOp::parse(event)?;
        let name = match op {
            PeerOp::Add => name_of(result).unwrap_or_default(),
            PeerOp::Remove | PeerOp::Check => arg(args, kwargs, 0, "agent")
                .and_then(|v| name_of(&v))
                .unwrap_or_default(),
            PeerOp::Fetch | PeerOp::Connect => arg(args, kwargs, 0, "remote_agent")
                .and_then(|v| name_of(&v))
                .unwrap_or_default(),
        };
        let failure = (!error.is_none()).then(|| failure_of(error));
        r.observer().peer(r.agent_id(agent), op, &name, failure.as_ref());
        Some(())
    });
    finish()
}

/// `send_notif(remote_agent_name, notif_msg)` (its `args`) returned or
/// raised; `get_new_notifs` returned `notifs` (a non-empty dict of lists by
/// peer) or raised. Heartbeats (vLLM's `HB:`) are counted apart per peer.
#[pyfunction]
#[pyo3(signature = (agent, direction, notifs, error, args=None, kwargs=None))]
pub(crate) fn notified(
    agent: &Bound<'_, PyAny>,
    direction: &str,
    notifs: &Bound<'_, PyAny>,
    error: &Bound<'_, PyAny>,
    args: Option<&Bound<'_, PyTuple>>,
    kwargs: Option<&Bound<'_, PyDict>>,
) -> PyResult<()> {
    guarded(Hooked::Notification, || {
        let r = running()?;
        let id = r.agent_id(agent);
        let direction = match direction {
            "send" => NotifDirection::Send,
            _ => NotifDirection::Receive,
        };
        if !error.is_none() {
            r.observer().notified(id, direction, 1, Some(&failure_of(error)));
            return Some(());
        }
        match (direction, notifs.cast::<PyDict>()) {
            (NotifDirection::Receive, Ok(d)) => {
                for (peer, list) in d.iter() {
                    let (messages, heartbeats) = match list.cast::<PyList>() {
                        Ok(l) => (l.len() as u64, l.iter().filter(|m| heartbeat(m)).count() as u64),
                        Err(_) => (list.len().soft().unwrap_or(0) as u64, 0),
                    };
                    let peer = name_of(&peer).unwrap_or_default();
                    r.observer().notified_peer(id, direction, &peer, messages, heartbeats);
                }
            }
            _ => {
                let (peer, message) = match args {
                    Some(a) => (
                        arg(a, kwargs, 0, "remote_agent_name").and_then(|v| name_of(&v)),
                        arg(a, kwargs, 1, "notif_msg"),
                    ),
                    None => (None, None),
                };
                let beat = u64::from(message.as_ref().is_some_and(heartbeat));
                r.observer()
                    .notified_peer(id, direction, peer.as_deref().unwrap_or(""), 1, beat);
            }
        }
        Some(())
    });
    finish()
}

/// `update_notifs` or `check_remote_xfer_done` returned (or raised after
/// NIXL's `getNotifs` answered): the agent's map `notifs` (its `notifs`
/// after the call) holds each peer's `before` messages (peer → count before
/// the call) followed by those `getNotifs` delivered, less the one message
/// `check_remote_xfer_done` removed from `removed_from`'s list: one of the
/// old (`removed_new` None) or one of the new, classified by `removed_new`
/// (the tag it matched). Each delivered message counts once as received,
/// as the interposer counts what `getNotifs` added to the map.
#[pyfunction]
#[pyo3(signature = (agent, notifs, before, removed_from=None, removed_new=None))]
pub(crate) fn notifs_grew(
    agent: &Bound<'_, PyAny>,
    notifs: &Bound<'_, PyAny>,
    before: &Bound<'_, PyAny>,
    removed_from: Option<&Bound<'_, PyAny>>,
    removed_new: Option<&Bound<'_, PyAny>>,
) -> PyResult<()> {
    guarded(Hooked::Notification, || {
        let r = running()?;
        let id = r.agent_id(agent);
        let map = notifs.cast::<PyDict>().ok()?;
        let before = before.cast::<PyDict>().ok()?;
        for (peer, list) in map.iter() {
            let Ok(list) = list.cast::<PyList>() else { continue };
            let had = before
                .get_item(&peer)
                .soft()
                .flatten()
                .and_then(|n| n.extract::<usize>().ok())
                .unwrap_or(0);
            let (mut start, mut extra, mut extra_beats) = (had, 0u64, 0u64);
            if removed_from.is_some_and(|p| p.eq(&peer).soft().unwrap_or(false)) {
                match removed_new {
                    None => start = had.saturating_sub(1),
                    Some(tag) => (extra, extra_beats) = (1, u64::from(heartbeat(tag))),
                }
            }
            let messages = list.len().saturating_sub(start) as u64 + extra;
            if messages == 0 {
                continue;
            }
            let beats = (start..list.len())
                .filter(|&i| list.get_item(i).is_ok_and(|m| heartbeat(&m)))
                .count() as u64
                + extra_beats;
            let peer = name_of(&peer).unwrap_or_default();
            r.observer()
                .notified_peer(id, NotifDirection::Receive, &peer, messages, beats);
        }
        Some(())
    });
    finish()
}

/// A notification message the framework marks as a heartbeat.
fn heartbeat(m: &Bound<'_, PyAny>) -> bool {
    if let Ok(b) = m.cast::<PyBytes>() {
        return crate::instrument::is_heartbeat(b.as_bytes());
    }
    m.cast::<PyString>()
        .ok()
        .and_then(|s| s.extract::<String>().ok())
        .map(|s| crate::instrument::is_heartbeat(s.as_bytes()))
        .unwrap_or(false)
}
