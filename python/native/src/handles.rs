//! NIXL's Python handle objects (`nixl_xfer_handle`,
//! `nixl_prepped_dlist_handle`) and what the recording keeps of each, keyed
//! by the object the program holds, never by NIXL's pointer alone: NIXL
//! hands a released request's address to the next request it makes, so a
//! table keyed by the pointer would take a new request for the old one (a
//! release the wrappers did not see, and the old request's open transfer
//! ended "done" at the new one's first post, with the time between as its
//! duration).
//!
//! A transfer request gets a serial of ours when the program creates it
//! ([`Requests::created`]): the ledger knows it by that serial only, and a
//! request NIXL makes at a reused address is a new serial. The entry lives
//! as long as the handle object: its release or its finalizer (the
//! wrappers of `_xfer.wrap_handles`) takes it out, whatever NIXL's private
//! state says; a second release finds nothing. A creation at an address
//! another live entry still names tells that NIXL let that request go by a
//! path the wrappers did not see: that entry ends there.

use pyo3::intern;
use pyo3::prelude::*;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use crate::Soft;

/// Which handle object, and NIXL's pointer it carries (`_handle`). An int
/// handle (an older NIXL API) is its own value, with object 0.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Key {
    object: usize,
    pointer: u64,
}

impl Key {
    /// The key of a handle object, or of an int.
    pub(crate) fn of(h: &Bound<'_, PyAny>) -> Option<Key> {
        let py = h.py();
        let (object, v) = match h.getattr(intern!(py, "_handle")).soft() {
            Some(v) => (h.as_ptr() as usize, v),
            None => (0, h.clone()),
        };
        // `PyLong_AsLong` first: the unsigned path goes through a byte array.
        let pointer = match v.extract::<i64>() {
            Ok(n) => n as u64,
            Err(_) => v.extract::<u64>().soft()?,
        };
        Some(Key { object, pointer })
    }

    /// NIXL's pointer (for a call the program's own NIXL call is followed by,
    /// such as its telemetry).
    pub(crate) fn pointer(self) -> u64 {
        self.pointer
    }
}

/// Entries of one kind of handle, by object; each also indexed by NIXL's
/// pointer, to find the one a reused address supersedes.
pub(crate) struct HandleTable<V> {
    by_object: HashMap<usize, (u64, V)>,
    by_pointer: HashMap<u64, usize>,
}

impl<V> Default for HandleTable<V> {
    fn default() -> Self {
        HandleTable {
            by_object: HashMap::new(),
            by_pointer: HashMap::new(),
        }
    }
}

impl<V> HandleTable<V> {
    pub(crate) fn len(&self) -> usize {
        self.by_object.len()
    }

    /// `key` is a new handle with `value`. Returns the entries it replaces:
    /// one of a collected object at the same address whose finalizer was
    /// not seen, and one of another object NIXL's pointer named (NIXL made
    /// the new one at a released one's address).
    pub(crate) fn insert(&mut self, key: Key, value: V) -> Vec<V> {
        let mut gone = Vec::new();
        if let Some(object) = self.by_pointer.get(&key.pointer).copied() {
            gone.extend(self.take(object));
        }
        gone.extend(self.take(key.object));
        self.by_pointer.insert(key.pointer, key.object);
        self.by_object.insert(key.object, (key.pointer, value));
        gone
    }

    fn take(&mut self, object: usize) -> Option<V> {
        let (pointer, v) = self.by_object.remove(&object)?;
        if self.by_pointer.get(&pointer) == Some(&object) {
            self.by_pointer.remove(&pointer);
        }
        Some(v)
    }

    /// The entry of `key`: its object, holding that pointer.
    pub(crate) fn get(&self, key: Key) -> Option<&V> {
        match self.by_object.get(&key.object) {
            Some((pointer, v)) if *pointer == key.pointer => Some(v),
            _ => None,
        }
    }

    /// Takes the entry of `key` out (its release, its finalizer).
    pub(crate) fn remove(&mut self, key: Key) -> Option<V> {
        self.get(key)?;
        self.take(key.object)
    }

    /// Drops the `n` entries `rank` puts first (least worth keeping).
    pub(crate) fn evict<R: Ord>(&mut self, n: usize, rank: impl Fn(&V) -> R) {
        let mut ranked: Vec<(R, usize)> = self.by_object.iter().map(|(o, (_, v))| (rank(v), *o)).collect();
        let n = n.min(ranked.len());
        if n == 0 {
            return;
        }
        if n < ranked.len() {
            ranked.select_nth_unstable_by(n - 1, |a, b| a.0.cmp(&b.0));
        }
        let objects: Vec<usize> = ranked[..n].iter().map(|(_, o)| *o).collect();
        for o in objects {
            self.take(o);
        }
    }
}

/// Transfer requests remembered at once: handle objects the program keeps
/// alive unreleased past this are forgotten, the oldest first (a post of
/// one then records nothing).
pub(crate) const REQUESTS_KEPT: usize = 1 << 16;

/// The transfer requests the program created, each with its serial.
#[derive(Default)]
pub(crate) struct Requests {
    table: Mutex<HandleTable<u64>>,
    next: AtomicU64,
}

impl Requests {
    fn lock(&self) -> std::sync::MutexGuard<'_, HandleTable<u64>> {
        self.table.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The program created the request `key`: its serial, and the serials
    /// of the requests it shows gone (see [`HandleTable::insert`]).
    pub(crate) fn created(&self, key: Key) -> (u64, Vec<u64>) {
        // Serials start at 1; the Rust front-end's are in the top half.
        let serial = self.next.fetch_add(1, Ordering::Relaxed) + 1;
        let mut t = self.lock();
        let mut gone = Vec::new();
        if t.len() >= REQUESTS_KEPT {
            t.evict(REQUESTS_KEPT / 16, |s| *s);
        }
        gone.extend(t.insert(key, serial));
        (serial, gone)
    }

    /// The serial of the request `key`, if created since the recording began.
    pub(crate) fn serial(&self, key: Key) -> Option<u64> {
        self.lock().get(key).copied()
    }

    /// The request `key` was released or collected: its serial, once.
    pub(crate) fn released(&self, key: Key) -> Option<u64> {
        self.lock().remove(key)
    }
}
