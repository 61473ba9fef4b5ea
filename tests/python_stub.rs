//! The type stub the Python package ships with `py.typed`
//! (python/nixl_agent_instrument/_native.pyi) against the extension module
//! as built and installed into the project's virtualenv (`make python`):
//! mypy's stubtest finds every export the stub lacks or has too many, and
//! every signature that differs. mypy is installed there by
//! scripts/setup.sh (a machine without it fails here, naming set-up).

use crate::support;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// mypy type-checks the stub; the rest of the package (plain Python, not
/// annotated) is imported by it but not judged.
const MYPY_CONFIG: &str = "[mypy]\n\
    [mypy-nixl_agent_instrument.*]\n\
    ignore_errors = True\n\
    [mypy-nixl_agent_instrument._native]\n\
    ignore_errors = False\n";

/// The extension as installed, checked by mypy's stubtest against the stub
/// package under `stubs` (the tree's `python/` for the shipped stub):
/// whether it passed, and what it said.
fn stubtest(stubs: &Path) -> (bool, String) {
    // Required like every Python test's (a missing one fails, naming set-up).
    let python = support::python();
    let has = |module: &str| {
        support::output_within(
            Command::new(&python).args(["-c", &format!("import {module}")]),
            Duration::from_secs(60),
            &format!("import {module} in the venv"),
        )
        .status
        .success()
    };
    assert!(
        has("mypy.stubtest"),
        "mypy is not in {}: run scripts/setup.sh (it installs the pinned mypy)",
        python.display()
    );
    assert!(
        has("nixl_agent_instrument._native"),
        "the extension is not installed in {}: run scripts/python.sh",
        python.display()
    );
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("mypy.ini");
    std::fs::write(&config, MYPY_CONFIG).unwrap();
    // Run outside the repository: the module imported is the installed
    // one, the stub read is the tree's (MYPYPATH).
    let out = support::output_within(
        Command::new(&python)
            .current_dir(dir.path())
            .env("MYPYPATH", stubs)
            .env_remove("PYTHONPATH")
            .arg("-m")
            .arg("mypy.stubtest")
            .arg("--mypy-config-file")
            .arg(&config)
            .arg("nixl_agent_instrument._native"),
        Duration::from_secs(300),
        "mypy stubtest nixl_agent_instrument._native",
    );
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), said)
}

#[test]
fn the_shipped_stub_declares_every_export_of_the_extension_as_it_is() {
    let (ok, said) = stubtest(&repo().join("python"));
    assert!(
        ok,
        "python/nixl_agent_instrument/_native.pyi differs from the built extension:\n{said}"
    );
    assert!(
        said.contains("Success: no issues found in 1 module"),
        "stubtest checked nothing:\n{said}"
    );
}

/// The check can fail: the shipped stub with one parameter of the
/// registration's one crossing renamed, and one export dropped, is refused,
/// naming both.
#[test]
fn a_stub_that_disagrees_with_the_extension_is_refused() {
    let pkg = repo().join("python/nixl_agent_instrument");
    let stubs = tempfile::tempdir().unwrap();
    let copy = stubs.path().join("nixl_agent_instrument");
    std::fs::create_dir(&copy).unwrap();
    for name in ["__init__.py", "py.typed"] {
        std::fs::copy(pkg.join(name), copy.join(name)).unwrap();
    }
    let stub = std::fs::read_to_string(pkg.join("_native.pyi")).unwrap();
    let renamed = stub.replacen("    site: _Site, func", "    group: _Site, func", 1);
    assert_ne!(renamed, stub, "the stub's `register` takes `site` first");
    let dropped = renamed.replacen("def explicit_group(", "def _explicit_group(", 1);
    assert_ne!(dropped, renamed, "the stub declares `explicit_group`");
    std::fs::write(copy.join("_native.pyi"), dropped).unwrap();
    let (ok, said) = stubtest(stubs.path());
    assert!(!ok, "stubtest accepted a stub that differs from the extension:\n{said}");
    assert!(
        said.contains("_native.register is inconsistent") && said.contains("_native.explicit_group"),
        "stubtest did not name the renamed parameter and the missing export:\n{said}"
    );
}
