//! The Kubernetes manifests in `deploy/kubernetes/` and the server they run: every document
//! parses (and kubectl reads the same objects, where it is installed); the ConfigMap's
//! `enforce.yaml` meets the schema and `enforce serve` starts on it with the Deployment's
//! arguments and the Secret's keys; the probes ask routes the server answers on the port it
//! listens on; the grace period covers the server's drain; the pieces name each other.

use crate::config_schema::{schema_verdict, validator};
use crate::serve::{client, temp_dir, Proxy};
use crate::{repo, BIN};
use serde::Deserialize;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::process::Command;

fn manifests_dir() -> PathBuf {
    repo().join("deploy/kubernetes")
}

/// Every document of every `.yaml` file in `deploy/kubernetes/`, as JSON values.
fn objects() -> Vec<Value> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(manifests_dir())
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no manifests in deploy/kubernetes/");
    let mut objects = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        for document in serde_yaml_ng::Deserializer::from_str(&text) {
            let object = Value::deserialize(document)
                .unwrap_or_else(|e| panic!("{}: not YAML: {e}", file.display()));
            for field in ["/apiVersion", "/kind", "/metadata/name"] {
                assert!(
                    object.pointer(field).is_some_and(Value::is_string),
                    "{}: a document without {field}",
                    file.display()
                );
            }
            objects.push(object);
        }
    }
    objects
}

fn find<'a>(objects: &'a [Value], kind: &str, name: &str) -> &'a Value {
    objects
        .iter()
        .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no {kind} {name} in deploy/kubernetes/"))
}

fn int(value: &Value, pointer: &str) -> u64 {
    value
        .pointer(pointer)
        .and_then(Value::as_u64)
        .unwrap_or_else(|| panic!("{pointer} is not a whole number"))
}

/// The proxy's Deployment, its one container, the ConfigMap's `enforce.yaml` as text and as
/// a value.
struct Proxied<'a> {
    deployment: &'a Value,
    container: &'a Value,
    config_text: String,
    config: Value,
}

fn proxied(objects: &[Value]) -> Proxied<'_> {
    let deployment = find(objects, "Deployment", "enforce");
    let containers = deployment
        .pointer("/spec/template/spec/containers")
        .and_then(Value::as_array)
        .expect("containers");
    assert_eq!(containers.len(), 1, "one container: the proxy");
    let config_map = find(objects, "ConfigMap", "enforce-config");
    let config_text = config_map["data"]["enforce.yaml"]
        .as_str()
        .expect("the ConfigMap holds enforce.yaml")
        .to_string();
    let config: Value = serde_yaml_ng::from_str(&config_text).expect("enforce.yaml is YAML");
    Proxied {
        deployment,
        container: &containers[0],
        config_text,
        config,
    }
}

/// The container port a probe or Service names (by name or number).
fn container_port(container: &Value, port: &Value) -> u64 {
    if let Some(number) = port.as_u64() {
        return number;
    }
    container["ports"]
        .as_array()
        .and_then(|ports| ports.iter().find(|p| p["name"] == *port))
        .and_then(|p| p["containerPort"].as_u64())
        .unwrap_or_else(|| panic!("the container has no port {port}"))
}

/// The port of `server.listen` (`host:port`).
fn listen_port(config: &Value) -> u64 {
    let listen = config["server"]["listen"]
        .as_str()
        .expect("server.listen is set");
    let (_, port) = listen.rsplit_once(':').expect("server.listen has a port");
    port.parse().expect("a port number")
}

#[test]
fn every_manifest_parses_and_kubectl_reads_the_same_objects() {
    let objects = objects();
    let mut ours: Vec<String> = objects
        .iter()
        .map(|o| {
            let kind = o["kind"].as_str().unwrap().to_lowercase();
            format!("{kind}/{}", o["metadata"]["name"].as_str().unwrap())
        })
        .collect();
    ours.sort();
    // Without a cluster `kubectl apply --dry-run=client` cannot run (it asks the API server
    // for its types); `label --local` reads and decodes every document the same way offline.
    let kubeconfig = temp_dir("kubeconfig").join("config");
    std::fs::write(&kubeconfig, "").unwrap();
    let out = match Command::new("kubectl")
        .args(["label", "--local", "--dry-run=client", "-o", "name", "-f"])
        .arg(manifests_dir())
        .arg("enforce.checked=yes")
        .env("KUBECONFIG", &kubeconfig)
        .output()
    {
        Ok(out) => out,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            println!("skipped: kubectl not found");
            return;
        }
        Err(e) => panic!("kubectl: {e}"),
    };
    assert!(
        out.status.success(),
        "kubectl refused the manifests: {}",
        crate::text(&out.stderr)
    );
    // kubectl names `deployment.apps/enforce`; the group is not in `kind`.
    let mut theirs: Vec<String> = crate::text(&out.stdout)
        .lines()
        .map(|line| {
            let (kind, name) = line.split_once('/').expect("kind/name");
            let kind = kind.split('.').next().unwrap_or(kind);
            format!("{kind}/{name}")
        })
        .collect();
    theirs.sort();
    assert_eq!(theirs, ours);
}

