//! End-to-end: the `enforce` binary with the example and test plugins built by
//! `cargo xtask build-plugins` (see `enforce_testkit::plugins` for how the libraries are found).

use enforce_testkit::plugins::dir_with;
use serde_json::Value;
use std::path::Path;
use std::process::{Command, Output};

const GOOD: [&str; 3] = [
    "enforce-plugin-german-prose",
    "enforce-plugin-domain-rules",
    "enforce-test-plugin-misbehaving",
];

/// `enforce ARGS` in `cwd`, isolated from the user's plugin directories.
fn enforce(cwd: &Path, args: &[&str], plugin_path: Option<&Path>) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_enforce"));
    cmd.args(args)
        .current_dir(cwd)
        .env("HOME", cwd)
        .env("XDG_DATA_HOME", cwd.join("xdg"))
        .env_remove("ENFORCE_PLUGIN_PATH")
        .env("NO_COLOR", "1");
    if let Some(path) = plugin_path {
        cmd.env("ENFORCE_PLUGIN_PATH", path);
    }
    cmd.output().expect("run enforce")
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn json(out: &Output) -> Value {
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}\nstderr: {}", stdout(out), stderr(out)))
}

/// A directory with the good plugins plus every kind of bad file.
fn mixed_dir() -> tempfile::TempDir {
    let mut packages = GOOD.to_vec();
    packages.extend([
        "enforce-test-plugin-no-root-module",
        "enforce-test-plugin-future-interface",
        "enforce-test-plugin-layout-mismatch",
        "enforce-test-plugin-init-error",
    ]);
    let dir = dir_with(&packages);
    let ext = std::env::consts::DLL_EXTENSION;
    std::fs::write(
        dir.path().join(format!("x.{ext}")),
        "a text file, not a library\n",
    )
    .expect("write x.so");
    dir
}

#[test]
fn plugins_lists_good_plugins_and_says_why_each_bad_file_failed() {
    let plugins = mixed_dir();
    let work = tempfile::tempdir().unwrap();
    let dir = plugins.path().to_str().unwrap();

    let out = enforce(
        work.path(),
        &["plugins", "--dir", dir, "--format", "json"],
        None,
    );
    assert_eq!(
        out.status.code(),
        Some(1),
        "a failed library makes the exit code 1"
    );
    let doc = json(&out);
    let entries = doc["plugins"].as_array().unwrap();
    let by_file = |needle: &str| -> &Value {
        entries
            .iter()
            .find(|e| e["file"].as_str().unwrap().contains(needle))
            .unwrap_or_else(|| panic!("no entry for {needle}: {doc:#}"))
    };
    let german = by_file("german_prose");
    assert_eq!(german["status"], "loaded");
    assert_eq!(german["name"], "german-prose");
    assert_eq!(german["version"], "0.1.0");
    assert_eq!(german["validators"][0]["name"], "german_prose");
    assert_eq!(
        by_file("domain_rules")["validators"][0]["name"],
        "domain_rules"
    );
    assert_eq!(by_file("misbehaving")["status"], "loaded");

    let ext = std::env::consts::DLL_EXTENSION;
    for (file, kind) in [
        (format!("/x.{ext}"), "not_a_library"),
        ("no_root_module".to_string(), "missing_root_module"),
        ("future_interface".to_string(), "wrong_interface_version"),
        ("layout_mismatch".to_string(), "layout_mismatch"),
        ("init_error".to_string(), "init_error"),
    ] {
        let entry = by_file(&file);
        assert_eq!(entry["status"], "error", "{entry}");
        assert_eq!(entry["error"]["kind"], kind, "{entry}");
    }
    assert_eq!(entries.len(), 8);

    // The text listing says the same in words.
    let out = enforce(work.path(), &["plugins", "--dir", dir], None);
    assert_eq!(out.status.code(), Some(1));
    let text = stdout(&out);
    assert!(
        text.contains("plugin german-prose 0.1.0 (interface 1.1.0)"),
        "{text}"
    );
    assert!(text.contains("validator domain_rules:"), "{text}");
    assert!(
        text.contains("error[not_a_library]: not a loadable library"),
        "{text}"
    );
    assert!(
        text.contains("error[missing_root_module]: missing root module"),
        "{text}"
    );
    assert!(
        text.contains("built for interface 2.0.0, this host supports 1.1.0"),
        "{text}"
    );
    assert!(
        text.contains("expected PluginModule; found WrongModule"),
        "{text}"
    );
    assert!(text.contains("refuses to initialise"), "{text}");
}

