use super::*;
use crate::plan::{GroupSpec, Kind};

struct Fake {
    maps: Vec<(usize, usize)>,
    memlock: Memlock,
    cuda: Result<DevicePointer, Reason>,
}

impl MemoryProbe for Fake {
    fn mapped_ranges(&self) -> Result<Vec<(usize, usize)>, String> {
        Ok(self.maps.clone())
    }
    fn device_pointer(&self, _addr: usize, _device: u32) -> Result<DevicePointer, Reason> {
        self.cuda
    }
    fn memlock(&self) -> Memlock {
        self.memlock
    }
}

fn probe() -> Fake {
    Fake {
        maps: vec![(0x1000, 0x10000), (0x20000, 0x30000)],
        memlock: Memlock {
            soft_limit: None,
            exempt: false,
            locked_bytes: None,
        },
        cuda: Err(Reason::CudaUnavailable),
    }
}

fn dram(regions: &[(usize, usize)]) -> (GroupSpec, Vec<Region>) {
    let r: Vec<Region> = regions.iter().map(|&(a, l)| Region::new(a, l, 0)).collect();
    (GroupSpec::provided("g", Kind::Aux, MemType::Dram, r.clone()), r)
}

fn reason(regions: &[(usize, usize)], p: &Fake, pinned: u64) -> Result<(), (Reason, Option<usize>)> {
    let (spec, r) = dram(regions);
    validate_group(&spec, &r, p, pinned).map_err(|e| (e.reason, e.region))
}

#[test]
fn good_regions_pass() {
    assert_eq!(
        reason(&[(0x1000, 0x1000), (0x2000, 0x1000), (0x20000, 0x10000)], &probe(), 0),
        Ok(())
    );
}

#[test]
fn each_rule_names_its_reason_and_region() {
    let p = probe();
    assert_eq!(
        reason(&[(0x1000, 16), (0, 4096)], &p, 0),
        Err((Reason::InvalidAddress, Some(1)))
    );
    assert_eq!(reason(&[(0x1000, 0)], &p, 0), Err((Reason::ZeroLength, Some(0))));
    assert_eq!(
        reason(&[(usize::MAX - 1, 16)], &p, 0),
        Err((Reason::InvalidAddress, Some(0)))
    );
    assert_eq!(
        reason(&[(0x3000, 0x1000), (0x1000, 0x2001)], &p, 0),
        Err((Reason::OverlappingRegions, Some(1)))
    );
    // The same region twice (NIXL accepts it, then crashes on deregistration)
    // is named as such, even beside a partial overlap, by the later index.
    assert_eq!(
        reason(&[(0x1000, 0x1000), (0x3000, 0x100), (0x1000, 0x1000)], &p, 0),
        Err((Reason::DuplicateRegions, Some(2)))
    );
    assert_eq!(
        reason(
            &[(0x1000, 0x800), (0x1000, 0x1000), (0x1400, 0x10), (0x1000, 0x800)],
            &p,
            0
        ),
        Err((Reason::DuplicateRegions, Some(3)))
    );
    // Same start, other length: an overlap, not a duplicate.
    assert_eq!(
        reason(&[(0x1000, 0x800), (0x1000, 0x1000)], &p, 0),
        Err((Reason::OverlappingRegions, Some(1)))
    );
    // Straddles the gap between two mappings.
    assert_eq!(
        reason(&[(0xf000, 0x2000)], &p, 0),
        Err((Reason::UnmappedAddress, Some(0)))
    );
    assert_eq!(
        reason(&[(0x1000, 16), (0x40000, 16)], &p, 0),
        Err((Reason::UnmappedAddress, Some(1)))
    );
}

#[test]
fn memlock_counts_what_is_already_pinned() {
    let mut p = probe();
    p.memlock = Memlock {
        soft_limit: Some(0x2000),
        exempt: false,
        locked_bytes: None,
    };
    assert_eq!(reason(&[(0x1000, 0x1000)], &p, 0), Ok(()));
    assert_eq!(
        reason(&[(0x1000, 0x1000)], &p, 0x1001),
        Err((Reason::MemlockLimit, None))
    );
    p.memlock.exempt = true;
    assert_eq!(reason(&[(0x1000, 0x1000)], &p, 0x1001), Ok(()));
}

