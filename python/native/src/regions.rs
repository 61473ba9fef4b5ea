//! A `register_memory` call's regions, read from its Python arguments in
//! place: a list of `(addr, len, dev[, meta])` tuples (SGLang, vLLM), a
//! `nixlRegDList` (from its serialised form in one call), tensors, an N×3
//! array. What cannot be read is recorded with no regions: NIXL says what
//! is wrong with it.

use crate::instrument::mem_type_word;
use crate::{dlists, soft, Soft};
use nixl_agent::{MemType, Region};
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyList, PyTuple};

/// What was passed to `register_memory`: its memory type and regions.
/// `None` for memory nixl-agent does not record (files, blocks, objects).
/// A shape it cannot read is recorded with no regions (NIXL will say).
pub(crate) fn regions_of(
    reg_list: &Bound<'_, PyAny>,
    mem_type: Option<&Bound<'_, PyAny>>,
) -> Option<(MemType, Vec<Region>)> {
    let py = reg_list.py();
    let named = mem_type.and_then(|m| m.extract::<String>().ok());
    let named_type = match named.as_deref() {
        // Files, blocks, objects: not memory nixl-agent records.
        Some("FILE" | "BLOCK" | "OBJ") => return None,
        Some(w) => mem_type_word(w),
        None => None,
    };
    let mem = named_type.unwrap_or(MemType::Dram);
    // A list of (addr, len, dev, meta) tuples: what SGLang and vLLM pass.
    if let Ok(l) = reg_list.cast::<PyList>() {
        return Some(list_regions(l, mem, named_type.is_some()));
    }
    // A nixlRegDList (or nixlXferDList) carries its own type: read from its
    // serialised form in one call, else item by item.
    if soft(reg_list.hasattr(intern!(py, "descCount"))).unwrap_or(false) {
        let mut out = scratch(0);
        if let Some(mem) = dlists::state_regions(reg_list, &mut out) {
            return Some((mem?, out));
        }
        let t = reg_list
            .call_method0(intern!(py, "getType"))
            .soft()?
            .str()
            .soft()?
            .to_string();
        let mem = if t.contains("VRAM") {
            MemType::Vram
        } else if t.contains("DRAM") {
            MemType::Dram
        } else {
            return None;
        };
        let n: usize = reg_list
            .call_method0(intern!(py, "descCount"))
            .soft()?
            .extract()
            .soft()?;
        out.reserve(n);
        for i in 0..n {
            match reg_list.get_item(i).soft().and_then(|d| tuple_region(&d)) {
                Some(r) => out.push(r),
                None => return Some((mem, Vec::new())),
            }
        }
        return Some((mem, out));
    }
    if is_tensor(reg_list) {
        let (mem, r) = tensor_region(reg_list)?;
        return Some((mem, vec![r]));
    }
    // An N×3 array (numpy): read in place, never as Python objects.
    let mut out = scratch(0);
    if dlists::array_regions(reg_list, &mut out).is_some() {
        return Some((mem, out));
    }
    recycle(out);
    if let Ok(t) = reg_list.cast::<PyTuple>() {
        return Some(list_regions(
            &PyList::new(py, t.iter()).soft()?,
            mem,
            named_type.is_some(),
        ));
    }
    Some((mem, Vec::new()))
}

thread_local! {
    /// The regions vector of this thread's last call, kept for the next:
    /// a call of thousands of regions then allocates nothing (a fresh 100 KB
    /// block each call is page faults and heap trims NIXL's call pays for).
    static SCRATCH: std::cell::Cell<Vec<Region>> = const { std::cell::Cell::new(Vec::new()) };
}

/// Kept regions vectors hold at most this many (a million-region call's
/// 24 MB is given back).
const SCRATCH_KEPT: usize = 1 << 16;

/// An empty vector for a call's regions (the thread's kept one, if any).
fn scratch(capacity: usize) -> Vec<Region> {
    let mut v = SCRATCH.with(|s| s.take());
    v.clear();
    v.reserve(capacity);
    v
}

/// Gives a call's regions vector back for the next call on this thread.
pub(crate) fn recycle(v: Vec<Region>) {
    if v.capacity() <= SCRATCH_KEPT {
        SCRATCH.with(|s| s.set(v));
    }
}

/// The regions of a list of tuples (or rows, or tensors).
pub(crate) fn list_regions(items: &Bound<'_, PyList>, mem: MemType, named: bool) -> (MemType, Vec<Region>) {
    let mut out = scratch(items.len());
    for item in items.iter() {
        let region = match item.cast::<PyTuple>() {
            Ok(t) => tuple_fields(t),
            // A list of tensors: their device says the type.
            Err(_) if is_tensor(&item) => {
                return match (tensors(items), items.get_item(0).soft().and_then(|t| tensor_region(&t))) {
                    (Some(all), Some((m, _))) if !named => (m, all),
                    (Some(all), _) => (mem, all),
                    _ => (mem, Vec::new()),
                };
            }
            Err(_) => tuple_region(&item),
        };
        match region {
            Some(r) => out.push(r),
            None => return (mem, Vec::new()),
        }
    }
    (mem, out)
}

