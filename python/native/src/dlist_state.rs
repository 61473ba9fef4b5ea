//! NIXL's own serialised form of a descriptor list, read back: what a
//! `nixlXferDList` or `nixlRegDList` hands out from `__getstate__` (NIXL's
//! `nixlDescList::serialize` through `nixlSerDes`), one call whatever the
//! list's length. The Python front-end reads a list NIXL built this way
//! instead of one pybind call per descriptor.
//!
//! The layout (NIXL 1.5.x): `nixlSerDes|`, then tagged fields, each
//! `tag`, an 8-byte little-endian length, the value and `|`:
//! `nixlDList` = `nixlBDList` (transfer lists) or `nixlSDList` (lists with
//! metadata), `t` = the memory type (4 bytes), `n` = the count (8 bytes);
//! then the descriptors, untagged: a `nixlBDList` as one blob of
//! `count × 24` bytes (address, length, device id, 8 bytes each), a
//! `nixlSDList` one blob per descriptor (those 24 bytes and its metadata).
//! Anything else is not read (`None`): the caller falls back to asking the
//! list item by item, so a NIXL that changes the format costs speed, never
//! a wrong figure.

const MAGIC: &[u8] = b"nixlSerDes|";
const BASIC: &[u8] = b"nixlBDList";
const WITH_META: &[u8] = b"nixlSDList";
/// address, length, device id.
const DESC: usize = 24;

/// What a serialised list says of itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DlistHeader {
    /// NIXL's `nixl_mem_t` (0 DRAM, 1 VRAM, 2 block, 3 object, 4 file).
    pub mem_code: u32,
    pub count: usize,
}

struct ByteReader<'a>(&'a [u8]);

impl<'a> ByteReader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.0.len() < n {
            return None;
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Some(head)
    }

    fn literal(&mut self, expect: &[u8]) -> Option<()> {
        (self.take(expect.len())? == expect).then_some(())
    }

    fn word(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }

    /// One field: its length, value and the closing `|` (the tag already read).
    fn value(&mut self) -> Option<&'a [u8]> {
        let len = usize::try_from(self.word()?).ok()?;
        let v = self.take(len)?;
        self.literal(b"|")?;
        Some(v)
    }
}

fn word_at(b: &[u8], i: usize) -> u64 {
    u64::from_le_bytes(b[i * 8..i * 8 + 8].try_into().unwrap_or([0; 8]))
}

