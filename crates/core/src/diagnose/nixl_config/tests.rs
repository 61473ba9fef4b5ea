//! The configuration order and each problem, over a world in memory.

use super::*;
use std::collections::HashMap;

#[derive(Default)]
struct World {
    vars: HashMap<&'static str, String>,
    /// path → contents, or an error kind.
    files: HashMap<PathBuf, Result<Vec<u8>, io::ErrorKind>>,
    dirs: Vec<PathBuf>,
}

impl World {
    fn var(mut self, k: &'static str, v: &str) -> Self {
        self.vars.insert(k, v.to_string());
        self
    }
    fn file(mut self, p: &str, body: &str) -> Self {
        self.files.insert(PathBuf::from(p), Ok(body.as_bytes().to_vec()));
        self
    }
    fn denied(mut self, p: &str) -> Self {
        self.files
            .insert(PathBuf::from(p), Err(io::ErrorKind::PermissionDenied));
        self
    }
}

impl ConfigWorld for World {
    fn var(&self, key: &str) -> Option<String> {
        self.vars.get(key).cloned()
    }
    fn exists(&self, path: &Path) -> io::Result<bool> {
        match self.files.get(path) {
            None => Ok(false),
            Some(Ok(_)) => Ok(true),
            Some(Err(k)) => Err(io::Error::from(*k)),
        }
    }
    fn read(&self, path: &Path) -> io::Result<Vec<u8>> {
        match self.files.get(path) {
            None => Err(io::Error::from(io::ErrorKind::NotFound)),
            Some(Ok(b)) => Ok(b.clone()),
            Some(Err(k)) => Err(io::Error::from(*k)),
        }
    }
    fn is_dir(&self, path: &Path) -> io::Result<bool> {
        match self.files.get(path) {
            None if self.dirs.iter().any(|d| d == path) => Ok(true),
            None => Err(io::Error::from(io::ErrorKind::NotFound)),
            Some(_) => Ok(false),
        }
    }
    fn uid(&self) -> Option<u32> {
        Some(65534)
    }
}

#[test]
fn no_file_or_good_files_are_no_cause() {
    assert_eq!(diagnose_file(&World::default()), None);
    assert_eq!(diagnose_file(&World::default().var("HOME", "/home/u")), None);
    let w = World::default()
        .var("HOME", "/home/u")
        .file("/home/u/.nixl.cfg", "[a]\nb = 1\n");
    assert_eq!(diagnose_file(&w), None);
    let w = World::default().var(VARIABLE, "/x.toml").file("/x.toml", "");
    assert_eq!(diagnose_file(&w), None);
}

#[test]
fn a_home_that_cannot_be_searched_is_named_with_the_user_and_the_fix() {
    let w = World::default().var("HOME", "/root").denied("/root/.nixl.cfg");
    let f = diagnose_file(&w).expect("a cause");
    assert_eq!(f.file, PathBuf::from("/root/.nixl.cfg"));
    assert_eq!(f.chosen_by, ChosenBy::Home);
    assert_eq!(
        f.problem,
        Problem::Denied {
            uid: Some(65534),
            lookup: true
        }
    );
    let failure = Finding::File(f).failure("creating NIXL agent \"a\"");
    assert_eq!(failure.reason, Reason::NixlConfig);
    assert!(failure.message.contains("/root/.nixl.cfg") && failure.message.contains("uid 65534"));
    assert!(
        failure.message.contains("may not search HOME=/root"),
        "{}",
        failure.message
    );
    let fix = failure.fix.expect("a fix");
    assert!(fix.contains("HOME") && fix.contains(VARIABLE), "{fix}");
}

#[test]
fn the_variable_wins_even_over_a_good_home_file_and_names_a_missing_file() {
    let w = World::default()
        .var(VARIABLE, "/etc/missing.toml")
        .var("HOME", "/home/u")
        .file("/home/u/.nixl.cfg", "");
    let f = diagnose_file(&w).expect("a cause");
    assert_eq!((f.chosen_by, &f.problem), (ChosenBy::Variable, &Problem::Missing));
    assert!(f.cause().contains("/etc/missing.toml") && f.cause().contains("does not exist"));
    assert!(f.fix().contains(VARIABLE));
}

#[test]
fn a_file_that_is_not_toml_is_named_with_its_position() {
    let w = World::default()
        .var(VARIABLE, "/c.toml")
        .file("/c.toml", "[ok]\nx = 1\ngarbage = = [\n");
    let f = diagnose_file(&w).expect("a cause");
    match &f.problem {
        Problem::NotToml { line, column, .. } => assert_eq!((*line, *column), (3, 11)),
        other => panic!("{other:?}"),
    }
    assert!(f.cause().contains("line 3, column 11"), "{}", f.cause());
    assert!(f.fix().contains("line 3, column 11"));
    let w = World::default().var(VARIABLE, "/c.toml");
    let mut w = w;
    w.files.insert(PathBuf::from("/c.toml"), Ok(vec![b'a', b'\n', 0xff]));
    match diagnose_file(&w).expect("a cause").problem {
        Problem::NotToml { line, column, .. } => assert_eq!((line, column), (2, 1)),
        other => panic!("{other:?}"),
    }
}

