//! What nixl-agent knows of the serving frameworks that call NIXL's Python
//! API (SGLang, vLLM, Dynamo), in one place: where their objects keep the
//! addresses of the buffers they register and the rank of their process
//! (the Python side reads those attributes, by the paths listed here, and
//! hands over what it found), how a call site is named a group and kind
//! ([`name_call`]), which groups readiness waits for ([`default_expect`]),
//! and which notifications are heartbeats ([`is_heartbeat`]).

use super::{Override, BUFFER_KIND};
use nixl_agent_core::model::{Kind, KIND_AUX, KIND_KV, KIND_STATE};
use nixl_agent_engine::observe::Expected;

/// Where a framework keeps the addresses of the buffers it registers, as an
/// attribute path on the registering method's `self`, and the word such a
/// buffer is named by: SGLang's `kv_args` (`kv_data_ptrs`, `aux_data_ptrs`,
/// `state_data_ptrs`), vLLM's `kv_caches_base_addr`. The first path holding
/// a call's first address names the call; renamed locals cannot change that.
pub const BUFFER_HOLDERS: &[(&str, &str)] = &[
    ("kv_args.kv_data_ptrs", KIND_KV),
    ("kv_args.aux_data_ptrs", KIND_AUX),
    ("kv_args.state_data_ptrs", KIND_STATE),
    ("kv_caches_base_addr", KIND_KV),
];

/// Where a framework keeps the rank of the process creating a NIXL agent,
/// as attribute paths on the creating method's `self`, first found first:
/// SGLang's `kv_args` (`engine_rank`, then `gpu_id`), vLLM's `tp_rank`.
pub const RANK_HOLDERS: &[&str] = &["kv_args.engine_rank", "kv_args.gpu_id", "tp_rank"];

/// Where a registration call was made, as the front-end sees it.
#[derive(Debug, Clone, Copy, Default)]
pub struct CallSite<'a> {
    /// The caller's module (`__name__` of its globals).
    pub module: &'a str,
    /// The caller's function (qualified name where the language has one).
    pub function: &'a str,
    /// The variable the call passes first, when it passes one.
    pub argument: Option<&'a str>,
    /// The framework attribute ([`BUFFER_HOLDERS`]) that holds the call's
    /// first address, when one does: it names the call, whatever the
    /// argument is called.
    pub holder: Option<&'a str>,
}

/// The word a [`BUFFER_HOLDERS`] path names its buffers by.
fn holder_word(path: &str) -> Option<&'static str> {
    BUFFER_HOLDERS.iter().find(|(p, _)| *p == path).map(|(_, w)| *w)
}

/// The well-known kind a word names (`kv_addrs` → kv), if any.
pub fn kind_of_word(word: &str) -> Option<Kind> {
    // Compared without case, allocating nothing: this runs on every call.
    let is = |t: &str, w: &str| t.eq_ignore_ascii_case(w);
    for t in word.split(|c: char| !c.is_ascii_alphanumeric()) {
        if is(t, KIND_KV) || t.get(..7).is_some_and(|p| is(p, "kvcache")) || is(t, "kvs") {
            return Some(Kind::Kv);
        }
        if is(t, KIND_AUX) {
            return Some(Kind::Aux);
        }
        if is(t, KIND_STATE) || is(t, "states") {
            return Some(Kind::State);
        }
        if is(t, "staging") {
            return Some(Kind::Custom("staging".into()));
        }
    }
    None
}

/// A label-safe word from a function name: `[a-z0-9_]`, at most 48 bytes.
fn label_word(s: &str) -> String {
    let last = s.rsplit('.').next().unwrap_or(s);
    let mut out = String::with_capacity(last.len());
    for c in last.chars() {
        let c = c.to_ascii_lowercase();
        if c.is_ascii_lowercase() || c.is_ascii_digit() {
            out.push(c);
        } else if !out.ends_with('_') && !out.is_empty() {
            out.push('_');
        }
    }
    let mut out = out.trim_end_matches('_').to_string();
    out.truncate(48);
    if out.is_empty() {
        out.push_str(nixl_agent_engine::observe::OVERFLOW_GROUP);
    }
    out
}

/// The group and kind of a call: an operator's override first, then the
/// known frameworks (SGLang's `register_buffer_to_engine` → kv / aux /
/// state / staging by the buffer it passes; vLLM's `register_kv_caches` →
/// kv; Dynamo's `nixl_connect` → `nixl_connect`), then a name from the call
/// site: the framework attribute holding the buffer, else the well-known
/// word in the argument or function name, else the function's name. Stable
/// across runs of the same code.
pub fn name_call(site: &CallSite<'_>, overrides: &[Override]) -> (String, Kind) {
    let derived = derive(site);
    if overrides.is_empty() {
        return derived;
    }
    let full = format!("{}:{}", site.module, site.function);
    for o in overrides {
        if o.key == full || o.key == derived.0 {
            let kind = o
                .kind
                .clone()
                .or_else(|| kind_of_word(&o.group))
                .unwrap_or(derived.1.clone());
            return (o.group.clone(), kind);
        }
    }
    derived
}

fn derive(site: &CallSite<'_>) -> (String, Kind) {
    let argument = match site.holder {
        Some(path) => holder_word(path),
        None => site.argument,
    };
    let from_argument = argument.and_then(kind_of_word);
    if site.module.starts_with("dynamo") && site.module.contains("nixl_connect") {
        return (
            "nixl_connect".into(),
            from_argument.unwrap_or(Kind::Custom(BUFFER_KIND.into())),
        );
    }
    if site.module.starts_with("vllm") && site.function.ends_with("register_kv_caches") {
        return (KIND_KV.into(), Kind::Kv);
    }
    if let Some(kind) = from_argument.or_else(|| kind_of_word(site.function)) {
        return (kind.as_str().to_string(), kind);
    }
    (label_word(site.function), Kind::Custom(BUFFER_KIND.into()))
}

/// The groups readiness waits for when `NIXL_AGENT_EXPECT` is unset:
/// SGLang → kv + aux, vLLM → kv, anything else → none (then ready once
/// NIXL's agent exists and one call has registered).
pub fn default_expect(frameworks: &[&str]) -> Vec<Expected> {
    if frameworks.contains(&"sglang") {
        vec![Expected::new(KIND_KV, Kind::Kv), Expected::new(KIND_AUX, Kind::Aux)]
    } else if frameworks.contains(&"vllm") {
        vec![Expected::new(KIND_KV, Kind::Kv)]
    } else {
        Vec::new()
    }
}

/// A notification the framework marks as a heartbeat: vLLM's `HB:<request>`.
pub fn is_heartbeat(message: &[u8]) -> bool {
    message.starts_with(b"HB:")
}
