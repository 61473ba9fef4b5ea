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

use nixl_agent::config::{self, Config, ConfigError};
use nixl_agent::lifecycle::group::{register_all, release_all, GroupFailure};
use nixl_agent::lifecycle::{Failure, Registrar, RuntimeFacts};
use nixl_agent::plan::{GroupSpec, Kind, Plan, Region, RegionSource};
use nixl_agent::telemetry::exposition::{self, escape, Format};
use nixl_agent::telemetry::metrics::{BuildInfo, Metrics};
use nixl_agent::units;
use nixl_agent::validate::{validate_group, DevicePointer, Memlock, MemoryProbe, Rejection};
use nixl_agent::{MemType, Reason};
use proptest::prelude::*;
use proptest::test_runner::{Config as PtConfig, TestCaseError, TestRunner};
use std::cell::RefCell;
use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

/// `n` cases, or `PROPTEST_CASES` when set (for a longer soak).
fn cases(n: u32) -> PtConfig {
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

fn in_charset(w: &str, max: usize, ok: impl Fn(char) -> bool) -> bool {
    !w.is_empty() && w.len() <= max && w.chars().all(ok)
}

fn name_ok(w: &str) -> bool {
    in_charset(w, 64, |c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
}

fn kind_ok(w: &str) -> bool {
    in_charset(w, 32, |c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
}

fn backend_ok(w: &str) -> bool {
    in_charset(w, 32, |c| c.is_ascii_alphanumeric() || c == '_')
}

/// Characters that would break or forge an exposition line if they reached a
/// label value unescaped.
const LABEL_BREAKERS: &[char] = &['"', '\\', '\n', '\r', '{', '}', ',', '=', ' ', '#'];

// ---------------------------------------------------------------------------
// 1. The config parser.

const CONFIG_PATH: &str = "/etc/nixl-agent/hostile.toml";

/// Keys a `config key` error may name (before any `[i]` index).
const KEY_PREFIXES: &[&str] = &["agent_name", "shutdown_grace", "retry.", "http.", "tracing.", "group"];

#[derive(Debug, Default)]
struct Outcomes {
    parse_err: AtomicUsize,
    invalid: AtomicUsize,
    valid: AtomicUsize,
    valid_with_groups: AtomicUsize,
}

/// The whole contract of config loading, for one document.
fn check_config_text(text: &str, seen: &Outcomes) -> Result<(), TestCaseError> {
    let path = Path::new(CONFIG_PATH);
    let cfg = match Config::from_toml(text, path) {
        Ok(c) => c,
        Err(e) => {
            let shown = e.to_string();
            prop_assert!(
                shown.starts_with(&format!("config file {CONFIG_PATH}: ")),
                "a parse error must name the file: {shown:?}"
            );
            prop_assert!(!shown.contains('\n'), "a parse error is one line: {shown:?}");
            seen.parse_err.fetch_add(1, Ordering::Relaxed);
            return Ok(());
        }
    };
    if let Err(e) = cfg.validate() {
        let shown = e.to_string();
        match &e {
            ConfigError::Invalid { key, .. } => {
                prop_assert!(
                    KEY_PREFIXES.iter().any(|p| key.starts_with(p)),
                    "error names no known key: {shown:?}"
                );
                prop_assert!(shown.starts_with(&format!("config key `{key}`: ")), "{shown:?}");
            }
            other => prop_assert!(false, "validate() returned a non-key error: {other:?}"),
        }
        seen.invalid.fetch_add(1, Ordering::Relaxed);
        return Ok(());
    }
    seen.valid.fetch_add(1, Ordering::Relaxed);
    check_valid_plan(&cfg)?;
    // `nixl-agent config` prints the effective config: it must load back as
    // the same config (and so validate again).
    let printed = toml::to_string_pretty(&cfg).map_err(|e| TestCaseError::fail(format!("serialize: {e}")))?;
    let again = Config::from_toml(&printed, path)
        .map_err(|e| TestCaseError::fail(format!("printed config does not parse: {e}\n{printed}")))?;
    prop_assert_eq!(&again, &cfg, "printed config differs:\n{}", printed);
    prop_assert!(again.validate().is_ok());
    Ok(())
}

/// What a validated config guarantees the plan.
fn check_valid_plan(cfg: &Config) -> Result<(), TestCaseError> {
    let plan = Plan::from_config(cfg);
    prop_assert!(plan.groups.len() <= config::MAX_GROUPS);
    prop_assert_eq!(plan.groups.len(), cfg.groups.len());
    let mut names = HashSet::new();
    for g in &plan.groups {
        prop_assert!(names.insert(g.name.clone()), "duplicate group name {:?}", g.name);
        prop_assert!(name_ok(&g.name), "name {:?}", g.name);
        prop_assert!(kind_ok(g.kind.as_str()), "kind {:?}", g.kind);
        prop_assert!(!g.backends.is_empty());
        for b in &g.backends {
            prop_assert!(backend_ok(b), "backend {:?}", b);
        }
        for w in [g.name.as_str(), g.kind.as_str(), &g.backend_label()] {
            prop_assert!(!w.contains(LABEL_BREAKERS), "label word {:?}", w);
        }
        match g.source {
            RegionSource::Allocate { count, size } => {
                prop_assert!(
                    count >= 1 && count as u64 <= config::MAX_REGIONS_PER_GROUP,
                    "count {}",
                    count
                );
                prop_assert!(size >= 1, "size {}", size);
                prop_assert!(
                    count as u128 * size as u128 <= config::MAX_GROUP_BYTES as u128,
                    "{} × {} exceeds MAX_GROUP_BYTES",
                    count,
                    size
                );
            }
            RegionSource::Provided(_) => prop_assert!(false, "a config plan allocates"),
        }
        if g.mem_type == MemType::Dram {
            prop_assert_eq!(g.device, 0);
        }
    }
    prop_assert!(plan.check().is_ok(), "{:?}", plan.check());
    Ok(())
}

/// A TOML basic string holding exactly `s`.
fn toml_str(s: &str) -> String {
    let mut o = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => o.push_str("\\\""),
            '\\' => o.push_str("\\\\"),
            c if c.is_control() => o.push_str(&format!("\\u{:04X}", c as u32)),
            c => o.push(c),
        }
    }
    o.push('"');
    o
}

/// Unicode and ASCII strings that stress charsets and escaping.
fn hostile_word() -> impl Strategy<Value = String> {
    prop_oneof![
        Just(String::new()),
        Just("a\"b".to_string()),
        Just("a\\b".to_string()),
        Just("a\nb".to_string()),
        Just("x} y{".to_string()),
        Just("kv,group=\"evil\"".to_string()),
        Just("ｋｖ".to_string()),
        Just("kv\u{0}".to_string()),
        Just("é".to_string()),
        Just("A".repeat(65)),
        Just("a".repeat(33)),
        Just(" kv".to_string()),
        Just("UCX+GDS".to_string()),
        "\\PC{0,12}",
        ".{0,12}",
        "[a-zA-Z0-9_.\\-\"\\\\\n{}=, ]{0,70}",
    ]
}

fn valid_name() -> impl Strategy<Value = String> {
    prop_oneof![
        prop::sample::select(vec!["kv", "aux", "state", "kv.0", "a-b", "X_1", "g"]).prop_map(str::to_string),
        "[A-Za-z0-9_.\\-]{1,64}",
    ]
}

fn valid_kind() -> impl Strategy<Value = String> {
    prop_oneof![
        prop::sample::select(vec!["kv", "aux", "state", "mamba_conv"]).prop_map(str::to_string),
        "[a-z0-9_]{1,32}",
    ]
}

fn valid_backend() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => prop::sample::select(vec!["UCX", "GDS", "POSIX", "LIBFABRIC"]).prop_map(str::to_string),
        1 => "[A-Za-z0-9_]{1,32}",
    ]
}