#[test]
fn plugins_with_only_good_libraries_exits_zero_and_empty_dirs_are_fine() {
    let plugins = dir_with(&GOOD);
    let work = tempfile::tempdir().unwrap();
    let out = enforce(
        work.path(),
        &["plugins", "--dir", plugins.path().to_str().unwrap()],
        None,
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let out = enforce(work.path(), &["plugins"], None);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        stdout(&out).contains("no plugin libraries found"),
        "{}",
        stdout(&out)
    );
}

#[test]
fn validators_lists_built_ins_and_plugin_validators_from_the_environment() {
    let plugins = dir_with(&GOOD);
    let work = tempfile::tempdir().unwrap();
    let out = enforce(
        work.path(),
        &["validators", "--format", "json"],
        Some(plugins.path()),
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let doc = json(&out);
    let list = doc["validators"].as_array().unwrap();
    let source_of = |name: &str| {
        list.iter()
            .find(|v| v["name"] == name)
            .map(|v| v["source"].as_str().unwrap().to_string())
    };
    assert_eq!(source_of("step_marker").as_deref(), Some("built-in"));
    assert_eq!(source_of("german_prose").as_deref(), Some("plugin"));
    assert_eq!(source_of("domain_rules").as_deref(), Some("plugin"));
    let prose = list.iter().find(|v| v["name"] == "german_prose").unwrap();
    assert_eq!(prose["plugin"]["name"], "german-prose");

    // Without the plugin path only built-ins remain.
    let out = enforce(work.path(), &["validators"], None);
    let text = stdout(&out);
    assert!(text.contains("step_marker"), "{text}");
    assert!(!text.contains("german_prose"), "{text}");
}

const CONFIG: &str = r#"
plugin_dirs: [plugins]
validators:
  prose:
    type: german_prose
  house_rules:
    type: domain_rules
    rules:
      - code: NO_GUARANTEE
        forbidden: [garantiert]
        replacement: voraussichtlich
profiles:
  letter:
    validators: [prose, house_rules]
  crashy:
    validators: [test_panic, prose]
"#;

/// A project directory with `enforce.yaml`, its `plugins/` (good and bad libraries) and inputs.
fn project() -> tempfile::TempDir {
    let project = tempfile::tempdir().unwrap();
    let plugins = mixed_dir();
    let target = project.path().join("plugins");
    std::fs::create_dir(&target).unwrap();
    for entry in std::fs::read_dir(plugins.path()).unwrap() {
        let path = entry.unwrap().path();
        std::fs::copy(&path, target.join(path.file_name().unwrap())).unwrap();
    }
    std::fs::write(project.path().join("enforce.yaml"), CONFIG).unwrap();
    std::fs::write(
        project.path().join("bad.md"),
        "Sehr geehrte Damen und Herren,\nwir danken Ihnen. Das Ergebnis: 8/10, garantiert.\n",
    )
    .unwrap();
    std::fs::write(
        project.path().join("good.md"),
        "Das Unternehmen dankt dem Team für die Zusammenarbeit.\n",
    )
    .unwrap();
    std::fs::write(project.path().join("panic.md"), "PANIC, bitte.\n").unwrap();
    project
}

#[test]
fn check_uses_plugin_validators_in_a_profile() {
    let project = project();
    let dir = project.path();

    let out = enforce(
        dir,
        &["check", "--profile", "letter", "--format", "json", "bad.md"],
        None,
    );
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let doc = json(&out);
    let issues = doc["results"][0]["issues"].as_array().unwrap();
    let mut found: Vec<(String, String, i64)> = issues
        .iter()
        .map(|i| {
            (
                i["validator"].as_str().unwrap().to_string(),
                i["code"].as_str().unwrap().to_string(),
                i["line"].as_i64().unwrap_or(0),
            )
        })
        .collect();
    found.sort();
    assert_eq!(
        found,
        vec![
            ("house_rules".into(), "NO_GUARANTEE".into(), 2),
            ("prose".into(), "DIRECT_ADDRESS".into(), 2),
            ("prose".into(), "SCORE_NOTATION".into(), 2),
        ]
    );
    // The bad libraries next to the good ones are warned about, and nothing else breaks.
    let err = stderr(&out);
    assert!(err.contains("wrong interface version"), "{err}");
    assert!(err.contains("missing root module"), "{err}");

    let out = enforce(dir, &["check", "--profile", "letter", "good.md"], None);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}{}",
        stdout(&out),
        stderr(&out)
    );

    // A plugin repair through `--fix`.
    std::fs::write(dir.join("fixable.md"), "Das Team liefert garantiert.\n").unwrap();
    let out = enforce(
        dir,
        &["check", "--profile", "letter", "--fix", "fixable.md"],
        None,
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stdout(&out), "Das Team liefert voraussichtlich.\n");
}

