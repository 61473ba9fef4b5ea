//! The plain NIXL programs of tests/programs/ (C++, Rust on nixl-sys,
//! Python on nixl._api): built once per test process and run with the
//! environment a plain NIXL user sets. They hold no nixl-agent code.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::UNIX_EPOCH;

fn programs() -> PathBuf {
    super::repo().join("tests/programs")
}

/// `target/` of this build: the test binary lives in `target/<profile>/deps/`.
fn target_profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    let deps = exe.parent().expect("test binary folder");
    deps.parent().expect("target profile folder").to_path_buf()
}

fn mtime_nanos(p: &Path) -> u128 {
    std::fs::metadata(p)
        .and_then(|m| m.modified())
        .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos()
}

/// tests/programs/cpp/nixl_plain.cpp compiled with g++ against the real
/// NIXL (rpath set: no LD_LIBRARY_PATH needed), cached in
/// target/programs/ under the sources' modification time.
pub fn cpp_program() -> PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT.get_or_init(|| compile_cpp("nixl_plain")).clone()
}

/// tests/programs/cpp/nixl_stress.cpp (16 threads transferring, agents
/// made and destroyed, forks), built as [`cpp_program`] is.
pub fn cpp_stress_program() -> PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT.get_or_init(|| compile_cpp("nixl_stress")).clone()
}

/// tests/programs/cpp/`stem`.cpp compiled with g++ into
/// target/programs/`stem`-`key` (`key`: the newest modification time of it
/// and nixl_decls.h).
fn compile_cpp(stem: &str) -> PathBuf {
    let src = programs().join("cpp");
    let source = format!("{stem}.cpp");
    let key = [source.as_str(), "nixl_decls.h"]
        .iter()
        .map(|f| mtime_nanos(&src.join(f)))
        .max()
        .unwrap();
    let out_dir = super::repo().join("target/programs");
    std::fs::create_dir_all(&out_dir).unwrap();
    let exe = out_dir.join(format!("{stem}-{key}"));
    if exe.exists() {
        return exe;
    }
    let lib = super::nixl_lib_dir();
    let tmp = out_dir.join(format!("{stem}-{key}.{}", std::process::id()));
    let status = Command::new("g++")
        .args(["-std=c++20", "-O1", "-pthread", &source, "-I."])
        .arg(format!("-L{}", lib.display()))
        .args(["-lnixl", "-lnixl_build"])
        .arg(format!("-Wl,-rpath,{}", lib.display()))
        .arg("-o")
        .arg(&tmp)
        .current_dir(&src)
        .status()
        .expect("run g++");
    assert!(status.success(), "g++ {source} failed: {status}");
    std::fs::rename(&tmp, &exe).unwrap();
    exe
}

/// The `nixl-plain` binary of the `nixl-plain-program` workspace member,
/// next to this test binary's target folder; built with cargo when missing
/// or older than its source.
pub fn rust_program() -> PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            let exe = target_profile_dir().join("nixl-plain");
            let src = programs().join("rust/src/main.rs");
            if !exe.exists() || mtime_nanos(&exe) < mtime_nanos(&src) {
                let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
                let mut cmd = Command::new(cargo);
                cmd.args(["build", "--offline", "-p", "nixl-plain-program", "--bin", "nixl-plain"])
                    .current_dir(super::repo());
                if target_profile_dir().file_name().is_some_and(|p| p == "release") {
                    cmd.arg("--release");
                }
                let status = cmd.status().expect("run cargo build");
                assert!(status.success(), "cargo build -p nixl-plain-program failed: {status}");
            }
            assert!(exe.exists(), "{} was not built", exe.display());
            exe
        })
        .clone()
}

/// The virtualenv's python and tests/programs/python/nixl_plain.py.
pub fn python_program() -> (PathBuf, PathBuf) {
    (super::python(), programs().join("python/nixl_plain.py"))
}

/// The command line running `scenario` of the program in `lang` ("cpp",
/// "rust", "python").
pub fn argv(lang: &str, scenario: &str) -> Vec<std::ffi::OsString> {
    let mut argv: Vec<std::ffi::OsString> = match lang {
        "cpp" => vec![cpp_program().into()],
        "rust" => vec![rust_program().into()],
        "python" => {
            let (python, script) = python_program();
            vec![python.into(), script.into()]
        }
        other => panic!("no plain program in {other}"),
    };
    argv.push(scenario.into());
    argv
}