/// A size as TOML: valid ones, boundary ones and hostile ones.
fn size_value() -> impl Strategy<Value = String> {
    let units = prop::sample::select(vec![
        "", "B", "KiB", "MiB", "GiB", "TiB", "KB", "MB", "GB", "TB", "k", "m", "g", "t", "kib", " MiB", "EiB", "Ki",
        "ｋiB", "e99KiB", "KiB ", "µB", "%",
    ]);
    prop_oneof![
        40 => prop::sample::select(vec!["\"4KiB\"", "\"64KiB\"", "\"1MiB\"", "4096", "\"512KiB\"", "\"1 mib\""])
            .prop_map(str::to_string),
        1 => prop::sample::select(vec![
            "\"1TiB\"", "1048576", "1048577", "\"1099511627776\"", "\"1099511627777\"", "\"1e99KiB\"",
            "\"18446744073709551615\"", "\"18446744073709551616\"", "18446744073709551616", "-1", "0", "\"0B\"",
            "1.5", "1e99", "nan", "inf", "true", "[]", "{}", "\"\"", "\"١٢KiB\"", "\"+5\"", "\"5 \"", "0x1000",
            "1_024", "\"16777216TiB\"", "\"16777215TiB\"",
        ])
        .prop_map(str::to_string),
        1 => (any::<u64>(), units.clone()).prop_map(|(n, u)| toml_str(&format!("{n}{u}"))),
        1 => (0u64..100_000, units).prop_map(|(n, u)| toml_str(&format!("{n}{u}"))),
        1 => any::<i64>().prop_map(|n| n.to_string()),
    ]
}

/// A duration as TOML.
fn duration_value() -> impl Strategy<Value = String> {
    let units = prop::sample::select(vec!["ms", "s", "m", "h", "", "us", "ns", "d", "S", " s", "sec", "ｓ"]);
    prop_oneof![
        40 => prop::sample::select(vec!["\"500ms\"", "\"10s\"", "\"1s\"", "\"30s\"", "\"2m\"", "\"1h\""])
            .prop_map(str::to_string),
        1 => prop::sample::select(vec![
            "\"0s\"", "\"0ms\"", "\"18446744073709551615h\"", "\"18446744073709551616s\"", "\"1e99s\"", "10",
            "-1", "\"-1s\"", "\"\"", "1.5", "true", "\"1h30m\"",
        ])
        .prop_map(str::to_string),
        1 => (any::<u64>(), units.clone()).prop_map(|(n, u)| toml_str(&format!("{n}{u}"))),
        1 => (0u64..10_000, units).prop_map(|(n, u)| toml_str(&format!("{n}{u}"))),
    ]
}

/// An unsigned integer field (count, device, queue_size, max_attempts, ...).
fn uint_value(boundaries: Vec<u64>) -> impl Strategy<Value = String> {
    prop_oneof![
        30 => (1u64..=16).prop_map(|n| n.to_string()),
        3 => prop::sample::select(boundaries).prop_map(|n| n.to_string()),
        1 => prop::sample::select(vec![
            "0", "-1", "-9223372036854775808", "9223372036854775807", "18446744073709551615", "4294967296",
            "1e3", "1.0", "\"8\"", "true", "0x10", "0o17", "0b101", "+3", "1_000",
        ])
        .prop_map(str::to_string),
        1 => any::<i64>().prop_map(|n| n.to_string()),
    ]
}

fn string_value(valid: BoxedStrategy<String>) -> impl Strategy<Value = String> {
    prop_oneof![
        40 => valid.prop_map(|s| toml_str(&s)),
        1 => hostile_word().prop_map(|s| toml_str(&s)),
        1 => prop::sample::select(vec!["42", "true", "[\"a\"]", "{ x = 1 }", "'''multi\nline'''", "'lit\"eral'"])
            .prop_map(str::to_string),
    ]
}

fn backends_value() -> impl Strategy<Value = String> {
    prop_oneof![
        30 => prop::collection::vec(valid_backend(), 1..3)
            .prop_map(|v| format!("[{}]", v.iter().map(|b| toml_str(b)).collect::<Vec<_>>().join(", "))),
        1 => prop::collection::vec(hostile_word(), 0..3)
            .prop_map(|v| format!("[{}]", v.iter().map(|b| toml_str(b)).collect::<Vec<_>>().join(", "))),
        1 => prop::sample::select(vec!["[]", "\"UCX\"", "[1]", "[\"UCX\", 2]"]).prop_map(str::to_string),
    ]
}

/// Mostly one of `valid`, sometimes one of `hostile` (TOML fragments).
fn pick(valid: Vec<&'static str>, hostile: Vec<&'static str>) -> BoxedStrategy<String> {
    prop_oneof![
        30 => prop::sample::select(valid).prop_map(str::to_string),
        1 => prop::sample::select(hostile).prop_map(str::to_string),
    ]
    .boxed()
}

