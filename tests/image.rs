//! The image recipe (`Dockerfile`, docs/image.md) for the image deploy/
//! names. No container engine runs here, so `docker build` is not run: the
//! manifests are checked to name that image, the Dockerfile's structure and
//! pins are read, and its NIXL stage's own script runs, after which the
//! binary, as the image's non-root user, loads that runtime and registers.

use std::path::PathBuf;
use std::process::Command;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn read(rel: &str) -> String {
    std::fs::read_to_string(repo().join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

/// The image's name and tag, as the manifests give it.
const IMAGE: &str = "registry.example.com/nixl-agent";

/// The Dockerfile's stages: (name, the lines of the stage).
fn stages(text: &str) -> Vec<(String, Vec<String>)> {
    let mut out: Vec<(String, Vec<String>)> = Vec::new();
    for line in text
        .lines()
        .map(str::trim)
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        if let Some(from) = line.strip_prefix("FROM ") {
            let name = from.split(" AS ").nth(1).unwrap_or("").to_string();
            out.push((name, vec![line.to_string()]));
        } else if let Some((_, lines)) = out.last_mut() {
            lines.push(line.to_string());
        }
    }
    out
}

/// Every `image:` of deploy/ that runs nixl-agent names this recipe's image
/// at the crate's version, and docs/image.md tags the build so.
#[test]
fn the_manifests_name_the_image_the_recipe_builds() {
    let tag = format!("{IMAGE}:{}", env!("CARGO_PKG_VERSION"));
    let mut named = 0;
    for file in ["deploy/serving.yaml", "deploy/canary.yaml"] {
        for line in read(file).lines().map(str::trim) {
            if let Some(image) = line.strip_prefix("image: ") {
                if image.starts_with(&format!("{IMAGE}:")) {
                    assert_eq!(image, tag, "{file}");
                    named += 1;
                }
            }
        }
    }
    assert_eq!(named, 2, "the sidecar and the canary");
    let doc = read("docs/image.md");
    assert!(
        doc.contains(&format!("docker build -t {tag} .")),
        "docs/image.md tags {tag}"
    );
    assert!(read("Dockerfile").contains(&format!("docker build -t {tag} .")));
}

/// Multi-stage, the NIXL pin of scripts/setup.sh, no floating tags, a
/// non-root user, NIXL_LIB_DIR where the NIXL stage unpacks, and a build
/// context without target/ and .deps/.
#[test]
fn the_recipe_is_multi_stage_pinned_and_non_root() {
    let text = read("Dockerfile");
    let stages = stages(&text);
    let names: Vec<&str> = stages.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["build", "wheel-build", "wheel", "nixl", "runtime"], "stages");
    for (name, lines) in &stages {
        let base = lines[0].split_whitespace().nth(1).unwrap();
        assert!(
            base == "scratch" || base == "build" || base.contains(':'),
            "{name}: {base} has no tag"
        );
        assert!(!base.ends_with(":latest"), "{name}: {base}");
    }
    let setup = read("scripts/setup.sh");
    let pin = setup
        .lines()
        .find_map(|l| l.strip_prefix("NIXL_WHEEL_VERSION="))
        .expect("setup.sh pins NIXL");
    assert!(
        text.contains(&format!("ARG NIXL_VERSION={pin}\n")),
        "the NIXL pin is setup.sh's {pin}"
    );
    assert!(
        text.contains("\"nixl-cu12==${NIXL_VERSION}\""),
        "the NIXL stage downloads the pin"
    );
    let rust_version = read("Cargo.toml")
        .lines()
        .find_map(|l| l.strip_prefix("rust-version = "))
        .map(|v| v.trim_matches('"').to_string())
        .unwrap();
    let rust_image: String = stages[0].1[0]
        .split(':')
        .nth(1)
        .unwrap()
        .split('-')
        .next()
        .unwrap()
        .to_string();
    let minor = |v: &str| v.split('.').nth(1).unwrap().parse::<u32>().unwrap();
    assert!(
        minor(&rust_image) >= minor(&rust_version),
        "rust {rust_image} < rust-version {rust_version}"
    );
    let runtime = &stages.last().unwrap().1;
    let user = runtime
        .iter()
        .find_map(|l| l.strip_prefix("USER "))
        .expect("the runtime stage names its USER");
    let uid: u32 = user.split(':').next().unwrap().parse().expect("a numeric uid");
    assert_ne!(uid, 0, "non-root");
    assert!(
        runtime.iter().any(|l| l.contains(&format!("--uid {uid}"))),
        "the user exists"
    );
    assert!(runtime.contains(&"ENV NIXL_LIB_DIR=/opt/nixl/.nixl_cu12.mesonpy.libs".to_string()));
    assert!(runtime.contains(&"COPY --from=nixl /opt/nixl /opt/nixl".to_string()));
    assert!(runtime
        .iter()
        .any(|l| l.starts_with("COPY --from=build /src/target/release/nixl-agent ")));
    // The interposer where `nixl-agent instrument` in /usr/local/bin looks,
    // and where deploy/serving.yaml's LD_PRELOAD names it.
    let so = runtime
        .iter()
        .find_map(|l| l.strip_prefix("COPY --from=build /src/target/interposer/libnixl_agent_interpose.so "))
        .expect("the runtime stage copies the interposer");
    let looked = nixl_agent::launch::candidates(None, Some(std::path::Path::new("/usr/local/bin/nixl-agent")));
    assert!(
        looked.iter().any(|p| normalize(p) == std::path::Path::new(so)),
        "{so} is not where the launcher looks: {looked:?}"
    );
    assert!(
        read("deploy/serving.yaml").contains(&format!("value: {so}")),
        "deploy/serving.yaml preloads {so}"
    );
    let ignore = read(".dockerignore");
    for p in ["target", ".deps", ".git"] {
        assert!(ignore.lines().any(|l| l == p), ".dockerignore keeps {p} out");
    }
}

