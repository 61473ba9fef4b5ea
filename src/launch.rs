//! `nixl-agent instrument -- COMMAND [ARGS...]`: runs COMMAND with the
//! interposer preloaded (`libnixl_agent_interpose.so`), so that every NIXL
//! call it makes, from any language, is recorded with no change to it. The
//! command replaces this process (`exec`): its pid, stdio, signals and exit
//! code are the command's own. Nothing else of the environment changes:
//! the instrumented process reads `NIXL_AGENT_*` itself.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// The variable naming the interposer library, before the places beside
/// this binary are searched.
pub const ENV_INTERPOSER: &str = "NIXL_AGENT_INTERPOSER";

/// The interposer's file name.
pub const INTERPOSER: &str = "libnixl_agent_interpose.so";

/// Where the interposer is looked for: `NIXL_AGENT_INTERPOSER`, else beside
/// the binary, else `../lib/` and `../lib/nixl-agent/` from it (an image's
/// `/usr/local/bin` and `/usr/local/lib`).
pub fn candidates(env_value: Option<OsString>, exe: Option<&Path>) -> Vec<PathBuf> {
    if let Some(v) = env_value.filter(|v| !v.is_empty()) {
        return vec![PathBuf::from(v)];
    }
    let Some(dir) = exe.and_then(Path::parent) else {
        return Vec::new();
    };
    vec![
        dir.join(INTERPOSER),
        dir.join("../lib").join(INTERPOSER),
        dir.join("../lib/nixl-agent").join(INTERPOSER),
    ]
}

/// `LD_PRELOAD` with the interposer first (what was there is kept after it).
pub fn preload(interposer: &Path, existing: Option<OsString>) -> OsString {
    let mut v = OsString::from(interposer);
    if let Some(e) = existing.filter(|e| !e.is_empty()) {
        v.push(":");
        v.push(e);
    }
    v
}

/// Runs the command (never returns on success); the exit code when it
/// cannot: 2 without a command or an interposer, 127 for a command that
/// cannot be run (as a shell says).
pub fn run(command: &[OsString]) -> u8 {
    let Some((program, args)) = command.split_first() else {
        eprintln!("nixl-agent instrument: no command given (nixl-agent instrument -- COMMAND [ARGS...])");
        return 2;
    };
    let exe = std::env::current_exe().ok();
    let searched = candidates(std::env::var_os(ENV_INTERPOSER), exe.as_deref());
    let Some(found) = searched.iter().find(|p| p.is_file()) else {
        let list: Vec<String> = searched.iter().map(|p| p.display().to_string()).collect();
        eprintln!(
            "nixl-agent instrument: {INTERPOSER} not found (looked at: {}); set {ENV_INTERPOSER} to its path",
            if list.is_empty() {
                "nowhere".to_string()
            } else {
                list.join(", ")
            }
        );
        return 2;
    };
    let found = found.canonicalize().unwrap_or_else(|_| found.clone());
    use std::os::unix::process::CommandExt;
    let err = std::process::Command::new(program)
        .args(args)
        .env("LD_PRELOAD", preload(&found, std::env::var_os("LD_PRELOAD")))
        .exec();
    eprintln!(
        "nixl-agent instrument: cannot run {}: {err}",
        Path::new(program).display()
    );
    127
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_variable_wins_then_beside_the_binary() {
        let exe = Path::new("/opt/x/bin/nixl-agent");
        assert_eq!(
            candidates(Some("/l/i.so".into()), Some(exe)),
            vec![PathBuf::from("/l/i.so")]
        );
        let c = candidates(None, Some(exe));
        assert_eq!(c[0], PathBuf::from("/opt/x/bin/libnixl_agent_interpose.so"));
        assert_eq!(c[1], PathBuf::from("/opt/x/bin/../lib/libnixl_agent_interpose.so"));
    }

    #[test]
    fn an_existing_preload_is_kept_after_it() {
        assert_eq!(preload(Path::new("/i.so"), None), OsString::from("/i.so"));
        assert_eq!(
            preload(Path::new("/i.so"), Some("/a.so".into())),
            OsString::from("/i.so:/a.so")
        );
    }
}
