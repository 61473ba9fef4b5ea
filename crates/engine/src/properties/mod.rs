//! Hostile input, property-based: whatever a config file, an embedding
//! process, a NIXL runtime or a scraper throws at the agent, it answers with
//! a value or a named error, never a panic, never a leaked registration, and
//! never a malformed exposition line.
//!
//! - config text (arbitrary bytes, and near-valid TOML with hostile values)
//!   → `Config::from_toml` → `validate` → `Plan::from_config`;
//! - `units::parse_size` / `parse_duration` against an oracle, round-tripped
//!   through `format_*`;
//! - `Plan::check` on arbitrary words: Ok exactly when every word is inside
//!   its documented charset, so no quote, backslash, brace or newline can
//!   reach a label; and the exposition encoders escape label values anyway;
//! - `validate_group` over arbitrary regions and a fake `MemoryProbe`;
//! - `register_all` / `release_all` with a fault-injecting ledger registrar;
//! - the same against the real NIXL runtime (a bounded number of cases).

use crate::config::{self, Config, ConfigError};
use crate::lifecycle::group::{register_all, release_all, GroupFailure, Refused};
use crate::lifecycle::{At, Failure, ListFailure, Registrar, RuntimeFacts, Unreleased};
use crate::model::{MemType, Reason};
use crate::plan::{GroupSpec, Kind, Plan, Region, RegionSource};
use crate::telemetry::exposition::{self, escape, Format};
use crate::telemetry::metrics::BuildInfo;
use crate::units;
use crate::validate::{validate_group, DevicePointer, Memlock, MemoryProbe, Rejection};
use proptest::prelude::*;
use proptest::test_runner::{Config as PtConfig, TestCaseError, TestRunner};
use std::cell::RefCell;
use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

/// `n` cases, or `PROPTEST_CASES` when set (for a longer soak).
pub(super) fn cases(n: u32) -> PtConfig {
    PtConfig {
        cases: std::env::var("PROPTEST_CASES")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(n),
        // Shrinking a config document can take long; the failing input is
        // printed either way.
        max_shrink_iters: 2000,
        failure_persistence: None,
        ..PtConfig::default()
    }
}

// ---------------------------------------------------------------------------
// Charsets, as documented in docs/metrics.md ("Label values are closed or
// validated") and config.rs.

pub(super) fn in_charset(w: &str, max: usize, ok: impl Fn(char) -> bool) -> bool {
    !w.is_empty() && w.len() <= max && w.chars().all(ok)
}

pub(super) fn name_ok(w: &str) -> bool {
    in_charset(w, 64, |c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
}

pub(super) fn kind_ok(w: &str) -> bool {
    in_charset(w, 32, |c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
}

pub(super) fn backend_ok(w: &str) -> bool {
    in_charset(w, 32, |c| c.is_ascii_alphanumeric() || c == '_')
}

/// Characters that would break or forge an exposition line if they reached a
/// label value unescaped.
pub(super) const LABEL_BREAKERS: &[char] = &['"', '\\', '\n', '\r', '{', '}', ',', '=', ' ', '#'];

mod config_text;
#[allow(unused_imports)]
use config_text::*;
mod unit_words;
#[allow(unused_imports)]
use unit_words::*;
mod plan_words;
#[allow(unused_imports)]
use plan_words::*;
mod escaping;
#[allow(unused_imports)]
use escaping::*;
mod regions;
#[allow(unused_imports)]
use regions::*;
mod all_or_nothing;
#[allow(unused_imports)]
use all_or_nothing::*;
mod real_nixl;
#[allow(unused_imports)]
use real_nixl::*;
mod batched;
mod pod;
mod regressions;
#[allow(unused_imports)]
use regressions::*;