/// A command running `scenario` of the program in `lang` ("cpp", "rust",
/// "python"), with [`plain_env`] set.
pub fn plain_command(lang: &str, scenario: &str) -> Command {
    let argv = argv(lang, scenario);
    let mut cmd = Command::new(&argv[0]);
    cmd.args(&argv[1..]);
    plain_env(&mut cmd);
    cmd
}

/// The same program under the one launcher, `nixl-agent instrument --`,
/// with no NIXL_AGENT_* variable but those in `env` (and the interposer
/// built, beside the binary, if it was not).
pub fn launched(lang: &str, scenario: &str, env: &[(&str, &str)]) -> Command {
    launched_argv(&argv(lang, scenario), env)
}

/// Any command line under the launcher, as [`launched`].
pub fn launched_argv(argv: &[std::ffi::OsString], env: &[(&str, &str)]) -> Command {
    interposer();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_nixl-agent"));
    cmd.arg("instrument").arg("--").args(argv);
    plain_env(&mut cmd);
    for (k, _) in std::env::vars() {
        if k.starts_with("NIXL_AGENT_") || k.starts_with("OTEL_") || k == "PYTHONPATH" {
            cmd.env_remove(k);
        }
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd
}

/// `libnixl_agent_interpose.so` beside the `nixl-agent` binary, built
/// (or found up to date) by cargo once per test process: a test binary
/// built alone does not rebuild the cdylib it runs under.
pub fn interposer() -> PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            let so = Path::new(env!("CARGO_BIN_EXE_nixl-agent")).with_file_name("libnixl_agent_interpose.so");
            let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
            let mut cmd = Command::new(cargo);
            cmd.args(["build", "--offline", "--quiet", "-p", "nixl-agent-interpose"])
                .current_dir(super::repo());
            if target_profile_dir().file_name().is_some_and(|p| p == "release") {
                cmd.arg("--release");
            }
            let status = cmd.status().expect("run cargo build");
            assert!(status.success(), "cargo build -p nixl-agent-interpose failed: {status}");
            assert!(so.exists(), "{} was not built", so.display());
            so
        })
        .clone()
}

/// `E1204 09:15:32.448592  22865 tail` → (`E`, `tail`).
fn glog_tail(l: &str) -> Option<(&str, &str)> {
    let level = l.get(..5)?;
    if !level[1..].bytes().all(|b| b.is_ascii_digit()) || !"IWEF".contains(&level[..1]) {
        return None;
    }
    let (time, rest) = l.get(6..)?.split_once(' ')?;
    if !time.contains(':') {
        return None;
    }
    let (pid, tail) = rest.trim_start().split_once(' ')?;
    pid.bytes().all(|b| b.is_ascii_digit()).then_some((&level[..1], tail))
}

/// Output with the clock and pid NIXL's and UCX's log lines start with
/// taken out (`[1796375732.448589] [host:22865:0]`, `E1204 09:15:32.448592
/// 22865 `): what differs between any two runs of the same program.
pub fn unstamped(text: &[u8]) -> String {
    String::from_utf8_lossy(text)
        .lines()
        .map(|l| {
            if let Some(rest) = l.strip_prefix('[') {
                // `[epoch] [host:pid:thread] rest`
                if let Some((_, after)) = rest.split_once("] [") {
                    if let Some((_, tail)) = after.split_once(']') {
                        return format!("[stamp]{tail}");
                    }
                }
            }
            glog_tail(l).map_or_else(|| l.to_string(), |(level, tail)| format!("{level} [stamp] {tail}"))
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// What a plain NIXL user sets: NIXL_PLUGIN_DIR (where UCX's plugin is) and
/// LD_LIBRARY_PATH (nixl-sys dlopens `libnixl_capi.so` by its bare name;
/// the C++ binary has an rpath and Python's nixl finds its own). No hold.
pub fn plain_env(cmd: &mut Command) {
    let lib = super::nixl_lib_dir();
    cmd.env("NIXL_PLUGIN_DIR", lib.join("plugins"));
    let mut path = std::ffi::OsString::from(lib.as_os_str());
    if let Some(old) = std::env::var_os("LD_LIBRARY_PATH").filter(|o| !o.is_empty()) {
        path.push(":");
        path.push(old);
    }
    cmd.env("LD_LIBRARY_PATH", path);
    cmd.env_remove("HOLD_BEFORE_EXIT");
}
