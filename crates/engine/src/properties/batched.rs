//! Batched registration and deregistration on the real NIXL runtime: what
//! NIXL 1.5.1 leaves after a list fails halfway, the search for the failing
//! region, a refused batch deregistration, and lists with twins.

use super::*;
use crate::lifecycle::registrar::{HeldRegions, NixlRegistrar};
use crate::lifecycle::At;
use crate::nixl::{discover, load};

struct Nixl {
    reg: Counting<NixlRegistrar>,
    buf: Vec<u8>,
}

impl Nixl {
    fn new(name: &str) -> Nixl {
        let loaded = load(discover(Some(&nixl_lib_dir()), &config::ProcessEnv)).expect("NIXL loads");
        let mut reg = Counting {
            inner: NixlRegistrar::new(name, Ok(loaded)),
            calls: 0,
        };
        reg.preflight().expect("NIXL agent");
        reg.ensure_backend("UCX").expect("UCX backend");
        Nixl {
            reg,
            buf: vec![0x5a; 1 << 20],
        }
    }

    /// `n` regions of 4 KiB of the buffer, region `null` (if any) at 0.
    fn regions(&self, n: usize, null: Option<usize>) -> Vec<Region> {
        let base = self.buf.as_ptr() as usize;
        (0..n)
            .map(|i| {
                if Some(i) == null {
                    Region::new(0, 64, 0)
                } else {
                    Region::new(base + i * 8192, 4096, 0)
                }
            })
            .collect()
    }

    /// Descriptors NIXL's own metadata describes.
    fn described(&self) -> u64 {
        nixl_descriptors(&self.reg.inner.local_md().expect("metadata")).expect("NIXL metadata layout")
    }
}

fn spec(regions: &[Region]) -> GroupSpec {
    GroupSpec::provided("batched", Kind::Kv, MemType::Dram, regions.to_vec()).with_validate(false)
}

#[test]
fn a_list_nixl_refuses_halfway_leaves_nothing_registered() {
    let mut n = Nixl::new("nixl-agent-batched-halfway");
    // NIXL registers a list region by region; the null one fails UCX's
    // ucp_mem_map after 40 regions were registered.
    let regions = n.regions(64, Some(40));
    let f = n
        .reg
        .register(&spec(&regions), &regions)
        .expect_err("NIXL refuses a null region");
    assert_eq!(f.at, At::List);
    assert_eq!(f.failure.reason, Reason::NixlBackendError);
    assert_eq!(
        n.described(),
        0,
        "NIXL 1.5.1 rolled back the 40 regions before the null one"
    );
    // The group's attempt names the region, in O(log N) calls, and leaves
    // nothing either.
    n.reg.calls = 0;
    let e = register_all(&mut n.reg, &spec(&regions), &regions)
        .expect_err("NIXL refuses")
        .failure;
    assert_eq!((e.region, e.rolled_back), (Some(40), 40), "{}", e.message);
    assert!(e.message.starts_with("region 40 [0x0, +64): "), "{}", e.message);
    assert!(n.reg.calls <= 1 + 2 * 7, "{} calls", n.reg.calls);
    assert_eq!(n.described(), 0);
    // And the same regions, the null one left out, register in one call.
    let good: Vec<Region> = regions.iter().copied().filter(|r| r.addr != 0).collect();
    n.reg.calls = 0;
    let held = register_all(&mut n.reg, &spec(&good), &good).expect("registers");
    assert_eq!((n.reg.calls, held.len(), n.described()), (1, 1, 63));
    assert!(release_all(&mut n.reg, held).is_clean());
    assert_eq!(n.described(), 0);
}

#[test]
fn a_list_with_twins_is_released_without_crashing_nixl() {
    // Without validation a list may name one region twice; NIXL 1.5.1
    // registers it, and a batched deregisterMem of it would SIGSEGV.
    let mut n = Nixl::new("nixl-agent-batched-twins");
    let mut regions = n.regions(4, None);
    regions.push(regions[1]);
    let held = register_all(&mut n.reg, &spec(&regions), &regions).expect("registers");
    assert_eq!(n.described(), 5);
    assert!(release_all(&mut n.reg, held).is_clean());
    assert_eq!(n.described(), 0);
}

#[test]
fn a_refused_release_leaves_held_exactly_the_region_nixl_never_registered() {
    // A handle claiming one region more than NIXL registered. A plain list:
    // NIXL 1.5.1 checks the whole list first and removes none of it, so it
    // is retried one region a call. A list with twins is released one
    // descriptor a call from the start; what those calls released is
    // never tried again.
    let mut n = Nixl::new("nixl-agent-batched-refused");
    let regions = n.regions(8, None);
    let mut twins = regions[..5].to_vec();
    twins.push(regions[1]);
    for registered in [regions[..7].to_vec(), twins] {
        let held = register_all(&mut n.reg, &spec(&registered), &registered).expect("registers");
        assert_eq!(n.described(), registered.len() as u64);
        let mut claimed = registered.clone();
        claimed.insert(3, regions[7]);
        let claim: Vec<HeldRegions> = held.into_iter().map(|h| h.claiming(&claimed)).collect();
        let released = release_all(&mut n.reg, claim);
        assert_eq!(
            (released.failed, released.failed_bytes, released.held.len()),
            (1, 4096, 1),
            "only the unregistered region is still held: {:?}",
            released.first
        );
        let first = released.first.as_ref().expect("the failure");
        assert_eq!(first.reason, Reason::NixlNotFound, "{first}");
        assert!(first.message.contains("deregisterMem of 1 regions"), "{first}");
        assert_eq!(n.described(), 0, "every registered descriptor was released once");
    }
}

#[test]
fn a_group_on_two_backends_is_registered_on_each_or_on_none() {
    use crate::lifecycle::registration::{CreatedBackends, Registration};
    use crate::record::Recorder;
    use crate::status::NixlStatus;
    // NIXL's registerMem succeeds when any one backend takes the list:
    // POSIX takes a null region that UCX refuses. The group must not read
    // registered (its deregisterMem would then fail on UCX at every drain).
    let mut n = Nixl::new("nixl-agent-batched-two-backends");
    n.reg.ensure_backend("POSIX").expect("POSIX backend");
    let rec = Recorder::new(
        &BuildInfo::current(None),
        NixlStatus::default(),
        std::time::Instant::now(),
    );
    let on_both = |regions: &[Region]| spec(regions).with_backends(&["POSIX", "UCX"]);
    let bad = n.regions(8, Some(5));
    let bad_spec = on_both(&bad);
    let mut group = Registration::new(&bad_spec);
    let e = group
        .attempt(&mut n.reg, &rec, &bad_spec, 1, &mut CreatedBackends::default(), 0)
        .expect_err("UCX refuses the null region");
    assert!(
        e.message.starts_with("backend UCX: region 5 [0x0, +64)"),
        "{}",
        e.message
    );
    assert_eq!(group.holding().descriptors, 0, "POSIX's registration was rolled back");
    assert_eq!(
        group.deregister(&mut n.reg, &rec, crate::event::CallKind::Deregister),
        (0, 0)
    );
    // A list both take registers on both, and both release it.
    let good = n.regions(8, None);
    let good_spec = on_both(&good);
    let mut group = Registration::new(&good_spec);
    group
        .attempt(&mut n.reg, &rec, &good_spec, 1, &mut CreatedBackends::default(), 0)
        .expect("registers");
    assert_eq!(group.holding().descriptors, 8);
    assert_eq!(
        group.deregister(&mut n.reg, &rec, crate::event::CallKind::Deregister),
        (8, 0)
    );
    assert_eq!(n.described(), 0);
}
