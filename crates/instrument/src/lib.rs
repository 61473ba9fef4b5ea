//! The instrumentation of one process, whichever front-end sees its NIXL
//! calls (the Python extension, or the interposer under `libnixl.so`),
//! decided from the environment alone and tested here:
//! - [`Settings::from_env`]: what the operator asked for, all from the
//!   environment (an instrumented program has no config file of ours),
//! - [`frameworks`]: what is known of SGLang, vLLM and Dynamo — where they
//!   keep buffers and ranks, the group and kind of a call site
//!   ([`name_call`]), the groups readiness waits for ([`default_expect`]),
//! - [`reason_of_exception`]: the closed reason of what the call raised,
//!   [`status_of_exception`] NIXL's status it stands for (the neutral call
//!   record's, as the interposer names it),
//! - [`Instrumentation`]: the observer, log, tap, server and publisher of
//!   one process.
//!
//! The recording itself is [`nixl_agent_engine::observe::Observer`]'s, the same path as
//! every other front-end.

pub mod frameworks;
mod process;
pub use frameworks::{default_expect, is_heartbeat, name_call, CallSite, BUFFER_HOLDERS, RANK_HOLDERS};
pub use nixl_agent_pod::{ENV_DIR as ENV_POD_DIR, ENV_RANK_ENV, ENV_RETENTION};
pub use process::Instrumentation;

use frameworks::kind_of_word;
use nixl_agent_core::config::{self, Config, ConfigError, Env};
use nixl_agent_core::model::{Kind, MemType, Reason};
use nixl_agent_engine::observe::{Expected, ObserveSettings, DEFAULT_MAX_GROUPS};
use nixl_agent_ledger::telemetry;

/// `off` / `0` / `false` switches the instrumentation off entirely (read by
/// the Python bootstrap); `1` turns it on where the launcher is not used.
pub const ENV_INSTRUMENT: &str = "NIXL_AGENT_INSTRUMENT";
/// The values `NIXL_AGENT_INSTRUMENT` takes (on, then off), as the Python
/// start-up (`_boot.py`) reads them.
pub const INSTRUMENT_WORDS: &[&str] = &["1", "on", "true", "0", "off", "false"];
/// `record` (default), `enforce` or `off`.
pub const ENV_VALIDATE: &str = "NIXL_AGENT_VALIDATE";
/// Groups readiness waits for: `name[:DRAM|VRAM],...`; `none` for none.
pub const ENV_EXPECT: &str = "NIXL_AGENT_EXPECT";
/// Group names: `key=group[:kind],...`, key a call site `module:function`
/// or the name nixl-agent would give the call.
pub const ENV_GROUPS: &str = "NIXL_AGENT_GROUPS";
pub const ENV_MAX_GROUPS: &str = "NIXL_AGENT_MAX_GROUPS";
/// `on` taps fds 1 and 2 to attribute what NIXL/UCX print; `off` (default).
pub const ENV_CAPTURE: &str = "NIXL_AGENT_CAPTURE";
/// `1` (or `on`): learn which transport each peer's transfers take from
/// UCX's protocol report (`UCX_PROTO_INFO=y`, set before NIXL loads unless
/// the operator set it); `off` (default).
pub const ENV_TRANSPORTS: &str = "NIXL_AGENT_TRANSPORTS";
/// Set to `1` by the launcher or the import hook when they set
/// `UCX_PROTO_INFO=y` themselves: UCX's tables are then kept off stdout.
pub const ENV_PROTO_INFO_SET: &str = "NIXL_AGENT_PROTO_INFO_SET";
/// The `backend` label of observed groups (`UCX` by default).
pub const ENV_BACKEND: &str = "NIXL_AGENT_BACKEND";
/// Deadline on every observed NIXL call (`60s` by default): a call past it
/// fails /livez until it returns.
pub const ENV_CALL_TIMEOUT: &str = "NIXL_AGENT_CALL_TIMEOUT";
/// How long a transfer may stay in flight before it counts as stalled
/// (`30s` by default).
pub const ENV_TRANSFER_STALL_AFTER: &str = "NIXL_AGENT_TRANSFER_STALL_AFTER";
pub const ENV_PEER_WAIT: &str = "NIXL_AGENT_PEER_WAIT";
/// `NIXL_AGENT_LISTEN=off`: record, serve nothing (the metrics are still
/// readable through the explicit API).
pub const LISTEN_OFF: &str = "off";
/// The log target of what the instrumentation says about itself.
pub const LOG_TARGET: &str = telemetry::names::INSTRUMENT_LOG_TARGET;
/// The log filter when `NIXL_AGENT_LOG` is unset. Inside someone else's
/// process nothing about its registrations reaches its stderr (they are on
/// /metrics and /v1/status, and the program sees its own exceptions); only
/// what stops nixl-agent itself from working does: a port in use, a failure
/// of the instrumentation (once per operation). `NIXL_AGENT_LOG=info` logs
/// every attempt.
pub const DEFAULT_LOG_FILTER: &str = "off,nixl_agent::instrument=warn";
/// The kind of a group whose call site names no well-known kind.
pub const BUFFER_KIND: &str = "buffer";

