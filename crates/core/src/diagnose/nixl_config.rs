//! NIXL's own configuration file as the cause of a failed agent creation.
//!
//! NIXL (1.5 and later, `src/utils/common/configuration.cpp`) reads one
//! TOML file the first time an agent is made: the file `NIXL_CONFIG_FILE`
//! names when that variable is set (even empty), else `$HOME/.nixl.cfg`
//! when it exists, else `/etc/nixl.cfg` when it exists, else none. A chosen
//! file that cannot be read or parsed fails every agent creation, with no
//! fall-back; so does a `$HOME/.nixl.cfg` that cannot even be looked up
//! (`EACCES` when the user may not search `$HOME`: a container run as
//! another user while `HOME` stays `/root`). NIXL's C API returns a bare
//! status for it and its Python API an exception naming none of this.
//!
//! The same goes for NIXL's own variables read at agent creation:
//! `NIXL_TELEMETRY_ENABLE` must be one of NIXL's boolean words, and with
//! telemetry on, `NIXL_TELEMETRY_DIR` must be a directory ("Failed to
//! create telemetry exporter: BUFFER" otherwise).
//!
//! [`diagnose`] walks the same order over a [`ConfigWorld`] and says which
//! file or variable, what is wrong with it and the fix. It is asked only
//! after NIXL has failed; it reads, never writes, and when NIXL would read
//! no file, or the file it would read is fine, and its variables are too,
//! it finds nothing. Pure: the world is a seam (the real one is the
//! engine's `nixl_config::System`).

use crate::model::{Failure, Reason};
use std::io;
use std::path::{Path, PathBuf};

/// The variable NIXL reads first.
pub const VARIABLE: &str = "NIXL_CONFIG_FILE";
/// The file under `$HOME` NIXL reads second.
pub const HOME_FILE: &str = ".nixl.cfg";
/// The file NIXL reads last.
pub const GLOBAL_FILE: &str = "/etc/nixl.cfg";
/// NIXL's telemetry switch, read as one of [`TRUE_WORDS`] or [`FALSE_WORDS`].
pub const TELEMETRY_ENABLE: &str = "NIXL_TELEMETRY_ENABLE";
/// Where NIXL's telemetry writes its buffers, when telemetry is on.
pub const TELEMETRY_DIR: &str = "NIXL_TELEMETRY_DIR";
/// The words NIXL reads as true, and as false, whatever their case.
pub const TRUE_WORDS: [&str; 6] = ["y", "yes", "on", "1", "true", "enable"];
pub const FALSE_WORDS: [&str; 6] = ["n", "no", "off", "0", "false", "disable"];

/// What [`diagnose`] may look at: the environment as NIXL's `getenv` sees
/// it and the file system as the process's user sees it.
pub trait ConfigWorld {
    /// The variable when it is set, even to the empty string.
    fn var(&self, key: &str) -> Option<String>;
    /// `stat(path)`: `Ok(true)` when something is there, `Ok(false)` when
    /// nothing is (`ENOENT`, `ENOTDIR`), the error otherwise.
    fn exists(&self, path: &Path) -> io::Result<bool>;
    /// The file's bytes.
    fn read(&self, path: &Path) -> io::Result<Vec<u8>>;
    /// Whether `path` is a directory (following links); the error when
    /// nothing is there or it cannot be looked up.
    fn is_dir(&self, path: &Path) -> io::Result<bool>;
    /// The effective user id of this process.
    fn uid(&self) -> Option<u32>;
}

/// Why NIXL chose the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChosenBy {
    /// `NIXL_CONFIG_FILE` names it.
    Variable,
    /// It is `$HOME/.nixl.cfg`.
    Home,
    /// It is `/etc/nixl.cfg`.
    Global,
}

/// What is wrong with the chosen file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Problem {
    /// Nothing is at the path `NIXL_CONFIG_FILE` names.
    Missing,
    /// The user may not look it up (`lookup`: search a directory on its
    /// path) or read it.
    Denied { uid: Option<u32>, lookup: bool },
    /// Any other error reading it (a directory, an I/O error).
    Unreadable { error: String },
    /// It is read but is not TOML (1-based line and column).
    NotToml { line: usize, column: usize, error: String },
}

/// The configuration file that makes NIXL refuse to create agents.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigFinding {
    pub file: PathBuf,
    pub chosen_by: ChosenBy,
    pub problem: Problem,
}

/// A variable of NIXL's that makes it refuse to create agents.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VariableFinding {
    pub name: &'static str,
    pub value: String,
    pub problem: VariableProblem,
}

/// What is wrong with the variable's value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VariableProblem {
    /// Not one of NIXL's boolean words.
    NotABoolean,
    /// Telemetry is on and the directory is not there.
    NoSuchDirectory,
    /// Telemetry is on and the path is not a directory.
    NotADirectory,
}

/// NIXL's configuration as the cause of a failed agent creation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Finding {
    File(ConfigFinding),
    Variable(VariableFinding),
}

