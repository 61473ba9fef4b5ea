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
//! - `nixlStrideDesc` (NIXL 1.5): a `nixlBasicDesc`, then `stride` and
//!   `count`: 40 bytes, proven per process ([`stride_test`]); a NIXL whose
//!   strided descriptors read otherwise has its strided lists not read.
//! - `std::string` (C++11 ABI): data pointer at 0, length at 8, 32 bytes.
//! - `nixl_notifs_t` (libstdc++'s `unordered_map<string, vector<string>>`):
//!   the first node at 16; a node's next node at 0, its key at 8, its
//!   message vector at 40. Proven with NIXL's own `operator[]` of it.
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

/// The size of NIXL 1.5's `nixlStrideDesc` (`nixlBasicDesc`, then the
/// `stride` and `count` of its run of blocks): proven per process by
/// [`stride_test`], since releases differ (later NIXL adds a metadata
/// pointer and a start index).
pub const STRIDE_DESC: usize = 40;

/// A strided (compressed) transfer list, `nixlDescList<nixlStrideDesc>`:
/// each descriptor a run of `count` blocks of `len` bytes, `stride` apart.
#[derive(Clone, Copy)]
pub struct StrideList<'a> {
    pub mem_type: i32,
    runs: &'a [[u64; 5]],
}

impl StrideList<'_> {
    /// Each run's block length and count, in order: the prepared list's
    /// flat block indices count through them.
    pub fn runs(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.runs.iter().map(|r| (r[1], r[4]))
    }
}

/// The caller's strided list, read as 40-byte descriptors (addr, len,
/// devId, stride, count); `None` when it does not read as one.
///
/// # Safety
/// `list` is null or a live `nixlDescList<nixlStrideDesc>` for `'a`, of a
/// NIXL whose [`stride_test`] passed.
pub unsafe fn stride_list<'a>(list: *const c_void) -> Option<StrideList<'a>> {
    // Safety: as the caller promises.
    let (begin, n) = unsafe { elements(list, STRIDE_DESC)? };
    if n > (1 << 24) || (n > 0 && !(begin as usize).is_multiple_of(8)) {
        return None;
    }
    let runs = if n == 0 {
        &[][..]
    } else {
        // Safety: `n` descriptors of five 8-byte words, aligned, live.
        unsafe { std::slice::from_raw_parts(begin.cast::<[u64; 5]>(), n) }
    };
    Some(StrideList {
        // Safety: as the caller promises.
        mem_type: unsafe { mem_type(list) },
        runs,
    })
}

/// What [`stride_test`] needs of `libnixl_build.so`.
pub struct StrideBuilders {
    /// `nixlDescList<nixlStrideDesc>::nixlDescList(const nixl_mem_t&, const int&)`
    pub list_new: usize,
    /// `nixlDescList<nixlStrideDesc>::addDesc(const nixlStrideDesc&)`
    pub list_add: usize,
    /// `nixlDescList<nixlStrideDesc>::~nixlDescList()`
    pub list_drop: usize,
}

pub(super) const STRIDE_SYMBOLS: [&str; 3] = [
    "_ZN12nixlDescListI14nixlStrideDescEC1ERK10nixl_mem_tRKi",
    "_ZN12nixlDescListI14nixlStrideDescE7addDescERKS0_",
    "_ZN12nixlDescListI14nixlStrideDescED1Ev",
];