/// What validation does with a call it rejects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Validation {
    /// No checks.
    Off,
    /// Check and record; the call goes to NIXL unchanged (default).
    Record,
    /// Refuse the call with a message naming the region and the reason.
    Enforce,
}

/// One `NIXL_AGENT_GROUPS` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Override {
    pub key: String,
    pub group: String,
    pub kind: Option<Kind>,
}

/// Everything the instrumentation of one process is told.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Listen address, HTTP limits, tracing, log format: the binary's
    /// settings and their `NIXL_AGENT_*` / `OTEL_*` variables.
    pub config: Config,
    /// Whether to serve HTTP at all (`NIXL_AGENT_LISTEN=off`).
    pub serve: bool,
    pub validation: Validation,
    /// `None`: the framework's default ([`default_expect`]).
    pub expect: Option<Vec<Expected>>,
    pub groups: Vec<Override>,
    pub max_groups: usize,
    pub capture: bool,
    /// Learn each peer's transports from UCX's protocol tables
    /// ([`ENV_TRANSPORTS`]).
    pub transports: bool,
    /// nixl-agent set `UCX_PROTO_INFO=y` ([`ENV_PROTO_INFO_SET`]): the
    /// tables are kept from the program's stdout. An operator's own pass.
    pub proto_info_ours: bool,
    pub backends: Vec<String>,
    /// The deadline on every observed NIXL call.
    pub call_timeout: std::time::Duration,
    /// A transfer in flight longer than this is stalled.
    pub transfer_stall_after: std::time::Duration,
    /// How long a peer's metadata is waited for before NIXL's refusals to
    /// create a request to it count as failed transfers.
    pub peer_wait: std::time::Duration,
    /// Publish to this pod directory (`NIXL_AGENT_MULTIPROC_DIR`) for a
    /// sidecar to serve. Without one, processes sharing the listen address
    /// are one pod of their own ([`nixl_agent_pod::local`]).
    pub publish: Option<std::path::PathBuf>,
    /// The rank slot to claim: the variable `NIXL_AGENT_RANK_ENV` names
    /// (explicit), else `LOCAL_RANK` (a preference), else the framework's
    /// own rank, else the lowest free slot.
    pub rank: nixl_agent_pod::claim::Wish,
    /// How long the ranks of a zero-configuration pod serve a rank whose
    /// process ended ([`nixl_agent_pod::ENV_RETENTION`]).
    pub retention: std::time::Duration,
    /// Where an unresolved NIXL failure is written for Kubernetes to show
    /// after the process died ([`ENV_TERMINATION_LOG`]).
    pub termination_log: telemetry::last_words::Target,
}

/// `off`, or the termination-message file's path (by default
/// `/dev/termination-log` when it exists and can be written).
pub use telemetry::last_words::ENV_TERMINATION_LOG;

fn invalid(key: &str, message: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        key: key.into(),
        message: message.into(),
    }
}

