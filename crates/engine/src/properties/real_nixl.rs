//! 4. The same against the real NIXL runtime (UCX registering DRAM).

use super::*;

// ---------------------------------------------------------------------------
// 4. The same against the real NIXL runtime (UCX registering DRAM).

/// Counts the registrar's registration calls.
pub(super) struct Counting<R: Registrar> {
    pub(super) inner: R,
    pub(super) calls: usize,
}

impl<R: Registrar> Registrar for Counting<R> {
    type Handle = R::Handle;
    type Backing = R::Backing;

    fn preflight(&mut self) -> Result<RuntimeFacts, Failure> {
        self.inner.preflight()
    }
    fn ensure_backend(&mut self, name: &str) -> Result<Option<Duration>, Failure> {
        self.inner.ensure_backend(name)
    }
    fn allocate(&mut self, spec: &GroupSpec, count: usize, size: usize) -> Result<(Vec<Region>, R::Backing), Failure> {
        self.inner.allocate(spec, count, size)
    }
    fn probe(&self) -> &dyn MemoryProbe {
        self.inner.probe()
    }
    fn register(&mut self, spec: &GroupSpec, regions: &[Region]) -> Result<R::Handle, ListFailure> {
        self.calls += 1;
        self.inner.register(spec, regions)
    }
    fn deregister(&mut self, handle: R::Handle) -> Result<(), Unreleased<R::Handle>> {
        self.inner.deregister(handle)
    }
}

/// One region of a real-NIXL case, carved from the test's buffer.
#[derive(Debug, Clone, Copy)]
pub(super) enum Carve {
    Slice { off: usize, len: usize },
    Null { len: usize },
    Zero { off: usize },
}

pub(super) const NIXL_BUF: usize = 1 << 20;

pub(super) fn carve() -> impl Strategy<Value = Carve> {
    prop_oneof![
        60 => (0..NIXL_BUF, 1usize..0x4000).prop_map(|(off, len)| {
            let off = off.min(NIXL_BUF - 1);
            Carve::Slice { off, len: len.min(NIXL_BUF - off) }
        }),
        1 => (1usize..0x4000).prop_map(|len| Carve::Null { len }),
        1 => (0..NIXL_BUF).prop_map(|off| Carve::Zero { off }),
    ]
}

/// Descriptors NIXL's own serialized local metadata lists: the sum of the
/// `|n` counts of every `nixlSDList` after the `nixlSecElms` marker.
///
/// Not the byte length: after a failed registerMem NIXL keeps an empty
/// (DRAM, UCX) section in its metadata (no descriptor in it) until a later
/// deregistration empties the section again.
pub(super) fn nixl_descriptors(md: &[u8]) -> Result<u64, String> {
    let marker = b"nixlSecElms";
    let start = md
        .windows(marker.len())
        .position(|w| w == marker)
        .ok_or("no nixlSecElms in NIXL metadata")?;
    let count_tag: &[u8] = b"|n\x08\0\0\0\0\0\0\0";
    let mut total = 0;
    let mut i = start;
    while let Some(p) = md[i..].windows(count_tag.len()).position(|w| w == count_tag) {
        let at = i + p + count_tag.len();
        let bytes: [u8; 8] = md
            .get(at..at + 8)
            .and_then(|b| b.try_into().ok())
            .ok_or("truncated descriptor count")?;
        total += u64::from_le_bytes(bytes);
        i = at + 8;
    }
    Ok(total)
}

