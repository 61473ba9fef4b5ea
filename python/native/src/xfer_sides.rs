//! What a transfer request moves, read from what its creation call was
//! given: the local side's descriptors, bytes and memory type, from a
//! descriptor list, an N×3 or N×5 array, or indices into a prepared list
//! (read in place, as NIXL reads them).

use crate::handles::Key;
use crate::prepped::Prepped;
use crate::{arg, Running, Soft};
use nixl_agent::MemType;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyTuple};

/// A `nixlXferDList`'s memory type word (`getType()` → `DRAM_SEG`).
pub(crate) fn dlist_mem(list: &Bound<'_, PyAny>) -> Option<MemType> {
    let t = list
        .call_method0(intern!(list.py(), "getType"))
        .soft()?
        .str()
        .soft()?
        .to_string();
    if t.contains("VRAM") {
        Some(MemType::Vram)
    } else if t.contains("DRAM") {
        Some(MemType::Dram)
    } else {
        None
    }
}

/// The local side of a request: descriptors, bytes, memory type.
pub(crate) fn local_side(
    r: &Running,
    method: &str,
    args: &Bound<'_, PyTuple>,
    kwargs: Option<&Bound<'_, PyDict>>,
) -> (usize, u64, Option<MemType>, Option<MemType>) {
    if method == "initialize_xfer" {
        // Lists `get_xfer_descs` made were summarised then: a lookup here,
        // whatever the request's descriptor count. Any other list is read
        // from its serialised form, one call.
        let local = arg(args, kwargs, 1, "local_descs").and_then(|l| r.made.summary(&l));
        let remote = arg(args, kwargs, 2, "remote_descs");
        let remote_mem = remote
            .as_ref()
            .and_then(|l| r.made.known(l).map(|s| s.mem).or_else(|| Some(dlist_mem(l))))
            .flatten();
        return match local {
            Some(s) => (s.descriptors, s.bytes, s.mem, remote_mem),
            None => (0, 0, None, remote_mem),
        };
    }
    let prepped = |i: usize, name: &str| {
        arg(args, kwargs, i, name)
            .and_then(|v| Key::of(&v))
            .and_then(|h| r.prepped(h))
    };
    let local = prepped(1, "local_xfer_side");
    let remote = prepped(3, "remote_xfer_side");
    let (descriptors, bytes) = match (arg(args, kwargs, 2, "local_indices"), &local) {
        (Some(v), Some(p)) => indexed(&v, p),
        (Some(v), None) => (v.len().soft().unwrap_or_else(|| indices_of(&v).len()), 0),
        (None, _) => (0, 0),
    };
    (
        descriptors,
        bytes,
        local.and_then(|p| p.mem),
        remote.and_then(|p| p.mem),
    )
}

/// The descriptors and bytes `indices` pick from prepared list `p`. A list
/// of equal descriptors (one run) needs only the count of indices, which
/// NIXL checked (a request it made names only descriptors the list has);
/// any other is read in place (arrays) or item by item (lists).
pub(crate) fn indexed(indices: &Bound<'_, PyAny>, p: &Prepped) -> (usize, u64) {
    if let (Some(len), Some(n)) = (p.uniform(), indices.len().soft()) {
        return (n, len.saturating_mul(n as u64));
    }
    let (mut n, mut bytes) = (0usize, 0u64);
    let read = crate::dlists::array_rows(indices, 1, |r| {
        n += 1;
        if let Some(len) = usize::try_from(r[0]).ok().and_then(|i| p.len_of(i)) {
            bytes = bytes.saturating_add(len);
        }
    });
    if read.is_some() {
        return (n, bytes);
    }
    let all = indices_of(indices);
    let bytes = all
        .iter()
        .filter_map(|i| p.len_of(*i))
        .fold(0u64, |a, b| a.saturating_add(b));
    (all.len(), bytes)
}

/// The rows of an N×5 strided array (`prep_xfer_dlist` only), read in
/// place as NIXL reads them: each row (addr, len, dev, stride, count) is
/// `count` descriptors of `len` bytes. `None`: not such an array (an N×3
/// one is read as descriptors by the caller).
pub(crate) fn strided_runs(obj: &Bound<'_, PyAny>) -> Option<Vec<(u64, u64)>> {
    let mut runs = Vec::new();
    crate::dlists::array_rows(obj, 5, |r| runs.push((r[4], r[1])))?.then_some(runs)
}

/// Indices as a list of ints or an integer array (read in place).
pub(crate) fn indices_of(v: &Bound<'_, PyAny>) -> Vec<usize> {
    if let Ok(l) = v.cast::<PyList>() {
        return l.iter().filter_map(|i| i.extract::<usize>().ok()).collect();
    }
    let mut out = Vec::new();
    if crate::dlists::array_rows(v, 1, |r| out.push(usize::try_from(r[0]).unwrap_or(usize::MAX))).is_some() {
        return out;
    }
    match v.try_iter() {
        Ok(it) => it.filter_map(|i| i.ok()?.extract::<usize>().ok()).collect(),
        Err(_) => Vec::new(),
    }
}
