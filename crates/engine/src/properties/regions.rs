//! 2. Region sets: validate_group over a fake MemoryProbe.

use super::*;

// ---------------------------------------------------------------------------
// 2. Region sets: validate_group over a fake MemoryProbe.

#[derive(Debug, Clone)]
pub(super) struct FakeProbe {
    /// Sorted, disjoint, non-adjacent.
    maps: Result<Vec<(usize, usize)>, String>,
    memlock: Memlock,
    /// VRAM facts per address; anything else is device memory on `home`.
    cuda: BTreeMap<usize, Result<DevicePointer, Reason>>,
    home: u32,
}

impl MemoryProbe for FakeProbe {
    fn mapped_ranges(&self) -> Result<Vec<(usize, usize)>, String> {
        self.maps.clone()
    }
    fn device_pointer(&self, addr: usize, _device: u32) -> Result<DevicePointer, Reason> {
        self.cuda.get(&addr).copied().unwrap_or(Ok(DevicePointer {
            is_device: true,
            device: self.home,
        }))
    }
    fn memlock(&self) -> Memlock {
        self.memlock
    }
}

/// Mapped ranges from (gap, len) page counts, starting above the null page.
pub(super) fn maps_strategy() -> impl Strategy<Value = Vec<(usize, usize)>> {
    prop::collection::vec((1usize..64, 1usize..64), 1..6).prop_map(|v| {
        let mut at = 0x1000usize;
        v.into_iter()
            .map(|(gap, len)| {
                let start = at + gap * 0x1000;
                at = start + len * 0x1000;
                (start, at)
            })
            .collect()
    })
}

/// A region: mostly inside a mapping, sometimes anything at all.
pub(super) fn region_strategy(maps: Vec<(usize, usize)>, home: u32) -> impl Strategy<Value = Region> {
    let n = maps.len();
    let inside = (0..n, any::<prop::sample::Index>(), any::<prop::sample::Index>()).prop_map(move |(m, o, l)| {
        let (s, e) = maps[m];
        let off = o.index(e - s);
        let len = 1 + l.index(e - s - off);
        Region::new(s + off, len, home)
    });
    prop_oneof![
        10 => inside,
        1 => (any::<usize>(), any::<usize>(), 0u32..3).prop_map(|(a, l, d)| Region::new(a, l, d)),
        1 => (0usize..0x100000, 0usize..0x4000).prop_map(move |(a, l)| Region::new(a, l, home)),
        1 => (1usize..4096).prop_map(move |l| Region::new(0, l, home)),
        1 => (1usize..0x10000).prop_map(move |a| Region::new(a, 0, home)),
        1 => (0usize..4096, 1usize..8192).prop_map(move |(d, l)| Region::new(usize::MAX - d, l, home)),
    ]
}

pub(super) fn memlock_strategy() -> impl Strategy<Value = Memlock> {
    (
        prop_oneof![Just(None), any::<u64>().prop_map(Some), (0u64..0x200000).prop_map(Some)],
        any::<bool>(),
    )
        .prop_map(|(soft_limit, exempt)| Memlock {
            soft_limit,
            exempt,
            locked_bytes: None,
        })
}

#[derive(Debug, Clone)]
pub(super) struct RegionCase {
    spec: GroupSpec,
    regions: Vec<Region>,
    probe: FakeProbe,
    pinned: u64,
}

pub(super) fn region_case() -> impl Strategy<Value = RegionCase> {
    (maps_strategy(), any::<bool>(), 0u32..2).prop_flat_map(|(maps, vram, home)| {
        let regions = prop::collection::vec(region_strategy(maps.clone(), home), 0..12);
        let cuda = prop::collection::btree_map(
            0usize..0x100000,
            prop_oneof![
                Just(Err(Reason::CudaUnavailable)),
                Just(Ok(DevicePointer {
                    is_device: false,
                    device: 0
                })),
                (0u32..3).prop_map(|d| Ok(DevicePointer {
                    is_device: true,
                    device: d
                })),
            ],
            0..4,
        );
        let maps_res = prop_oneof![60 => Just(Ok(maps.clone())), 1 => Just(Err("no /proc".to_string()))];
        (
            regions,
            cuda,
            maps_res,
            memlock_strategy(),
            prop_oneof![Just(0u64), any::<u64>(), 0u64..0x100000],
        )
            .prop_map(move |(regions, mut cuda, maps, memlock, pinned)| {
                // Point some CUDA facts at the regions actually generated.
                let facts: Vec<_> = cuda.values().copied().collect();
                for (r, f) in regions.iter().zip(facts) {
                    cuda.insert(r.addr, f);
                }
                let mem = if vram { MemType::Vram } else { MemType::Dram };
                let mut spec = GroupSpec::provided("g", Kind::Aux, mem, regions.clone());
                spec.device = home;
                RegionCase {
                    spec,
                    regions,
                    probe: FakeProbe {
                        maps,
                        memlock,
                        cuda,
                        home,
                    },
                    pinned,
                }
            })
    })
}

