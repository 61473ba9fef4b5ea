//! Prepared descriptor lists (`prep_xfer_dlist`), what `make_prepped_xfer`
//! indexes into: each list's descriptor lengths (an N×5 strided array is
//! `count` descriptors per row, as NIXL expands it), memory type, peer and
//! when it was prepared, in a table by handle object bounded by last use. Lists prepared for
//! the local side (`NIXL_INIT_AGENT`) live as long as the program's KV
//! buffers and are kept; of the others, the least recently used go.

use crate::handles::{HandleTable, Key};
use nixl_agent::MemType;
use nixl_agent_core::model::BlockLens;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// Prepared lists remembered per process (a program that never releases
/// them cannot grow this past it).
pub(crate) const PREPPED_KEPT: usize = 4096;

/// One prepared list.
pub(crate) struct Prepped {
    /// Each block's length (the interposer reads its lists into the same).
    lens: BlockLens,
    pub(crate) mem: Option<MemType>,
    /// The agent it was prepared for: "" (local, NIXL_INIT_AGENT), a remote
    /// agent's name, or the agent's own (loopback).
    pub(crate) peer: String,
    /// When it was prepared: a peer reloaded since makes it stale.
    pub(crate) prepared: Instant,
    /// The one backend it was prepared for (`backends=[one]`), if named.
    pub(crate) backend: Option<String>,
    last_used: AtomicU64,
}

impl Prepped {
    /// A list of `runs`: (descriptors, length of each).
    pub(crate) fn new(runs: impl IntoIterator<Item = (u64, u64)>, mem: Option<MemType>, peer: String) -> Prepped {
        Prepped {
            lens: BlockLens::from_runs(runs),
            mem,
            peer,
            prepared: Instant::now(),
            backend: None,
            last_used: AtomicU64::new(0),
        }
    }

    /// The list, prepared for `backend` alone (when it named one).
    pub(crate) fn confined_to(self, backend: Option<String>) -> Prepped {
        Prepped { backend, ..self }
    }

    /// The one length of every descriptor, when they are all alike.
    pub(crate) fn uniform(&self) -> Option<u64> {
        self.lens.uniform()
    }

    /// The length of descriptor `i`, if the list has one.
    pub(crate) fn len_of(&self, i: usize) -> Option<u64> {
        self.lens.get(i)
    }
}

/// The table, by handle object (see [`crate::handles`]): a list NIXL
/// prepared at a released one's address is a new list, and the release of
/// the old object is not the new one's.
#[derive(Default)]
pub(crate) struct PreppedLists {
    lists: Mutex<HandleTable<Arc<Prepped>>>,
    uses: AtomicU64,
}

impl PreppedLists {
    fn lock(&self) -> std::sync::MutexGuard<'_, HandleTable<Arc<Prepped>>> {
        self.lists.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn insert(&self, handle: Key, p: Prepped) {
        p.last_used
            .store(self.uses.fetch_add(1, Ordering::Relaxed), Ordering::Relaxed);
        let mut map = self.lock();
        if map.len() >= PREPPED_KEPT {
            // The least recently used go, local ones last: only when
            // nothing else is left does a local list go.
            map.evict(PREPPED_KEPT / 8, |p| {
                (p.peer.is_empty(), p.last_used.load(Ordering::Relaxed))
            });
        }
        map.insert(handle, Arc::new(p));
    }

    /// The list `handle`, marked as used now.
    pub(crate) fn get(&self, handle: Key) -> Option<Arc<Prepped>> {
        let p = self.lock().get(handle).cloned()?;
        p.last_used
            .store(self.uses.fetch_add(1, Ordering::Relaxed), Ordering::Relaxed);
        Some(p)
    }

    pub(crate) fn remove(&self, handle: Key) {
        self.lock().remove(handle);
    }
}