#[test]
fn vram_rules() {
    let r = vec![Region::new(0x7000_0000, 4096, 1)];
    let mut spec = GroupSpec::provided("s", Kind::State, MemType::Vram, r.clone());
    let mut p = probe();
    let check = |spec: &GroupSpec, p: &Fake| validate_group(spec, &r, p, 0).map_err(|e| e.reason);
    assert_eq!(check(&spec, &p), Err(Reason::CudaUnavailable));
    p.cuda = Ok(DevicePointer {
        is_device: false,
        device: 0,
    });
    assert_eq!(check(&spec, &p), Err(Reason::MemTypeMismatch));
    p.cuda = Ok(DevicePointer {
        is_device: true,
        device: 0,
    });
    assert_eq!(check(&spec, &p), Err(Reason::DeviceMismatch));
    p.cuda = Ok(DevicePointer {
        is_device: true,
        device: 1,
    });
    assert_eq!(check(&spec, &p), Ok(()));
    spec.device = 2;
    assert_eq!(check(&spec, &p), Err(Reason::DeviceMismatch));
}

#[test]
fn maps_parse_and_merge() {
    let text = "\
00400000-00452000 r-xp 00000000 08:02 173521 /usr/bin/dbus-daemon
00652000-00655000 rw-p 00052000 08:02 173521 /usr/bin/dbus-daemon
00651000-00652000 r--p 00051000 08:02 173521 /usr/bin/dbus-daemon
7ffc1000-7ffc2000 rw-p 00000000 00:00 0 [stack]
garbage line
";
    assert_eq!(
        parse_maps(text),
        vec![(0x400000, 0x452000), (0x651000, 0x655000), (0x7ffc1000, 0x7ffc2000)]
    );
}

#[test]
fn ipc_lock_capability() {
    assert!(has_ipc_lock("Name:\tx\nCapEff:\t000001fffeffffff\n"));
    assert!(!has_ipc_lock("CapEff:\t0000000000000000\n"));
    assert!(!has_ipc_lock("nothing"));
}

/// Observe mode and Python processes pin far more than nixl-agent planned:
/// what the kernel says the process holds counts, and the message says
/// which figure was compared.
#[test]
fn memlock_counts_what_the_process_has_locked_and_says_so() {
    let mut p = probe();
    p.memlock = Memlock {
        soft_limit: Some(0x3000),
        exempt: false,
        locked_bytes: Some(0x2800),
    };
    let (spec, r) = dram(&[(0x1000, 0x1000)]);
    let e = validate_group(&spec, &r, &p, 0).unwrap_err();
    assert_eq!(e.reason, Reason::MemlockLimit);
    assert!(
        e.message
            .contains("10240 bytes already locked (VmLck+VmPin of the process)"),
        "{}",
        e.message
    );
    // When nixl-agent's own figure is the larger (a transport that does not
    // pin), that one is compared and named.
    p.memlock.locked_bytes = Some(0);
    let e = validate_group(&spec, &r, &p, 0x2800).unwrap_err();
    assert!(e.message.contains("(DRAM nixl-agent registered)"), "{}", e.message);
}

#[test]
fn locked_bytes_are_vmlck_plus_vmpin() {
    let status = "Name:\tx\nVmLck:\t      8 kB\nVmPin:\t     4 kB\nVmRSS:\t 100 kB\n";
    assert_eq!(locked_bytes(status), Some(12 * 1024));
    assert_eq!(locked_bytes("Name:\tx\n"), None);
}

/// Every region of a VRAM group is asked of CUDA (its own type and
/// ordinal), each with the device the group expects to compare with.
#[test]
fn every_vram_region_is_asked_of_cuda() {
    struct Asked(std::cell::RefCell<Vec<u32>>);
    impl MemoryProbe for Asked {
        fn mapped_ranges(&self) -> Result<Vec<(usize, usize)>, String> {
            Ok(vec![])
        }
        fn device_pointer(&self, _addr: usize, device: u32) -> Result<DevicePointer, Reason> {
            self.0.borrow_mut().push(device);
            Ok(DevicePointer {
                is_device: true,
                device,
            })
        }
        fn memlock(&self) -> Memlock {
            Memlock {
                soft_limit: None,
                exempt: true,
                locked_bytes: None,
            }
        }
    }
    let r = vec![Region::new(0x7000_0000, 4096, 3), Region::new(0x7100_0000, 4096, 3)];
    let spec = GroupSpec::provided("kv", Kind::Kv, MemType::Vram, r.clone());
    let probe = Asked(Default::default());
    validate_group(&spec, &r, &probe, 0).unwrap();
    assert_eq!(*probe.0.borrow(), [3, 3]);
}
