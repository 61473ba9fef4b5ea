//! Configuration: the TOML file, its defaults, environment overrides and
//! validation. Everything here runs before any port is bound or any NIXL call
//! is made, so a bad config costs nothing but an error message.

use crate::model::MemType;
use crate::units;
use serde::{Deserialize, Serialize};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Default HTTP listen address: loopback only. Port 10915 sits outside the
/// Prometheus exporter range 9100–9999 (fully allocated) and away from NIXL's
/// own 8888 and the usual serving ports.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:10915";
/// Default NIXL agent name (NIXL uses it in metadata exchange).
pub const DEFAULT_AGENT_NAME: &str = "nixl-agent";
/// Default time allowed to deregister everything after SIGTERM.
pub const DEFAULT_SHUTDOWN_GRACE: Duration = Duration::from_secs(10);
/// Default deadline of one NIXL call of the lifecycle (backend creation, a
/// group's registration or deregistration). Far above what the benchmark
/// measures for the largest groups (deregistration grows as N² in NIXL).
pub const DEFAULT_NIXL_CALL_TIMEOUT: Duration = Duration::from_secs(60);
/// Default first retry delay after a failed group attempt.
pub const DEFAULT_INITIAL_BACKOFF: Duration = Duration::from_millis(500);
/// Default ceiling of the retry delay.
pub const DEFAULT_MAX_BACKOFF: Duration = Duration::from_secs(30);
/// Default attempts per group before giving up; 0 retries for ever.
pub const DEFAULT_MAX_ATTEMPTS: u32 = 0;
/// Default backend list of a group.
pub const DEFAULT_BACKEND: &str = "UCX";

/// Most regions one group may have: refuses absurd plans before allocating.
pub const MAX_REGIONS_PER_GROUP: u64 = 1 << 20;
/// Most bytes one group may ask the binary to allocate.
pub const MAX_GROUP_BYTES: u64 = 1 << 40;
/// Longest duration any setting accepts: far beyond any sane value, far
/// below what would overflow a deadline.
pub const MAX_DURATION: Duration = Duration::from_secs(24 * 3600);
/// Page size the per-group byte limit assumes when rounding sizes up (the
/// largest common one, so the limit holds on every platform).
pub const LIMIT_PAGE: u64 = 64 << 10;
/// Shortest NIXL call deadline accepted (the watchdog looks 4 times within).
pub const MIN_NIXL_CALL_TIMEOUT: Duration = Duration::from_millis(10);
/// Most groups in one plan.
pub const MAX_GROUPS: usize = 256;

/// Environment variables read as overrides (after the file, before flags).
pub const ENV_CONFIG: &str = "NIXL_AGENT_CONFIG";
/// Shortest node-canary probe interval.
pub const MIN_PROBE_INTERVAL: Duration = Duration::from_secs(1);
pub const ENV_LISTEN: &str = "NIXL_AGENT_LISTEN";
pub const ENV_LOG_FORMAT: &str = "NIXL_AGENT_LOG_FORMAT";
/// What to do when the listen address cannot be bound (another process
/// holds the port, or the address is not this host's).
pub const LISTEN_FIX: &str =
    "another process may hold that port: give a free ADDR:PORT with --listen, NIXL_AGENT_LISTEN or `listen` in the config";
/// The log filter (`info`, `warn`, `nixl_agent=debug`: tracing's
/// `EnvFilter` directives); an unparsable one is a config error.
pub const ENV_LOG: &str = "NIXL_AGENT_LOG";
pub const ENV_NIXL_LIB_DIR: &str = "NIXL_LIB_DIR";