/// What in NIXL's configuration makes it refuse to create agents in
/// `world`, in the order NIXL reads it: the file, then the variables
/// agent creation reads. `None` when all of it is fine.
pub fn diagnose(world: &dyn ConfigWorld) -> Option<Finding> {
    if let Some(f) = diagnose_file(world) {
        return Some(Finding::File(f));
    }
    let enable = world.var(TELEMETRY_ENABLE);
    let on = match enable.as_deref().map(boolean) {
        None => false,
        Some(Some(on)) => on,
        Some(None) => {
            return Some(Finding::Variable(VariableFinding {
                name: TELEMETRY_ENABLE,
                value: enable.unwrap_or_default(),
                problem: VariableProblem::NotABoolean,
            }))
        }
    };
    let dir = world.var(TELEMETRY_DIR).filter(|_| on)?;
    let problem = match world.is_dir(Path::new(&dir)) {
        Ok(true) => return None,
        Ok(false) => VariableProblem::NotADirectory,
        Err(_) => VariableProblem::NoSuchDirectory,
    };
    Some(Finding::Variable(VariableFinding {
        name: TELEMETRY_DIR,
        value: dir,
        problem,
    }))
}

impl Finding {
    /// The failure of `during` (e.g. `creating NIXL agent "x"`), with its
    /// fix: reason `nixl_config`.
    pub fn failure(&self, during: &str) -> Failure {
        Failure::new(Reason::NixlConfig, format!("{during}: {}", self.cause())).with_fix(self.fix())
    }

    /// What is wrong, naming the file or variable.
    pub fn cause(&self) -> String {
        match self {
            Finding::File(f) => f.cause(),
            Finding::Variable(v) => match v.problem {
                VariableProblem::NotABoolean => format!(
                    "{}={:?} is not a value NIXL reads as a boolean ({} or {}, any case)",
                    v.name,
                    v.value,
                    TRUE_WORDS.join(", "),
                    FALSE_WORDS.join(", ")
                ),
                VariableProblem::NoSuchDirectory => format!(
                    "NIXL's telemetry is on ({TELEMETRY_ENABLE}) and {}={} does not exist or cannot be looked up",
                    v.name, v.value
                ),
                VariableProblem::NotADirectory => format!(
                    "NIXL's telemetry is on ({TELEMETRY_ENABLE}) and {}={} is not a directory",
                    v.name, v.value
                ),
            },
        }
    }

    /// What the operator does about it.
    pub fn fix(&self) -> String {
        match self {
            Finding::File(f) => f.fix(),
            Finding::Variable(v) => match v.problem {
                VariableProblem::NotABoolean => format!("set {} to yes or no, or unset it", v.name),
                VariableProblem::NoSuchDirectory | VariableProblem::NotADirectory => {
                    format!("point {TELEMETRY_DIR} at a directory this user can write, or set {TELEMETRY_ENABLE}=no")
                }
            },
        }
    }
}

/// The file NIXL's configuration order picks in `world`, if it is the
/// cause of a failure; `None` when NIXL reads no file or a good one.
pub fn diagnose_file(world: &dyn ConfigWorld) -> Option<ConfigFinding> {
    let found = |file: PathBuf, chosen_by, problem| {
        Some(ConfigFinding {
            file,
            chosen_by,
            problem,
        })
    };
    if let Some(named) = world.var(VARIABLE) {
        let file = PathBuf::from(named);
        // NIXL reads the file whether or not it exists.
        return match world.read(&file) {
            Ok(bytes) => parse(&bytes).and_then(|p| found(file, ChosenBy::Variable, p)),
            Err(e) if missing(&e) => found(file, ChosenBy::Variable, Problem::Missing),
            Err(e) => found(file, ChosenBy::Variable, problem_of(&e, world, false)),
        };
    }
    let candidates = world
        .var("HOME")
        .map(|home| (Path::new(&home).join(HOME_FILE), ChosenBy::Home))
        .into_iter()
        .chain([(PathBuf::from(GLOBAL_FILE), ChosenBy::Global)]);
    for (file, chosen_by) in candidates {
        match world.exists(&file) {
            Ok(false) => continue,
            // NIXL's `std::filesystem::exists` throws on anything but
            // "not there": the lookup itself fails agent creation.
            Err(e) => return found(file, chosen_by, problem_of(&e, world, true)),
            Ok(true) => {
                return match world.read(&file) {
                    Ok(bytes) => parse(&bytes).and_then(|p| found(file, chosen_by, p)),
                    Err(e) => found(file, chosen_by, problem_of(&e, world, false)),
                }
            }
        }
    }
    None
}

fn missing(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::NotFound || e.raw_os_error() == Some(ENOTDIR)
}

/// `ENOTDIR` on Linux: a path component is a file, which `stat` reports as
/// "nothing there" to NIXL as well.
const ENOTDIR: i32 = 20;

fn problem_of(e: &io::Error, world: &dyn ConfigWorld, lookup: bool) -> Problem {
    match e.kind() {
        io::ErrorKind::PermissionDenied => Problem::Denied {
            uid: world.uid(),
            lookup,
        },
        io::ErrorKind::NotFound => Problem::Missing,
        _ => Problem::Unreadable { error: e.to_string() },
    }
}