impl Settings {
    /// Reads every setting; the first unusable one is named in the error.
    pub fn from_env(env: &dyn Env) -> Result<Settings, ConfigError> {
        let mut cfg = Config::default();
        let publish = env.var(nixl_agent_pod::ENV_DIR).map(std::path::PathBuf::from);
        // Ranks of a pod publish; the pod's agent serves them. A rank serves
        // HTTP itself only when told where.
        let listen_off = env
            .var(config::ENV_LISTEN)
            .is_some_and(|v| v.trim().eq_ignore_ascii_case(LISTEN_OFF));
        let serve = match env.var(config::ENV_LISTEN) {
            Some(_) if listen_off => false,
            Some(_) => true,
            None => publish.is_none(),
        };
        if !listen_off {
            cfg.apply_env(env)?;
        } else {
            let rest = EnvWithout {
                env,
                key: config::ENV_LISTEN,
            };
            cfg.apply_env(&rest)?;
        }
        cfg.validate()?;
        let lower = |k: &str| env.var(k).map(|v| v.trim().to_ascii_lowercase());
        let validation = match lower(ENV_VALIDATE).as_deref() {
            None | Some("record") => Validation::Record,
            Some("enforce") => Validation::Enforce,
            Some("off") => Validation::Off,
            Some(v) => {
                return Err(invalid(
                    ENV_VALIDATE,
                    format!("`{v}` is not one of record, enforce, off"),
                ))
            }
        };
        let backends = match env.var(ENV_BACKEND) {
            None => vec![config::DEFAULT_BACKEND.to_string()],
            Some(v) => v.split('+').map(str::to_string).collect(),
        };
        if backends.is_empty() || backends.iter().any(String::is_empty) {
            return Err(invalid(ENV_BACKEND, "names at least one backend, e.g. UCX"));
        }
        config::validate_backends(&backends, ENV_BACKEND)?;
        let expect = match env.var(ENV_EXPECT) {
            None => None,
            Some(v) => Some(parse_expect(&v)?),
        };
        let groups = match env.var(ENV_GROUPS) {
            None => Vec::new(),
            Some(v) => parse_groups(&v)?,
        };
        let max_groups = match env.var(ENV_MAX_GROUPS) {
            None => DEFAULT_MAX_GROUPS,
            Some(v) => match v.parse::<usize>() {
                Ok(n) if (1..=256).contains(&n) => n,
                _ => return Err(invalid(ENV_MAX_GROUPS, format!("`{v}` is not a number from 1 to 256"))),
            },
        };
        // Read by the Python start-up (which says a bad value itself before
        // any of this runs); checked here too, so the explicit API refuses it.
        if let Some(v) = lower(ENV_INSTRUMENT) {
            if !INSTRUMENT_WORDS.contains(&v.as_str()) {
                return Err(invalid(
                    ENV_INSTRUMENT,
                    format!("`{v}` is not one of {}", INSTRUMENT_WORDS.join(", ")),
                ));
            }
        }
        let capture = match lower(ENV_CAPTURE).as_deref() {
            None | Some("off") | Some("0") | Some("false") => false,
            Some("on") | Some("1") | Some("true") => true,
            Some(v) => return Err(invalid(ENV_CAPTURE, format!("`{v}` is neither on nor off"))),
        };
        let transports = match lower(ENV_TRANSPORTS).as_deref() {
            None | Some("off") | Some("0") | Some("false") => false,
            Some("on") | Some("1") | Some("true") => true,
            Some(v) => return Err(invalid(ENV_TRANSPORTS, format!("`{v}` is neither 1 nor 0"))),
        };
        let proto_info_ours = env.var(ENV_PROTO_INFO_SET).as_deref() == Some("1");
        let call_timeout = match env.var(ENV_CALL_TIMEOUT) {
            None => config::DEFAULT_NIXL_CALL_TIMEOUT,
            Some(v) => match nixl_agent_core::units::parse_duration(v.trim()) {
                Ok(d) if (config::MIN_NIXL_CALL_TIMEOUT..=config::MAX_DURATION).contains(&d) => d,
                _ => {
                    return Err(invalid(
                        ENV_CALL_TIMEOUT,
                        format!("`{v}` is not a duration from 10ms to 24h (e.g. 60s)"),
                    ))
                }
            },
        };
        let transfer_stall_after = match env.var(ENV_TRANSFER_STALL_AFTER) {
            None => nixl_agent_engine::observe::DEFAULT_STALL_AFTER,
            Some(v) => match nixl_agent_core::units::parse_duration(v.trim()) {
                Ok(d) if (config::MIN_NIXL_CALL_TIMEOUT..=config::MAX_DURATION).contains(&d) => d,
                _ => {
                    return Err(invalid(
                        ENV_TRANSFER_STALL_AFTER,
                        format!("`{v}` is not a duration from 10ms to 24h (e.g. 30s)"),
                    ))
                }
            },
        };
        let peer_wait = match env.var(ENV_PEER_WAIT) {
            None => nixl_agent_engine::observe::DEFAULT_PEER_WAIT,
            Some(v) => match nixl_agent_core::units::parse_duration(v.trim()) {
                Ok(d) if d <= config::MAX_DURATION => d,
                _ => {
                    return Err(invalid(
                        ENV_PEER_WAIT,
                        format!("`{v}` is not a duration up to 24h (e.g. 60s; 0s: never wait)"),
                    ))
                }
            },
        };
        if let Some(e) = &expect {
            if e.len() > max_groups {
                return Err(invalid(
                    ENV_MAX_GROUPS,
                    format!("{max_groups} is fewer than the {} groups {ENV_EXPECT} names", e.len()),
                ));
            }
        }
        Ok(Settings {
            config: cfg,
            serve,
            validation,
            expect,
            groups,
            max_groups,
            capture,
            transports,
            proto_info_ours,
            backends,
            call_timeout,
            transfer_stall_after,
            peer_wait,
            publish,
            rank: nixl_agent_pod::wish_from_env(env)?,
            retention: nixl_agent_pod::retention_from_env(env)?,
            termination_log: telemetry::last_words::Target::parse(env.var(ENV_TERMINATION_LOG).as_deref())
                .map_err(|m| invalid(ENV_TERMINATION_LOG, m))?,
        })
    }

