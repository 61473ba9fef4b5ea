//! 1. The config parser.

use super::*;

// ---------------------------------------------------------------------------
// 1. The config parser.

pub(super) const CONFIG_PATH: &str = "/etc/nixl-agent/hostile.toml";

/// Keys a `config key` error may name (before any `[i]` index).
pub(super) const KEY_PREFIXES: &[&str] = &["agent_name", "shutdown_grace", "retry.", "http.", "tracing.", "group"];

#[derive(Debug, Default)]
pub(super) struct Outcomes {
    parse_err: AtomicUsize,
    invalid: AtomicUsize,
    valid: AtomicUsize,
    valid_with_groups: AtomicUsize,
}

/// The whole contract of config loading, for one document.
pub(super) fn check_config_text(text: &str, seen: &Outcomes) -> Result<(), TestCaseError> {
    let path = Path::new(CONFIG_PATH);
    let cfg = match Config::from_toml(text, path) {
        Ok(c) => c,
        Err(e) => {
            let shown = e.to_string();
            match &e {
                // The parser's report as it gives it: the file named first,
                // the line quoted with the caret under the column below.
                ConfigError::Parse { .. } => {
                    prop_assert!(
                        shown.starts_with(&format!("config file {CONFIG_PATH}: ")),
                        "a parse error must name the file: {shown:?}"
                    );
                    prop_assert!(!shown.ends_with('\n'), "{shown:?}");
                }
                // A [[group]] lacking required keys: all of them, at once.
                ConfigError::Invalid { key, .. } => {
                    prop_assert!(key.starts_with("group["), "{shown:?}");
                    prop_assert!(shown.contains(": missing ") && !shown.contains('\n'), "{shown:?}");
                }
                other => prop_assert!(false, "from_toml returned {other:?}"),
            }
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
pub(super) fn check_valid_plan(cfg: &Config) -> Result<(), TestCaseError> {
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
pub(super) fn toml_str(s: &str) -> String {
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
pub(super) fn hostile_word() -> impl Strategy<Value = String> {
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

pub(super) fn valid_name() -> impl Strategy<Value = String> {
    prop_oneof![
        prop::sample::select(vec!["kv", "aux", "state", "kv.0", "a-b", "X_1", "g"]).prop_map(str::to_string),
        "[A-Za-z0-9_.\\-]{1,64}",
    ]
}

pub(super) fn valid_kind() -> impl Strategy<Value = String> {
    prop_oneof![
        prop::sample::select(vec!["kv", "aux", "state", "mamba_conv"]).prop_map(str::to_string),
        "[a-z0-9_]{1,32}",
    ]
}

pub(super) fn valid_backend() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => prop::sample::select(vec!["UCX", "GDS", "POSIX", "LIBFABRIC"]).prop_map(str::to_string),
        1 => "[A-Za-z0-9_]{1,32}",
    ]
}

/// A size as TOML: valid ones, boundary ones and hostile ones.
pub(super) fn size_value() -> impl Strategy<Value = String> {
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
pub(super) fn duration_value() -> impl Strategy<Value = String> {
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
pub(super) fn uint_value(boundaries: Vec<u64>) -> impl Strategy<Value = String> {
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

pub(super) fn string_value(valid: BoxedStrategy<String>) -> impl Strategy<Value = String> {
    prop_oneof![
        40 => valid.prop_map(|s| toml_str(&s)),
        1 => hostile_word().prop_map(|s| toml_str(&s)),
        1 => prop::sample::select(vec!["42", "true", "[\"a\"]", "{ x = 1 }", "'''multi\nline'''", "'lit\"eral'"])
            .prop_map(str::to_string),
    ]
}

pub(super) fn backends_value() -> impl Strategy<Value = String> {
    prop_oneof![
        30 => prop::collection::vec(valid_backend(), 1..3)
            .prop_map(|v| format!("[{}]", v.iter().map(|b| toml_str(b)).collect::<Vec<_>>().join(", "))),
        1 => prop::collection::vec(hostile_word(), 0..3)
            .prop_map(|v| format!("[{}]", v.iter().map(|b| toml_str(b)).collect::<Vec<_>>().join(", "))),
        1 => prop::sample::select(vec!["[]", "\"UCX\"", "[1]", "[\"UCX\", 2]"]).prop_map(str::to_string),
    ]
}

/// Mostly one of `valid`, sometimes one of `hostile` (TOML fragments).
pub(super) fn pick(valid: Vec<&'static str>, hostile: Vec<&'static str>) -> BoxedStrategy<String> {
    prop_oneof![
        30 => prop::sample::select(valid).prop_map(str::to_string),
        1 => prop::sample::select(hostile).prop_map(str::to_string),
    ]
    .boxed()
}

pub(super) fn bool_value() -> impl Strategy<Value = String> {
    prop_oneof![
        30 => prop::sample::select(vec!["true", "false"]).prop_map(str::to_string),
        1 => prop::sample::select(vec!["\"yes\"", "1", "True"]).prop_map(str::to_string),
    ]
}

/// `key = value` or nothing (then the default applies).
pub(super) fn maybe(key: &'static str, value: impl Strategy<Value = String> + 'static) -> BoxedStrategy<String> {
    prop_oneof![
        1 => Just(String::new()),
        1 => value.prop_map(move |v| format!("{key} = {v}\n")),
    ]
    .boxed()
}

pub(super) fn lines(parts: Vec<BoxedStrategy<String>>) -> BoxedStrategy<String> {
    parts.prop_map(|p| p.concat()).boxed()
}

pub(super) fn group_table() -> BoxedStrategy<String> {
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
pub(super) fn config_document() -> impl Strategy<Value = String> {
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
pub(super) fn config_from_arbitrary_bytes_is_a_value_or_a_named_error() {
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
pub(super) fn config_from_arbitrary_toml_like_text_is_a_value_or_a_named_error() {
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
pub(super) fn near_valid_configs_validate_into_bounded_plans_or_name_the_key() {
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
pub(super) fn group_limits_are_enforced_at_their_exact_boundaries() {
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
