//! Descriptor lists read in bulk, the way NIXL's binding reads them, never
//! one Python object per descriptor:
//! - N×k integer arrays (N×3 descriptors, N×5 strided runs, index arrays)
//!   through the buffer protocol: one call, the rows read in place;
//! - NIXL's own lists (`nixlXferDList`, `nixlRegDList`) through their
//!   serialised form (`__getstate__`, one call; the layout is read by the
//!   library, [`read_dlist_state`]);
//! - the transfer lists `get_xfer_descs` made, summarised once, when made
//!   ([`MadeLists`]), so that a request over them (`initialize_xfer`,
//!   `prep_xfer_dlist`) costs a lookup whatever its descriptor count.

use crate::dlist_state::read_dlist_state;
use crate::instrument::mem_type_word;
use nixl_agent::{MemType, Region};
use pyo3::buffer::PyBuffer;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyTuple, PyWeakrefReference};
use std::collections::HashMap;
use std::sync::Mutex;

use crate::{arg, Soft};

/// An integer array's rows, read as NIXL reads one: C-contiguous, 8-byte
/// (or, for indices, 4-byte) native integers, `width` to a row. `None`: not
/// a buffer of such integers (the caller tries other shapes); `Some(false)`:
/// such a buffer NIXL would not take (another row width, not contiguous,
/// empty), nothing read.
pub(crate) fn array_rows(obj: &Bound<'_, PyAny>, width: usize, mut row: impl FnMut(&[u64])) -> Option<bool> {
    let py = obj.py();
    macro_rules! read {
        ($t:ty) => {
            if let Ok(buf) = PyBuffer::<$t>::get(obj) {
                let shape = buf.shape();
                let fits = match shape {
                    [n, w] => *w == width && *n > 0,
                    [n] => width == 1 && *n > 0,
                    _ => false,
                };
                let Some(cells) = buf.as_slice(py).filter(|_| fits) else {
                    buf.release(py);
                    return Some(false);
                };
                let mut words = [0u64; 8];
                for r in cells.chunks_exact(width) {
                    for (w, c) in words.iter_mut().zip(r) {
                        // A negative index or device reads as 0 (NIXL refuses such rows).
                        *w = u64::try_from(c.get()).unwrap_or(0);
                    }
                    row(&words[..width]);
                }
                buf.release(py);
                return Some(true);
            }
        };
    }
    if width > 8 {
        return None;
    }
    read!(u64);
    read!(i64);
    if width == 1 {
        read!(i32);
        read!(u32);
    }
    None
}

/// The `(addr, len, dev)` regions of an N×3 array (`None`: not such an
/// integer buffer; an empty vector: one NIXL would refuse).
pub(crate) fn array_regions(obj: &Bound<'_, PyAny>, out: &mut Vec<Region>) -> Option<()> {
    let read = array_rows(obj, 3, |r| out.push(region(r[0], r[1], r[2])))?;
    if !read {
        out.clear();
    }
    Some(())
}

fn region(addr: u64, len: u64, dev: u64) -> Region {
    Region::new(addr as usize, len as usize, u32::try_from(dev).unwrap_or(u32::MAX))
}

/// NIXL's `nixl_mem_t` code as the library's word (`None`: files, blocks,
/// objects, which nixl-agent does not record).
fn mem_of_code(code: u32) -> Option<MemType> {
    match code {
        0 => Some(MemType::Dram),
        1 => Some(MemType::Vram),
        _ => None,
    }
}

/// A NIXL list's serialised form (`__getstate__`, one call).
fn state_of<'py>(list: &Bound<'py, PyAny>) -> Option<Bound<'py, PyBytes>> {
    let state = list.call_method0(intern!(list.py(), "__getstate__")).soft()?;
    state.cast_into::<PyBytes>().ok()
}

/// A NIXL list's regions and memory type from its serialised form, one call.
/// `None`: not a list that serialises (or a layout this reader does not
/// know); the caller asks it item by item.
pub(crate) fn state_regions(list: &Bound<'_, PyAny>, out: &mut Vec<Region>) -> Option<Option<MemType>> {
    let bytes = state_of(list)?;
    out.clear();
    match read_dlist_state(bytes.as_bytes(), |a, l, d| out.push(region(a, l, d))) {
        Some(h) => Some(mem_of_code(h.mem_code)),
        None => {
            out.clear();
            None
        }
    }
}

/// What a request needs of a transfer list: its descriptors, bytes and type.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Summary {
    pub(crate) descriptors: usize,
    pub(crate) bytes: u64,
    pub(crate) mem: Option<MemType>,
}

impl Summary {
    fn of_state(list: &Bound<'_, PyAny>) -> Option<Summary> {
        let bytes = state_of(list)?;
        let mut total = 0u64;
        let h = read_dlist_state(bytes.as_bytes(), |_, l, _| total = total.saturating_add(l))?;
        Some(Summary {
            descriptors: h.count,
            bytes: total,
            mem: mem_of_code(h.mem_code),
        })
    }
}

