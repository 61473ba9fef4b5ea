//! The Kubernetes manifests in deploy/: the core objects validate against
//! the Kubernetes schemas (kubernetes-validate from PyPI, in .deps/venv),
//! the PrometheusRule carries exactly the rules of alerts/ (and promtool
//! accepts them), and every port, path and flag is one the binary has.

use crate::support;
use serde_json::Value;
use std::path::PathBuf;
use std::process::Command;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Every document of a YAML file, as JSON (PyYAML from the venv).
fn documents(rel: &str) -> Vec<Value> {
    let out = Command::new(support::venv_bin("python"))
        .args([
            "-c",
            "import json, sys, yaml; print(json.dumps([d for d in yaml.safe_load_all(open(sys.argv[1])) if d]))",
        ])
        .arg(repo().join(rel))
        .output()
        .unwrap();
    assert!(out.status.success(), "{rel}: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

fn yaml(rel: &str) -> Value {
    documents(rel).into_iter().next().unwrap()
}

fn containers(doc: &Value) -> Vec<Value> {
    doc["spec"]["template"]["spec"]["containers"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

fn find<'a>(docs: &'a [Value], kind: &str) -> &'a Value {
    docs.iter()
        .find(|d| d["kind"] == kind)
        .unwrap_or_else(|| panic!("no {kind}"))
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .map(|a| a.iter().filter_map(|x| x.as_str().map(String::from)).collect())
        .unwrap_or_default()
}

fn flag<'a>(args: &'a [String], name: &str) -> Option<&'a str> {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .map(String::as_str)
}

#[test]
fn core_objects_validate_against_the_kubernetes_schemas() {
    for file in ["deploy/serving.yaml", "deploy/canary.yaml"] {
        let out = Command::new(support::venv_bin("kubernetes-validate"))
            .arg("--strict")
            .arg(repo().join(file))
            .output()
            .unwrap();
        let said = String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{file}: {said}");
        for d in documents(file) {
            let resource = format!(
                "{}/{}",
                d["kind"].as_str().unwrap().to_lowercase(),
                d["metadata"]["name"].as_str().unwrap()
            );
            assert!(
                said.contains(&format!("passed for resource {resource}")),
                "{file}: {resource}: {said}"
            );
        }
    }
}

#[test]
fn the_prometheus_rule_is_the_rules_of_alerts_and_promtool_accepts_it() {
    let docs = documents("deploy/monitoring.yaml");
    let rule = find(&docs, "PrometheusRule");
    let shipped = yaml("alerts/nixl-agent.rules.yml");
    assert_eq!(
        rule["spec"]["groups"], shipped["groups"],
        "deploy/monitoring.yaml's PrometheusRule differs from alerts/nixl-agent.rules.yml: copy its groups"
    );
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("rules.json");
    std::fs::write(&file, serde_json::json!({"groups": rule["spec"]["groups"]}).to_string()).unwrap();
    let out = Command::new(support::promtool())
        .args(["check", "rules"])
        .arg(&file)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stdout));
    // Serving pods and canaries are scraped under jobs of their own; the
    // serving job is the one the rules select by default.
    let jobs: Vec<&str> = docs
        .iter()
        .filter(|d| d["kind"] == "PodMonitor")
        .map(|d| d["spec"]["selector"]["matchLabels"]["nixl-agent/job"].as_str().unwrap())
        .collect();
    assert_eq!(jobs, ["nixl-agent", "nixl-agent-canary"]);
    assert_eq!(nixl_agent::cli::DEFAULT_SELECTOR, format!("job=\"{}\"", jobs[0]));
    for d in docs.iter().filter(|d| d["kind"] == "PodMonitor") {
        let ep = &d["spec"]["podMetricsEndpoints"][0];
        assert_eq!(ep["port"], "metrics");
        assert_eq!(ep["path"], "/metrics");
        assert_eq!(d["spec"]["jobLabel"], "nixl-agent/job");
    }
}

