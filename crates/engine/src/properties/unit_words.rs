//! 1b. units.

use super::*;

// ---------------------------------------------------------------------------
// 1b. units.

/// The documented grammar of sizes, computed independently.
pub(super) fn size_oracle(text: &str) -> Option<u64> {
    let t = text.trim();
    let digits: String = t.chars().take_while(|c| c.is_ascii_digit()).collect();
    if digits.is_empty() {
        return None;
    }
    let n: u128 = if digits.len() > 25 {
        u128::MAX
    } else {
        digits.parse().ok()?
    };
    let mult: u128 = match t[digits.len()..].trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "kib" | "k" => 1 << 10,
        "mib" | "m" => 1 << 20,
        "gib" | "g" => 1 << 30,
        "tib" | "t" => 1 << 40,
        "kb" => 1_000,
        "mb" => 1_000_000,
        "gb" => 1_000_000_000,
        "tb" => 1_000_000_000_000,
        _ => return None,
    };
    if n > u64::MAX as u128 {
        return None;
    }
    u64::try_from(n.checked_mul(mult)?).ok()
}

pub(super) fn duration_oracle(text: &str) -> Option<Duration> {
    let t = text.trim();
    let digits: String = t.chars().take_while(|c| c.is_ascii_digit()).collect();
    let n: u64 = digits.parse().ok()?;
    Some(match t[digits.len()..].trim() {
        "ms" => Duration::from_millis(n),
        "s" => Duration::from_secs(n),
        // Overflowing minutes or hours are refused, not saturated.
        "m" => Duration::from_secs(n.checked_mul(60)?),
        "h" => Duration::from_secs(n.checked_mul(3600)?),
        _ => return None,
    })
}

pub(super) fn unit_text() -> impl Strategy<Value = String> {
    let digits = prop_oneof![
        "[0-9]{0,3}",
        "[0-9]{18,22}",
        any::<u64>().prop_map(|n| n.to_string()),
        Just("18446744073709551616".to_string()),
        Just("18446744073709551615".to_string()),
        Just("١٢".to_string()),
    ];
    let unit = prop_oneof![
        prop::sample::select(vec![
            "", "B", "b", "KiB", "kib", "KIB", "k", "MiB", "m", "GiB", "g", "TiB", "t", "KB", "MB", "GB", "TB", "ms",
            "s", "h", "e99KiB", "EiB", "ｍs", " ms", "ms ", "1", "-", ".5", "\u{0}",
        ])
        .prop_map(str::to_string),
        "\\PC{0,4}",
    ];
    (
        prop::sample::select(vec!["", " ", "\t", "\n"]),
        digits,
        unit,
        prop::sample::select(vec!["", " ", "\n"]),
    )
        .prop_map(|(a, d, u, z)| format!("{a}{d}{u}{z}"))
}

proptest! {
    #![proptest_config(cases(2000))]

    #[test]
    fn parse_size_matches_its_grammar_and_never_panics(text in unit_text()) {
        let got = units::parse_size(&text);
        prop_assert_eq!(got.clone().ok(), size_oracle(&text), "parse_size({:?}) = {:?}", text, got);
        if let Err(e) = got {
            prop_assert!(!e.is_empty());
        }
    }

    #[test]
    fn parse_size_of_any_string_never_panics(text in "\\PC{0,24}|.{0,24}") {
        if let Ok(n) = units::parse_size(&text) {
            prop_assert_eq!(units::parse_size(&units::format_size(n)), Ok(n));
        }
    }

    #[test]
    fn every_size_round_trips_through_format_size(n in prop_oneof![any::<u64>(), (0u64..64).prop_map(|s| 1u64 << s), (0u64..44).prop_map(|s| 3u64 << s)]) {
        let shown = units::format_size(n);
        prop_assert_eq!(units::parse_size(&shown), Ok(n), "{}", shown);
    }

    #[test]
    fn parse_duration_matches_its_grammar_and_never_panics(text in unit_text()) {
        let got = units::parse_duration(&text);
        prop_assert_eq!(got.clone().ok(), duration_oracle(&text), "parse_duration({:?}) = {:?}", text, got);
        if let Ok(d) = got {
            prop_assert_eq!(units::parse_duration(&units::format_duration(d)), Ok(d));
        }
    }

    #[test]
    fn parse_duration_of_any_string_never_panics(text in "\\PC{0,24}|.{0,24}") {
        if let Ok(d) = units::parse_duration(&text) {
            prop_assert_eq!(units::parse_duration(&units::format_duration(d)), Ok(d));
        }
    }

    #[test]
    fn every_whole_millisecond_duration_round_trips(ms in any::<u64>(), secs in any::<u64>()) {
        for d in [Duration::from_millis(ms), Duration::from_secs(secs)] {
            let shown = units::format_duration(d);
            prop_assert_eq!(units::parse_duration(&shown), Ok(d), "{}", shown);
        }
    }
}