/// NIXL's own strided list takes two descriptors (`addDesc` copies
/// `sizeof(nixlStrideDesc)` bytes of each) and must read back as exactly
/// those two 40-byte descriptors: a NIXL whose descriptor is another size
/// reads as another count of bytes, and its strided lists are not read.
///
/// # Safety
/// `b` holds the addresses of those functions of the loaded NIXL.
pub(super) unsafe fn stride_test(b: &StrideBuilders) -> Result<(), String> {
    type ListNew = unsafe extern "C-unwind" fn(*mut c_void, *const i32, *const i32);
    type ListAdd = unsafe extern "C-unwind" fn(*mut c_void, *const c_void);
    type ListDrop = unsafe extern "C-unwind" fn(*mut c_void);
    // Safety: each address is the named function, whose signature these
    // types spell.
    let (list_new, list_add, list_drop) = unsafe {
        (
            std::mem::transmute::<usize, ListNew>(b.list_new),
            std::mem::transmute::<usize, ListAdd>(b.list_add),
            std::mem::transmute::<usize, ListDrop>(b.list_drop),
        )
    };
    let want: [[u64; 5]; 2] = [[0x7f00_0000_1000, 4096, 3, 8192, 17], [0x2000, 512, 0, 512, 9]];
    let mut list = Room([0; 128]);
    let (mem, reserve) = (DRAM_SEG, 0i32);
    // Safety: NIXL's constructor builds the list in a room larger than the
    // class; each descriptor is a room of plain words (larger than any
    // release's descriptor, the rest zero) that `addDesc` copies; the list's
    // destructor runs once, after it is read.
    unsafe {
        list_new(list.0.as_mut_ptr().cast(), &mem, &reserve);
        for d in &want {
            let mut room = Room([0; 128]);
            for (i, w) in d.iter().enumerate() {
                room.0[i * 8..i * 8 + 8].copy_from_slice(&w.to_ne_bytes());
            }
            list_add(list.0.as_mut_ptr().cast(), room.0.as_ptr().cast());
        }
    }
    // Safety: the list NIXL just built, live until dropped below.
    let read = unsafe { stride_list(list.0.as_ptr().cast()) }.map(|l| (l.mem_type, l.runs.to_vec()));
    // Safety: NIXL's destructor of the list it built, once.
    unsafe { list_drop(list.0.as_mut_ptr().cast()) };
    match read {
        Some((m, got)) if m == DRAM_SEG && got == want => Ok(()),
        Some((m, got)) => Err(format!(
            "a strided list NIXL built reads back as type {m} with {got:x?}, not type {DRAM_SEG} with {want:x?}"
        )),
        None => Err(format!(
            "a strided list NIXL built does not read as {STRIDE_DESC}-byte descriptors"
        )),
    }
}

/// A `std::vector<int>`'s elements (begin and end pointers at 0 and 8, as
/// libstdc++ lays out every vector); empty for a null pointer or one that
/// does not read as a vector of at most 2^24 elements.
///
/// # Safety
/// `v` is null or points to a live `std::vector<int>` for `'a`.
pub unsafe fn ints<'a>(v: *const c_void) -> &'a [i32] {
    if v.is_null() {
        return &[];
    }
    // Safety: begin at 0, end at 8, live for the call.
    let (begin, end) = unsafe { (v.cast::<*const i32>().read(), v.cast::<*const i32>().add(1).read()) };
    let bytes = (end as usize).wrapping_sub(begin as usize);
    if begin.is_null() || end < begin || !bytes.is_multiple_of(4) || bytes / 4 > (1 << 24) {
        return &[];
    }
    // Safety: the vector's elements, between its begin and end.
    unsafe { std::slice::from_raw_parts(begin, bytes / 4) }
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
    /// `nixl_notifs_t::operator[](const std::string&)`: the instance of
    /// libstdc++'s template NIXL's own `getNotifs` inserts with (in
    /// `libnixl.so`).
    pub notifs_index: usize,
    /// libstdc++'s `operator delete(void*)`, which frees what that
    /// `operator[]` allocated.
    pub delete: usize,
}