fn bool_value() -> impl Strategy<Value = String> {
    prop_oneof![
        30 => prop::sample::select(vec!["true", "false"]).prop_map(str::to_string),
        1 => prop::sample::select(vec!["\"yes\"", "1", "True"]).prop_map(str::to_string),
    ]
}

/// `key = value` or nothing (then the default applies).
fn maybe(key: &'static str, value: impl Strategy<Value = String> + 'static) -> BoxedStrategy<String> {
    prop_oneof![
        1 => Just(String::new()),
        1 => value.prop_map(move |v| format!("{key} = {v}\n")),
    ]
    .boxed()
}

fn lines(parts: Vec<BoxedStrategy<String>>) -> BoxedStrategy<String> {
    parts.prop_map(|p| p.concat()).boxed()
}

fn group_table() -> BoxedStrategy<String> {
    let mem_type = prop_oneof![
        30 => Just("\"DRAM\"".to_string()),
        8 => Just("\"VRAM\"".to_string()),
        1 => prop::sample::select(vec!["\"dram\"", "\"Dram\"", "\"HBM\"", "1", "\"\""]).prop_map(str::to_string),
    ];
    let required = [
        // name, kind and count/size have no default.
        prop_oneof![
            60 => string_value(valid_name().boxed()).prop_map(|v| format!("name = {v}\n")),
            1 => Just(String::new()),
        ]
        .boxed(),
        prop_oneof![
            60 => string_value(valid_kind().boxed()).prop_map(|v| format!("kind = {v}\n")),
            1 => Just(String::new()),
        ]
        .boxed(),
        prop_oneof![60 => mem_type.prop_map(|v| format!("mem_type = {v}\n")), 1 => Just(String::new())].boxed(),
        prop_oneof![
            60 => uint_value(vec![config::MAX_REGIONS_PER_GROUP, config::MAX_REGIONS_PER_GROUP + 1, 1 << 19, 3])
                .prop_map(|v| format!("count = {v}\n")),
            1 => Just(String::new()),
        ]
        .boxed(),
        prop_oneof![60 => size_value().prop_map(|v| format!("size = {v}\n")), 1 => Just(String::new())].boxed(),
    ];
    let optional = [
        prop_oneof![
            6 => Just(String::new()),
            1 => uint_value(vec![0, 1, 7, u32::MAX as u64, u32::MAX as u64 + 1]).prop_map(|v| format!("device = {v}\n")),
        ]
        .boxed(),
        maybe("backends", backends_value()),
        maybe("required", bool_value()),
        maybe("validate", bool_value()),
        prop_oneof![60 => Just(String::new()), 1 => Just("unknown_key = 1\n".to_string())].boxed(),
    ];
    let mut parts: Vec<BoxedStrategy<String>> = vec![Just("\n[[group]]\n".to_string()).boxed()];
    parts.extend(required);
    parts.extend(optional);
    lines(parts).prop_shuffle_lines()
}

/// Shuffles the `key = value` lines after a table header, so key order
/// never matters to the parser.
trait ShuffleLines {
    fn prop_shuffle_lines(self) -> BoxedStrategy<String>;
}

impl ShuffleLines for BoxedStrategy<String> {
    fn prop_shuffle_lines(self) -> BoxedStrategy<String> {
        self.prop_flat_map(|s| {
            let mut it = s.splitn(3, '\n');
            let (blank, header, body) = (
                it.next().unwrap_or(""),
                it.next().unwrap_or(""),
                it.next().unwrap_or(""),
            );
            let head = format!("{blank}\n{header}\n");
            let body: Vec<String> = body.lines().map(|l| format!("{l}\n")).collect();
            Just(body)
                .prop_shuffle()
                .prop_map(move |b| format!("{head}{}", b.concat()))
        })
        .boxed()
    }
}

/// A near-valid config document: every section, each key present or not,
/// most values valid, some hostile, groups with clashing names.
fn config_document() -> impl Strategy<Value = String> {
    let top = lines(vec![
        maybe(
            "listen",
            pick(
                vec![
                    "\"127.0.0.1:0\"",
                    "\"0.0.0.0:10915\"",
                    "\"[::1]:10915\"",
                    "\"[fe80::1%2]:80\"",
                ],
                vec![
                    "\"localhost:80\"",
                    "\"127.0.0.1\"",
                    "\"127.0.0.1:65536\"",
                    "\"256.0.0.1:1\"",
                    "8080",
                    "\"\"",
                ],
            ),
        ),
        maybe(
            "agent_name",
            string_value(prop_oneof![Just("nixl-agent".to_string()), "[A-Za-z0-9_.\\-]{1,130}"].boxed()),
        ),
        maybe(
            "nixl_lib_dir",
            string_value(prop_oneof![Just("/opt/nixl".to_string()), "\\PC{1,20}"].boxed()),
        ),
        maybe("shutdown_grace", duration_value()),
        maybe(
            "log_format",
            pick(vec!["\"text\"", "\"json\""], vec!["\"JSON\"", "\"xml\"", "1"]),
        ),
        prop_oneof![60 => Just(String::new()), 1 => "[a-z_]{1,12}".prop_map(|k| format!("{k} = 1\n"))].boxed(),
    ]);
    let retry = lines(vec![
        Just("\n[retry]\n".to_string()).boxed(),
        maybe("initial_backoff", duration_value()),
        maybe("max_backoff", duration_value()),
        maybe(
            "max_attempts",
            uint_value(vec![0, u32::MAX as u64, u32::MAX as u64 + 1]),
        ),
    ]);
    let http = lines(vec![
        Just("\n[http]\n".to_string()).boxed(),
        maybe("max_connections", uint_value(vec![0, 512, 65_536, 65_537])),
        maybe("header_read_timeout", duration_value()),
        maybe("request_timeout", duration_value()),
        maybe(
            "max_header_bytes",
            prop_oneof![
                3 => Just("\"16KiB\"".to_string()),
                1 => prop::sample::select(vec!["\"8KiB\"", "\"1MiB\"", "8191", "1048577", "\"0\""])
                    .prop_map(str::to_string),
                1 => size_value(),
            ],
        ),
    ]);
    let tracing = lines(vec![
        Just("\n[tracing]\n".to_string()).boxed(),
        maybe(
            "endpoint",
            prop_oneof![
                3 => Just("\"http://127.0.0.1:4318\"".to_string()),
                1 => prop::sample::select(vec!["\"https://x\"", "\"ftp://x\"", "\"127.0.0.1:4318\"", "\"\""])
                    .prop_map(str::to_string),
            ],
        ),
        maybe(
            "protocol",
            pick(vec!["\"http/protobuf\"", "\"grpc\""], vec!["\"http/json\"", "\"GRPC\""]),
        ),
        maybe(
            "service_name",
            string_value(prop_oneof![Just("svc".to_string()), "\\PC{0,20}"].boxed()),
        ),
        maybe(
            "sampler",
            pick(
                vec!["\"always_on\"", "\"traceidratio\"", "\"parentbased_always_off\""],
                vec!["\"sometimes\"", "\"\""],
            ),
        ),
        maybe(
            "sampler_arg",
            prop_oneof![
                3 => (0.0f64..=1.0).prop_map(|f| format!("{f:?}")),
                1 => prop::sample::select(vec!["-0.0", "1.0000001", "nan", "-inf", "1", "\"0.5\"", "1e-320"])
                    .prop_map(str::to_string),
            ],
        ),
        maybe("queue_size", uint_value(vec![0, 1, 1 << 20, (1 << 20) + 1])),
        maybe("export_timeout", duration_value()),
    ]);
    let resource = prop::collection::btree_map(
        prop_oneof![3 => "[a-z.]{1,8}", 1 => "\\PC{1,8}"],
        prop_oneof![3 => "[a-z0-9]{0,8}", 1 => "\\PC{0,8}"],
        0..3,
    )
    .prop_map(|m| {
        let body: String = m
            .iter()
            .map(|(k, v)| format!("{} = {}\n", toml_str(k), toml_str(v)))
            .collect();
        format!("\n[tracing.resource]\n{body}")
    });
    let section = |s: BoxedStrategy<String>| prop_oneof![1 => Just(String::new()), 1 => s];
    let tail = prop_oneof![
        30 => Just(String::new()),
        1 => prop::sample::select(vec![
            "listen = \"127.0.0.1:1\"\n", // duplicate key, or a key in the wrong table
            "[retry]\n",                  // duplicate table
            "garbage\n",
            "= 1\n",
            "[[group]\n",
            "\"unterminated\n",
        ])
        .prop_map(str::to_string),
    ];
    (
        top,
        section(retry),
        section(http),
        section(tracing),
        section(resource.boxed()),
        prop::collection::vec(group_table(), 0..5),
        tail,
    )
        .prop_map(|(top, retry, http, tracing, resource, groups, tail)| {
            // A resource table only after its parent, or on its own.
            format!("{top}{retry}{http}{tracing}{resource}{}{tail}", groups.concat())
        })
}

