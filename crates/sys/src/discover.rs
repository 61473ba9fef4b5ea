//! Finding libnixl_capi.so on disk. Plain file-system work, no loading.
//!
//! Order: the configured directory (`--nixl-lib-dir`, `NIXL_LIB_DIR`, or
//! `nixl_lib_dir` in the file); a pip-installed NIXL wheel in a Python
//! site-packages; `/opt/nvidia/nvda_nixl`; then the dynamic loader's own
//! search path (tried by the loader, not here). A configured directory that
//! does not hold the library is an error, not a reason to look elsewhere: the
//! operator asked for that one.

use crate::config::Env;
use std::path::{Path, PathBuf};

/// File name of the NIXL C API library.
pub const CAPI_LIB: &str = "libnixl_capi.so";
/// Library folders that the NIXL wheels install inside site-packages.
pub const WHEEL_LIB_DIRS: &[&str] = &[
    ".nixl_cu12.mesonpy.libs",
    ".nixl_cu13.mesonpy.libs",
    ".nixl.mesonpy.libs",
];
/// Where NVIDIA's NIXL packages and containers install it.
pub const OPT_PREFIX: &str = "/opt/nvidia/nvda_nixl";

/// Which discovery step found the library.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FoundBy {
    /// `--nixl-lib-dir`, `NIXL_LIB_DIR` or `nixl_lib_dir`.
    Configured,
    /// A pip-installed NIXL wheel.
    Wheel,
    /// `/opt/nvidia/nvda_nixl`.
    Opt,
    /// The dynamic loader's search path (LD_LIBRARY_PATH, ld.so.cache).
    Loader,
    /// Already loaded in the process, by the program (observe mode: NIXL's
    /// Python API, or an embedder that loaded it).
    Process,
}

impl FoundBy {
    pub fn as_str(self) -> &'static str {
        match self {
            FoundBy::Configured => "configured",
            FoundBy::Wheel => "wheel",
            FoundBy::Opt => "opt",
            FoundBy::Loader => "loader",
            FoundBy::Process => "process",
        }
    }
}

/// A library found on disk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Discovery {
    /// Full path of libnixl_capi.so; just the file name for `FoundBy::Loader`.
    pub library: PathBuf,
    pub found_by: FoundBy,
    /// NIXL version, read from the wheel's dist-info when there is one.
    pub version: Option<String>,
}

impl Discovery {
    /// The folder holding the library (none for the loader path).
    pub fn lib_dir(&self) -> Option<&Path> {
        self.library.parent().filter(|p| !p.as_os_str().is_empty())
    }
}

/// Nothing found on disk; `searched` lists every place looked at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotFound {
    pub searched: Vec<String>,
    /// True when a configured directory was given (then no fallback applies).
    pub configured: bool,
}

/// Searches the file system in the documented order.
pub fn discover(configured: Option<&Path>, env: &dyn Env) -> Result<Discovery, NotFound> {
    if let Some(dir) = configured {
        let lib = dir.join(CAPI_LIB);
        return if lib.is_file() {
            Ok(Discovery {
                version: wheel_version(dir),
                library: lib,
                found_by: FoundBy::Configured,
            })
        } else {
            Err(NotFound {
                searched: vec![lib.display().to_string()],
                configured: true,
            })
        };
    }
    let mut searched = Vec::new();
    for site in site_packages(env) {
        for name in WHEEL_LIB_DIRS {
            let dir = site.join(name);
            let lib = dir.join(CAPI_LIB);
            if lib.is_file() {
                return Ok(Discovery {
                    version: wheel_version(&dir),
                    library: lib,
                    found_by: FoundBy::Wheel,
                });
            }
            searched.push(lib.display().to_string());
        }
    }
    for sub in ["lib/x86_64-linux-gnu", "lib/aarch64-linux-gnu", "lib64", "lib"] {
        let lib = Path::new(OPT_PREFIX).join(sub).join(CAPI_LIB);
        if lib.is_file() {
            return Ok(Discovery {
                library: lib,
                found_by: FoundBy::Opt,
                version: None,
            });
        }
        searched.push(lib.display().to_string());
    }
    Err(NotFound {
        searched,
        configured: false,
    })
}

/// The version in `nixl*-VERSION.dist-info` beside a wheel's library folder.
pub fn wheel_version(lib_dir: &Path) -> Option<String> {
    let parent = lib_dir.parent()?;
    let mut found: Vec<String> = std::fs::read_dir(parent)
        .ok()?
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.starts_with("nixl") && n.ends_with(".dist-info"))
        .filter_map(|n| {
            n.trim_end_matches(".dist-info")
                .split_once('-')
                .map(|(_, v)| v.to_string())
        })
        .collect();
    found.sort();
    found.pop()
}

