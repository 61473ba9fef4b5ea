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
    BUILT
        .get_or_init(|| {
            let src = programs().join("cpp");
            let key = ["nixl_plain.cpp", "nixl_decls.h"]
                .iter()
                .map(|f| mtime_nanos(&src.join(f)))
                .max()
                .unwrap();
            let out_dir = super::repo().join("target/programs");
            std::fs::create_dir_all(&out_dir).unwrap();
            let exe = out_dir.join(format!("nixl_plain-{key}"));
            if exe.exists() {
                return exe;
            }
            let lib = super::nixl_lib_dir();
            let tmp = out_dir.join(format!("nixl_plain-{key}.{}", std::process::id()));
            let status = Command::new("g++")
                .args(["-std=c++20", "-O1", "nixl_plain.cpp", "-I."])
                .arg(format!("-L{}", lib.display()))
                .args(["-lnixl", "-lnixl_build"])
                .arg(format!("-Wl,-rpath,{}", lib.display()))
                .arg("-o")
                .arg(&tmp)
                .current_dir(&src)
                .status()
                .expect("run g++");
            assert!(status.success(), "g++ nixl_plain.cpp failed: {status}");
            std::fs::rename(&tmp, &exe).unwrap();
            exe
        })
        .clone()
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

/// A command running `scenario` of the program in `lang` ("cpp", "rust",
/// "python"), with [`plain_env`] set.
pub fn plain_command(lang: &str, scenario: &str) -> Command {
    let mut cmd = match lang {
        "cpp" => Command::new(cpp_program()),
        "rust" => Command::new(rust_program()),
        "python" => {
            let (python, script) = python_program();
            let mut c = Command::new(python);
            c.arg(script);
            c
        }
        other => panic!("no plain program in {other}"),
    };
    cmd.arg(scenario);
    plain_env(&mut cmd);
    cmd
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