pub(super) const BUILDER_SYMBOLS: [&str; 7] = [
    "_ZN12nixlDescListI12nixlBlobDescEC1ERK10nixl_mem_tRKi",
    "_ZN12nixlDescListI12nixlBlobDescE7addDescERKS0_",
    "_ZN12nixlDescListI12nixlBlobDescED1Ev",
    "_ZN13nixlBasicDescC1ERKmS1_S1_",
    "_ZN12nixlBlobDescC1ERK13nixlBasicDescRKNSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEE",
    "_ZNSt8__detail9_Map_baseINSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEESt4pairIKS6_St6vectorIS6_SaIS6_EEESaISC_ENS_10_Select1stESt8equal_toIS6_ESt4hashIS6_ENS_18_Mod_range_hashingENS_20_Default_ranged_hashENS_20_Prime_rehash_policyENS_17_Hashtable_traitsILb1ELb0ELb1EEELb1EEixERS8_",
    "_ZdlPv",
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
        // Safety: as the caller promises.
        Some((m, got)) if m == VRAM_SEG && got == want => unsafe { notifs_test(b) },
        Some((m, got)) => Err(format!(
            "a descriptor list NIXL built reads back as type {m} with {got:x?}, not type {VRAM_SEG} with {want:x?}"
        )),
        None => Err("a descriptor list NIXL built does not read as a vector of 56-byte descriptors".into()),
    }
}

/// An empty `nixl_notifs_t` as libstdc++'s default constructor leaves it:
/// one bucket, the map's own (`_M_single_bucket`), no node, a load factor
/// of 1.
#[repr(C)]
struct EmptyMap {
    buckets: *mut *mut u8,
    bucket_count: usize,
    before_begin: *mut u8,
    element_count: usize,
    max_load_factor: f32,
    next_resize: usize,
    single_bucket: *mut u8,
}