/// Transfer lists `get_xfer_descs` made, by object address, each with a weak
/// reference that tells the list from a later one at the same address.
/// Bounded: past [`MADE_KEPT`] entries the dead ones go, then half of the
/// rest (a list forgotten is read from its serialised form instead).
#[derive(Default)]
pub(crate) struct MadeLists(Mutex<HashMap<usize, (Py<PyWeakrefReference>, Summary)>>);

/// A list of tuples up to this long is summarised from its items (a few
/// calls each); a longer one from NIXL's serialised list (one call, a few
/// nanoseconds a descriptor in C++).
const SHORT_LIST: usize = 32;

/// Lists remembered at once (a request's two lists live for the request).
pub(crate) const MADE_KEPT: usize = 4096;

impl MadeLists {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<usize, (Py<PyWeakrefReference>, Summary)>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `get_xfer_descs(descs, mem_type)` returned `list`: summarised from its
    /// input when that is an N×3 array (read in place), else from the list's
    /// serialised form.
    pub(crate) fn made(
        &self,
        list: &Bound<'_, PyAny>,
        descs: Option<&Bound<'_, PyAny>>,
        mem_type: Option<&Bound<'_, PyAny>>,
    ) {
        if list.is_none() || descs.is_some_and(|d| d.is(list)) {
            return; // NIXL refused the input, or handed a list back as it came
        }
        let named = mem_type
            .and_then(|m| m.extract::<String>().ok())
            .and_then(|w| mem_type_word(&w));
        // A list of tuples is no buffer: not asked to be one.
        let from_array = || {
            let descs = descs.filter(|d| !d.is_instance_of::<PyList>())?;
            let (mut n, mut bytes) = (0usize, 0u64);
            let read = array_rows(descs, 3, |r| {
                n += 1;
                bytes = bytes.saturating_add(r[1]);
            })?;
            read.then_some(Summary {
                descriptors: n,
                bytes,
                mem: named,
            })
        };
        // A short list of tuples: its items cost less than a serialisation.
        let from_tuples = || {
            let l = descs?.cast::<PyList>().ok().filter(|l| l.len() <= SHORT_LIST)?;
            let (_, regions) = crate::list_regions(l, named.unwrap_or(MemType::Dram), true);
            let s = (regions.len() == l.len()).then(|| Summary {
                descriptors: regions.len(),
                bytes: regions.iter().fold(0u64, |a, r| a.saturating_add(r.len as u64)),
                mem: named,
            });
            crate::recycle(regions);
            s
        };
        let Some(summary) = from_array().or_else(from_tuples).or_else(|| Summary::of_state(list)) else {
            return;
        };
        let Some(weak) = PyWeakrefReference::new(list).soft() else {
            return;
        };
        let mut map = self.lock();
        if map.len() >= MADE_KEPT {
            map.retain(|_, (w, _)| w.bind(list.py()).upgrade().is_some());
            if map.len() >= MADE_KEPT / 2 {
                let drop: Vec<usize> = map.keys().copied().take(map.len() / 2).collect();
                for k in drop {
                    map.remove(&k);
                }
            }
        }
        map.insert(list.as_ptr() as usize, (weak.unbind(), summary));
    }

    /// The summary of a list `get_xfer_descs` made, if it is that list.
    pub(crate) fn known(&self, list: &Bound<'_, PyAny>) -> Option<Summary> {
        let map = self.lock();
        map.get(&(list.as_ptr() as usize))
            .filter(|(w, _)| w.bind(list.py()).upgrade().is_some_and(|o| o.is(list)))
            .map(|(_, s)| *s)
    }

    /// A transfer list's summary: a lookup for one `get_xfer_descs` made,
    /// else one read of its serialised form.
    pub(crate) fn summary(&self, list: &Bound<'_, PyAny>) -> Option<Summary> {
        self.known(list).or_else(|| Summary::of_state(list))
    }
}

/// `get_xfer_descs(self, descs, mem_type=None)` returned `list`.
#[pyfunction]
#[pyo3(signature = (list, args, kwargs=None))]
pub(crate) fn xfer_descs_made(
    list: &Bound<'_, PyAny>,
    args: &Bound<'_, PyTuple>,
    kwargs: Option<&Bound<'_, PyDict>>,
) -> PyResult<()> {
    crate::guarded(nixl_agent::Hooked::Transfer, || {
        let r = crate::running()?;
        let descs = arg(args, kwargs, 0, "descs");
        let mem_type = arg(args, kwargs, 1, "mem_type");
        r.made.made(list, descs.as_ref(), mem_type.as_ref());
        Some(())
    });
    crate::finish()
}