fn tensors(items: &Bound<'_, PyList>) -> Option<Vec<Region>> {
    items.iter().map(|t| tensor_region(&t).map(|(_, r)| r)).collect()
}

/// `(addr, len, dev[, meta])` as a tuple (the fast path: borrowed items)
/// or any sequence (a `nixlRegDList` item).
pub(crate) fn tuple_region(item: &Bound<'_, PyAny>) -> Option<Region> {
    match item.cast::<PyTuple>() {
        Ok(t) => tuple_fields(t),
        Err(_) => fields(
            word(&item.get_item(0).soft()?)?,
            word(&item.get_item(1).soft()?)?,
            item.get_item(2).soft()?.extract::<i64>().soft()?,
        ),
    }
}

/// The fast path: a tuple's first three items, borrowed.
fn tuple_fields(t: &Bound<'_, PyTuple>) -> Option<Region> {
    // The common shapes, (addr, len, dev) and (addr, len, dev, meta), in one
    // extraction (items read in place); anything else (an address past
    // i64::MAX, an int-like object) by the general path below. What the
    // fast path raised is kept if it is an interrupt ([`soft`]).
    let fast = match t.len() {
        3 => t.extract::<(i64, i64, i64)>(),
        4 => t
            .extract::<(i64, i64, i64, Bound<'_, PyAny>)>()
            .map(|(a, l, d, _)| (a, l, d)),
        n if n < 3 => return None,
        _ => Err(pyo3::exceptions::PyTypeError::new_err("")),
    };
    match fast {
        Ok((a, l, d)) if a >= 0 && l >= 0 => return fields(a as u64, l as u64, d),
        Ok(_) => {}
        Err(e) => {
            soft::<()>(Err(e));
        }
    }
    let (addr, len, dev) = (
        t.get_borrowed_item(0).soft()?,
        t.get_borrowed_item(1).soft()?,
        t.get_borrowed_item(2).soft()?,
    );
    fields(word(&addr)?, word(&len)?, dev.extract::<i64>().soft()?)
}

fn fields(addr: u64, len: u64, dev: i64) -> Option<Region> {
    Some(Region::new(
        addr as usize,
        len as usize,
        u32::try_from(dev.max(0)).unwrap_or(u32::MAX),
    ))
}

/// An address or length: as `i64` first (CPython's `PyLong_AsLong` is a
/// short loop; its `unsigned long long` conversion goes through a generic
/// byte-array path several times slower), as `u64` above `i64::MAX`.
fn word(v: &Bound<'_, PyAny>) -> Option<u64> {
    match v.extract::<i64>() {
        Ok(w) if w >= 0 => Some(w as u64),
        Ok(_) => None,
        Err(e) if e.is_instance_of::<pyo3::exceptions::PyOverflowError>(v.py()) => v.extract::<u64>().soft(),
        Err(e) => soft::<u64>(Err(e)),
    }
}

/// What a deregistration names: its first region and descriptor count
/// (a `nixlRegDList` from `register_memory`; one pybind call each).
pub(crate) fn first_and_count(list: &Bound<'_, PyAny>) -> Option<(Region, usize)> {
    let py = list.py();
    if !soft(list.hasattr(intern!(py, "descCount"))).unwrap_or(false) {
        let (_, regions) = regions_of(list, None)?;
        return regions.first().map(|r| (*r, regions.len()));
    }
    let n: usize = list.call_method0(intern!(py, "descCount")).soft()?.extract().soft()?;
    if n == 0 {
        return None;
    }
    Some((tuple_region(&list.get_item(0).soft()?)?, n))
}

fn is_tensor(obj: &Bound<'_, PyAny>) -> bool {
    let py = obj.py();
    soft(obj.hasattr(intern!(py, "data_ptr"))).unwrap_or(false)
        && soft(obj.hasattr(intern!(py, "element_size"))).unwrap_or(false)
}

fn tensor_region(t: &Bound<'_, PyAny>) -> Option<(MemType, Region)> {
    let py = t.py();
    let addr: u64 = t.call_method0(intern!(py, "data_ptr")).soft()?.extract().soft()?;
    let numel: u64 = t.call_method0(intern!(py, "numel")).soft()?.extract().soft()?;
    let size: u64 = t.call_method0(intern!(py, "element_size")).soft()?.extract().soft()?;
    let dev: i64 = t.call_method0(intern!(py, "get_device")).soft()?.extract().soft()?;
    let mem = if dev >= 0 { MemType::Vram } else { MemType::Dram };
    Some((
        mem,
        Region::new(addr as usize, numel.saturating_mul(size) as usize, dev.max(0) as u32),
    ))
}