pub(super) fn nixl_lib_dir() -> PathBuf {
    let p = std::env::var_os("NIXL_LIB_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(".deps/nixl/.nixl_cu12.mesonpy.libs"));
    assert!(
        p.join("libnixl_capi.so").is_file(),
        "NIXL_LIB_DIR: {} has no libnixl_capi.so; run `bash scripts/setup.sh` (make test does)",
        p.display()
    );
    p
}

#[test]
pub(super) fn real_nixl_registers_random_region_sets_all_or_nothing() {
    use crate::lifecycle::registrar::NixlRegistrar;
    use crate::nixl::{discover, load};
    let loaded = load(discover(Some(&nixl_lib_dir()), &config::ProcessEnv)).expect("NIXL loads");
    let mut reg = Counting {
        inner: NixlRegistrar::new("nixl-agent-properties", Ok(loaded)),
        calls: 0,
    };
    reg.preflight().expect("NIXL agent");
    reg.ensure_backend("UCX").expect("UCX backend");
    let metadata = |r: &Counting<NixlRegistrar>| {
        let md = r.inner.local_md().expect("metadata");
        nixl_descriptors(&md).expect("NIXL metadata layout")
    };
    assert_eq!(metadata(&reg), 0, "a fresh NIXL agent describes no memory");
    let buf = vec![0x5au8; NIXL_BUF];
    let base = buf.as_ptr() as usize;
    let reg = RefCell::new(reg);
    let tally = RefCell::new(BTreeMap::<String, usize>::new());
    let check = |(carves, validate): (Vec<Carve>, bool)| -> Result<(), TestCaseError> {
        let mut reg = reg.borrow_mut();
        let regions: Vec<Region> = carves
            .iter()
            .map(|c| match *c {
                Carve::Slice { off, len } => Region::new(base + off, len, 0),
                Carve::Null { len } => Region::new(0, len, 0),
                Carve::Zero { off } => Region::new(base + off, 0, 0),
            })
            .collect();
        let spec = GroupSpec::provided("props", Kind::Aux, MemType::Dram, regions.clone()).with_validate(validate);
        // What validation must say: the first null or empty region, else
        // the first overlap, else nothing (the buffer is mapped and 1 MiB
        // is far below any memlock limit a test runs under).
        let first_bad = regions.iter().position(|r| r.len == 0 || r.addr == 0);
        let overlap = (0..regions.len()).any(|i| (i + 1..regions.len()).any(|j| overlaps(&regions[i], &regions[j])));
        let twins = (0..regions.len()).any(|i| (i + 1..regions.len()).any(|j| regions[i] == regions[j]));
        let outcome = if validate {
            match validate_group(&spec, &regions, reg.probe(), 0) {
                Err(rej) => {
                    let want = match first_bad {
                        Some(i) if regions[i].len == 0 => (Reason::ZeroLength, Some(i)),
                        Some(i) => (Reason::InvalidAddress, Some(i)),
                        None if twins => (Reason::DuplicateRegions, rej.region),
                        None => (Reason::OverlappingRegions, rej.region),
                    };
                    prop_assert!(first_bad.is_some() || overlap, "rejected a valid set: {:?}", rej);
                    prop_assert_eq!((rej.reason, rej.region), want);
                    format!("rejected by validation: {}", rej.reason)
                }
                Ok(()) => {
                    prop_assert!(first_bad.is_none() && !overlap, "validation passed {:?}", regions);
                    String::new()
                }
            }
        } else {
            String::new()
        };
        let outcome = if !outcome.is_empty() {
            outcome
        } else {
            reg.calls = 0;
            let outcome = register_all(&mut *reg, &spec, &regions);
            let budget = 1 + 2 * (usize::BITS - regions.len().leading_zeros()) as usize;
            prop_assert!(
                reg.calls <= budget,
                "{} NIXL calls for {} regions",
                reg.calls,
                regions.len()
            );
            match outcome {
                Ok(handles) => {
                    prop_assert_eq!(handles.len(), 1, "one NIXL call for the group");
                    prop_assert!(
                        !regions.iter().any(|r| r.addr == 0 && r.len > 0),
                        "NIXL registered a null region: {:?}",
                        regions
                    );
                    prop_assert_eq!(metadata(&reg), regions.len() as u64, "NIXL's own count of descriptors");
                    prop_assert!(release_all(&mut *reg, handles).is_clean());
                    "registered and released".to_string()
                }
                Err(Refused { failure: f, .. }) => {
                    prop_assert!(!validate, "NIXL refused a validated set: {:?}", f);
                    let i = f.region.expect("a region to blame");
                    prop_assert_eq!(f.rolled_back, i);
                    // UCX refuses only null-with-length; it takes empty
                    // regions, duplicates and overlaps.
                    prop_assert!(
                        regions[i].addr == 0,
                        "NIXL refused a non-null region: {:?} ({})",
                        regions[i],
                        f.message
                    );
                    let what = if regions[i].addr == 0 { "null" } else { "empty" };
                    format!("refused by NIXL: {} on a {what} region", f.reason)
                }
            }
        };
        // NIXL's own view: nothing left.
        prop_assert_eq!(metadata(&reg), 0, "NIXL still describes memory after: {}", outcome);
        *tally.borrow_mut().entry(outcome).or_default() += 1;
        Ok(())
    };
    // Every path once, deterministically: NIXL refusing the third region
    // (two to roll back), validation catching each rule, a clean set.
    let slice = |off, len| Carve::Slice { off, len };
    for fixed in [
        (vec![slice(0, 4096), slice(8192, 4096), Carve::Null { len: 64 }], false),
        (vec![slice(0, 4096), Carve::Null { len: 64 }], true),
        (vec![slice(0, 4096), Carve::Zero { off: 8192 }], true),
        (vec![slice(0, 4096), slice(2048, 4096)], true),
        (vec![slice(0, 4096), slice(0, 4096), Carve::Zero { off: 8192 }], false),
        (vec![slice(0, 4096), slice(4096, 4096)], true),
    ] {
        check(fixed.clone()).unwrap_or_else(|e| panic!("{fixed:?}: {e}"));
    }
    let mut runner = TestRunner::new(PtConfig {
        max_shrink_iters: 50,
        ..cases(48)
    });
    runner
        .run(&(prop::collection::vec(carve(), 1..=32), any::<bool>()), check)
        .unwrap();
    let tally = tally.into_inner();
    println!("real NIXL outcomes: {tally:?}");
    for path in [
        "registered and released",
        "refused by NIXL: nixl_backend_error on a null region",
        "rejected by validation: invalid_address",
        "rejected by validation: zero_length",
        "rejected by validation: overlapping_regions",
    ] {
        assert!(tally.contains_key(path), "{path} never happened: {tally:?}");
    }
    drop(buf);
}
