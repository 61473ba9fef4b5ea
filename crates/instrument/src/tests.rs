//! Unit tests of the Python front-end's decisions: settings from the
//! environment, group names from call sites and framework attributes,
//! exception classes to reasons, and docs/python.md's settings table.

use super::*;
use std::collections::HashMap;

fn env(pairs: &[(&str, &str)]) -> HashMap<String, String> {
    pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

fn site<'a>(module: &'a str, function: &'a str, argument: Option<&'a str>) -> CallSite<'a> {
    CallSite {
        module,
        function,
        argument,
        holder: None,
    }
}

#[test]
fn sglang_buffers_are_named_by_what_they_hold() {
    let f = "NixlKVManager.register_buffer_to_engine";
    let m = "sglang.srt.disaggregation.nixl.conn";
    for (arg, group, kind) in [
        ("kv_addrs", "kv", Kind::Kv),
        ("aux_addrs", "aux", Kind::Aux),
        ("state_addrs", "state", Kind::State),
        ("staging_addrs", "staging", Kind::Custom("staging".into())),
    ] {
        assert_eq!(
            name_call(&site(m, f, Some(arg)), &[]),
            (group.to_string(), kind),
            "{arg}"
        );
    }
}

#[test]
fn vllm_dynamo_and_unknown_callers_get_stable_names() {
    let vllm = site(
        "vllm.distributed.kv_transfer.kv_connector.v1.nixl_connector",
        "NixlConnectorWorker.register_kv_caches",
        Some("descs"),
    );
    assert_eq!(name_call(&vllm, &[]), ("kv".into(), Kind::Kv));
    let dynamo = site("dynamo.nixl_connect", "Connector._register", Some("descs"));
    assert_eq!(name_call(&dynamo, &[]).0, "nixl_connect");
    let other = site("__main__", "Server.Setup-Buffers", Some("regions"));
    assert_eq!(
        name_call(&other, &[]),
        ("setup_buffers".into(), Kind::Custom("buffer".into()))
    );
    let lambda = site("__main__", "<lambda>", None);
    assert_eq!(name_call(&lambda, &[]).0, "lambda");
}

#[test]
fn the_framework_attribute_holding_the_buffer_names_it_whatever_the_variable() {
    let f = "NixlKVManager.register_buffer_to_engine";
    let m = "sglang.srt.disaggregation.nixl.conn";
    for (holder, group) in [
        ("kv_args.kv_data_ptrs", "kv"),
        ("kv_args.aux_data_ptrs", "aux"),
        ("kv_args.state_data_ptrs", "state"),
        ("kv_caches_base_addr", "kv"),
    ] {
        let at = CallSite {
            holder: Some(holder),
            ..site(m, f, Some("aux_addrs"))
        };
        assert_eq!(name_call(&at, &[]).0, group, "{holder}");
    }
    // Every holder the Python side reads names a well-known kind.
    for (path, word) in BUFFER_HOLDERS {
        let at = CallSite {
            holder: Some(path),
            ..site("app", "setup", None)
        };
        assert_eq!(name_call(&at, &[]).1.as_str(), *word, "{path}");
    }
    assert!(RANK_HOLDERS.iter().all(|p| !p.is_empty() && !p.ends_with('.')));
}

#[test]
fn well_known_words_are_read_without_case_from_any_token() {
    use super::frameworks::kind_of_word as k;
    assert_eq!(k("KVCacheBuffers"), Some(Kind::Kv));
    assert_eq!(k("register_kvcaches"), Some(Kind::Kv));
    assert_eq!(k("my.KVS"), Some(Kind::Kv));
    assert_eq!(k("AUX_addrs"), Some(Kind::Aux));
    assert_eq!(k("States"), Some(Kind::State));
    assert_eq!(k("Staging-area"), Some(Kind::Custom("staging".into())));
    assert_eq!(k("kv2_addrs"), None);
    assert_eq!(k("kvcach"), None);
    assert_eq!(k("ümlaut_kv"), Some(Kind::Kv));
    assert_eq!(k(""), None);
}

#[test]
fn overrides_match_the_call_site_or_the_derived_name() {
    let o = parse_groups("__main__:setup=kvcache:kv, setup_buffers=meta").unwrap();
    assert_eq!(
        name_call(&site("__main__", "setup", None), &o),
        ("kvcache".into(), Kind::Kv)
    );
    assert_eq!(name_call(&site("__main__", "Setup.setup_buffers", None), &o).0, "meta");
    let err = parse_groups("setup=bad group").unwrap_err().to_string();
    assert!(err.contains(ENV_GROUPS) && err.contains("bad group"), "{err}");
    assert!(parse_groups("no-equals-sign").is_err());
}