    /// Observe mode's settings for a process running `frameworks` (the
    /// top-level modules loaded when its first NIXL agent was created).
    pub fn observe(&self, frameworks: &[&str]) -> ObserveSettings {
        ObserveSettings {
            expect: self.expect.clone().unwrap_or_else(|| default_expect(frameworks)),
            validate: self.validation != Validation::Off,
            enforce: self.validation == Validation::Enforce,
            max_groups: self.max_groups,
            backends: self.backends.clone(),
            // No framework the defaults know and nothing said: ready only
            // once something registered (`NIXL_AGENT_EXPECT=none` opts out).
            require_registration: self.expect.is_none(),
            call_timeout: Some(self.call_timeout),
            transfer_stall_after: self.transfer_stall_after,
            peer_wait: self.peer_wait,
        }
    }
}

/// Checks a group name and kind given explicitly (Python's
/// `nixl_agent_instrument.group`) as the config file and the library API
/// check them: a word that cannot be a label is refused with one line naming
/// it and what is allowed, never recorded as `other` without a word.
pub fn check_group(name: &str, kind: &str) -> Result<(), ConfigError> {
    config::validate_name_and_kind(name, kind, &|k| format!("group {k}"))
}

/// An [`Env`] that hides one variable.
struct EnvWithout<'a> {
    env: &'a dyn Env,
    key: &'a str,
}

impl Env for EnvWithout<'_> {
    fn var(&self, key: &str) -> Option<String> {
        if key == self.key {
            None
        } else {
            self.env.var(key)
        }
    }
}

/// The memory type a word of NIXL's Python API names (`DRAM`/`cpu`,
/// `VRAM`/`cuda`), if any.
pub fn mem_type_word(word: &str) -> Option<MemType> {
    match word {
        "DRAM" | "dram" | "cpu" => Some(MemType::Dram),
        "VRAM" | "vram" | "cuda" => Some(MemType::Vram),
        _ => None,
    }
}

fn parse_expect(v: &str) -> Result<Vec<Expected>, ConfigError> {
    if v.trim().eq_ignore_ascii_case("none") {
        return Ok(Vec::new());
    }
    let mut out = Vec::new();
    for item in v.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let (name, mem) = match item.split_once(':') {
            Some((n, m)) => match mem_type_word(m.trim()) {
                Some(t) => (n, Some(t)),
                None => return Err(invalid(ENV_EXPECT, format!("`{item}`: `{m}` is neither DRAM nor VRAM"))),
            },
            None => (item, None),
        };
        let name = name.trim();
        let kind = kind_of_word(name).unwrap_or_else(|| Kind::Custom(BUFFER_KIND.into()));
        config::validate_group_words(name, kind.as_str(), &["UCX".into()], &|_| ENV_EXPECT.to_string())?;
        // `group:MEMTYPE` is still accepted; the labels come from the
        // group's first call, whatever the expectation said.
        let _ = mem;
        out.push(Expected::new(name, kind));
    }
    Ok(out)
}