#[test]
fn config_from_arbitrary_bytes_is_a_value_or_a_named_error() {
    let seen = Outcomes::default();
    let mut runner = TestRunner::new(cases(2000));
    runner
        .run(&prop::collection::vec(any::<u8>(), 0..400), |bytes| {
            check_config_text(&String::from_utf8_lossy(&bytes), &seen)
        })
        .unwrap();
    // Arbitrary bytes almost never parse; that is the point: none panics.
    assert!(seen.parse_err.load(Ordering::Relaxed) > 0);
}

#[test]
fn config_from_arbitrary_toml_like_text_is_a_value_or_a_named_error() {
    // Short lines built from TOML's own punctuation and the agent's keys.
    let token = prop::sample::select(vec![
        "listen",
        "group",
        "[[group]]",
        "[retry]",
        "[tracing]",
        "[http]",
        "name",
        "count",
        "size",
        "=",
        " ",
        "\n",
        "\"",
        "'",
        "[",
        "]",
        "{",
        "}",
        ",",
        ".",
        "#",
        "\\",
        "1",
        "-",
        "e",
        "KiB",
        "\"kv\"",
        "\"UCX\"",
        "true",
        "inf",
        "nan",
        "0x",
        "é",
        "\u{0}",
        "\r\n",
        "\t",
        "\"\"\"",
        "'''",
    ]);
    let seen = Outcomes::default();
    let mut runner = TestRunner::new(cases(2000));
    runner
        .run(&prop::collection::vec(token, 0..60), |t| {
            check_config_text(&t.concat(), &seen)
        })
        .unwrap();
}

#[test]
fn near_valid_configs_validate_into_bounded_plans_or_name_the_key() {
    let seen = Outcomes::default();
    let mut runner = TestRunner::new(cases(1500));
    runner
        .run(&config_document(), |doc| {
            check_config_text(&doc, &seen)?;
            if let Ok(cfg) = Config::from_toml(&doc, Path::new(CONFIG_PATH)) {
                if cfg.validate().is_ok() && doc.contains("[[group]]") {
                    seen.valid_with_groups.fetch_add(1, Ordering::Relaxed);
                }
            }
            Ok(())
        })
        .unwrap();
    let (p, i, v, vg) = (
        seen.parse_err.load(Ordering::Relaxed),
        seen.invalid.load(Ordering::Relaxed),
        seen.valid.load(Ordering::Relaxed),
        seen.valid_with_groups.load(Ordering::Relaxed),
    );
    println!("near-valid configs: {p} parse errors, {i} invalid, {v} valid ({vg} with their own groups)");
    // The generator must reach every outcome, or the property proves little.
    assert!(p >= 50 && i >= 50 && v >= 50 && vg >= 25, "{p} / {i} / {v} / {vg}");
}

#[test]
fn group_limits_are_enforced_at_their_exact_boundaries() {
    let doc = |count: u64, size: &str| {
        format!("[[group]]\nname = \"g\"\nkind = \"kv\"\nmem_type = \"DRAM\"\ncount = {count}\nsize = {size}\n")
    };
    let load = |d: &str| {
        let c = Config::from_toml(d, Path::new(CONFIG_PATH)).unwrap();
        c.validate().map(|()| c)
    };
    let max_r = config::MAX_REGIONS_PER_GROUP;
    let max_b = config::MAX_GROUP_BYTES;
    assert!(load(&doc(max_r, &(max_b / max_r).to_string())).is_ok());
    let e = load(&doc(max_r + 1, "1")).unwrap_err().to_string();
    assert!(e.contains("group[0].count"), "{e}");
    let e = load(&doc(max_r, &(max_b / max_r + 1).to_string()))
        .unwrap_err()
        .to_string();
    assert!(e.contains("group[0].size"), "{e}");
    assert!(load(&doc(1, &max_b.to_string())).is_ok());
    assert!(load(&doc(1, &(max_b + 1).to_string())).is_err());
    // count × size overflowing u64 is refused, not wrapped.
    let e = load(&doc(max_r, "\"16777215TiB\"")).unwrap_err().to_string();
    assert!(e.contains("group[0].size"), "{e}");
    // MAX_GROUPS distinct groups pass, one more does not.
    let many = |n: usize| {
        (0..n)
            .map(|i| format!("[[group]]\nname = \"g{i}\"\nkind = \"kv\"\nmem_type = \"DRAM\"\ncount = 1\nsize = 1\n"))
            .collect::<String>()
    };
    let ok = load(&many(config::MAX_GROUPS)).unwrap();
    assert_eq!(Plan::from_config(&ok).groups.len(), config::MAX_GROUPS);
    let e = load(&many(config::MAX_GROUPS + 1)).unwrap_err().to_string();
    assert!(e.starts_with("config key `group`"), "{e}");
}

