use super::*;

#[test]
fn key_list_refuses_blanks() {
    assert_eq!(parse_key_list(" a ,b").unwrap(), vec!["a", "b"]);
    assert_eq!(parse_key_list("").unwrap_err().position, 1);
    assert_eq!(parse_key_list(" a, ,b").unwrap_err().position, 2);
    assert_eq!(parse_key_list("a,").unwrap_err().position, 2);
}

#[test]
fn zero_limits_and_timeouts_are_refused() {
    for (text, field) in [
        (r#"{"max_body_bytes":0}"#, "max_body_bytes"),
        (
            r#"{"max_body_bytes_in_flight":0}"#,
            "max_body_bytes_in_flight",
        ),
        (r#"{"request_timeout_secs":0}"#, "request_timeout_secs"),
        (r#"{"request_timeout_secs":0.0}"#, "request_timeout_secs"),
    ] {
        let section: ServerSection = serde_json::from_str(text).unwrap();
        assert_eq!(section.to_config().unwrap_err().field, field, "{text}");
    }
}

#[test]
fn one_key_in_two_entries_is_refused() {
    let var = |name: &str| (name == "LIMITED").then(|| " k1 ".to_string());
    for text in [
        r#"{"api_keys":["k1", {"key":"k1","models":["m"]}]}"#,
        r#"{"api_keys":[{"key":"k1","models":["m"]}, "k1"]}"#,
        r#"{"api_keys":["k1", {"key_env":"LIMITED","models":["m"]}]}"#,
        r#"{"api_keys":["k0", "k1", " k1"]}"#,
    ] {
        let section: ServerSection = serde_json::from_str(text).unwrap();
        let error = section.keys(var).unwrap_err();
        assert!(
            error.message.contains("the same key as api_keys["),
            "{text}: {error}"
        );
        assert!(
            !error.message.contains("k1"),
            "the key is never shown: {error}"
        );
    }
    let distinct: ServerSection =
        serde_json::from_str(r#"{"api_keys":["k1", {"key":"k2","models":["m"]}]}"#).unwrap();
    assert!(distinct.keys(var).is_ok());
}

#[test]
fn section_rejects_bad_values() {
    let bad: ServerSection = serde_json::from_str(r#"{"audit_fsync":"sometimes"}"#).unwrap();
    assert_eq!(bad.to_config().unwrap_err().field, "audit_fsync");
    let bad: ServerSection = serde_json::from_str(r#"{"request_timeout_secs":-1}"#).unwrap();
    assert!(bad.to_config().is_err());
    assert!(serde_json::from_str::<ServerSection>(r#"{"nope":1}"#).is_err());
    let ok = ServerSection::default().to_config().unwrap();
    assert_eq!(ok.max_body_bytes, 10 * 1024 * 1024);
}

pub(super) fn vars(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
    let pairs: Vec<(String, String)> = pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    move |name| {
        pairs
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
    }
}

#[test]
fn state_section_checks_the_redis_url() {
    let state = |json: &str| {
        serde_json::from_str::<ServerSection>(&format!(r#"{{"state": {json}}}"#))
            .unwrap()
            .to_config()
    };
    let ok = state(r#"{"redis": "redis://127.0.0.1:6379/2", "namespace": "prod"}"#)
        .unwrap()
        .state
        .unwrap();
    assert_eq!(ok.namespace, "prod");
    assert_eq!(ok.concurrency, ConcurrencyScope::Local);
    assert_eq!(ok.timeout, Duration::from_millis(250));
    assert!(state(r#"{"redis": "redis://user:pw@cache/0"}"#).is_ok());
    for (bad, says) in [
        (
            r#"{"redis": "http://127.0.0.1:6379"}"#,
            "not a redis:// URL",
        ),
        (r#"{"redis": "redis://:6379"}"#, "names no host"),
        (r#"{"redis": "redis://host:99999"}"#, "port"),
        (r#"{"redis": "redis://host/db0"}"#, "database"),
        (r#"{}"#, "give the Redis URL"),
        (r#"{"redis": "redis://h", "namespace": "a:b"}"#, "namespace"),
    ] {
        let e = state(bad).unwrap_err();
        assert!(e.field.starts_with("state."), "{bad}: {e}");
        assert!(e.to_string().contains(says), "{bad}: {e}");
    }
    assert!(ServerSection::default()
        .to_config()
        .unwrap()
        .state
        .is_none());
}

#[test]
fn api_keys_take_plain_keys_and_limited_entries() {
    let section: ServerSection = serde_json::from_value(serde_json::json!({"api_keys": [
        "plain-1",
        {"name": "app", "key_env": "APP_KEY", "models": ["m"]},
        {"key": " inline ", "profiles": ["p"]},
        {"name": "unlimited", "key": "k-all"},
    ]}))
    .unwrap();
    let env = vars(&[("APP_KEY", "from-env")]);
    let (plain, grants) = section.keys(&env).unwrap();
    assert_eq!(plain, ["plain-1"]);
    assert_eq!(grants.len(), 3);
    assert_eq!(
        (grants[0].name.as_str(), grants[0].key.as_str()),
        ("app", "from-env")
    );
    assert!(grants[0].allows_model("m") && !grants[0].allows_model("n"));
    assert!(grants[0].allows_profile("anything"));
    assert_eq!(
        (grants[1].name.as_str(), grants[1].key.as_str()),
        ("api_keys[2]", "inline")
    );
    assert!(grants[1].allows_model("n") && !grants[1].allows_profile("q"));
    // A named key without limits is kept for its name (the audit names it).
    assert_eq!(grants[2].name, "unlimited");
    assert!(grants[0].is_limited() && grants[1].is_limited() && !grants[2].is_limited());
    assert!(grants[2].allows_model("n") && grants[2].allows_profile("q"));
    assert!(
        !format!("{:?}", grants[0]).contains("from-env"),
        "no key in Debug"
    );
    for (entry, field, says) in [
        (
            serde_json::json!({"key_env": "UNSET"}),
            "api_keys[0].key_env",
            "`UNSET` is not set",
        ),
        (
            serde_json::json!({"key": "a", "key_env": "APP_KEY"}),
            "api_keys[0]",
            "exactly one",
        ),
        (
            serde_json::json!({"models": ["m"]}),
            "api_keys[0]",
            "exactly one",
        ),
        (
            serde_json::json!({"key": "a", "models": [" "]}),
            "api_keys[0].models[0]",
            "empty",
        ),
        (serde_json::json!(" "), "api_keys[0]", "empty"),
    ] {
        let section: ServerSection =
            serde_json::from_value(serde_json::json!({"api_keys": [entry]})).unwrap();
        let e = section.keys(&env).unwrap_err();
        assert_eq!(e.field, field, "{e}");
        assert!(e.message.contains(says), "{e}");
    }
    let typo = serde_json::from_value::<ServerSection>(
        serde_json::json!({"api_keys": [{"key": "a", "model": ["m"]}]}),
    );
    assert!(typo
        .unwrap_err()
        .to_string()
        .contains("unknown field `model`"));
}

#[test]
fn options_parse_from_config_words() {
    let o: ModelOptions =
        serde_json::from_str(r#"{"on_unresolved":"error","status_events":true}"#).unwrap();
    assert_eq!(o.on_unresolved, FailureResponse::Error);
    assert_eq!(o.on_unavailable, FailureResponse::Return);
    assert!(o.status_events);
}
