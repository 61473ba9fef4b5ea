//! 5. Bugs found by the properties above, pinned as regression tests (each failed before its fix in src/ and passes since).

use super::*;

// ---------------------------------------------------------------------------
// 5. Bugs found by the properties above, pinned as regression tests (each
// failed before its fix in src/ and passes since).

/// A validated config must not hold a duration that the agent turns into a
/// deadline (`Instant::now() + d`) and that overflows `Instant`. Before
/// durations were capped at 24 h, both of these passed `validate()` and then
/// panicked:
/// - `retry.initial_backoff = "18446744073709551615s"`: the first failed
///   attempt panics the lifecycle thread (ScheduleRetry in
///   crates/engine/src/lifecycle/driver.rs): retries stop for good, /readyz stays 503, and
///   shutdown reports "the lifecycle thread panicked";
/// - `http.header_read_timeout = "18446744073709551615s"`: hyper's header
///   timer panics every connection task, so /livez, /readyz and /metrics
///   never answer.
#[test]
pub(super) fn validated_durations_that_become_deadlines_fit_an_instant() {
    let values = [
        "18446744073709551615s",
        "5124095576030431h",
        "9223372036854775807s",
        "307445734561825860m",
    ];
    let mut overflowing = Vec::new();
    for value in values {
        let retry = format!("[retry]\ninitial_backoff = \"{value}\"\nmax_backoff = \"{value}\"\n");
        let http = format!("[http]\nheader_read_timeout = \"{value}\"\n");
        for doc in [retry, http] {
            let cfg = Config::from_toml(&doc, Path::new(CONFIG_PATH)).unwrap();
            if cfg.validate().is_err() {
                continue;
            }
            let now = std::time::Instant::now();
            let mut deadlines = vec![cfg.http.header_read_timeout];
            deadlines
                .extend((1..=40).map(|n| crate::backoff::delay(cfg.retry.initial_backoff, cfg.retry.max_backoff, n)));
            if deadlines.iter().any(|d| now.checked_add(*d).is_none()) {
                overflowing.push(doc);
            }
        }
    }
    assert!(
        overflowing.is_empty(),
        "validated, yet overflow an Instant: {overflowing:#?}"
    );
}

/// `GroupSpec::totals` sums provided lengths in u64 before validation has
/// seen them: hostile regions overflow it (a panic in debug builds, a wrong
/// `planned_bytes` in release). `Agent::start` reaches it through
/// `Status::initial` before any check.
#[test]
pub(super) fn totals_of_hostile_provided_regions_do_not_overflow() {
    let regions = vec![Region::new(1, usize::MAX - 1, 0), Region::new(2, usize::MAX - 2, 0)];
    let spec = GroupSpec::provided("g", Kind::Aux, MemType::Dram, regions);
    Plan {
        groups: vec![spec.clone()],
    }
    .check()
    .expect("words are fine");
    let r = std::panic::catch_unwind(|| spec.totals());
    assert!(r.is_ok(), "GroupSpec::totals panicked");
}

/// Config errors quote the offending value raw: a newline or an escape
/// sequence in a name becomes part of the one-line error the binary prints.
#[test]
pub(super) fn config_errors_are_one_printable_line() {
    for name in ["a\nb", "x\u{1b}[2Jy", "tab\there"] {
        let doc = format!(
            "[[group]]\nname = {}\nkind = \"kv\"\nmem_type = \"DRAM\"\ncount = 1\nsize = 1\n",
            toml_str(name)
        );
        let e = Config::from_toml(&doc, Path::new(CONFIG_PATH))
            .unwrap()
            .validate()
            .unwrap_err()
            .to_string();
        assert!(!e.chars().any(char::is_control), "{e:?}");
    }
}

/// `MAX_GROUP_BYTES` is checked on `count × size`, but the binary allocates
/// `count × size rounded up to the page`: count = 1048575, size = 1048577
/// validates (2^40 − 1 bytes) and allocates 1 TiB + 4 GiB.
#[test]
pub(super) fn group_byte_limit_holds_after_page_rounding() {
    let (count, size) = (config::MAX_REGIONS_PER_GROUP - 1, config::MAX_REGIONS_PER_GROUP + 1);
    let doc = format!("[[group]]\nname = \"g\"\nkind = \"kv\"\nmem_type = \"DRAM\"\ncount = {count}\nsize = {size}\n");
    let cfg = Config::from_toml(&doc, Path::new(CONFIG_PATH)).unwrap();
    if cfg.validate().is_ok() {
        let allocated = count as u128 * (size as u128).div_ceil(4096) * 4096;
        assert!(
            allocated <= config::MAX_GROUP_BYTES as u128,
            "validated, yet allocates {allocated} bytes > MAX_GROUP_BYTES"
        );
    }
}