/// The agent's whole configuration. Every field has a default, so an empty
/// file is a valid config and runs the embedded default plan.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// Address the HTTP server (/metrics, /livez, /readyz, /v1/status) binds.
    /// Loopback by default; binding all interfaces needs an explicit address.
    pub listen: SocketAddr,
    /// Name of the NIXL agent this process creates.
    pub agent_name: String,
    /// Directory holding libnixl_capi.so. Unset: search the pip wheel in
    /// Python's site-packages, /opt/nvidia/nvda_nixl, then the loader path.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nixl_lib_dir: Option<PathBuf>,
    /// Time allowed, after SIGTERM/SIGINT, to deregister everything and exit.
    #[serde(with = "units::duration")]
    pub shutdown_grace: Duration,
    /// Deadline of one NIXL call of the lifecycle. Past it the attempt counts
    /// as a `timeout` failure, the agent is not ready, and /livez fails until
    /// the call returns (a restart is what frees a process wedged in a
    /// driver call).
    #[serde(with = "units::duration")]
    pub nixl_call_timeout: Duration,
    /// Node canary: deregister and register every group again at this
    /// interval, so the agent says whether this node can register *now*
    /// (memlock, UCX and its CUDA modules, GPUs) before a serving pod lands
    /// on it. Unset: register once. Its metrics say `role="canary"`.
    #[serde(with = "units::duration_opt", default, skip_serializing_if = "Option::is_none")]
    pub probe_interval: Option<Duration>,
    /// Log line format: "text" for people, "json" for log pipelines.
    pub log_format: LogFormat,
    /// How failed groups are retried.
    pub retry: RetryConfig,
    /// OpenTelemetry trace export (the standard OTEL_* variables override it).
    pub tracing: TracingConfig,
    /// Limits of the HTTP server (slow or abusive clients).
    pub http: HttpConfig,
    /// The registration plan: one entry per named group of regions.
    #[serde(rename = "group")]
    pub groups: Vec<GroupConfig>,
}

/// Log line format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    #[default]
    Text,
    Json,
}

/// Capped exponential backoff for failed groups.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RetryConfig {
    /// Delay before the first retry; each further retry doubles it.
    #[serde(with = "units::duration")]
    pub initial_backoff: Duration,
    /// Ceiling of the delay between two attempts of one group.
    #[serde(with = "units::duration")]
    pub max_backoff: Duration,
    /// Consecutive failed attempts of a group before the agent stops
    /// retrying it (0: never stop). A success or a re-registration starts
    /// the count again.
    pub max_attempts: u32,
}

impl Default for RetryConfig {
    fn default() -> Self {
        RetryConfig {
            initial_backoff: DEFAULT_INITIAL_BACKOFF,
            max_backoff: DEFAULT_MAX_BACKOFF,
            max_attempts: DEFAULT_MAX_ATTEMPTS,
        }
    }
}

/// Default cap on open HTTP connections.
pub const DEFAULT_MAX_CONNECTIONS: usize = 512;
/// Default time a client has to send a request's headers (also the idle
/// keep-alive limit): slowloris protection.
pub const DEFAULT_HEADER_READ_TIMEOUT: Duration = Duration::from_secs(5);
/// Default time to answer one request.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// Default cap on a request's header bytes (hyper's floor is 8 KiB).
pub const DEFAULT_MAX_HEADER_BYTES: u64 = 16 << 10;
/// Largest request body accepted (the endpoints take none).
pub const MAX_BODY_BYTES: usize = 1024;

/// HTTP server limits.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HttpConfig {
    /// Open connections beyond this are closed at once.
    pub max_connections: usize,
    /// Time to send a request's headers, and the keep-alive idle limit.
    #[serde(with = "units::duration")]
    pub header_read_timeout: Duration,
    /// Time to answer one request (408 after it).
    #[serde(with = "units::duration")]
    pub request_timeout: Duration,
    /// Most header bytes in one request (431 beyond; at least 8KiB).
    #[serde(with = "units::size")]
    pub max_header_bytes: u64,
}

impl Default for HttpConfig {
    fn default() -> Self {
        HttpConfig {
            max_connections: DEFAULT_MAX_CONNECTIONS,
            header_read_timeout: DEFAULT_HEADER_READ_TIMEOUT,
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
            max_header_bytes: DEFAULT_MAX_HEADER_BYTES,
        }
    }
}

/// OTLP protocol for trace export.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
pub enum OtlpProtocol {
    #[default]
    #[serde(rename = "http/protobuf")]
    HttpProtobuf,
    #[serde(rename = "grpc")]
    Grpc,
}

/// Default service.name of exported traces.
pub const DEFAULT_SERVICE_NAME: &str = "nixl-agent";
/// Default sampler (the OTel SDK default).
pub const DEFAULT_SAMPLER: &str = "parentbased_always_on";
/// Default bound of the span export queue.
pub const DEFAULT_TRACE_QUEUE: usize = 2048;
/// Default timeout of one export request.
pub const DEFAULT_EXPORT_TIMEOUT: Duration = Duration::from_secs(5);
/// Samplers the agent understands (OTEL_TRACES_SAMPLER values).
pub const SAMPLERS: &[&str] = &[
    "always_on",
    "always_off",
    "traceidratio",
    "parentbased_always_on",
    "parentbased_always_off",
    "parentbased_traceidratio",
];