pub(super) fn overlaps(a: &Region, b: &Region) -> bool {
    let (ae, be) = (a.addr as u128 + a.len as u128, b.addr as u128 + b.len as u128);
    (a.addr as u128) < be && (b.addr as u128) < ae
}

pub(super) fn covered(maps: &[(usize, usize)], r: &Region) -> bool {
    maps.iter()
        .any(|&(s, e)| r.addr >= s && r.addr as u128 + r.len as u128 <= e as u128)
}

/// Is `rej` a true statement about this case?
pub(super) fn justified(c: &RegionCase, rej: &Rejection) -> Result<(), String> {
    let r = |i: usize| c.regions[i];
    let idx = rej.region;
    let one = || idx.ok_or_else(|| format!("{:?} without a region", rej.reason));
    let vram = c.spec.mem_type == MemType::Vram;
    let ok = match rej.reason {
        Reason::ZeroLength => r(one()?).len == 0,
        Reason::InvalidAddress => {
            let x = r(one()?);
            x.len > 0 && (x.addr == 0 || x.addr.checked_add(x.len).is_none())
        }
        Reason::OverlappingRegions => {
            let i = one()?;
            (0..c.regions.len()).any(|j| j != i && overlaps(&r(i), &r(j)))
        }
        Reason::DuplicateRegions => {
            let i = one()?;
            (0..c.regions.len()).any(|j| j != i && r(i).addr == r(j).addr && r(i).len == r(j).len)
        }
        Reason::DeviceMismatch => {
            let i = one()?;
            r(i).device != c.spec.device
                || (vram
                    && matches!(c.probe.device_pointer(r(i).addr, c.spec.device), Ok(p) if p.device != c.spec.device))
        }
        Reason::UnmappedAddress => {
            let maps = c.probe.maps.as_ref().map_err(|e| e.clone())?;
            !vram && !covered(maps, &r(one()?))
        }
        Reason::MemlockLimit => {
            let total: u128 = c.regions.iter().map(|r| r.len as u128).sum::<u128>() + c.pinned as u128;
            !vram && idx.is_none() && c.probe.memlock.enforced_limit().is_some_and(|l| total > l as u128)
        }
        Reason::MemTypeMismatch => {
            vram && matches!(c.probe.device_pointer(r(one()?).addr, c.spec.device), Ok(p) if !p.is_device)
        }
        Reason::CudaUnavailable => vram && c.probe.device_pointer(r(one()?).addr, c.spec.device).is_err(),
        Reason::Unknown => !vram && c.probe.maps.is_err(),
        other => return Err(format!("validation never says {other}")),
    };
    if !ok {
        return Err(format!("{:?} is not true of this case", rej));
    }
    if let Some(i) = idx {
        if !rej.message.contains(&format!("region {i}")) {
            return Err(format!("message does not name region {i}: {}", rej.message));
        }
    }
    Ok(())
}

/// Whether the set is acceptable, decided naively (O(n²), u128 arithmetic).
pub(super) fn acceptable(c: &RegionCase) -> bool {
    let rs = &c.regions;
    let basic = rs
        .iter()
        .all(|r| r.len > 0 && r.addr != 0 && r.addr.checked_add(r.len).is_some() && r.device == c.spec.device);
    let disjoint = (0..rs.len()).all(|i| (i + 1..rs.len()).all(|j| !overlaps(&rs[i], &rs[j])));
    let memory = match c.spec.mem_type {
        MemType::Dram => match &c.probe.maps {
            Err(_) => false,
            Ok(maps) => {
                let total: u128 = rs.iter().map(|r| r.len as u128).sum::<u128>() + c.pinned as u128;
                rs.iter().all(|r| covered(maps, r))
                    && c.probe.memlock.enforced_limit().is_none_or(|l| total <= l as u128)
            }
        },
        MemType::Vram => rs
            .iter()
            .all(|r| matches!(c.probe.device_pointer(r.addr, c.spec.device), Ok(p) if p.is_device && p.device == c.spec.device)),
    };
    basic && disjoint && memory
}

proptest! {
    #![proptest_config(cases(2000))]

    #[test]
    fn validate_group_accepts_exactly_the_safe_sets_and_blames_truthfully(c in region_case()) {
        let got = validate_group(&c.spec, &c.regions, &c.probe, c.pinned);
        let want = acceptable(&c);
        match &got {
            Ok(()) => prop_assert!(want, "accepted an unsafe set: {:?}", c),
            Err(rej) => {
                prop_assert!(!want, "rejected a safe set with {:?}: {:?}", rej, c);
                if let Err(e) = justified(&c, rej) {
                    prop_assert!(false, "{}: {:?}", e, c);
                }
            }
        }
    }
}

/// One violation injected into an otherwise valid set.
#[derive(Debug, Clone, Copy)]
pub(super) enum Violation {
    Zero,
    Null,
    Wraps,
    Overlap(prop::sample::Index),
    Gap,
    Straddle,
    WrongDevice,
    Memlock,
    HostPointer,
    OtherGpu,
    NoCuda,
}

