//! Postings told without the ledger's lock. A post that ended well inside
//! the call (or is in flight) and that nothing else needs to hear of now
//! is the data path's hottest event: the caller's thread writes it to a
//! ring of its own — plain atomic stores, no lock, no read-modify-write —
//! and the ledger applies every ring, in order, before anything reads or
//! writes its tables (`Ledger::lock`). So no reader sees the tables
//! without them, and an event a thread emits after its post is applied
//! after it: per-thread order is the program's order, and an event of
//! another thread that follows a post (a release the program synchronised
//! with it) finds the post applied first.
//!
//! Readers that skip the lock while nothing changed (the snapshot cache,
//! the exposition cache, the publisher's look) ask [`Deferred::pending`]
//! first. A full ring refuses the post: the caller records it the usual
//! way, which applies the ring before it.

use std::cell::RefCell;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, RwLock, Weak};

/// Postings one thread may hold before it records the usual way.
const CAPACITY: u64 = 256;
/// Words per posting: the handle (with [`ENDED`]), posted and ended, in
/// nanoseconds since the ledger's start.
const WORDS: usize = 3;
/// Set in the handle word when the posting ended within the call.
const ENDED: u64 = 1 << 63;

/// One thread's postings not yet applied: a single-producer ring (the
/// owning thread) with a single consumer at a time (the ledger's lock).
struct Ring {
    words: Box<[AtomicU64]>,
    /// Next to read; written by the consumer only.
    head: AtomicU64,
    /// Next to write; written by the owning thread only.
    tail: AtomicU64,
}

impl Ring {
    fn new() -> Ring {
        Ring {
            words: (0..CAPACITY as usize * WORDS).map(|_| AtomicU64::new(0)).collect(),
            head: AtomicU64::new(0),
            tail: AtomicU64::new(0),
        }
    }

    /// The owning thread's write; `false` when the ring is full.
    fn push(&self, entry: [u64; WORDS]) -> bool {
        let tail = self.tail.load(Ordering::Relaxed);
        if tail.wrapping_sub(self.head.load(Ordering::Acquire)) >= CAPACITY {
            return false;
        }
        let at = (tail % CAPACITY) as usize * WORDS;
        for (word, value) in self.words[at..at + WORDS].iter().zip(entry) {
            word.store(value, Ordering::Relaxed);
        }
        // Publishes the words above to the consumer's acquire.
        self.tail.store(tail.wrapping_add(1), Ordering::Release);
        true
    }

    fn pending(&self) -> bool {
        self.tail.load(Ordering::Acquire) != self.head.load(Ordering::Acquire)
    }

    /// Hands every posting written so far to `f`, oldest first. One caller
    /// at a time (under the ledger's lock).
    fn take(&self, f: &mut impl FnMut([u64; WORDS])) -> bool {
        let head = self.head.load(Ordering::Relaxed);
        let tail = self.tail.load(Ordering::Acquire);
        let mut n = head;
        while n != tail {
            let at = (n % CAPACITY) as usize * WORDS;
            let mut entry = [0; WORDS];
            for (e, word) in entry.iter_mut().zip(&self.words[at..at + WORDS]) {
                *e = word.load(Ordering::Relaxed);
            }
            f(entry);
            n = n.wrapping_add(1);
        }
        // The slots read above may be written again from now on.
        self.head.store(tail, Ordering::Release);
        head != tail
    }
}

/// A posting as the ledger applies it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeferredPosting {
    pub handle: u64,
    /// Nanoseconds since the ledger's start.
    pub posted: u64,
    /// Ended within the call, at this many nanoseconds since the start.
    pub ended: Option<u64>,
}

/// The rings of one ledger: every thread that deferred a posting to it.
#[derive(Default)]
pub struct Deferred {
    rings: RwLock<Vec<Arc<Ring>>>,
    /// A ring was ever taken: a ledger nobody deferred to never looks.
    used: AtomicBool,
}

thread_local! {
    /// This thread's ring in each ledger it deferred to.
    static MINE: RefCell<Vec<(Weak<Deferred>, Arc<Ring>)>> = const { RefCell::new(Vec::new()) };
}