/// Trace export over OTLP. Without an endpoint nothing is exported and
/// nothing is slowed: spans are not even built.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TracingConfig {
    /// Collector base URL, e.g. "http://127.0.0.1:4318" for http/protobuf
    /// (`/v1/traces` is appended) or "http://127.0.0.1:4317" for grpc.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<String>,
    /// "http/protobuf" or "grpc".
    pub protocol: OtlpProtocol,
    /// The service.name resource attribute.
    pub service_name: String,
    /// always_on, always_off, traceidratio or their parentbased_ forms.
    pub sampler: String,
    /// Ratio for the traceidratio samplers, 0.0 to 1.0.
    pub sampler_arg: f64,
    /// Extra resource attributes, e.g. { role = "decode", rank = "0" }.
    pub resource: std::collections::BTreeMap<String, String>,
    /// Spans buffered for export; beyond it spans are dropped and counted.
    pub queue_size: usize,
    /// Timeout of one export request.
    #[serde(with = "units::duration")]
    pub export_timeout: Duration,
    /// `endpoint` is the full traces URL, used as given: it came from
    /// `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` (the OTel spec appends
    /// `/v1/traces` only to `OTEL_EXPORTER_OTLP_ENDPOINT`). Not a file key.
    #[serde(skip)]
    pub endpoint_is_traces_url: bool,
}

impl Default for TracingConfig {
    fn default() -> Self {
        TracingConfig {
            endpoint: None,
            protocol: OtlpProtocol::HttpProtobuf,
            service_name: DEFAULT_SERVICE_NAME.to_string(),
            sampler: DEFAULT_SAMPLER.to_string(),
            sampler_arg: 1.0,
            resource: Default::default(),
            queue_size: DEFAULT_TRACE_QUEUE,
            export_timeout: DEFAULT_EXPORT_TIMEOUT,
            endpoint_is_traces_url: false,
        }
    }
}

/// One group of regions the binary allocates (`count` × `size`) and registers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GroupConfig {
    /// Unique group name, the `group` label: [A-Za-z0-9_.-], 1–64 bytes.
    pub name: String,
    /// What the buffers are for: kv, aux, state or your own word ([a-z0-9_]).
    pub kind: String,
    /// DRAM (host memory) or VRAM (GPU memory, needs CUDA).
    pub mem_type: MemType,
    /// Device id: the CUDA ordinal for VRAM, 0 for DRAM.
    #[serde(default)]
    pub device: u32,
    /// NIXL backends to register with, by plugin name.
    #[serde(default = "default_backends")]
    pub backends: Vec<String>,
    /// Whether /readyz waits for this group.
    #[serde(default = "default_true")]
    pub required: bool,
    /// Whether regions are checked before NIXL sees them.
    #[serde(default = "default_true")]
    pub validate: bool,
    /// Number of regions to allocate.
    pub count: u64,
    /// Size of each region ("64KiB", "2MiB"), rounded up to the page size.
    #[serde(with = "units::size")]
    pub size: u64,
}

/// The keys every `[[group]]` must have (the rest have defaults).
pub const GROUP_REQUIRED_KEYS: &[&str] = &["name", "kind", "mem_type", "count", "size"];

/// The first `[[group]]` of a file that parses as TOML but lacks required
/// keys, named with every key it lacks (not one per try).
fn missing_group_keys(text: &str) -> Option<ConfigError> {
    let table: toml::Table = toml::from_str(text).ok()?;
    let groups = table.get("group")?.as_array()?;
    groups.iter().enumerate().find_map(|(i, g)| {
        let g = g.as_table()?;
        let missing: Vec<&str> = GROUP_REQUIRED_KEYS
            .iter()
            .copied()
            .filter(|k| !g.contains_key(*k))
            .collect();
        (!missing.is_empty()).then(|| {
            invalid(
                format!("group[{i}]"),
                format!(
                    "missing {}; every [[group]] needs {} (device, backends, required and validate have defaults)",
                    missing.join(", "),
                    GROUP_REQUIRED_KEYS.join(", ")
                ),
            )
        })
    })
}

fn default_backends() -> Vec<String> {
    vec![DEFAULT_BACKEND.to_string()]
}

fn default_true() -> bool {
    true
}