/// Python site-packages folders worth looking at, most specific first:
/// PYTHONPATH entries, the active virtualenv or conda env, the prefix of
/// every `python3` on PATH, the user site, then the system prefixes.
pub fn site_packages(env: &dyn Env) -> Vec<PathBuf> {
    let mut prefixes: Vec<PathBuf> = Vec::new();
    let mut out: Vec<PathBuf> = Vec::new();
    if let Some(pp) = env.var("PYTHONPATH") {
        out.extend(std::env::split_paths(&pp));
    }
    for var in ["VIRTUAL_ENV", "CONDA_PREFIX"] {
        if let Some(p) = env.var(var) {
            prefixes.push(PathBuf::from(p));
        }
    }
    if let Some(path) = env.var("PATH") {
        for dir in std::env::split_paths(&path) {
            for exe in ["python3", "python"] {
                if let Ok(real) = std::fs::canonicalize(dir.join(exe)) {
                    if let Some(prefix) = real.parent().and_then(Path::parent) {
                        prefixes.push(prefix.to_path_buf());
                    }
                }
            }
        }
    }
    if let Some(home) = env.var("HOME") {
        prefixes.push(Path::new(&home).join(".local"));
    }
    prefixes.extend(["/usr/local", "/usr", "/opt/conda"].map(PathBuf::from));
    for prefix in prefixes {
        let lib = prefix.join("lib");
        let Ok(entries) = std::fs::read_dir(&lib) else {
            continue;
        };
        let mut pys: Vec<PathBuf> = entries
            .filter_map(|e| e.ok())
            .filter(|e| e.file_name().to_string_lossy().starts_with("python3"))
            .map(|e| e.path())
            .collect();
        pys.sort();
        for py in pys {
            out.push(py.join("site-packages"));
            out.push(py.join("dist-packages"));
        }
    }
    let mut seen = std::collections::HashSet::new();
    out.retain(|p| p.is_dir() && seen.insert(p.clone()));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn fake_wheel(root: &Path, libs: &str, dist: &str) -> PathBuf {
        let site = root.join("lib/python3.11/site-packages");
        std::fs::create_dir_all(site.join(libs)).unwrap();
        std::fs::create_dir_all(site.join(dist)).unwrap();
        std::fs::write(site.join(libs).join(CAPI_LIB), b"").unwrap();
        site
    }

    #[test]
    fn configured_dir_wins_and_never_falls_back() {
        let t = tempfile::tempdir().unwrap();
        let site = fake_wheel(t.path(), ".nixl_cu12.mesonpy.libs", "nixl_cu12-1.5.1.dist-info");
        let env: HashMap<String, String> = [("VIRTUAL_ENV".into(), t.path().display().to_string())].into();
        let dir = site.join(".nixl_cu12.mesonpy.libs");
        let d = discover(Some(&dir), &env).unwrap();
        assert_eq!((d.found_by, d.version.as_deref()), (FoundBy::Configured, Some("1.5.1")));
        let missing = t.path().join("nope");
        let e = discover(Some(&missing), &env).unwrap_err();
        assert!(e.configured);
        assert_eq!(e.searched, vec![missing.join(CAPI_LIB).display().to_string()]);
    }

    #[test]
    fn wheel_in_a_virtualenv_is_found() {
        let t = tempfile::tempdir().unwrap();
        fake_wheel(t.path(), ".nixl_cu13.mesonpy.libs", "nixl_cu13-2.0.0.dist-info");
        let env: HashMap<String, String> = [("VIRTUAL_ENV".into(), t.path().display().to_string())].into();
        let d = discover(None, &env).unwrap();
        assert_eq!(d.found_by, FoundBy::Wheel);
        assert_eq!(d.version.as_deref(), Some("2.0.0"));
        assert!(d.library.ends_with(".nixl_cu13.mesonpy.libs/libnixl_capi.so"));
    }

    #[test]
    fn nothing_found_lists_where_it_looked() {
        let t = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(t.path().join("lib/python3.11/site-packages")).unwrap();
        let env: HashMap<String, String> = [("VIRTUAL_ENV".into(), t.path().display().to_string())].into();
        let e = discover(None, &env).expect_err("no NIXL may be installed system-wide on a test machine");
        assert!(!e.configured);
        assert!(e.searched.iter().any(|s| s.contains(".nixl_cu12.mesonpy.libs")));
        assert!(e.searched.iter().any(|s| s.starts_with(OPT_PREFIX)));
    }
}