pub(super) fn violation() -> impl Strategy<Value = Violation> {
    prop_oneof![
        Just(Violation::Zero),
        Just(Violation::Null),
        Just(Violation::Wraps),
        any::<prop::sample::Index>().prop_map(Violation::Overlap),
        Just(Violation::Gap),
        Just(Violation::Straddle),
        Just(Violation::WrongDevice),
        Just(Violation::Memlock),
        Just(Violation::HostPointer),
        Just(Violation::OtherGpu),
        Just(Violation::NoCuda),
    ]
}

proptest! {
    #![proptest_config(cases(2000))]

    #[test]
    fn one_constructed_violation_is_named_with_its_reason_and_region(
        maps in maps_strategy(),
        picks in prop::collection::vec((any::<prop::sample::Index>(), 1usize..0x800), 1..10),
        at in any::<prop::sample::Index>(),
        v in violation(),
        home in 0u32..2,
        pinned in 0u64..0x1000,
    ) {
        // A valid set: one region per page, each in the lower half of a
        // mapping's pages (the upper halves stay free for Straddle).
        let mut pages: Vec<usize> = maps
            .iter()
            .flat_map(|&(s, e)| (s..s + (e - s) / 2).step_by(0x1000))
            .collect();
        pages.dedup();
        prop_assume!(!pages.is_empty());
        let mut used = HashSet::new();
        let mut regions: Vec<Region> = Vec::new();
        for (p, len) in &picks {
            let page = pages[p.index(pages.len())];
            if used.insert(page) {
                regions.push(Region::new(page, *len, home));
            }
        }
        let k = at.index(regions.len());
        let vram = matches!(v, Violation::HostPointer | Violation::OtherGpu | Violation::NoCuda);
        let mem = if vram { MemType::Vram } else { MemType::Dram };
        let mut probe = FakeProbe {
            maps: Ok(maps.clone()),
            memlock: Memlock { soft_limit: Some(u64::MAX), exempt: false, locked_bytes: None },
            cuda: BTreeMap::new(),
            home,
        };
        let spec = |rs: &[Region]| {
            let mut s = GroupSpec::provided("g", Kind::Kv, mem, rs.to_vec());
            s.device = home;
            s
        };
        // The set is valid before the violation.
        prop_assert_eq!(validate_group(&spec(&regions), &regions, &probe, pinned), Ok(()));
        let total: u64 = regions.iter().map(|r| r.len as u64).sum();
        let expect: (Reason, Option<usize>) = match v {
            Violation::Zero => { regions[k].len = 0; (Reason::ZeroLength, Some(k)) }
            Violation::Null => { regions[k].addr = 0; (Reason::InvalidAddress, Some(k)) }
            Violation::Wraps => {
                regions[k].addr = usize::MAX - 10;
                regions[k].len = 64;
                (Reason::InvalidAddress, Some(k))
            }
            Violation::Overlap(j) => {
                prop_assume!(regions.len() >= 2);
                let j = j.index(regions.len() - 1);
                let j = if j >= k { j + 1 } else { j };
                regions[k].addr = regions[j].addr;
                regions[k].len = regions[k].len.min(regions[j].len);
                let twin = regions[k].len == regions[j].len;
                (if twin { Reason::DuplicateRegions } else { Reason::OverlappingRegions }, Some(k.max(j)))
            }
            Violation::Gap => {
                // The page just below the first mapping is never mapped.
                regions[k].addr = maps[0].0 - 0x1000;
                regions[k].len = 0x1000;
                (Reason::UnmappedAddress, Some(k))
            }
            Violation::Straddle => {
                let (_, end) = maps[at.index(maps.len())];
                regions[k].addr = end - 1;
                regions[k].len = 2;
                (Reason::UnmappedAddress, Some(k))
            }
            Violation::WrongDevice => { regions[k].device = home + 1; (Reason::DeviceMismatch, Some(k)) }
            Violation::Memlock => {
                probe.memlock.soft_limit = Some(total + pinned - 1);
                (Reason::MemlockLimit, None)
            }
            Violation::HostPointer => {
                probe.cuda.insert(regions[k].addr, Ok(DevicePointer { is_device: false, device: 0 }));
                (Reason::MemTypeMismatch, Some(k))
            }
            Violation::OtherGpu => {
                probe.cuda.insert(regions[k].addr, Ok(DevicePointer { is_device: true, device: home + 1 }));
                (Reason::DeviceMismatch, Some(k))
            }
            Violation::NoCuda => {
                probe.cuda.insert(regions[k].addr, Err(Reason::CudaUnavailable));
                (Reason::CudaUnavailable, Some(k))
            }
        };
        let got = validate_group(&spec(&regions), &regions, &probe, pinned).map_err(|r| (r.reason, r.region));
        prop_assert_eq!(got, Err(expect), "{:?} at {} of {:?}", v, k, regions);
        if matches!(v, Violation::Memlock) {
            // CAP_IPC_LOCK lifts the limit.
            probe.memlock.exempt = true;
            prop_assert_eq!(validate_group(&spec(&regions), &regions, &probe, pinned), Ok(()));
        }
    }
}