impl Default for Config {
    fn default() -> Self {
        Config {
            listen: DEFAULT_LISTEN.parse().expect("DEFAULT_LISTEN is a socket address"),
            agent_name: DEFAULT_AGENT_NAME.to_string(),
            nixl_lib_dir: None,
            shutdown_grace: DEFAULT_SHUTDOWN_GRACE,
            nixl_call_timeout: DEFAULT_NIXL_CALL_TIMEOUT,
            probe_interval: None,
            log_format: LogFormat::Text,
            retry: RetryConfig::default(),
            tracing: TracingConfig::default(),
            http: HttpConfig::default(),
            groups: default_groups(),
        }
    }
}

/// The embedded default plan, shaped like an SGLang decode worker: a kv group
/// of several regions and an aux group of a few small ones, all DRAM so that
/// it registers on any machine (4.25 MiB in all, under Docker's 8 MiB memlock).
pub fn default_groups() -> Vec<GroupConfig> {
    let group = |name: &str, count, size| GroupConfig {
        name: name.to_string(),
        kind: name.to_string(),
        mem_type: MemType::Dram,
        device: 0,
        backends: default_backends(),
        required: true,
        validate: true,
        count,
        size,
    };
    vec![group("kv", 8, 512 << 10), group("aux", 4, 64 << 10)]
}

/// A configuration problem: which key, and what is wrong with it.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("config file {path}: {message}")]
    Parse { path: PathBuf, message: String },
    #[error("config key `{key}`: {message}")]
    Invalid { key: String, message: String },
}

fn invalid(key: impl Into<String>, message: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        key: key.into(),
        message: message.into(),
    }
}

/// Source of environment variables, so tests never touch the process env.
pub trait Env {
    fn var(&self, key: &str) -> Option<String>;
}

/// The real process environment.
pub struct ProcessEnv;

impl Env for ProcessEnv {
    fn var(&self, key: &str) -> Option<String> {
        std::env::var(key).ok().filter(|v| !v.is_empty())
    }
}

impl Env for std::collections::HashMap<String, String> {
    fn var(&self, key: &str) -> Option<String> {
        self.get(key).cloned()
    }
}

impl Config {
    /// Parses a config file's text (`path` only names it in errors).
    /// A `[[group]]` missing required keys is named with all of them at
    /// once; a TOML error keeps its lines (the caret under the column).
    pub fn from_toml(text: &str, path: &Path) -> Result<Config, ConfigError> {
        toml::from_str(text).map_err(|e| {
            if let Some(missing) = missing_group_keys(text) {
                return missing;
            }
            ConfigError::Parse {
                path: path.to_path_buf(),
                message: e.to_string().trim_end().to_string(),
            }
        })
    }