fn parse_groups(v: &str) -> Result<Vec<Override>, ConfigError> {
    let mut out = Vec::new();
    for item in v.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let Some((key, value)) = item.split_once('=') else {
            return Err(invalid(ENV_GROUPS, format!("`{item}` is not key=group[:kind]")));
        };
        let (group, kind) = match value.split_once(':') {
            Some((g, k)) => (g, Some(Kind::parse(k))),
            None => (value, None),
        };
        let k = kind
            .clone()
            .or_else(|| kind_of_word(group))
            .unwrap_or(Kind::Custom(BUFFER_KIND.into()));
        config::validate_group_words(group, k.as_str(), &["UCX".into()], &|f| {
            format!("{ENV_GROUPS} `{item}` {f}")
        })?;
        out.push(Override {
            key: key.trim().to_string(),
            group: group.to_string(),
            kind,
        });
    }
    Ok(out)
}

/// The reason of an exception raised by NIXL's Python API, by class name.
/// NIXL's own classes (`nixl_cu12._bindings.nixl*Error`) carry its status
/// code; Python's own errors are what the API raises for input it cannot
/// take.
pub fn reason_of_exception(class: &str) -> Reason {
    match class {
        "nixlBackendError" => Reason::NixlBackendError,
        "nixlInvalidParamError" | "nixlMismatchError" => Reason::NixlInvalidParam,
        "nixlNotFoundError" => Reason::NixlNotFound,
        "TypeError" | "KeyError" | "IndexError" | "ValueError" | "AttributeError" | "OverflowError" => {
            Reason::InvalidArgument
        }
        "MemoryError" => Reason::AllocationFailed,
        _ => Reason::Unknown,
    }
}

/// The closed reason of what a transfer, peer or notification call raised:
/// NIXL's exception classes say more on the data path than at registration
/// (a remote disconnect is a lost peer; a mismatch is metadata NIXL refuses).
pub fn reason_of_transfer_exception(class: &str) -> Reason {
    match class {
        "nixlRemoteDisconnectError" => Reason::PeerLost,
        "nixlMismatchError" => Reason::MetadataMismatch,
        "nixlNotFoundError" => Reason::NixlNotFound,
        "nixlBackendError" => Reason::NixlBackendError,
        "nixlInvalidParamError" => Reason::NixlInvalidParam,
        "nixlRepostActiveError" => Reason::RepostActive,
        "nixlNotAllowedError" | "nixlNotPostedError" => Reason::InvalidArgument,
        "nixlCancelledError" | "nixlUnknownError" | "nixlNotSupportedError" | "nixlNoTelemetryError" => {
            Reason::NixlError
        }
        other => reason_of_exception(other),
    }
}

/// NIXL's name of the status a call of NIXL's Python API ended with, by
/// the class of what it raised, in the interposer's words for the same C++
/// call (`nixl_agent_sys::interpose::status::name`): NIXL's exception
/// classes are named after the status its binding turned into them; a C++
/// exception that escaped NIXL (pybind11's `RuntimeError`) or anything
/// unknown is [`NixlCalled::THREW`](nixl_agent_core::event::NixlCalled::THREW).
/// `None` for Python's own argument errors, which the API raises before it
/// calls NIXL (a backend the agent never made): no NIXL call to count, as
/// the interposer counts none.
pub fn status_of_exception(class: &str) -> Option<&'static str> {
    use nixl_agent_sys::interpose::status::{self, *};
    let code = match class {
        "nixlNotPostedError" => ERR_NOT_POSTED,
        "nixlInvalidParamError" => ERR_INVALID_PARAM,
        "nixlBackendError" => ERR_BACKEND,
        "nixlNotFoundError" => ERR_NOT_FOUND,
        "nixlMismatchError" => ERR_MISMATCH,
        "nixlNotAllowedError" => ERR_NOT_ALLOWED,
        "nixlRepostActiveError" => ERR_REPOST_ACTIVE,
        "nixlUnknownError" => ERR_UNKNOWN,
        "nixlNotSupportedError" => ERR_NOT_SUPPORTED,
        "nixlRemoteDisconnectError" => ERR_REMOTE_DISCONNECT,
        "nixlCancelledError" => ERR_CANCELED,
        "nixlNoTelemetryError" => ERR_NO_TELEMETRY,
        other if reason_of_exception(other) == Reason::InvalidArgument => return None,
        _ => return Some(nixl_agent_core::event::NixlCalled::THREW),
    };
    Some(status::name(code))
}

#[cfg(test)]
mod tests;
