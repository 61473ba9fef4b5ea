//! What the interposer reads of NIXL's C++ objects, pinned to the builds
//! it was proven against (NIXL 1.5.1, libstdc++'s C++11 ABI) and proven
//! again in every process before it reads anything (`self_test`):
//!
//! - `nixlDescList<T>`: a polymorphic class; the vtable pointer at 0, the
//!   memory type (`nixl_mem_t`, an `int`) at 8, its `std::vector<T>` at 16
//!   (begin, end, capacity pointers). NIXL's accessors are inline, so the
//!   layout is the only way in.
//! - `nixlBasicDesc`: `{ addr: uintptr_t, len: size_t, devId: uint64_t }`,
//!   24 bytes; `nixlBlobDesc` adds a `std::string metaInfo`: 56 bytes.
//! - `std::string` (C++11 ABI): data pointer at 0, length at 8.
//!
//! Nothing here writes to NIXL's objects, and nothing outlives the call it
//! was read in: a [`List`] borrows the caller's list for the hook's frame.

use std::ffi::c_void;

/// `nixl_mem_t` values (NIXL's `nixl_types.h`).
pub const DRAM_SEG: i32 = 0;
pub const VRAM_SEG: i32 = 1;

/// `nixlBasicDesc` as NIXL lays it out.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BasicDesc {
    pub addr: usize,
    pub len: usize,
    pub dev: u64,
}

/// `nixlBlobDesc`: a basic descriptor and its metadata string (not read).
#[repr(C)]
struct BlobDesc {
    basic: BasicDesc,
    _meta: [usize; 4],
}

const _: () = assert!(std::mem::size_of::<BasicDesc>() == 24);
const _: () = assert!(std::mem::size_of::<BlobDesc>() == 56);

/// Byte offsets in `nixlDescList<T>`.
const TYPE_AT: usize = 8;
const VECTOR_AT: usize = 16;

/// A descriptor list NIXL was handed, read where it lies: its memory type
/// and descriptors.
#[derive(Clone, Copy)]
pub struct List<'a> {
    /// `nixl_mem_t` as NIXL holds it (`DRAM_SEG`, `VRAM_SEG`, …).
    pub mem_type: i32,
    descs: Descs<'a>,
}

/// [`List::iter`]: a walk of the list's own slice.
pub struct Iter<'a>(Walk<'a>);