    /// Reads and parses a config file.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        Config::from_toml(&text, path)
    }

    /// Applies environment overrides on top of the file.
    pub fn apply_env(&mut self, env: &dyn Env) -> Result<(), ConfigError> {
        if let Some(v) = env.var(ENV_LISTEN) {
            self.listen = v
                .parse()
                .map_err(|_| invalid(ENV_LISTEN, format!("`{v}` is not an ADDR:PORT socket address")))?;
        }
        if let Some(v) = env.var(ENV_NIXL_LIB_DIR) {
            self.nixl_lib_dir = Some(PathBuf::from(v));
        }
        self.tracing.apply_env(env)?;
        if let Some(v) = env.var(ENV_LOG) {
            if let Err(e) = tracing_subscriber::EnvFilter::builder().parse(&v) {
                return Err(invalid(
                    ENV_LOG,
                    format!("`{v}` is not a log filter ({e}); e.g. info, warn, nixl_agent=debug"),
                ));
            }
        }
        if let Some(v) = env.var(ENV_LOG_FORMAT) {
            self.log_format = match v.as_str() {
                "text" => LogFormat::Text,
                "json" => LogFormat::Json,
                _ => return Err(invalid(ENV_LOG_FORMAT, format!("`{v}` is neither text nor json"))),
            };
        }
        Ok(())
    }

    /// Checks everything serde cannot: ranges, names, uniqueness, limits.
    pub fn validate(&self) -> Result<(), ConfigError> {
        check_word("agent_name", &self.agent_name, 128, NAME_CHARS, |c| {
            c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.')
        })?;
        if self.shutdown_grace.is_zero() {
            return Err(invalid("shutdown_grace", "must be greater than 0"));
        }
        if self.nixl_call_timeout < MIN_NIXL_CALL_TIMEOUT {
            return Err(invalid("nixl_call_timeout", "must be at least 10ms"));
        }
        if let Some(p) = self.probe_interval {
            if p < MIN_PROBE_INTERVAL {
                return Err(invalid("probe_interval", "must be at least 1s"));
            }
            if p > MAX_DURATION {
                return Err(invalid("probe_interval", "is longer than the 24h maximum"));
            }
        }
        let r = &self.retry;
        if r.initial_backoff.is_zero() {
            return Err(invalid("retry.initial_backoff", "must be greater than 0"));
        }
        if r.max_backoff < r.initial_backoff {
            return Err(invalid("retry.max_backoff", "must be at least retry.initial_backoff"));
        }
        for (key, d) in [
            ("shutdown_grace", self.shutdown_grace),
            ("nixl_call_timeout", self.nixl_call_timeout),
            ("retry.initial_backoff", self.retry.initial_backoff),
            ("retry.max_backoff", self.retry.max_backoff),
            ("http.header_read_timeout", self.http.header_read_timeout),
            ("http.request_timeout", self.http.request_timeout),
            ("tracing.export_timeout", self.tracing.export_timeout),
        ] {
            if d > MAX_DURATION {
                return Err(invalid(
                    key,
                    format!("{} is longer than the 24h maximum", units::format_duration(d)),
                ));
            }
        }
        let h = &self.http;
        if h.max_connections == 0 || h.max_connections > 65_536 {
            return Err(invalid("http.max_connections", "must be 1..=65536"));
        }
        if h.header_read_timeout.is_zero() || h.request_timeout.is_zero() {
            return Err(invalid("http.header_read_timeout", "timeouts must be greater than 0"));
        }
        if !(8 << 10..=1 << 20).contains(&h.max_header_bytes) {
            return Err(invalid("http.max_header_bytes", "must be between 8KiB and 1MiB"));
        }
        let t = &self.tracing;
        if let Some(e) = &t.endpoint {
            if !(e.starts_with("http://") || e.starts_with("https://")) {
                return Err(invalid(
                    "tracing.endpoint",
                    format!("`{e}` must start with http:// or https://"),
                ));
            }
        }
        if !SAMPLERS.contains(&t.sampler.as_str()) {
            return Err(invalid(
                "tracing.sampler",
                format!("`{}` is not one of {}", t.sampler, SAMPLERS.join(", ")),
            ));
        }
        if !(0.0..=1.0).contains(&t.sampler_arg) {
            return Err(invalid("tracing.sampler_arg", "must be between 0.0 and 1.0"));
        }
        if t.queue_size == 0 || t.queue_size > 1 << 20 {
            return Err(invalid("tracing.queue_size", "must be 1..=1048576"));
        }
        if t.export_timeout.is_zero() {
            return Err(invalid("tracing.export_timeout", "must be greater than 0"));
        }
        if self.groups.len() > MAX_GROUPS {
            return Err(invalid(
                "group",
                format!("{} groups; at most {MAX_GROUPS}", self.groups.len()),
            ));
        }
        let mut names = std::collections::HashSet::new();
        for (i, g) in self.groups.iter().enumerate() {
            let key = |field: &str| format!("group[{i}].{field}");
            validate_group_words(&g.name, &g.kind, &g.backends, &key)?;
            if !names.insert(g.name.as_str()) {
                return Err(invalid(key("name"), format!("`{}` is used by another group", g.name)));
            }
            if g.mem_type == MemType::Dram && g.device != 0 {
                return Err(invalid(key("device"), "DRAM groups use device 0"));
            }
            if g.count == 0 || g.count > MAX_REGIONS_PER_GROUP {
                return Err(invalid(
                    key("count"),
                    format!("{} regions; must be 1..={MAX_REGIONS_PER_GROUP}", g.count),
                ));
            }
            if g.size == 0 {
                return Err(invalid(key("size"), "must be greater than 0"));
            }
            match g
                .size
                .checked_next_multiple_of(LIMIT_PAGE)
                .and_then(|s| s.checked_mul(g.count))
            {
                Some(total) if total <= MAX_GROUP_BYTES => {}
                _ => {
                    return Err(invalid(
                        key("size"),
                        format!("count × size exceeds {} per group", units::format_size(MAX_GROUP_BYTES)),
                    ))
                }
            }
        }
        Ok(())
    }
}