/// Reads a serialised list, calling `each(address, length, device)` per
/// descriptor in order. `None` (and calls made for part of it, which the
/// caller must discard) when the bytes are not a list of this layout.
pub fn read_dlist_state(bytes: &[u8], mut each: impl FnMut(u64, u64, u64)) -> Option<DlistHeader> {
    let mut r = ByteReader(bytes);
    r.literal(MAGIC)?;
    r.literal(b"nixlDList")?;
    let kind = r.value()?;
    r.literal(b"t")?;
    let t = r.value()?;
    let mem_code = u32::from_le_bytes(t.try_into().ok()?);
    r.literal(b"n")?;
    let count = usize::try_from(u64::from_le_bytes(r.value()?.try_into().ok()?)).ok()?;
    if kind == BASIC {
        if count > 0 {
            let blob = r.value()?;
            if blob.len() != count.checked_mul(DESC)? {
                return None;
            }
            for d in blob.chunks_exact(DESC) {
                each(word_at(d, 0), word_at(d, 1), word_at(d, 2));
            }
        }
    } else if kind == WITH_META {
        for _ in 0..count {
            let d = r.value()?;
            if d.len() < DESC {
                return None;
            }
            each(word_at(d, 0), word_at(d, 1), word_at(d, 2));
        }
    } else {
        return None;
    }
    r.0.is_empty().then_some(DlistHeader { mem_code, count })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn field(out: &mut Vec<u8>, tag: &[u8], v: &[u8]) {
        out.extend_from_slice(tag);
        out.extend_from_slice(&(v.len() as u64).to_le_bytes());
        out.extend_from_slice(v);
        out.push(b'|');
    }

    fn desc(addr: u64, len: u64, dev: u64, meta: &[u8]) -> Vec<u8> {
        let mut d = Vec::new();
        for w in [addr, len, dev] {
            d.extend_from_slice(&w.to_le_bytes());
        }
        d.extend_from_slice(meta);
        d
    }

    /// The bytes NIXL 1.5.1's `nixlXferDList(VRAM_SEG, [(1, 2, 3)]).__getstate__()`
    /// returned, verbatim.
    const NIXL_151_XFER: &[u8] = b"nixlSerDes|nixlDList\n\x00\x00\x00\x00\x00\x00\x00nixlBDList|t\x04\x00\x00\x00\x00\x00\x00\x00\x01\x00\x00\x00|n\x08\x00\x00\x00\x00\x00\x00\x00\x01\x00\x00\x00\x00\x00\x00\x00|\x18\x00\x00\x00\x00\x00\x00\x00\x01\x00\x00\x00\x00\x00\x00\x00\x02\x00\x00\x00\x00\x00\x00\x00\x03\x00\x00\x00\x00\x00\x00\x00|";

    fn list(kind: &[u8], mem: u32, descs: &[(u64, u64, u64, &[u8])]) -> Vec<u8> {
        let mut out = MAGIC.to_vec();
        field(&mut out, b"nixlDList", kind);
        field(&mut out, b"t", &mem.to_le_bytes());
        field(&mut out, b"n", &(descs.len() as u64).to_le_bytes());
        if kind == BASIC && !descs.is_empty() {
            let blob: Vec<u8> = descs.iter().flat_map(|&(a, l, d, _)| desc(a, l, d, b"")).collect();
            field(&mut out, b"", &blob);
        } else if kind == WITH_META {
            for &(a, l, d, m) in descs {
                field(&mut out, b"", &desc(a, l, d, m));
            }
        }
        out
    }

    /// (address, length, device) of each descriptor read.
    type Descs = Vec<(u64, u64, u64)>;

    fn read(b: &[u8]) -> Option<(DlistHeader, Descs)> {
        let mut seen = Vec::new();
        read_dlist_state(b, |a, l, d| seen.push((a, l, d))).map(|h| (h, seen))
    }

    #[test]
    fn nixls_own_bytes_read_back() {
        let (h, d) = read(NIXL_151_XFER).unwrap();
        assert_eq!(h, DlistHeader { mem_code: 1, count: 1 });
        assert_eq!(d, vec![(1, 2, 3)]);
        assert_eq!(list(BASIC, 1, &[(1, 2, 3, b"")]), NIXL_151_XFER);
    }

    #[test]
    fn transfer_and_metadata_lists_of_any_length() {
        let descs: Vec<(u64, u64, u64, &[u8])> = (0..100)
            .map(|i| (0x1000 + i * 4096, 4096, i % 3, &b"meta"[..]))
            .collect();
        for kind in [BASIC, WITH_META] {
            let (h, d) = read(&list(kind, 0, &descs)).unwrap();
            assert_eq!(h.count, 100);
            assert_eq!(d.len(), 100);
            assert_eq!(d[7], (0x1000 + 7 * 4096, 4096, 1));
        }
        let (h, d) = read(&list(BASIC, 0, &[])).unwrap();
        assert_eq!((h.count, d.len()), (0, 0));
    }

    #[test]
    fn anything_else_is_not_read() {
        let good = list(BASIC, 0, &[(1, 2, 3, b""), (4, 5, 6, b"")]);
        // Every truncation, a trailing byte, a count the blob does not hold,
        // an unknown list kind.
        for cut in 0..good.len() {
            assert!(read(&good[..cut]).is_none(), "cut at {cut}");
        }
        let mut longer = good.clone();
        longer.push(0);
        assert!(read(&longer).is_none());
        let mut wrong_count = good.clone();
        let n_at = good.windows(2).position(|w| w == b"|n").unwrap() + 10;
        wrong_count[n_at] = 3;
        assert!(read(&wrong_count).is_none());
        assert!(read(&list(b"nixlXXList", 0, &[(1, 2, 3, b"")])).is_none());
        assert!(read(b"").is_none());
    }
}