enum Walk<'a> {
    Basic(std::slice::Iter<'a, BasicDesc>),
    Blob(std::slice::Iter<'a, BlobDesc>),
}

impl Iterator for Iter<'_> {
    type Item = BasicDesc;

    fn next(&mut self) -> Option<BasicDesc> {
        match &mut self.0 {
            Walk::Basic(i) => i.next().copied(),
            Walk::Blob(i) => i.next().map(|b| b.basic),
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = match &self.0 {
            Walk::Basic(i) => i.len(),
            Walk::Blob(i) => i.len(),
        };
        (n, Some(n))
    }

    fn fold<B, F: FnMut(B, BasicDesc) -> B>(self, init: B, mut f: F) -> B {
        // One match for the whole walk, not one a descriptor.
        match self.0 {
            Walk::Basic(i) => i.fold(init, |a, d| f(a, *d)),
            Walk::Blob(i) => i.fold(init, |a, b| f(a, b.basic)),
        }
    }
}

impl ExactSizeIterator for Iter<'_> {}

#[derive(Clone, Copy)]
enum Descs<'a> {
    Basic(&'a [BasicDesc]),
    Blob(&'a [BlobDesc]),
}

impl<'a> List<'a> {
    pub fn len(&self) -> usize {
        match self.descs {
            Descs::Basic(d) => d.len(),
            Descs::Blob(d) => d.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The `i`th descriptor's address, length and device.
    pub fn get(&self, i: usize) -> Option<BasicDesc> {
        match self.descs {
            Descs::Basic(d) => d.get(i).copied(),
            Descs::Blob(d) => d.get(i).map(|b| b.basic),
        }
    }

    /// Each descriptor's address, length and device, in order (an exact
    /// size: a `collect` allocates once).
    pub fn iter(&self) -> Iter<'a> {
        match self.descs {
            Descs::Basic(d) => Iter(Walk::Basic(d.iter())),
            Descs::Blob(d) => Iter(Walk::Blob(d.iter())),
        }
    }

    /// The bytes of every descriptor.
    pub fn bytes(&self) -> u64 {
        self.iter().fold(0u64, |a, d| a.saturating_add(d.len as u64))
    }
}

/// The vector's element pointers, or `None` for a malformed one (end
/// before begin, or not a whole number of elements).
///
/// # Safety
/// `list` points to a live `nixlDescList<T>` of the proven layout.
unsafe fn elements(list: *const c_void, size: usize) -> Option<(*const u8, usize)> {
    if list.is_null() {
        return None;
    }
    let base = list.cast::<u8>();
    // Safety: the caller's list is live for the call; the vector's
    // pointers are at VECTOR_AT (proven by `self_test`).
    let (begin, end) = unsafe {
        (
            base.add(VECTOR_AT).cast::<*const u8>().read(),
            base.add(VECTOR_AT + 8).cast::<*const u8>().read(),
        )
    };
    let span = (end as usize).checked_sub(begin as usize)?;
    if span % size != 0 || (span > 0 && begin.is_null()) {
        return None;
    }
    Some((begin, span / size))
}

/// The memory type at `TYPE_AT`.
///
/// # Safety
/// As for [`elements`].
unsafe fn mem_type(list: *const c_void) -> i32 {
    // Safety: as the caller promises.
    unsafe { list.cast::<u8>().add(TYPE_AT).cast::<i32>().read() }
}

/// A registration list (`nixl_reg_dlist_t`), or `None` when it does not
/// read as one.
///
/// # Safety
/// `list` points to a live `nixlDescList<nixlBlobDesc>` for `'a`.
pub unsafe fn blob_list<'a>(list: *const c_void) -> Option<List<'a>> {
    // Safety: as the caller promises.
    let (begin, n) = unsafe { elements(list, std::mem::size_of::<BlobDesc>())? };
    let descs = if n == 0 {
        &[][..]
    } else {
        // Safety: `n` elements of NIXL's vector, live for the call.
        unsafe { std::slice::from_raw_parts(begin.cast::<BlobDesc>(), n) }
    };
    Some(List {
        // Safety: as the caller promises.
        mem_type: unsafe { mem_type(list) },
        descs: Descs::Blob(descs),
    })
}

/// A transfer list (`nixl_xfer_dlist_t`), or `None`.
///
/// # Safety
/// `list` points to a live `nixlDescList<nixlBasicDesc>` for `'a`.
pub unsafe fn basic_list<'a>(list: *const c_void) -> Option<List<'a>> {
    // Safety: as the caller promises.
    let (begin, n) = unsafe { elements(list, std::mem::size_of::<BasicDesc>())? };
    let descs = if n == 0 {
        &[][..]
    } else {
        // Safety: `n` elements of NIXL's vector, live for the call.
        unsafe { std::slice::from_raw_parts(begin.cast::<BasicDesc>(), n) }
    };
    Some(List {
        // Safety: as the caller promises.
        mem_type: unsafe { mem_type(list) },
        descs: Descs::Basic(descs),
    })
}

/// A `std::string` (C++11 ABI) as text, lossily; empty for a null pointer.
///
/// # Safety
/// `s` is null or points to a live `std::string` for `'a`.
pub unsafe fn string<'a>(s: *const c_void) -> std::borrow::Cow<'a, str> {
    if s.is_null() {
        return std::borrow::Cow::Borrowed("");
    }
    // Safety: data pointer at 0, length at 8, live for the call.
    let (data, len) = unsafe { (s.cast::<*const u8>().read(), s.cast::<usize>().add(1).read()) };
    if data.is_null() || len == 0 {
        return std::borrow::Cow::Borrowed("");
    }
    // Safety: the string's `len` bytes at `data`.
    let bytes = unsafe { std::slice::from_raw_parts(data, len) };
    String::from_utf8_lossy(bytes)
}

/// An empty `std::string` built in place (its data pointer at its own
/// inline buffer), to hand to a NIXL constructor that copies it.
#[repr(C)]
pub(super) struct EmptyString {
    data: *const u8,
    len: usize,
    local: [u8; 16],
}

impl EmptyString {
    /// Builds it at its final address (the pointer is to itself).
    pub(super) fn init(slot: &mut std::mem::MaybeUninit<EmptyString>) -> *const c_void {
        let p = slot.as_mut_ptr();
        // Safety: `p` is the slot's own, writable memory.
        unsafe {
            p.write(EmptyString {
                data: std::ptr::null(),
                len: 0,
                local: [0; 16],
            });
            (*p).data = (*p).local.as_ptr();
        }
        p.cast()
    }
}

/// What the self-test needs of `libnixl_build.so` (the descriptor lists'
/// code, exported): addresses of NIXL's own functions.
pub struct Builders {
    /// `nixlDescList<nixlBlobDesc>::nixlDescList(const nixl_mem_t&, const int&)`
    pub blob_list_new: usize,
    /// `nixlDescList<nixlBlobDesc>::addDesc(const nixlBlobDesc&)`
    pub blob_list_add: usize,
    /// `nixlDescList<nixlBlobDesc>::~nixlDescList()`
    pub blob_list_drop: usize,
    /// `nixlBasicDesc::nixlBasicDesc(const uintptr_t&, const size_t&, const uint64_t&)`
    pub basic_new: usize,
    /// `nixlBlobDesc::nixlBlobDesc(const nixlBasicDesc&, const std::string&)`
    pub blob_new: usize,
}

pub(super) const BUILDER_SYMBOLS: [&str; 5] = [
    "_ZN12nixlDescListI12nixlBlobDescEC1ERK10nixl_mem_tRKi",
    "_ZN12nixlDescListI12nixlBlobDescE7addDescERKS0_",
    "_ZN12nixlDescListI12nixlBlobDescED1Ev",
    "_ZN13nixlBasicDescC1ERKmS1_S1_",
    "_ZN12nixlBlobDescC1ERK13nixlBasicDescRKNSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEE",
];

/// Aligned room for one of NIXL's objects (larger than any it builds here).
#[repr(C, align(16))]
struct Room([u8; 128]);

/// NIXL builds a registration list of two descriptors (VRAM, out of
/// address order) with its own constructors; it is read back with
/// [`blob_list`] and must say exactly what was put in. `Err` says what
/// differed. The list is destroyed by NIXL's own destructor.
///
/// # Safety
/// `b` holds the addresses of those functions of a loaded
/// `libnixl_build.so`.
pub(super) unsafe fn self_test(b: &Builders) -> Result<(), String> {
    type ListNew = unsafe extern "C-unwind" fn(*mut c_void, *const i32, *const i32);
    type ListAdd = unsafe extern "C-unwind" fn(*mut c_void, *const c_void);
    type ListDrop = unsafe extern "C-unwind" fn(*mut c_void);
    type BasicNew = unsafe extern "C-unwind" fn(*mut c_void, *const usize, *const usize, *const u64);
    type BlobNew = unsafe extern "C-unwind" fn(*mut c_void, *const c_void, *const c_void);
    // Safety: each address is the named function of libnixl_build.so,
    // whose C++ signature these types spell in the Itanium ABI.
    let (list_new, list_add, list_drop, basic_new, blob_new) = unsafe {
        (
            std::mem::transmute::<usize, ListNew>(b.blob_list_new),
            std::mem::transmute::<usize, ListAdd>(b.blob_list_add),
            std::mem::transmute::<usize, ListDrop>(b.blob_list_drop),
            std::mem::transmute::<usize, BasicNew>(b.basic_new),
            std::mem::transmute::<usize, BlobNew>(b.blob_new),
        )
    };
    let want = [
        BasicDesc {
            addr: 0x7f00_dead_0000,
            len: 3 << 20,
            dev: 5,
        },
        BasicDesc {
            addr: 0x1000,
            len: 4096,
            dev: 2,
        },
    ];
    let mut list = Room([0; 128]);
    let mut empty = std::mem::MaybeUninit::<EmptyString>::uninit();
    let meta = EmptyString::init(&mut empty);
    let (mem, reserve) = (VRAM_SEG, 0i32);
    // Safety: NIXL's constructor builds the list in `list` (room larger
    // than the class); every descriptor is built by NIXL's constructors in
    // rooms of their own, copied in by `addDesc`; the basic and blob
    // descriptors hold no heap memory (an empty inline string), so only the
    // list needs its destructor, which runs once, after it is read.
    unsafe {
        list_new(list.0.as_mut_ptr().cast(), &mem, &reserve);
        for d in &want {
            let mut basic = Room([0; 128]);
            let mut blob = Room([0; 128]);
            basic_new(basic.0.as_mut_ptr().cast(), &d.addr, &d.len, &d.dev);
            blob_new(blob.0.as_mut_ptr().cast(), basic.0.as_ptr().cast(), meta);
            list_add(list.0.as_mut_ptr().cast(), blob.0.as_ptr().cast());
        }
    }
    // Safety: the list NIXL just built, live until dropped below.
    let read = unsafe { blob_list(list.0.as_ptr().cast()) }.map(|l| (l.mem_type, l.iter().collect::<Vec<_>>()));
    // Safety: NIXL's destructor of the list it built, once.
    unsafe { list_drop(list.0.as_mut_ptr().cast()) };
    match read {
        Some((m, got)) if m == VRAM_SEG && got == want => Ok(()),
        Some((m, got)) => Err(format!(
            "a descriptor list NIXL built reads back as type {m} with {got:x?}, not type {VRAM_SEG} with {want:x?}"
        )),
        None => Err("a descriptor list NIXL built does not read as a vector of 56-byte descriptors".into()),
    }
}

/// A `std::string`'s bytes (C++11 ABI).
///
/// # Safety
/// `s` points to a live `std::string` for `'a`.
unsafe fn bytes<'a>(s: *const u8) -> &'a [u8] {
    // Safety: data pointer at 0, length at 8, live for the call.
    let (data, len) = unsafe { (s.cast::<*const u8>().read(), s.cast::<usize>().add(1).read()) };
    if data.is_null() || len == 0 {
        return &[];
    }
    // Safety: the string's `len` bytes at `data`.
    unsafe { std::slice::from_raw_parts(data, len) }
}

/// The nodes of a `nixl_notifs_t` (libstdc++'s `unordered_map<string,
/// vector<string>>`): its first node at 16 (`_M_before_begin`), each node
/// its next pointer, then the key (a 32-byte string) and the vector's
/// begin/end at 40/48, each message a 32-byte string.
///
/// # Safety
/// `map` is null or a live `nixl_notifs_t` for `'a`.
unsafe fn notif_nodes<'a>(map: *const c_void, mut each: impl FnMut(&'a [u8], &'a [[u8; 32]])) {
    if map.is_null() {
        return;
    }
    // Safety: the live map's node list, bounded against a corrupt one.
    unsafe {
        let mut node = map.cast::<u8>().add(16).cast::<*const u8>().read();
        let mut seen = 0;
        while !node.is_null() && seen < 1 << 20 {
            let key = bytes(node.add(8));
            let begin = node.add(40).cast::<*const [u8; 32]>().read();
            let end = node.add(48).cast::<*const [u8; 32]>().read();
            let n = (end as usize).saturating_sub(begin as usize) / 32;
            let messages = if n == 0 || begin.is_null() {
                &[][..]
            } else {
                std::slice::from_raw_parts(begin, n)
            };
            each(key, messages);
            node = node.cast::<*const u8>().read();
            seen += 1;
        }
    }
}

/// How many messages each peer has in the map.
///
/// # Safety
/// As for [`notif_nodes`].
pub unsafe fn notif_counts(map: *const c_void) -> Vec<(Vec<u8>, usize)> {
    let mut out = Vec::new();
    // Safety: as the caller promises.
    unsafe { notif_nodes(map, |key, messages| out.push((key.to_vec(), messages.len()))) };
    out
}

/// The messages each peer has beyond what `before` counted (a call appends
/// to a peer's list), copied.
///
/// # Safety
/// As for [`notif_nodes`].
pub unsafe fn notifs_since(map: *const c_void, before: &[(Vec<u8>, usize)]) -> Vec<(String, Vec<Vec<u8>>)> {
    let mut out = Vec::new();
    // Safety: as the caller promises; each message a live string of the map.
    unsafe {
        notif_nodes(map, |key, messages| {
            let had = before.iter().find(|(k, _)| k == key).map_or(0, |(_, n)| *n);
            if messages.len() > had {
                let fresh = messages[had..].iter().map(|m| bytes(m.as_ptr()).to_vec()).collect();
                out.push((String::from_utf8_lossy(key).into_owned(), fresh));
            }
        })
    };
    out
}