/// NIXL's own `operator[]` of a `nixl_notifs_t` (what its `getNotifs`
/// inserts peers with) inserts two peers into an empty map; the map is read
/// back with [`notif_nodes`] and must hold exactly those peers, each with
/// its empty message vector where `operator[]` said it is. The nodes and
/// buckets it allocated are freed with libstdc++'s `operator delete` (the
/// keys are short: kept inline, nothing else to free).
///
/// # Safety
/// `b` holds the addresses of those functions of the loaded NIXL.
unsafe fn notifs_test(b: &Builders) -> Result<(), String> {
    type Index = unsafe extern "C-unwind" fn(*mut c_void, *const c_void) -> *mut u8;
    type Delete = unsafe extern "C" fn(*mut c_void);
    // Safety: the named functions, whose signatures these types spell.
    let (index, delete) = unsafe {
        (
            std::mem::transmute::<usize, Index>(b.notifs_index),
            std::mem::transmute::<usize, Delete>(b.delete),
        )
    };
    let mut map = EmptyMap {
        buckets: std::ptr::null_mut(),
        bucket_count: 1,
        before_begin: std::ptr::null_mut(),
        element_count: 0,
        max_load_factor: 1.0,
        next_resize: 0,
        single_bucket: std::ptr::null_mut(),
    };
    map.buckets = &mut map.single_bucket;
    let keys: [&[u8]; 2] = [b"nixl-agent-a", b"nixl-agent-b"];
    let mut values = [std::ptr::null_mut::<u8>(); 2];
    for (key, value) in keys.iter().zip(values.iter_mut()) {
        let mut room = std::mem::MaybeUninit::<EmptyString>::uninit();
        let k = EmptyString::init(&mut room);
        // Safety: a short key, written into the inline buffer of the string
        // just built (at most 15 bytes and a NUL).
        unsafe {
            let s = &mut *(k as *mut EmptyString);
            s.local[..key.len()].copy_from_slice(key);
            s.local[key.len()] = 0;
            s.len = key.len();
        }
        // Safety: NIXL's `operator[]` on a map in libstdc++'s empty state,
        // with a live key it copies.
        *value = unsafe { index((&mut map as *mut EmptyMap).cast(), k) };
    }
    let mut read: Vec<(Vec<u8>, usize)> = Vec::new();
    // Safety: the map NIXL's code just filled, live until freed below.
    unsafe {
        notif_nodes((&map as *const EmptyMap).cast(), |key, messages| {
            read.push((key.to_vec(), messages.len()));
        });
    }
    // Where each node's vector is, by [`notif_nodes`]'s offsets: at 40.
    let mut node = map.before_begin;
    let mut at = Vec::new();
    let mut nodes = Vec::new();
    while !node.is_null() && nodes.len() < 4 {
        nodes.push(node);
        // Safety: a node NIXL's code allocated; 40 is inside it.
        at.push(unsafe { node.add(40) });
        // Safety: its first word is the next node.
        node = unsafe { node.cast::<*mut u8>().read() };
    }
    let element_count = map.element_count;
    // Safety: each node and the bucket array (when not the map's own) were
    // allocated by libstdc++'s `operator new` in NIXL's `operator[]`; the
    // keys are inline and the vectors empty, so nothing else is owned.
    unsafe {
        for n in &nodes {
            delete(n.cast());
        }
        if !std::ptr::eq(map.buckets, &map.single_bucket) {
            delete(map.buckets.cast());
        }
    }
    let mut got: Vec<Vec<u8>> = read.iter().map(|(k, _)| k.clone()).collect();
    got.sort();
    let want: Vec<Vec<u8>> = keys.iter().map(|k| k.to_vec()).collect();
    let placed = values.iter().all(|v| at.contains(v));
    if got == want && read.iter().all(|(_, n)| *n == 0) && placed && element_count == 2 {
        Ok(())
    } else {
        Err(format!(
            "a notification map NIXL filled reads back as {} peers {:?} (vectors where operator[] put them: {placed}), not {:?}",
            element_count,
            got.iter().map(|k| String::from_utf8_lossy(k).into_owned()).collect::<Vec<_>>(),
            keys.iter().map(|k| String::from_utf8_lossy(k).into_owned()).collect::<Vec<_>>(),
        ))
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The self-test on the real NIXL of set-up (`NIXL_LIB_DIR`, as `make
    /// test` exports it): the descriptor list and the notification map,
    /// each built by NIXL's own code, read back as this module reads the
    /// program's.
    #[test]
    fn the_self_test_proves_every_layout_read_on_the_real_nixl() {
        let dir = std::env::var("NIXL_LIB_DIR").unwrap_or_else(|_| {
            concat!(env!("CARGO_MANIFEST_DIR"), "/../../.deps/nixl/.nixl_cu12.mesonpy.libs").into()
        });
        let path = std::ffi::CString::new(format!("{dir}/libnixl.so")).unwrap();
        // Safety: loads NIXL's library (its constructors only register
        // NIXL's own statics) and looks up the named functions.
        let f: Vec<usize> = unsafe {
            let h = libc::dlopen(path.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL);
            assert!(!h.is_null(), "dlopen {dir}/libnixl.so");
            BUILDER_SYMBOLS
                .iter()
                .map(|s| {
                    let c = std::ffi::CString::new(*s).unwrap();
                    libc::dlsym(h, c.as_ptr()) as usize
                })
                .collect()
        };
        assert!(!f.contains(&0), "every builder found: {f:x?}");
        let b = Builders {
            blob_list_new: f[0],
            blob_list_add: f[1],
            blob_list_drop: f[2],
            basic_new: f[3],
            blob_new: f[4],
            notifs_index: f[5],
            delete: f[6],
        };
        // Safety: those functions of the NIXL just loaded.
        assert_eq!(unsafe { notifs_test(&b) }, Ok(()));
        // Safety: as above.
        assert_eq!(unsafe { self_test(&b) }, Ok(()));
        // Safety: those functions of the NIXL just loaded.
        let s: Vec<usize> = unsafe {
            let h = libc::dlopen(path.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL);
            STRIDE_SYMBOLS
                .iter()
                .map(|s| {
                    let c = std::ffi::CString::new(*s).unwrap();
                    libc::dlsym(h, c.as_ptr()) as usize
                })
                .collect()
        };
        let strides = StrideBuilders {
            list_new: s[0],
            list_add: s[1],
            list_drop: s[2],
        };
        // Safety: those functions of the NIXL loaded above.
        let read = unsafe { stride_test(&strides) };
        assert_eq!(read, Ok(()), "NIXL 1.5.1's 40-byte strided descriptors");
    }
}