#[test]
fn a_panicking_plugin_yields_plugin_panic_and_the_process_survives() {
    let project = project();
    let out = enforce(
        project.path(),
        &[
            "check",
            "--profile",
            "crashy",
            "--format",
            "json",
            "panic.md",
            "good.md",
        ],
        None,
    );
    // Exit 1 (a failed input), not a crash: the report covers both inputs.
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let doc = json(&out);
    let results = doc["results"].as_array().unwrap();
    assert_eq!(results.len(), 2);
    assert_eq!(results[0]["status"], "failed");
    let panic = results[0]["issues"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["code"] == "PLUGIN_PANIC")
        .unwrap_or_else(|| panic!("no PLUGIN_PANIC in {doc:#}"));
    assert_eq!(panic["validator"], "test_panic");
    assert!(
        panic["message"].as_str().unwrap().contains("panicked"),
        "{panic}"
    );
    assert_eq!(results[1]["status"], "passed");
}

#[test]
fn a_stalled_plugin_times_out_per_its_config_and_fails_closed() {
    let project = project();
    let dir = project.path();
    std::fs::write(
        dir.join("slow.yaml"),
        "plugin_dirs: [plugins]\nvalidators:\n  slow:\n    type: test_sleep\n    sleep_ms: 5000\n    plugin:\n      timeout_ms: 200\n      fail_mode: closed\nprofiles:\n  slow:\n    validators: [slow]\n",
    )
    .unwrap();
    let started = std::time::Instant::now();
    let out = enforce(
        dir,
        &[
            "check",
            "--config",
            "slow.yaml",
            "--profile",
            "slow",
            "--format",
            "json",
            "good.md",
        ],
        None,
    );
    assert!(
        started.elapsed() < std::time::Duration::from_secs(4),
        "the timeout did not cut the call short"
    );
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let doc = json(&out);
    let issue = &doc["results"][0]["issues"][0];
    assert_eq!(issue["code"], "VALIDATOR_UNAVAILABLE", "{doc:#}");
    assert!(
        issue["message"]
            .as_str()
            .unwrap()
            .contains("did not answer within 200 ms"),
        "{issue}"
    );
}

/// `file_existence`, the seed's name for `file_refs`, is listed as the alias it is.
#[test]
fn validators_lists_file_existence_as_an_alias_of_file_refs() {
    let work = tempfile::tempdir().unwrap();
    let out = enforce(work.path(), &["validators"], None);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(
        text.lines()
            .any(|l| l.starts_with("file_existence ")
                && l.ends_with("built-in (alias of file_refs)")),
        "{text}"
    );
    let out = enforce(work.path(), &["validators", "--format", "json"], None);
    let doc = json(&out);
    let alias = doc["validators"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == "file_existence")
        .cloned();
    assert_eq!(alias.unwrap()["alias_of"], "file_refs");
}