impl Deferred {
    /// Writes `p` to this thread's ring of `this`; `false` when it cannot
    /// (the ring is full, the handle too large, the thread ending): record
    /// it the usual way then.
    pub fn push(this: &Arc<Deferred>, p: DeferredPosting) -> bool {
        if p.handle & ENDED != 0 {
            return false;
        }
        let entry = [
            p.handle | if p.ended.is_some() { ENDED } else { 0 },
            p.posted,
            p.ended.unwrap_or(0),
        ];
        let mine = Arc::as_ptr(this);
        MINE.try_with(|rings| {
            let mut rings = rings.borrow_mut();
            if let Some((_, ring)) = rings.iter().find(|(d, _)| std::ptr::eq(d.as_ptr(), mine)) {
                return ring.push(entry);
            }
            // Ledgers gone since: their rings go with them.
            rings.retain(|(d, _)| d.strong_count() > 0);
            let ring = Arc::new(Ring::new());
            this.rings.write().unwrap_or_else(|e| e.into_inner()).push(ring.clone());
            this.used.store(true, Ordering::Release);
            rings.push((Arc::downgrade(this), ring.clone()));
            ring.push(entry)
        })
        .unwrap_or(false)
    }

    /// Some ring holds a posting not yet applied.
    pub fn pending(&self) -> bool {
        self.used.load(Ordering::Acquire)
            && self
                .rings
                .read()
                .unwrap_or_else(|e| e.into_inner())
                .iter()
                .any(|r| r.pending())
    }

    /// Hands every posting not yet applied to `f`, each thread's in its
    /// order; rings of threads that ended are dropped once empty. Call it
    /// under the ledger's lock. Whether there was any.
    pub fn take(&self, mut f: impl FnMut(DeferredPosting)) -> bool {
        if !self.used.load(Ordering::Acquire) {
            return false;
        }
        let mut any = false;
        let mut orphaned = false;
        for ring in self.rings.read().unwrap_or_else(|e| e.into_inner()).iter() {
            any |= ring.take(&mut |[handle, posted, ended]| {
                f(DeferredPosting {
                    handle: handle & !ENDED,
                    posted,
                    ended: (handle & ENDED != 0).then_some(ended),
                })
            });
            orphaned |= Arc::strong_count(ring) == 1;
        }
        if orphaned {
            // Only the list holds them: their threads ended, and what they
            // wrote was just taken (a new write needs a thread).
            self.rings
                .write()
                .unwrap_or_else(|e| e.into_inner())
                .retain(|r| Arc::strong_count(r) > 1 || r.pending());
        }
        any
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn posting(handle: u64, ended: bool) -> DeferredPosting {
        DeferredPosting {
            handle,
            posted: handle * 10,
            ended: ended.then_some(handle * 10 + 5),
        }
    }

    #[test]
    fn postings_come_back_in_each_threads_order_and_once() {
        let d = Arc::new(Deferred::default());
        assert!(!d.pending());
        for h in 1..=5 {
            assert!(Deferred::push(&d, posting(h, h % 2 == 0)));
        }
        let other = {
            let d = d.clone();
            std::thread::spawn(move || Deferred::push(&d, posting(100, true)))
        };
        assert!(other.join().unwrap());
        assert!(d.pending());
        let mut seen = Vec::new();
        assert!(d.take(|p| seen.push(p)));
        let mine: Vec<DeferredPosting> = seen.iter().copied().filter(|p| p.handle < 100).collect();
        assert_eq!(mine, (1..=5).map(|h| posting(h, h % 2 == 0)).collect::<Vec<_>>());
        assert!(seen.contains(&posting(100, true)));
        assert!(!d.pending());
        assert!(!d.take(|_| panic!("taken twice")));
        // The ended thread's ring is gone; this thread's stays.
        assert_eq!(d.rings.read().unwrap().len(), 1);
    }

    #[test]
    fn a_full_ring_refuses_and_takes_again_once_emptied() {
        let d = Arc::new(Deferred::default());
        for h in 0..CAPACITY {
            assert!(Deferred::push(&d, posting(h, false)));
        }
        assert!(!Deferred::push(&d, posting(CAPACITY, false)), "full");
        let mut n = 0;
        d.take(|_| n += 1);
        assert_eq!(n, CAPACITY);
        assert!(Deferred::push(&d, posting(7, true)));
        let mut seen = Vec::new();
        d.take(|p| seen.push(p));
        assert_eq!(seen, vec![posting(7, true)]);
    }

    #[test]
    fn a_handle_that_needs_the_flag_bit_is_refused() {
        let d = Arc::new(Deferred::default());
        let p = DeferredPosting {
            handle: ENDED | 1,
            posted: 1,
            ended: None,
        };
        assert!(!Deferred::push(&d, p));
        assert!(!d.pending());
    }
}