/// `a/b/../c` as `a/c`.
fn normalize(p: &std::path::Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            std::path::Component::ParentDir => {
                out.pop();
            }
            c => out.push(c),
        }
    }
    out
}

/// What the build stage's `--locked` needs: Cargo.lock up to date.
#[test]
fn cargo_lock_is_up_to_date_for_a_locked_build() {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args([
            "metadata",
            "--locked",
            "--offline",
            "--format-version",
            "1",
            "--no-deps",
        ])
        .current_dir(repo())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

/// The NIXL stage's script on the pinned wheel (the one scripts/setup.sh
/// downloaded), then the binary as the image's uid 10001 with the image's
/// NIXL_LIB_DIR: NIXL 1.5.1 found and versioned, UCX created, the default
/// plan registered and released.
#[test]
fn the_nixl_stage_gives_a_runtime_the_non_root_binary_registers_with() {
    let pin = read("scripts/setup.sh")
        .lines()
        .find_map(|l| l.strip_prefix("NIXL_WHEEL_VERSION=").map(str::to_string))
        .unwrap();
    let wheels = repo().join(".deps/wheels");
    let wheel = std::fs::read_dir(&wheels)
        .unwrap_or_else(|e| panic!("{}: {e} (run scripts/setup.sh)", wheels.display()))
        .filter_map(Result::ok)
        .map(|e| e.path())
        .find(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with(&format!("nixl_cu12-{pin}-"))
        })
        .expect("the pinned nixl-cu12 wheel in .deps/wheels");
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let opt = dir.path().join("opt/nixl");
    let out = Command::new("sh")
        .arg(repo().join("scripts/nixl-runtime.sh"))
        .arg(&wheel)
        .arg(&opt)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let lib_dir = opt.join(".nixl_cu12.mesonpy.libs");
    // The image's HOME: NIXL looks up $HOME/.nixl.cfg before it makes an
    // agent, so uid 10001 must be able to search it.
    let home = read("Dockerfile")
        .lines()
        .find_map(|l| l.strip_prefix("ENV HOME=").map(str::to_string))
        .expect("the Dockerfile sets HOME");
    let out = Command::new("setpriv")
        .args(["--reuid=10001", "--regid=10001", "--clear-groups", "--inh-caps=-all"])
        .arg(env!("CARGO_BIN_EXE_nixl-agent"))
        .args(["check", "--no-transfer", "--json"])
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("NIXL_LIB_DIR", &lib_dir)
        .env("HOME", &home)
        .current_dir(dir.path())
        .output()
        .unwrap();
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "not JSON ({e}): {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    let nixl = &report["nixl"];
    assert_eq!(nixl["outcome"], "ok", "{report}");
    assert_eq!(nixl["version"], pin.as_str(), "{nixl}");
    assert_eq!(nixl["found_by"], "configured", "{nixl}");
    assert_eq!(nixl["library"], lib_dir.join("libnixl_capi.so").display().to_string());
    assert_eq!(report["backends"][0]["outcome"], "ok", "{report}");
    assert!(
        report["groups"]
            .as_array()
            .unwrap()
            .iter()
            .all(|g| g["outcome"] == "ok"),
        "{}",
        report["groups"]
    );
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
}