/// `None` when the bytes are TOML NIXL can take.
fn parse(bytes: &[u8]) -> Option<Problem> {
    let text = match std::str::from_utf8(bytes) {
        Ok(t) => t,
        Err(e) => {
            let (line, column) = position(&bytes[..e.valid_up_to()]);
            return Some(Problem::NotToml {
                line,
                column,
                error: "the file is not UTF-8".to_string(),
            });
        }
    };
    let e = text.parse::<toml::Table>().err()?;
    let at = e.span().map_or(0, |s| s.start);
    let (line, column) = position(&text.as_bytes()[..at.min(text.len())]);
    Some(Problem::NotToml {
        line,
        column,
        error: e
            .message()
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .collect::<Vec<_>>()
            .join("; "),
    })
}

/// 1-based line and column of the byte after `before`.
fn position(before: &[u8]) -> (usize, usize) {
    let line = 1 + before.iter().filter(|b| **b == b'\n').count();
    let start = before.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1);
    let column = 1 + String::from_utf8_lossy(&before[start..]).chars().count();
    (line, column)
}

impl ConfigFinding {
    /// Where the file came from, in the words of NIXL's order.
    fn origin(&self) -> String {
        match self.chosen_by {
            ChosenBy::Variable => format!("named by {VARIABLE}"),
            ChosenBy::Home => "found in $HOME".to_string(),
            ChosenBy::Global => "NIXL's global file".to_string(),
        }
    }

    /// The file and what is wrong with it.
    pub fn cause(&self) -> String {
        let file = self.file.display();
        let user = |uid: &Option<u32>| uid.map_or("this process's user".to_string(), |u| format!("uid {u}"));
        match (&self.problem, self.chosen_by) {
            (Problem::Missing, _) => {
                format!("NIXL's configuration file {file} ({}) does not exist", self.origin())
            }
            (Problem::Denied { uid, lookup: true }, _) => format!(
                "NIXL's configuration file {file} ({}) cannot be looked up by {}: permission denied \
                 (that user may not search {})",
                self.origin(),
                user(uid),
                match self.chosen_by {
                    ChosenBy::Home => format!("HOME={}", self.file.parent().unwrap_or(Path::new("")).display()),
                    _ => format!("{}", self.file.parent().unwrap_or(Path::new("")).display()),
                }
            ),
            (Problem::Denied { uid, .. }, _) => format!(
                "NIXL's configuration file {file} ({}) cannot be read by {} (permission denied)",
                self.origin(),
                user(uid)
            ),
            (Problem::Unreadable { error }, _) => {
                format!(
                    "NIXL's configuration file {file} ({}) cannot be read: {error}",
                    self.origin()
                )
            }
            (Problem::NotToml { line, column, error }, _) => format!(
                "NIXL's configuration file {file} ({}) is not TOML: line {line}, column {column}: {error}",
                self.origin()
            ),
        }
    }

    /// What the operator does about it.
    pub fn fix(&self) -> String {
        let file = self.file.display();
        match (&self.problem, self.chosen_by) {
            (Problem::NotToml { line, column, .. }, ChosenBy::Variable) => format!(
                "correct {file} at line {line}, column {column}, or point {VARIABLE} at a valid TOML file (or unset it)"
            ),
            (Problem::NotToml { line, column, .. }, _) => format!(
                "correct {file} at line {line}, column {column}, or set {VARIABLE} to a valid TOML file (an empty file will do)"
            ),
            (_, ChosenBy::Variable) => {
                format!("point {VARIABLE} at a TOML file this user can read (/dev/null is an empty configuration), or unset it")
            }
            (_, ChosenBy::Home) => format!(
                "run with a HOME this user can search (HOME=/tmp, or the user's own home), or set {VARIABLE} \
                 to a TOML file this user can read (/dev/null is an empty configuration)"
            ),
            (_, ChosenBy::Global) => format!(
                "make {file} readable by this user, or set {VARIABLE} to a TOML file this user can read"
            ),
        }
    }
}

/// Whether NIXL records telemetry for an agent made while
/// `NIXL_TELEMETRY_ENABLE` was `variable` (`None`: unset) with
/// `captureTelemetry` = `capture_telemetry` in its config: NIXL's own rule
/// (`nixlAgentData`'s constructor). A set variable decides alone, on iff
/// it is one of [`TRUE_WORDS`] in any case (the config is then ignored);
/// unset, the config decides. Any other value makes NIXL refuse the agent,
/// so no agent has it: `false`, which asks NIXL nothing.
pub fn telemetry_on(variable: Option<&str>, capture_telemetry: bool) -> bool {
    match variable {
        Some(v) => boolean(v) == Some(true),
        None => capture_telemetry,
    }
}

/// A value as NIXL reads a boolean: one of [`TRUE_WORDS`] or
/// [`FALSE_WORDS`] in any case, `None` for anything else.
fn boolean(v: &str) -> Option<bool> {
    if TRUE_WORDS.iter().any(|w| w.eq_ignore_ascii_case(v)) {
        Some(true)
    } else if FALSE_WORDS.iter().any(|w| w.eq_ignore_ascii_case(v)) {
        Some(false)
    } else {
        None
    }
}

#[cfg(test)]
mod tests;