/// The sidecar's and the canary's flags, ports, probe paths and config are
/// ones the binary accepts.
#[test]
fn ports_paths_flags_and_config_are_the_binarys() {
    let endpoints: Vec<&str> = nixl_agent::endpoints::ENDPOINTS.iter().map(|(p, _)| *p).collect();
    let serving = documents("deploy/serving.yaml");
    let canary = documents("deploy/canary.yaml");
    let mut seen = 0;
    for doc in serving
        .iter()
        .chain(canary.iter())
        .filter(|d| d["kind"] == "Deployment" || d["kind"] == "DaemonSet")
    {
        let pod_labels = &doc["spec"]["template"]["metadata"]["labels"];
        assert!(pod_labels["nixl-agent/job"].is_string(), "scraped under a job label");
        for c in containers(doc).iter().filter(|c| c["name"] == "nixl-agent") {
            seen += 1;
            let args = strings(&c["args"]);
            let sub = args[0].as_str();
            assert!(["run", "pod"].contains(&sub), "{args:?}");
            let help = support::binary().args([sub, "--help"]).output().unwrap();
            let help = String::from_utf8_lossy(&help.stdout).to_string();
            for a in args.iter().filter(|a| a.starts_with("--")) {
                assert!(help.contains(&format!("{a} ")), "`nixl-agent {sub}` has no {a}");
            }
            let listen: std::net::SocketAddr = flag(&args, "--listen").unwrap().parse().unwrap();
            assert_eq!(c["ports"][0]["name"], "metrics");
            assert_eq!(c["ports"][0]["containerPort"].as_u64(), Some(u64::from(listen.port())));
            for (probe, path) in [("readinessProbe", "/readyz"), ("livenessProbe", "/livez")] {
                assert_eq!(c[probe]["httpGet"]["path"], path);
                assert_eq!(c[probe]["httpGet"]["port"], "metrics");
                assert!(endpoints.contains(&path));
            }
            assert!(endpoints.contains(&"/metrics"));
            let mounts: Vec<String> = c["volumeMounts"]
                .as_array()
                .unwrap()
                .iter()
                .map(|m| m["mountPath"].as_str().unwrap().to_string())
                .collect();
            if let Some(dir) = flag(&args, "--dir") {
                assert!(mounts.iter().any(|m| m == dir), "--dir {dir} is mounted");
                // The serving container publishes where the sidecar reads.
                let app = containers(doc).into_iter().find(|c| c["name"] != "nixl-agent").unwrap();
                let env = app["env"].as_array().unwrap();
                let published = env.iter().find(|e| e["name"] == nixl_agent::env::ENV_POD_DIR).unwrap();
                assert_eq!(published["value"], dir);
                // Ranks are claimed, never assumed: no rank variable to set
                // (and none torch or vLLM would act on).
                assert!(
                    !env.iter().any(|e| e["name"] == nixl_agent::env::LOCAL_RANK
                        || e["name"] == "RANK"
                        || e["name"] == nixl_agent::env::ENV_RANK_ENV),
                    "deploy/ sets a rank variable: {env:?}"
                );
                assert!(strings(&app["securityContext"]["capabilities"]["add"]).contains(&"IPC_LOCK".to_string()));
                // NIXL's configuration file is one this container can read
                // whatever user it runs as: named outright, so that NIXL
                // never looks up $HOME/.nixl.cfg in a HOME the user may not
                // search (reason nixl_config).
                let config = env
                    .iter()
                    .find(|e| e["name"] == "NIXL_CONFIG_FILE")
                    .expect("NIXL_CONFIG_FILE set");
                let file = config["value"].as_str().unwrap();
                assert!(
                    std::fs::metadata(file).is_ok_and(|m| !m.is_dir()),
                    "{file}: a file every image has"
                );
                assert!(app["volumeMounts"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|m| m["mountPath"] == "/dev/shm"));
                let ranks: u32 = flag(&args, "--ranks").unwrap().parse().unwrap();
                assert!(ranks >= 1);
                // A hung rank restarts the container it runs in: the
                // serving container's probe, on the sidecar's port (the
                // pod's containers share its network; a named port would
                // be the serving container's own).
                let probe = &app["livenessProbe"]["httpGet"];
                assert_eq!(probe["path"], nixl_agent::endpoints::LIVEZ_RANKS_PATH, "{app}");
                assert_eq!(probe["port"].as_u64(), Some(u64::from(listen.port())), "{app}");
                assert!(nixl_agent::endpoints::POD_ENDPOINTS
                    .iter()
                    .any(|(p, _)| *p == nixl_agent::endpoints::LIVEZ_RANKS_PATH));
                assert_eq!(app["terminationMessagePath"], "/dev/termination-log");
            }
            if let Some(config) = flag(&args, "--config") {
                assert!(
                    mounts.iter().any(|m| config.starts_with(m.as_str())),
                    "--config {config} is mounted"
                );
                let cm = find(&canary, "ConfigMap");
                let name = std::path::Path::new(config).file_name().unwrap().to_str().unwrap();
                let text = cm["data"][name].as_str().unwrap();
                let cfg = nixl_agent::Config::from_toml(text, std::path::Path::new(name)).unwrap();
                cfg.validate().unwrap();
                assert!(cfg.probe_interval.is_some(), "the canary re-registers");
                assert!(strings(&c["securityContext"]["capabilities"]["add"]).contains(&"IPC_LOCK".to_string()));
            }
        }
    }
    assert_eq!(seen, 2, "the sidecar and the canary");
}
