use super::*;
use std::collections::HashMap;

fn parse(text: &str) -> Result<Config, ConfigError> {
    let c = Config::from_toml(text, Path::new("t.toml"))?;
    c.validate()?;
    Ok(c)
}

#[test]
fn empty_file_is_the_default() {
    assert_eq!(parse("").unwrap(), Config::default());
    Config::default().validate().unwrap();
}

#[test]
fn default_plan_is_small_dram() {
    let total: u64 = default_groups().iter().map(|g| g.count * g.size).sum();
    assert!(total <= 8 << 20, "must fit Docker's default memlock");
    assert!(default_groups().iter().all(|g| g.mem_type == MemType::Dram));
    assert!(Config::default().listen.ip().is_loopback());
}

#[test]
fn unknown_key_is_named() {
    let e = parse("lisen = \"127.0.0.1:1\"").unwrap_err().to_string();
    assert!(e.contains("lisen"), "{e}");
    let e = parse("[[group]]\nname='a'\nkind='kv'\nmem_type='DRAM'\ncount=1\nsize='4KiB'\nsiez=1")
        .unwrap_err()
        .to_string();
    assert!(e.contains("siez"), "{e}");
}

#[test]
fn bad_values_name_their_key() {
    let g = |extra: &str| format!("[[group]]\nname='a'\nkind='kv'\nmem_type='DRAM'\n{extra}");
    let cases = [
        (g("count=0\nsize='4KiB'"), "group[0].count"),
        (g("count=1000000000000\nsize='4KiB'"), "group[0].count"),
        (g("count=1048576\nsize='1GiB'"), "group[0].size"),
        (g("count=1\nsize=0"), "group[0].size"),
        (g("count=1\nsize='4KiB'\ndevice=1"), "group[0].device"),
        (g("count=1\nsize='4KiB'\nbackends=[]"), "group[0].backends"),
        (g("count=1\nsize='4KiB'\nbackends=['U CX']"), "group[0].backends"),
        (
            "[[group]]\nname='a b'\nkind='kv'\nmem_type='DRAM'\ncount=1\nsize=1".to_string(),
            "group[0].name",
        ),
        (
            "[[group]]\nname='a'\nkind='KV'\nmem_type='DRAM'\ncount=1\nsize=1".to_string(),
            "group[0].kind",
        ),
        (
            format!("{}\n{}", g("count=1\nsize=1"), g("count=1\nsize=1")),
            "group[1].name",
        ),
        (
            "[retry]\ninitial_backoff='2s'\nmax_backoff='1s'".to_string(),
            "retry.max_backoff",
        ),
        ("shutdown_grace='0s'".to_string(), "shutdown_grace"),
    ];
    for (text, key) in cases {
        let e = parse(&text).unwrap_err().to_string();
        assert!(e.contains(key), "{text:?} -> {e}");
    }
    let e = parse(&g("count=1\nsize='4XB'")).unwrap_err().to_string();
    assert!(e.contains("size") && e.contains("unknown size unit"), "{e}");
    let e = parse("[[group]]\nname='a'\nkind='kv'\nmem_type='HBM'\ncount=1\nsize=1")
        .unwrap_err()
        .to_string();
    assert!(e.contains("HBM"), "{e}");
}

#[test]
fn env_overrides_file() {
    let mut c = parse("listen = '127.0.0.1:1'").unwrap();
    let env: HashMap<String, String> = [
        (ENV_LISTEN.to_string(), "127.0.0.1:2".to_string()),
        (ENV_NIXL_LIB_DIR.to_string(), "/x".to_string()),
        (ENV_LOG_FORMAT.to_string(), "json".to_string()),
    ]
    .into();
    c.apply_env(&env).unwrap();
    assert_eq!(c.listen.port(), 2);
    assert_eq!(c.nixl_lib_dir.as_deref(), Some(Path::new("/x")));
    assert_eq!(c.log_format, LogFormat::Json);
    let bad: HashMap<String, String> = [(ENV_LISTEN.to_string(), "nope".to_string())].into();
    assert!(c.apply_env(&bad).unwrap_err().to_string().contains(ENV_LISTEN));
}

#[test]
fn a_group_missing_keys_names_them_all_at_once() {
    let err = parse("[[group]]\nname = 'kv'\n").unwrap_err().to_string();
    assert_eq!(
        err,
        "config key `group[0]`: missing kind, mem_type, count, size; every [[group]] needs name, kind, mem_type, \
         count, size (device, backends, required and validate have defaults)"
    );
    // The list is serde's: each required key alone is refused, the group
    // with only them parses.
    let full = [
        ("name", "'kv'"),
        ("kind", "'kv'"),
        ("mem_type", "'DRAM'"),
        ("count", "2"),
        ("size", "'4KiB'"),
    ];
    assert_eq!(full.map(|(k, _)| k), GROUP_REQUIRED_KEYS);
    let group = |skip: Option<&str>| {
        let mut t = String::from("[[group]]\n");
        for (k, v) in full.iter().filter(|(k, _)| Some(*k) != skip) {
            t.push_str(&format!("{k} = {v}\n"));
        }
        t
    };
    parse(&group(None)).unwrap();
    for k in GROUP_REQUIRED_KEYS {
        let err = parse(&group(Some(k))).unwrap_err().to_string();
        assert!(err.contains(&format!("missing {k};")), "{k}: {err}");
    }
}

#[test]
fn a_toml_error_keeps_its_caret_under_the_column() {
    let err = parse("listen = \"127.0.0.1:1\"\nshutdown_grace = = 3\n")
        .unwrap_err()
        .to_string();
    let lines: Vec<&str> = err.lines().collect();
    assert!(lines.len() >= 4, "{err}");
    let code = lines
        .iter()
        .position(|l| l.contains("shutdown_grace = = 3"))
        .expect("the line quoted");
    let caret = lines[code + 1];
    let col = caret.find('^').expect("a caret line");
    assert_eq!(
        &lines[code][col..col + 1],
        "=",
        "the caret points at the second `=`: {err}"
    );
}
