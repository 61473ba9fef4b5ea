//! The group of a registration nobody named. A C++ or Rust program tells
//! NIXL only memory: its type, device and the order of its calls. So a call
//! is named, first match wins, by the operator's `NIXL_AGENT_GROUPS` keys
//! - `MEM#N`: the N-th registration call of that memory type in this
//!   process, counting from 0 (`dram#1=aux:aux`),
//! - `MEM@DEV`: that memory type on that device (`vram@0=kv`),
//! - `MEM`: every call of that memory type (`vram=kv`),
//!
//! and otherwise by its memory type's word (`dram`, `vram`), kind `buffer`.
//! `MEM` is `dram` or `vram`. Stable across runs of the same program.

use nixl_agent_core::model::{Kind, MemType};
use nixl_agent_instrument::frameworks::kind_of_word;
use nixl_agent_instrument::{Override, BUFFER_KIND};
use std::sync::atomic::{AtomicU64, Ordering};

pub struct Naming {
    overrides: Vec<Override>,
    /// Registration calls so far, DRAM and VRAM.
    calls: [AtomicU64; 2],
}

impl Naming {
    pub fn new(overrides: Vec<Override>) -> Naming {
        Naming {
            overrides,
            calls: [AtomicU64::new(0), AtomicU64::new(0)],
        }
    }

    /// The group and kind of the next registration call of `mem` on `device`.
    pub fn next(&self, mem: MemType, device: u32) -> (String, Kind) {
        let n = self.calls[usize::from(mem == MemType::Vram)].fetch_add(1, Ordering::Relaxed);
        name(&self.overrides, mem, device, n)
    }
}

fn name(overrides: &[Override], mem: MemType, device: u32, n: u64) -> (String, Kind) {
    let word = mem.as_str().to_ascii_lowercase();
    let keys = [format!("{word}#{n}"), format!("{word}@{device}"), word.to_string()];
    for key in &keys {
        if let Some(o) = overrides.iter().find(|o| o.key == *key) {
            let kind = o
                .kind
                .clone()
                .or_else(|| kind_of_word(&o.group))
                .unwrap_or_else(|| Kind::Custom(BUFFER_KIND.into()));
            return (o.group.clone(), kind);
        }
    }
    (word, Kind::Custom(BUFFER_KIND.into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn o(key: &str, group: &str, kind: Option<Kind>) -> Override {
        Override {
            key: key.into(),
            group: group.into(),
            kind,
        }
    }

    #[test]
    fn order_then_device_then_memory_type_then_the_word() {
        let rules = vec![
            o("dram#1", "aux", Some(Kind::Aux)),
            o("vram@1", "draft", None),
            o("vram", "kv", None),
        ];
        let n = Naming::new(rules);
        assert_eq!(n.next(MemType::Dram, 0), ("dram".into(), Kind::Custom("buffer".into())));
        assert_eq!(n.next(MemType::Dram, 0), ("aux".into(), Kind::Aux));
        assert_eq!(n.next(MemType::Dram, 0).0, "dram");
        assert_eq!(n.next(MemType::Vram, 1).0, "draft");
        assert_eq!(n.next(MemType::Vram, 0), ("kv".into(), Kind::Kv));
    }
}