#[test]
fn probes_ports_and_grace_period_match_the_server_configuration() {
    let objects = objects();
    let Proxied {
        deployment,
        container,
        config,
        ..
    } = proxied(&objects);
    let port = listen_port(&config);
    for probe in ["readinessProbe", "livenessProbe"] {
        let get = &container[probe]["httpGet"];
        assert_eq!(get["path"], "/healthz", "{probe}");
        assert_eq!(container_port(container, &get["port"]), port, "{probe}");
    }
    // The grace period covers the preStop sleep and the server's drain, with room to spare.
    let grace = config["server"]["shutdown_grace_secs"]
        .as_f64()
        .expect("server.shutdown_grace_secs is set");
    let pre_stop = int(container, "/lifecycle/preStop/sleep/seconds") as f64;
    let termination = int(
        deployment,
        "/spec/template/spec/terminationGracePeriodSeconds",
    ) as f64;
    assert!(
        termination > pre_stop + grace,
        "terminationGracePeriodSeconds {termination} <= preStop {pre_stop} + shutdown_grace_secs {grace}"
    );
    // A draining pod (listener closed, probes refused) is not restarted before it is done.
    let liveness = &container["livenessProbe"];
    let tolerated = int(liveness, "/periodSeconds") * int(liveness, "/failureThreshold");
    assert!(
        tolerated as f64 >= pre_stop + grace,
        "liveness gives up after {tolerated} s"
    );

    let service = find(&objects, "Service", "enforce");
    assert_eq!(
        service["spec"]["selector"],
        deployment["spec"]["template"]["metadata"]["labels"]
    );
    let target = &service["spec"]["ports"][0]["targetPort"];
    assert_eq!(container_port(container, target), port);

    let hpa = find(&objects, "HorizontalPodAutoscaler", "enforce");
    assert_eq!(hpa["spec"]["scaleTargetRef"]["kind"], "Deployment");
    assert_eq!(hpa["spec"]["scaleTargetRef"]["name"], "enforce");
    assert_eq!(hpa["spec"]["metrics"][0]["resource"]["name"], "cpu");
    // Utilisation is measured against the request: without one the HPA cannot scale.
    assert!(container["resources"]["requests"]["cpu"].is_string());

    // server.state.redis names the Redis Service and its port.
    let redis = config["server"]["state"]["redis"].as_str().expect("redis");
    let host_port = redis
        .trim_start_matches("redis://")
        .split('/')
        .next()
        .unwrap();
    let redis_service = find(&objects, "Service", "enforce-redis");
    let (host, redis_port) = host_port.split_once(':').unwrap();
    assert_eq!(host, "enforce-redis");
    assert_eq!(
        redis_port,
        redis_service["spec"]["ports"][0]["port"].to_string()
    );
    let redis_deployment = find(&objects, "Deployment", "enforce-redis");
    assert_eq!(
        redis_service["spec"]["selector"],
        redis_deployment["spec"]["template"]["metadata"]["labels"]
    );
}

/// The Deployment's `--config` path is the ConfigMap's `enforce.yaml` where it is mounted.
fn config_argument(proxied: &Proxied<'_>) -> usize {
    let args = proxied.container["args"].as_array().expect("args");
    let at = args
        .iter()
        .position(|a| a == "--config")
        .expect("args pass --config");
    let mounts = proxied.container["volumeMounts"].as_array().unwrap();
    let volumes = proxied.deployment["spec"]["template"]["spec"]["volumes"]
        .as_array()
        .unwrap();
    let config_volume = volumes
        .iter()
        .find(|v| v["configMap"]["name"] == "enforce-config")
        .expect("a volume of the ConfigMap");
    let mount = mounts
        .iter()
        .find(|m| m["name"] == config_volume["name"])
        .expect("the ConfigMap is mounted");
    let expected = format!("{}/enforce.yaml", mount["mountPath"].as_str().unwrap());
    assert_eq!(args[at + 1], expected.as_str());
    at
}

/// The container's environment as the pod gets it: `env` values and every key of the
/// Secrets in `envFrom`.
fn environment(objects: &[Value], container: &Value) -> BTreeMap<String, String> {
    let mut env = BTreeMap::new();
    for from in container["envFrom"].as_array().into_iter().flatten() {
        let name = from["secretRef"]["name"]
            .as_str()
            .expect("envFrom a Secret");
        let secret = find(objects, "Secret", name);
        for (key, value) in secret["stringData"].as_object().expect("stringData") {
            env.insert(key.clone(), value.as_str().unwrap().to_string());
        }
    }
    for var in container["env"].as_array().into_iter().flatten() {
        let value = var["value"].as_str().expect("plain env values");
        env.insert(var["name"].as_str().unwrap().to_string(), value.to_string());
    }
    env
}