#[test]
fn settings_default_to_record_loopback_and_no_capture() {
    let s = Settings::from_env(&env(&[])).unwrap();
    assert!(s.serve);
    assert_eq!(s.config.listen.to_string(), config::DEFAULT_LISTEN);
    assert_eq!(s.validation, Validation::Record);
    assert!(!s.capture);
    assert!(s.expect.is_none());
    let o = s.observe(&["sglang"]);
    assert_eq!(
        o.expect.iter().map(|e| e.group.as_str()).collect::<Vec<_>>(),
        ["kv", "aux"]
    );
    assert!(o.validate && !o.enforce);
    assert!(s.observe(&["numpy"]).expect.is_empty());
    assert_eq!(s.observe(&["vllm"]).expect.len(), 1);
}

#[test]
fn settings_name_the_variable_that_is_wrong() {
    for (k, v) in [
        (ENV_VALIDATE, "strict"),
        (ENV_CAPTURE, "maybe"),
        (ENV_MAX_GROUPS, "0"),
        (ENV_EXPECT, "kv:HBM"),
        (ENV_EXPECT, "k v"),
        (config::ENV_LISTEN, "localhost"),
        (ENV_BACKEND, "U-CX"),
        (ENV_INSTRUMENT, "maybe"),
        (config::ENV_LOG, "notalevel["),
    ] {
        let err = Settings::from_env(&env(&[(k, v)])).unwrap_err().to_string();
        assert!(err.contains(k), "{k}={v}: {err}");
    }
}

#[test]
fn words_are_case_insensitive_and_trimmed_and_the_cap_fits_expect() {
    let s = Settings::from_env(&env(&[
        (ENV_VALIDATE, "Enforce"),
        (ENV_CAPTURE, "ON"),
        (config::ENV_LISTEN, "OFF"),
        (ENV_EXPECT, "kv :VRAM, aux"),
    ]))
    .unwrap();
    assert_eq!(s.validation, Validation::Enforce);
    assert!(s.capture && !s.serve);
    assert_eq!(s.expect.unwrap()[0].group, "kv");
    let err = Settings::from_env(&env(&[(ENV_EXPECT, "kv,aux,state"), (ENV_MAX_GROUPS, "2")]))
        .unwrap_err()
        .to_string();
    assert!(err.contains(ENV_MAX_GROUPS), "{err}");
}

#[test]
fn expect_and_listen_off_parse() {
    let s = Settings::from_env(&env(&[
        (ENV_EXPECT, "kv:DRAM, aux,meta"),
        (config::ENV_LISTEN, LISTEN_OFF),
        (ENV_VALIDATE, "enforce"),
    ]))
    .unwrap();
    assert!(!s.serve);
    let e = s.expect.unwrap();
    assert_eq!(e[0].group.as_str(), "kv");
    assert_eq!(e[1].group.as_str(), "aux");
    assert_eq!(e[2].kind, Kind::Custom(BUFFER_KIND.into()));
    assert!(Settings::from_env(&env(&[(ENV_EXPECT, "none")]))
        .unwrap()
        .expect
        .unwrap()
        .is_empty());
}

#[test]
fn exceptions_map_into_the_closed_vocabulary() {
    assert_eq!(reason_of_exception("nixlBackendError"), Reason::NixlBackendError);
    assert_eq!(reason_of_exception("nixlInvalidParamError"), Reason::NixlInvalidParam);
    assert_eq!(reason_of_exception("nixlNotFoundError"), Reason::NixlNotFound);
    assert_eq!(reason_of_exception("IndexError"), Reason::InvalidArgument);
    assert_eq!(reason_of_exception("KeyError"), Reason::InvalidArgument);
    assert_eq!(reason_of_exception("MemoryError"), Reason::AllocationFailed);
    assert_eq!(reason_of_exception("SomethingNew"), Reason::Unknown);
}

