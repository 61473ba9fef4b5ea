//! The type stub the Python package ships with `py.typed`
//! (python/nixl_agent_instrument/_native.pyi) against the extension module
//! as built and installed into the project's virtualenv (`make python`):
//! mypy's stubtest finds every export the stub lacks or has too many, and
//! every signature that differs. mypy is installed there by
//! scripts/setup.sh (a machine without it fails here, naming set-up).

mod support;

use std::path::PathBuf;
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

#[test]
fn the_shipped_stub_declares_every_export_of_the_extension_as_it_is() {
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
            .env("MYPYPATH", repo().join("python"))
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
    assert!(
        out.status.success(),
        "python/nixl_agent_instrument/_native.pyi differs from the built extension:\n{said}"
    );
    assert!(
        said.contains("Success: no issues found in 1 module"),
        "stubtest checked nothing:\n{said}"
    );
}