impl TracingConfig {
    /// The standard OpenTelemetry variables, read through [`Env`].
    fn apply_env(&mut self, env: &dyn Env) -> Result<(), ConfigError> {
        if let Some(v) = env.var("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") {
            self.endpoint = Some(v);
            self.endpoint_is_traces_url = true;
        } else if let Some(v) = env.var("OTEL_EXPORTER_OTLP_ENDPOINT") {
            self.endpoint = Some(v);
            self.endpoint_is_traces_url = false;
        }
        let protocol = env
            .var("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
            .or_else(|| env.var("OTEL_EXPORTER_OTLP_PROTOCOL"));
        if let Some(p) = protocol {
            self.protocol = match p.as_str() {
                "http/protobuf" => OtlpProtocol::HttpProtobuf,
                "grpc" => OtlpProtocol::Grpc,
                _ => {
                    return Err(invalid(
                        "OTEL_EXPORTER_OTLP_PROTOCOL",
                        format!("`{p}`: use http/protobuf or grpc"),
                    ))
                }
            };
        }
        if let Some(v) = env.var("OTEL_SERVICE_NAME") {
            self.service_name = v;
        }
        if let Some(v) = env.var("OTEL_RESOURCE_ATTRIBUTES") {
            for kv in v.split(',').filter(|kv| !kv.trim().is_empty()) {
                let (k, val) = kv
                    .split_once('=')
                    .ok_or_else(|| invalid("OTEL_RESOURCE_ATTRIBUTES", format!("`{kv}` is not key=value")))?;
                self.resource.insert(k.trim().to_string(), val.trim().to_string());
            }
        }
        if let Some(v) = env.var("OTEL_TRACES_SAMPLER") {
            self.sampler = v;
        }
        if let Some(v) = env.var("OTEL_TRACES_SAMPLER_ARG") {
            self.sampler_arg = v
                .parse()
                .map_err(|_| invalid("OTEL_TRACES_SAMPLER_ARG", format!("`{v}` is not a number")))?;
        }
        if let Some(v) = env.var("OTEL_EXPORTER_OTLP_TIMEOUT") {
            let ms: u64 = v
                .parse()
                .map_err(|_| invalid("OTEL_EXPORTER_OTLP_TIMEOUT", format!("`{v}` is not milliseconds")))?;
            self.export_timeout = Duration::from_millis(ms);
        }
        Ok(())
    }
}

/// Checks the words of a group that become label values. Shared by the config
/// file and the library API, so both refuse the same names.
pub fn validate_group_words(
    name: &str,
    kind: &str,
    backends: &[String],
    key: &dyn Fn(&str) -> String,
) -> Result<(), ConfigError> {
    validate_name_and_kind(name, kind, key)?;
    if backends.is_empty() {
        return Err(invalid(key("backends"), "needs at least one backend, e.g. [\"UCX\"]"));
    }
    validate_backends(backends, &key("backends"))
}

/// What a group name may hold (it becomes the `group` label).
const NAME_CHARS: &str = "ASCII letters, digits, '_', '-' and '.'";
/// What a kind may hold (it becomes the `kind` label).
const KIND_CHARS: &str = "lowercase ASCII letters, digits and '_' (kv, aux, state or a word of your own)";
/// What a backend name may hold.
const BACKEND_CHARS: &str = "ASCII letters, digits and '_' (e.g. UCX)";

/// Checks a group's name and kind, the words that become the `group` and
/// `kind` labels: the config file, the library API and Python's
/// `nixl_agent_instrument.group` refuse the same words with the same line.
pub fn validate_name_and_kind(name: &str, kind: &str, key: &dyn Fn(&str) -> String) -> Result<(), ConfigError> {
    check_word(&key("name"), name, 64, NAME_CHARS, |c| {
        c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.')
    })?;
    check_word(&key("kind"), kind, 32, KIND_CHARS, |c| {
        c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'
    })
}

/// Backend names (`UCX`, `GDS`), as the `backend` label takes them.
pub fn validate_backends(backends: &[String], key: &str) -> Result<(), ConfigError> {
    for b in backends {
        check_word(key, b, 32, BACKEND_CHARS, |c| c.is_ascii_alphanumeric() || c == '_')?;
    }
    Ok(())
}

fn check_word(key: &str, value: &str, max: usize, allowed: &str, ok: impl Fn(char) -> bool) -> Result<(), ConfigError> {
    if value.is_empty() || value.len() > max {
        return Err(invalid(key, format!("{value:?} must be 1 to {max} bytes long")));
    }
    if let Some(c) = value.chars().find(|c| !ok(*c)) {
        return Err(invalid(key, format!("{value:?} contains {c:?}; allowed: {allowed}")));
    }
    Ok(())
}

#[cfg(test)]
mod tests;