#[test]
fn a_raised_status_is_named_as_the_interposer_names_it() {
    assert_eq!(
        status_of_exception("nixlInvalidParamError"),
        Some("NIXL_ERR_INVALID_PARAM")
    );
    assert_eq!(
        status_of_exception("nixlNotSupportedError"),
        Some("NIXL_ERR_NOT_SUPPORTED")
    );
    assert_eq!(status_of_exception("nixlCancelledError"), Some("NIXL_ERR_CANCELED"));
    // A C++ exception out of NIXL, or anything unknown: NIXL threw.
    assert_eq!(status_of_exception("RuntimeError"), Some("exception"));
    assert_eq!(status_of_exception("SomethingNew"), Some("exception"));
    // The API's own refusals, before NIXL is called: no NIXL call.
    assert_eq!(status_of_exception("ValueError"), None);
    assert_eq!(status_of_exception("TypeError"), None);
}

#[test]
fn a_data_path_exception_names_its_reason() {
    use super::reason_of_transfer_exception as r;
    assert_eq!(r("nixlRemoteDisconnectError"), Reason::PeerLost);
    assert_eq!(r("nixlMismatchError"), Reason::MetadataMismatch);
    assert_eq!(r("nixlNotFoundError"), Reason::NixlNotFound);
    assert_eq!(r("nixlBackendError"), Reason::NixlBackendError);
    assert_eq!(r("nixlRepostActiveError"), Reason::RepostActive);
    assert_eq!(r("nixlUnknownError"), Reason::NixlError);
    assert_eq!(r("KeyError"), Reason::InvalidArgument);
    assert_eq!(r("SomethingNew"), Reason::Unknown);
}

#[test]
fn an_explicit_group_is_checked_as_the_config_file_checks_it() {
    let err = check_group("kv cache", "kv").unwrap_err().to_string();
    assert_eq!(
        err,
        "config key `group name`: \"kv cache\" contains ' '; allowed: ASCII letters, digits, '_', '-' and '.'"
    );
    let err = check_group("kv_cache", "KV").unwrap_err().to_string();
    assert!(
        err.contains("`group kind`") && err.contains("\"KV\" contains 'K'; allowed: lowercase"),
        "{err}"
    );
    check_group("kv_cache", "kv").unwrap();
    for v in INSTRUMENT_WORDS {
        Settings::from_env(&env(&[(ENV_INSTRUMENT, v)])).unwrap();
    }
}

/// docs/python.md's settings table names exactly the variables the
/// instrumentation reads.
#[test]
fn python_settings_are_the_ones_read() {
    use super as i;
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/python.md");
    let section = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let rows: Vec<&str> = section
        .lines()
        .filter_map(|l| l.strip_prefix("| `NIXL_AGENT_"))
        .filter_map(|l| l.split('`').next())
        .collect();
    let mut documented: Vec<String> = rows.iter().map(|r| format!("NIXL_AGENT_{r}")).collect();
    documented.sort();
    let mut read_by_code = vec![
        i::ENV_INSTRUMENT.to_string(),
        config::ENV_LISTEN.to_string(),
        i::ENV_VALIDATE.to_string(),
        i::ENV_EXPECT.to_string(),
        i::ENV_GROUPS.to_string(),
        i::ENV_MAX_GROUPS.to_string(),
        i::ENV_CAPTURE.to_string(),
        i::ENV_TRANSPORTS.to_string(),
        i::ENV_BACKEND.to_string(),
        i::ENV_CALL_TIMEOUT.to_string(),
        i::ENV_TRANSFER_STALL_AFTER.to_string(),
        i::ENV_PEER_WAIT.to_string(),
        "NIXL_AGENT_LOG".to_string(),
        i::ENV_POD_DIR.to_string(),
        i::ENV_RANK_ENV.to_string(),
        i::ENV_TERMINATION_LOG.to_string(),
        i::ENV_RETENTION.to_string(),
    ];
    read_by_code.sort();
    assert_eq!(documented, read_by_code);
    assert!(section.contains(config::DEFAULT_LISTEN));
}

#[test]
fn the_peer_wait_is_a_duration_and_zero_never_waits() {
    let s = Settings::from_env(&env(&[])).unwrap();
    assert_eq!(s.peer_wait, nixl_agent_engine::observe::DEFAULT_PEER_WAIT);
    let s = Settings::from_env(&env(&[(ENV_PEER_WAIT, "0s")])).unwrap();
    assert_eq!(s.observe(&[]).peer_wait, std::time::Duration::ZERO);
    let e = Settings::from_env(&env(&[(ENV_PEER_WAIT, "soon")])).unwrap_err();
    assert!(e.to_string().contains(ENV_PEER_WAIT), "{e}");
}