// ---------------------------------------------------------------------------
// 1b. units.

/// The documented grammar of sizes, computed independently.
fn size_oracle(text: &str) -> Option<u64> {
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

fn duration_oracle(text: &str) -> Option<Duration> {
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

fn unit_text() -> impl Strategy<Value = String> {
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

// ---------------------------------------------------------------------------
// 1c. Plan::check: the gate in front of every label.

fn any_word(valid: BoxedStrategy<String>) -> BoxedStrategy<String> {
    prop_oneof![3 => valid, 2 => hostile_word()].boxed()
}

fn any_spec() -> impl Strategy<Value = GroupSpec> {
    (
        prop_oneof![3 => prop::sample::select(vec!["kv", "aux", "a.b"]).prop_map(str::to_string), 2 => any_word(valid_name().boxed())],
        any_word(valid_kind().boxed()),
        prop_oneof![
            6 => prop::collection::vec(any_word(valid_backend().boxed()), 1..3),
            1 => Just(vec![]),
        ],
        any::<bool>(),
    )
        .prop_map(|(name, kind, backends, vram)| {
            let mem = if vram { MemType::Vram } else { MemType::Dram };
            let mut g = GroupSpec::provided(&name, Kind::parse(&kind), mem, vec![]);
            g.backends = backends;
            g
        })
}

/// The key `Plan::check` must name for this plan, or None when it must pass.
fn plan_oracle(plan: &Plan) -> Option<String> {
    let mut names = HashSet::new();
    for (i, g) in plan.groups.iter().enumerate() {
        let key = |f: &str| format!("groups[{i}].{f}");
        if !name_ok(&g.name) {
            return Some(key("name"));
        }
        if !kind_ok(g.kind.as_str()) {
            return Some(key("kind"));
        }
        if g.backends.is_empty() || !g.backends.iter().all(|b| backend_ok(b)) {
            return Some(key("backends"));
        }
        if !names.insert(g.name.as_str()) {
            return Some(key("name"));
        }
    }
    None
}

proptest! {
    #![proptest_config(cases(2000))]

    #[test]
    fn plan_check_admits_exactly_the_documented_charsets(groups in prop::collection::vec(any_spec(), 0..5)) {
        let plan = Plan { groups };
        let got = plan.check();
        match (plan_oracle(&plan), &got) {
            (None, Ok(())) => {
                for g in &plan.groups {
                    for w in [g.name.as_str(), g.kind.as_str(), &g.backend_label()] {
                        prop_assert!(!w.contains(LABEL_BREAKERS), "{:?} passed the check", w);
                        prop_assert_eq!(escape(w), w.to_string());
                    }
                }
            }
            (Some(key), Err(ConfigError::Invalid { key: k, .. })) => prop_assert_eq!(k, &key),
            (want, got) => prop_assert!(false, "expected {:?}, got {:?} for {:?}", want, got, plan),
        }
    }
}

// ---------------------------------------------------------------------------
// 1d. Escaping: label values and help text that contain `"`, `\` and
// newlines are written so that a parser reads back the exact string.

/// Undoes exposition escaping; `quote` says whether `\"` is an escape.
fn unescape(s: &str, quote: bool) -> Result<String, String> {
    let mut out = String::new();
    let mut it = s.chars();
    while let Some(c) = it.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match it.next() {
            Some('\\') => out.push('\\'),
            Some('n') => out.push('\n'),
            Some('"') if quote => out.push('"'),
            other => return Err(format!("bad escape \\{other:?} in {s:?}")),
        }
    }
    Ok(out)
}

/// One sample line: metric name, labels, and what follows the labels.
#[derive(Debug)]
struct Sample {
    name: String,
    labels: Vec<(String, String)>,
    value: String,
}

/// A strict parser of one exposition sample line (both formats).
fn parse_sample(line: &str) -> Result<Sample, String> {
    let chars: Vec<char> = line.chars().collect();
    let mut i = 0;
    let name: String = chars
        .iter()
        .take_while(|c| c.is_ascii_alphanumeric() || **c == '_' || **c == ':')
        .collect();
    if name.is_empty() {
        return Err(format!("no metric name: {line:?}"));
    }
    i += name.len();
    let mut labels = Vec::new();
    if chars.get(i) == Some(&'{') {
        i += 1;
        loop {
            if chars.get(i) == Some(&'}') {
                i += 1;
                break;
            }
            let k: String = chars[i..]
                .iter()
                .take_while(|c| c.is_ascii_alphanumeric() || **c == '_')
                .collect();
            i += k.len();
            if k.is_empty() || chars.get(i) != Some(&'=') || chars.get(i + 1) != Some(&'"') {
                return Err(format!("bad label at {i}: {line:?}"));
            }
            i += 2;
            let mut raw = String::new();
            loop {
                match chars.get(i) {
                    None => return Err(format!("unterminated label value: {line:?}")),
                    Some('\\') => {
                        raw.push('\\');
                        raw.push(*chars.get(i + 1).ok_or("dangling backslash")?);
                        i += 2;
                    }
                    Some('"') => {
                        i += 1;
                        break;
                    }
                    Some(c) => {
                        raw.push(*c);
                        i += 1;
                    }
                }
            }
            labels.push((k, unescape(&raw, true)?));
            match chars.get(i) {
                Some(',') => i += 1,
                Some('}') => {}
                _ => return Err(format!("expected , or }} at {i}: {line:?}")),
            }
        }
    }
    if chars.get(i) != Some(&' ') {
        return Err(format!("no space before the value: {line:?}"));
    }
    let value: String = chars[i + 1..].iter().collect();
    if value.is_empty() {
        return Err(format!("no value: {line:?}"));
    }
    Ok(Sample { name, labels, value })
}

fn label<'a>(s: &'a Sample, name: &str) -> Option<&'a String> {
    s.labels.iter().find(|(k, _)| k == name).map(|(_, v)| v)
}