/// The variables `enforce serve` reads whatever its file says.
fn read_by_the_binary() -> BTreeSet<&'static str> {
    BTreeSet::from([
        enforce_server::API_KEYS_ENV,
        enforce_server::OTLP_ENDPOINT_ENV,
        enforce_server::OTLP_TRACES_ENDPOINT_ENV,
        enforce_server::OTLP_LOGS_ENDPOINT_ENV,
        enforce_server::OTEL_SERVICE_NAME_ENV,
        enforce_server::OTEL_SDK_DISABLED_ENV,
        "OTEL_EXPORTER_OTLP_HEADERS",
        "ENFORCE_CONFIG",
        "RUST_LOG",
    ])
}

#[tokio::test]
async fn serve_starts_on_the_config_map_with_the_deployment_s_arguments_and_keys() {
    let objects = objects();
    let proxied = proxied(&objects);
    schema_verdict(&validator(), &proxied.config_text)
        .unwrap_or_else(|e| panic!("the ConfigMap's enforce.yaml breaks the schema:\n{e}"));

    // Every variable the pod gets is one the file or the binary reads.
    let env = environment(&objects, proxied.container);
    for name in env.keys() {
        let in_file = proxied.config_text.contains(&format!("${{{name}")) || {
            let named = Value::String(name.clone());
            let mut found = false;
            walk(&proxied.config, &mut |key, value| {
                found |= key.ends_with("key_env") && *value == named;
            });
            found
        };
        assert!(
            in_file || read_by_the_binary().contains(name.as_str()),
            "the pod gets {name}, which neither enforce.yaml nor enforce serve reads"
        );
    }

    // The Deployment's own arguments, with the file where this test put it, and the flags
    // `enforce serve --help` knows.
    let args: Vec<String> = proxied.container["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap().to_string())
        .collect();
    assert_eq!(proxied.container["command"][0], "enforce");
    assert_eq!(args[0], "serve");
    let help = Command::new(BIN)
        .args(["serve", "--help"])
        .output()
        .unwrap();
    let help = crate::text(&help.stdout);
    for flag in args.iter().filter(|a| a.starts_with("--")) {
        assert!(help.contains(flag.as_str()), "enforce serve has no {flag}");
    }
    let at = config_argument(&proxied) - 1;
    let dir = temp_dir("kubernetes");
    let file = dir.join("enforce.yaml");
    std::fs::write(&file, &proxied.config_text).unwrap();
    let audit = dir.join("audit.jsonl");
    let mut serve_args: Vec<&str> = args[1..].iter().map(String::as_str).collect();
    serve_args[at + 1] = file.to_str().unwrap();
    serve_args.extend(["--audit-log", audit.to_str().unwrap()]);

    let proxy = Proxy::start_with_env(&serve_args, env.clone());
    let http = client();
    // The proxy names its OpenAI base URL; the probes ask from the root.
    let root = proxy.base.trim_end_matches("/v1");
    for probe in ["readinessProbe", "livenessProbe"] {
        let path = proxied.container[probe]["httpGet"]["path"]
            .as_str()
            .unwrap();
        let response = http.get(format!("{root}{path}")).send().await.unwrap();
        assert_eq!(response.status(), 200, "{probe} {path}");
    }
    // The Secret's client key opens the API; no key does not.
    let key = env[enforce_server::API_KEYS_ENV].split(',').next().unwrap();
    let models = http.get(proxy.url("/models")).bearer_auth(key);
    let models: Value = models.send().await.unwrap().json().await.unwrap();
    assert_eq!(models["data"][0]["id"], proxied.config["models"][0]["id"]);
    let refused = http.get(proxy.url("/models")).send().await.unwrap();
    assert_eq!(refused.status(), 401);
    assert!(proxy.terminate().success(), "SIGTERM drains and exits 0");
}

/// Calls `visit` with every key and value of a JSON tree.
fn walk(value: &Value, visit: &mut impl FnMut(&str, &Value)) {
    match value {
        Value::Object(map) => {
            for (key, inner) in map {
                visit(key, inner);
                walk(inner, visit);
            }
        }
        Value::Array(items) => items.iter().for_each(|item| walk(item, visit)),
        _ => {}
    }
}

#[test]
fn the_request_rate_metric_in_the_operations_guide_is_the_servers() {
    let guide = std::fs::read_to_string(repo().join("docs/operations.md")).unwrap();
    let metrics =
        std::fs::read_to_string(repo().join("crates/enforce-server/src/metrics.rs")).unwrap();
    let rule = guide
        .split("seriesQuery: '")
        .nth(1)
        .expect("docs/operations.md has a Prometheus Adapter rule");
    let series = rule.split('{').next().unwrap();
    assert_eq!(series, "enforce_requests_total");
    assert!(metrics.contains(&format!("\"{series}\"")));
}