#[test]
fn the_global_file_is_read_only_without_a_home_file_and_an_empty_variable_counts() {
    let w = World::default().var("HOME", "/home/u").file(GLOBAL_FILE, "= 1");
    assert_eq!(diagnose_file(&w).expect("a cause").chosen_by, ChosenBy::Global);
    let w = World::default()
        .var("HOME", "/home/u")
        .file("/home/u/.nixl.cfg", "")
        .file(GLOBAL_FILE, "= 1");
    assert_eq!(diagnose_file(&w), None, "NIXL stops at the home file");
    // NIXL's getenv sees an empty variable as set, and reads "".
    let w = World::default().var(VARIABLE, "");
    assert_eq!(diagnose_file(&w).expect("a cause").problem, Problem::Missing);
}

#[test]
fn a_file_that_is_found_but_not_readable_is_told_apart_from_a_lookup() {
    let mut w = World::default().var("HOME", "/home/u");
    // Found by stat, refused by open.
    struct Unreadable(World);
    impl ConfigWorld for Unreadable {
        fn var(&self, key: &str) -> Option<String> {
            ConfigWorld::var(&self.0, key)
        }
        fn exists(&self, _: &Path) -> io::Result<bool> {
            Ok(true)
        }
        fn read(&self, _: &Path) -> io::Result<Vec<u8>> {
            Err(io::Error::from(io::ErrorKind::PermissionDenied))
        }
        fn is_dir(&self, path: &Path) -> io::Result<bool> {
            self.0.is_dir(path)
        }
        fn uid(&self) -> Option<u32> {
            Some(1000)
        }
    }
    w.files.clear();
    let f = diagnose_file(&Unreadable(w)).expect("a cause");
    assert_eq!(
        f.problem,
        Problem::Denied {
            uid: Some(1000),
            lookup: false
        }
    );
    assert!(f.cause().contains("cannot be read by uid 1000"), "{}", f.cause());
}

#[test]
fn nixls_own_variables_are_named_after_the_file() {
    // A bad boolean, whatever else is set.
    let w = World::default().var(TELEMETRY_ENABLE, "maybe");
    let f = diagnose(&w).expect("a cause");
    assert!(f.cause().contains("NIXL_TELEMETRY_ENABLE=\"maybe\""), "{}", f.cause());
    assert_eq!(f.failure("x").reason, Reason::NixlConfig);
    assert!(f.fix().contains("yes or no"));
    let w = World::default().var(TELEMETRY_ENABLE, "");
    assert!(
        matches!(diagnose(&w), Some(Finding::Variable(_))),
        "NIXL refuses an empty value"
    );
    // Any case of NIXL's words is fine.
    for v in ["YES", "Enable", "0", "off"] {
        assert_eq!(diagnose(&World::default().var(TELEMETRY_ENABLE, v)), None, "{v}");
    }
    // The directory matters only with telemetry on.
    let w = World::default().var(TELEMETRY_ENABLE, "y").var(TELEMETRY_DIR, "/nope");
    let f = diagnose(&w).expect("a cause");
    assert!(f.cause().contains("NIXL_TELEMETRY_DIR=/nope"), "{}", f.cause());
    let w = World::default().var(TELEMETRY_ENABLE, "no").var(TELEMETRY_DIR, "/nope");
    assert_eq!(diagnose(&w), None);
    let w = World::default()
        .var(TELEMETRY_ENABLE, "on")
        .var(TELEMETRY_DIR, "/f")
        .file("/f", "");
    assert!(diagnose(&w).expect("a cause").cause().contains("not a directory"));
    let mut w = World::default().var(TELEMETRY_ENABLE, "on").var(TELEMETRY_DIR, "/d");
    w.dirs.push(PathBuf::from("/d"));
    assert_eq!(diagnose(&w), None);
    // The file comes first.
    let w = World::default()
        .var(VARIABLE, "/missing")
        .var(TELEMETRY_ENABLE, "maybe");
    assert!(matches!(diagnose(&w), Some(Finding::File(_))));
}

#[test]
fn telemetry_is_on_by_the_variable_first_then_by_the_config() {
    // Set, the variable decides alone, in any case of NIXL's words.
    for v in ["no", "N", "off", "0", "false", "Disable"] {
        assert!(!telemetry_on(Some(v), true), "{v} turns the config's telemetry off");
    }
    for v in ["yes", "Y", "ON", "1", "true", "enable"] {
        assert!(
            telemetry_on(Some(v), false),
            "{v} turns telemetry on without the config"
        );
        assert!(telemetry_on(Some(v), true), "{v}");
    }
    // Unset, the config decides.
    assert!(telemetry_on(None, true));
    assert!(!telemetry_on(None, false));
    // A value NIXL refuses (no agent has it) and the empty one: never on.
    for v in ["maybe", ""] {
        assert!(!telemetry_on(Some(v), true), "{v:?}");
    }
}