/// Parses a whole exposition body: every line is a comment or a sample.
/// Returns the samples and the HELP texts by family.
fn parse_exposition(body: &str, format: Format) -> Result<(Vec<Sample>, BTreeMap<String, String>), String> {
    let mut samples = Vec::new();
    let mut help = BTreeMap::new();
    let om = format == Format::OpenMetrics;
    for line in body.split_terminator('\n') {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let (fam, text) = rest.split_once(' ').unwrap_or((rest, ""));
            help.insert(fam.to_string(), unescape(text, om)?);
        } else if line.starts_with("# TYPE ") || line.starts_with("# UNIT ") || line == "# EOF" {
        } else if line.starts_with('#') {
            return Err(format!("unknown comment line {line:?}"));
        } else {
            let mut s = parse_sample(line)?;
            // OpenMetrics exemplars follow the value after " # ".
            if om {
                if let Some((value, _exemplar)) = s.value.split_once(" # ") {
                    s.value = value.to_string();
                }
            }
            samples.push(s);
        }
    }
    if om && !body.ends_with("# EOF\n") {
        return Err("OpenMetrics body does not end with # EOF".into());
    }
    Ok((samples, help))
}

proptest! {
    #![proptest_config(cases(1000))]

    #[test]
    fn escape_is_reversible_and_leaves_no_raw_newline_or_quote(v in ".{0,24}|\\PC{0,24}|[\"\\\\\n a]{0,12}") {
        let e = escape(&v);
        prop_assert!(!e.contains('\n'));
        prop_assert_eq!(unescape(&e, true), Ok(v.clone()));
        // Every quote is escaped: no `"` is preceded by an even run of backslashes.
        let b: Vec<char> = e.chars().collect();
        for (i, c) in b.iter().enumerate() {
            if *c == '"' {
                let run = b[..i].iter().rev().take_while(|c| **c == '\\').count();
                prop_assert!(run % 2 == 1, "unescaped quote in {:?}", e);
            }
        }
    }

    #[test]
    fn hostile_label_values_and_help_survive_both_encoders(
        values in prop::collection::vec("[\"\\\\\n{},= a#é]{0,10}|\\PC{0,10}", 1..4),
        help in "[\"\\\\\n a]{1,12}|\\PC{1,12}",
    ) {
        let r = prometheus::Registry::new();
        let c = prometheus::IntCounterVec::new(prometheus::Opts::new("x_events_total", help.clone()), &["who"]).unwrap();
        r.register(Box::new(c.clone())).unwrap();
        let g = prometheus::GaugeVec::new(prometheus::Opts::new("x_level", "Level."), &["who", "other"]).unwrap();
        r.register(Box::new(g.clone())).unwrap();
        let distinct: HashSet<&String> = values.iter().collect();
        for v in &values {
            c.with_label_values(&[v.as_str()]).inc();
            g.with_label_values(&[v.as_str(), "\\"]).set(2.0);
        }
        for format in [Format::Text, Format::OpenMetrics] {
            let body = exposition::encode(&r, format);
            let (samples, helps) = parse_exposition(&body, format)
                .map_err(|e| TestCaseError::fail(format!("{format:?}: {e}\n{body}")))?;
            let counters: Vec<&Sample> = samples.iter().filter(|s| s.name == "x_events_total").collect();
            prop_assert_eq!(counters.len(), distinct.len(), "{:?}:\n{}", format, body);
            let got: HashSet<&String> = counters.iter().filter_map(|s| label(s, "who")).collect();
            prop_assert_eq!(&got, &distinct, "{:?}:\n{}", format, body);
            for s in samples.iter().filter(|s| s.name == "x_level") {
                prop_assert_eq!(label(s, "other").map(String::as_str), Some("\\"));
                prop_assert!(label(s, "who").is_some_and(|w| distinct.contains(w)));
                prop_assert_eq!(&s.value, "2");
            }
            let fam = if format == Format::OpenMetrics { "x_events" } else { "x_events_total" };
            prop_assert_eq!(helps.get(fam), Some(&help), "{:?}:\n{}", format, body);
        }
    }

}

proptest! {
    #![proptest_config(cases(256))]

    /// The one label fed from outside the config: the NIXL version read from
    /// the wheel's dist-info on disk.
    #[test]
    fn build_info_carries_any_nixl_version_through_both_encoders(version in "[\"\\\\\n{}, a]{1,12}|\\PC{1,16}") {
        let m = Metrics::new(&BuildInfo::current(Some(&version)));
        for format in [Format::Text, Format::OpenMetrics] {
            let body = m.encode(format);
            let (samples, _) = parse_exposition(&body, format)
                .map_err(|e| TestCaseError::fail(format!("{format:?}: {e}")))?;
            let info: Vec<&Sample> = samples.iter().filter(|s| s.name == "nixl_agent_build_info").collect();
            prop_assert_eq!(info.len(), 1);
            prop_assert_eq!(label(info[0], "nixl_version"), Some(&version));
        }
    }
}

// ---------------------------------------------------------------------------
// 2. Region sets: validate_group over a fake MemoryProbe.

#[derive(Debug, Clone)]
struct FakeProbe {
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
fn maps_strategy() -> impl Strategy<Value = Vec<(usize, usize)>> {
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
fn region_strategy(maps: Vec<(usize, usize)>, home: u32) -> impl Strategy<Value = Region> {
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

fn memlock_strategy() -> impl Strategy<Value = Memlock> {
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
struct RegionCase {
    spec: GroupSpec,
    regions: Vec<Region>,
    probe: FakeProbe,
    pinned: u64,
}

fn region_case() -> impl Strategy<Value = RegionCase> {
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

fn overlaps(a: &Region, b: &Region) -> bool {
    let (ae, be) = (a.addr as u128 + a.len as u128, b.addr as u128 + b.len as u128);
    (a.addr as u128) < be && (b.addr as u128) < ae
}

fn covered(maps: &[(usize, usize)], r: &Region) -> bool {
    maps.iter()
        .any(|&(s, e)| r.addr >= s && r.addr as u128 + r.len as u128 <= e as u128)
}

/// Is `rej` a true statement about this case?
fn justified(c: &RegionCase, rej: &Rejection) -> Result<(), String> {
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
fn acceptable(c: &RegionCase) -> bool {
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
enum Violation {
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

fn violation() -> impl Strategy<Value = Violation> {
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
                (Reason::OverlappingRegions, Some(k.max(j)))
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

// ---------------------------------------------------------------------------
// 3. All or nothing: a registrar that fails where it is told to.

#[derive(Debug, Default)]
struct Ledger {
    /// Live registrations: handle id → address.
    live: BTreeMap<u64, usize>,
    next: u64,
    /// Register calls (0-based, across the ledger's life) that fail.
    fail_register: HashSet<usize>,
    /// Deregister calls that fail.
    fail_deregister: HashSet<usize>,
    register_calls: usize,
    deregister_calls: usize,
    /// Handle ids in the order they were registered / deregistered.
    registered: Vec<u64>,
    deregistered: Vec<u64>,
    /// Deregistrations of a handle that was not live: must never happen.
    double_frees: usize,
}

/// A handle that, like nixl-sys's, deregisters itself when dropped unless it
/// was deregistered (the `Registrar::Handle` contract).
#[derive(Debug)]
struct LedgerHandle {
    id: u64,
    done: bool,
    ledger: Rc<RefCell<Ledger>>,
}

impl Drop for LedgerHandle {
    fn drop(&mut self) {
        if !self.done {
            self.ledger.borrow_mut().live.remove(&self.id);
        }
    }
}

struct NoProbe;

impl MemoryProbe for NoProbe {
    fn mapped_ranges(&self) -> Result<Vec<(usize, usize)>, String> {
        Ok(vec![(0, usize::MAX)])
    }
    fn device_pointer(&self, _: usize, _: u32) -> Result<DevicePointer, Reason> {
        Err(Reason::CudaUnavailable)
    }
    fn memlock(&self) -> Memlock {
        Memlock {
            soft_limit: None,
            exempt: true,
            locked_bytes: None,
        }
    }
}

struct Faulty {
    ledger: Rc<RefCell<Ledger>>,
    probe: NoProbe,
}

impl Registrar for Faulty {
    type Handle = LedgerHandle;
    type Backing = ();

    fn preflight(&mut self) -> Result<RuntimeFacts, Failure> {
        Ok(RuntimeFacts::default())
    }
    fn ensure_backend(&mut self, _: &str) -> Result<Option<Duration>, Failure> {
        Ok(None)
    }
    fn allocate(&mut self, _: &GroupSpec, _: usize, _: usize) -> Result<(Vec<Region>, ()), Failure> {
        Err(Failure::new(Reason::AllocationFailed, "not here"))
    }
    fn probe(&self) -> &dyn MemoryProbe {
        &self.probe
    }
    fn register_region(&mut self, _: &GroupSpec, region: &Region) -> Result<LedgerHandle, Failure> {
        let mut l = self.ledger.borrow_mut();
        let call = l.register_calls;
        l.register_calls += 1;
        if l.fail_register.contains(&call) {
            return Err(Failure::new(Reason::NixlBackendError, format!("injected fault {call}")));
        }
        let id = l.next;
        l.next += 1;
        l.live.insert(id, region.addr);
        l.registered.push(id);
        Ok(LedgerHandle {
            id,
            done: false,
            ledger: self.ledger.clone(),
        })
    }
    fn deregister_region(&mut self, mut h: LedgerHandle) -> Result<(), Failure> {
        let mut l = self.ledger.borrow_mut();
        let call = l.deregister_calls;
        l.deregister_calls += 1;
        l.deregistered.push(h.id);
        if !l.live.contains_key(&h.id) {
            l.double_frees += 1;
        }
        if l.fail_deregister.contains(&call) {
            // The handle is dropped on return and deregisters itself then.
            drop(l);
            return Err(Failure::new(
                Reason::NixlBackendError,
                format!("injected deregister fault {call}"),
            ));
        }
        l.live.remove(&h.id);
        h.done = true;
        Ok(())
    }
}

fn regions_at(base: usize, n: usize) -> Vec<Region> {
    (0..n).map(|i| Region::new(base + i * 0x1000, 0x1000, 0)).collect()
}

proptest! {
    #![proptest_config(cases(2000))]

    #[test]
    fn a_failed_group_holds_nothing_and_a_released_group_nothing_either(
        n in 0usize..40,
        fail_reg in prop::collection::hash_set(0usize..48, 0..3),
        fail_dereg in prop::collection::hash_set(0usize..48, 0..4),
        other in 0usize..6,
    ) {
        let ledger = Rc::new(RefCell::new(Ledger::default()));
        let mut r = Faulty { ledger: ledger.clone(), probe: NoProbe };
        // Another group, registered first, must be untouched by this one's rollback.
        let first = GroupSpec::provided("first", Kind::Kv, MemType::Dram, regions_at(0x100000, other));
        let kept = register_all(&mut r, &first, &regions_at(0x100000, other)).expect("no faults yet");
        let kept_ids: Vec<u64> = ledger.borrow().registered.clone();
        {
            let mut l = ledger.borrow_mut();
            // Fault positions are relative to this group's calls.
            l.fail_register = fail_reg.iter().map(|c| c + other).collect();
            l.fail_deregister = fail_dereg.clone();
        }
        let regions = regions_at(0x1000_0000, n);
        let spec = GroupSpec::provided("g", Kind::Aux, MemType::Dram, regions.clone());
        let first_fault = (0..n).find(|i| fail_reg.contains(i));
        let before = ledger.borrow().registered.len();
        match register_all(&mut r, &spec, &regions) {
            Err(GroupFailure { reason, region, message, rolled_back, .. }) => {
                let f = first_fault.expect("failed without an injected fault");
                prop_assert_eq!(region, Some(f));
                prop_assert_eq!(rolled_back, f);
                prop_assert_eq!(reason, Reason::NixlBackendError);
                prop_assert!(message.contains("injected fault"), "{}", message);
                let l = ledger.borrow();
                let mine: Vec<u64> = l.registered[before..].to_vec();
                prop_assert_eq!(mine.len(), f);
                // Nothing of this group is left; the other group is intact.
                prop_assert_eq!(l.live.keys().copied().collect::<Vec<_>>(), kept_ids.clone(), "leaked");
                // Rolled back newest first, each exactly once.
                let mut rev = mine.clone();
                rev.reverse();
                prop_assert_eq!(&l.deregistered, &rev);
                prop_assert_eq!(l.double_frees, 0);
                let dereg_failed = (0..f).any(|c| fail_dereg.contains(&c));
                prop_assert_eq!(message.contains("rollback also failed"), dereg_failed, "{}", message);
            }
            Ok(handles) => {
                prop_assert!(first_fault.is_none());
                prop_assert_eq!(handles.len(), n);
                prop_assert_eq!(ledger.borrow().live.len(), n + other);
                let (failed, first_err) = release_all(&mut r, handles);
                let l = ledger.borrow();
                let expect_failed = (0..n).filter(|c| fail_dereg.contains(c)).count();
                prop_assert_eq!(failed, expect_failed);
                prop_assert_eq!(first_err.is_some(), expect_failed > 0);
                if let Some(e) = first_err {
                    let c = (0..n).find(|c| fail_dereg.contains(c)).unwrap();
                    prop_assert_eq!(e.message, format!("injected deregister fault {c}"));
                }
                prop_assert_eq!(l.live.keys().copied().collect::<Vec<_>>(), kept_ids.clone(), "leaked");
                let mut rev = l.registered[before..].to_vec();
                rev.reverse();
                prop_assert_eq!(&l.deregistered, &rev);
                prop_assert_eq!(l.double_frees, 0);
            }
        }
        // Releasing the first group empties the ledger.
        ledger.borrow_mut().fail_deregister.clear();
        let (failed, _) = release_all(&mut r, kept);
        prop_assert_eq!(failed, 0);
        prop_assert!(ledger.borrow().live.is_empty());
        prop_assert_eq!(ledger.borrow().double_frees, 0);
    }
}

// ---------------------------------------------------------------------------
// 4. The same against the real NIXL runtime (UCX registering DRAM).

/// Counts the registrar's outstanding handles.
struct Counting<R: Registrar> {
    inner: R,
    outstanding: usize,
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
    fn register_region(&mut self, spec: &GroupSpec, region: &Region) -> Result<R::Handle, Failure> {
        let h = self.inner.register_region(spec, region)?;
        self.outstanding += 1;
        Ok(h)
    }
    fn deregister_region(&mut self, handle: R::Handle) -> Result<(), Failure> {
        // Consumed either way: a handle that fails to deregister is dropped,
        // and dropping deregisters.
        self.outstanding -= 1;
        self.inner.deregister_region(handle)
    }
}

/// One region of a real-NIXL case, carved from the test's buffer.
#[derive(Debug, Clone, Copy)]
enum Carve {
    Slice { off: usize, len: usize },
    Null { len: usize },
    Zero { off: usize },
}

const NIXL_BUF: usize = 1 << 20;

fn carve() -> impl Strategy<Value = Carve> {
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
fn nixl_descriptors(md: &[u8]) -> Result<u64, String> {
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

fn nixl_lib_dir() -> PathBuf {
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
fn real_nixl_registers_random_region_sets_all_or_nothing() {
    use nixl_agent::nixl::{discover, load, NixlRegistrar};
    let loaded = load(discover(Some(&nixl_lib_dir()), &config::ProcessEnv)).expect("NIXL loads");
    let mut reg = Counting {
        inner: NixlRegistrar::new("nixl-agent-properties", Ok(loaded)),
        outstanding: 0,
    };
    reg.preflight().expect("NIXL agent");
    reg.ensure_backend("UCX").expect("UCX backend");
    let metadata = |r: &Counting<NixlRegistrar>| {
        let md = r.inner.agent().expect("agent").get_local_md().expect("metadata");
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
        let outcome = if validate {
            match validate_group(&spec, &regions, reg.probe(), 0) {
                Err(rej) => {
                    let want = match first_bad {
                        Some(i) if regions[i].len == 0 => (Reason::ZeroLength, Some(i)),
                        Some(i) => (Reason::InvalidAddress, Some(i)),
                        None => (Reason::OverlappingRegions, rej.region),
                    };
                    prop_assert!(first_bad.is_some() || overlap, "rejected a valid set: {:?}", rej);
                    prop_assert_eq!((rej.reason, rej.region), want);
                    prop_assert_eq!(reg.outstanding, 0);
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
            match register_all(&mut *reg, &spec, &regions) {
                Ok(handles) => {
                    prop_assert_eq!(handles.len(), regions.len());
                    prop_assert_eq!(reg.outstanding, regions.len());
                    prop_assert!(
                        !regions.iter().any(|r| r.addr == 0 && r.len > 0),
                        "NIXL registered a null region: {:?}",
                        regions
                    );
                    prop_assert_eq!(metadata(&reg), regions.len() as u64, "NIXL's own count of descriptors");
                    let (failed, first) = release_all(&mut *reg, handles);
                    prop_assert_eq!((failed, first), (0, None));
                    "registered and released".to_string()
                }
                Err(f) => {
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
        // Nothing outstanding, and NIXL's own view agrees.
        prop_assert_eq!(reg.outstanding, 0, "leaked handles after: {}", outcome);
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

// ---------------------------------------------------------------------------
// 5. Bugs found by the properties above, pinned as regression tests (each
// failed before its fix in src/ and passes since).

/// A validated config must not hold a duration that the agent turns into a
/// deadline (`Instant::now() + d`) and that overflows `Instant`. Before
/// durations were capped at 24 h, both of these passed `validate()` and then
/// panicked:
/// - `retry.initial_backoff = "18446744073709551615s"`: the first failed
///   attempt panics the lifecycle thread (ScheduleRetry in
///   src/lifecycle/driver.rs): retries stop for good, /readyz stays 503, and
///   shutdown reports "the lifecycle thread panicked";
/// - `http.header_read_timeout = "18446744073709551615s"`: hyper's header
///   timer panics every connection task, so /livez, /readyz and /metrics
///   never answer.
#[test]
fn validated_durations_that_become_deadlines_fit_an_instant() {
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
            deadlines.extend(
                (1..=40).map(|n| nixl_agent::backoff::delay(cfg.retry.initial_backoff, cfg.retry.max_backoff, n)),
            );
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
fn totals_of_hostile_provided_regions_do_not_overflow() {
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
fn config_errors_are_one_printable_line() {
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
fn group_byte_limit_holds_after_page_rounding() {
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
