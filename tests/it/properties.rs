//! Property tests (proptest) for the parsers and repairs that see model output and upstream
//! bytes: ADR front matter detection, the `files.modify` → `files.create` repair, step marker
//! extraction and repair, the Claude CLI result parser, the OpenAI completion parser and the
//! SSE parser. Every entry point must accept any input without panicking; the structured
//! properties pin what the repairs may and may not change. A few hundred cases each: seconds.

use crate::block_on;
use enforce_core::{Context, Severity, Validator};
use enforce_documents::adr::find_adr;
use enforce_documents::extract_step;
use enforce_documents::file_refs::{FileRefs, FILE_NOT_FOUND};
use enforce_documents::step_marker::{StepMarker, DEFAULT_STEPS};
use enforce_testkit::sse::parse_sse;
use proptest::prelude::*;
use serde_yaml_ng::Value as Yaml;
use std::path::PathBuf;

/// Text built from the tokens the parsers care about, so random cases hit the interesting
/// paths (fences, markers, delimiters, CRLF, multi-byte characters) far more often than
/// uniformly random strings do.
fn tokens() -> impl Strategy<Value = String> {
    let token = prop_oneof![
        Just("```".to_string()),
        Just("~~~".to_string()),
        Just("```markdown\n".to_string()),
        Just("<!--".to_string()),
        Just("-->".to_string()),
        Just("<!-- STEP: what -->".to_string()),
        Just("<!-- STEP: bogus -->".to_string()),
        Just("<!-- STEP:".to_string()),
        Just("STEP:".to_string()),
        Just("---\n".to_string()),
        Just("---".to_string()),
        Just("adr_id: 7\n".to_string()),
        Just("files:\n  modify:\n    - a.rs\n".to_string()),
        Just("  - ".to_string()),
        Just("\n".to_string()),
        Just("\r\n".to_string()),
        Just("\r".to_string()),
        Just(" ".to_string()),
        Just("é€😀".to_string()),
        Just("\u{feff}".to_string()),
        Just("## Kontext\n".to_string()),
        Just("data: ".to_string()),
        Just(":".to_string()),
        "[a-z]{1,6}",
        any::<String>(),
    ];
    prop::collection::vec(token, 0..24).prop_map(|parts| parts.concat())
}

fn project() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("temp dir");
    for name in ["a.rs", "b.rs", "src/c.rs"] {
        let path = dir.path().join(name);
        std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        std::fs::write(path, "").expect("write");
    }
    let root = dir.path().canonicalize().expect("canonical root");
    (dir, root)
}

const EXISTING: [&str; 3] = ["a.rs", "b.rs", "src/c.rs"];

/// One generated ADR: the pieces, so the test knows what each list must hold.
#[derive(Debug, Clone)]
struct AdrCase {
    preamble: String,
    fenced: bool,
    modify: Vec<String>,
    create: Vec<String>,
    create_first: bool,
    comment: bool,
    extra_key: Option<(String, String)>,
    body: String,
}

impl AdrCase {
    fn render(&self) -> String {
        let mut y = String::from("adr_id: ADR-9\ntitle: \"A title\"\n");
        if let Some((k, v)) = &self.extra_key {
            y.push_str(&format!("{k}: {v}\n"));
        }
        y.push_str("files:\n");
        if self.comment {
            y.push_str("  # the files this touches\n");
        }
        let list = |name: &str, items: &[String]| {
            let mut s = format!("  {name}:\n");
            for item in items {
                s.push_str(&format!("    - {item}\n"));
            }
            s
        };
        let modify = list("modify", &self.modify);
        let create = if self.create.is_empty() {
            String::new()
        } else {
            list("create", &self.create)
        };
        if self.create_first {
            y.push_str(&create);
            y.push_str(&modify);
        } else {
            y.push_str(&modify);
            y.push_str(&create);
        }
        y.push_str("status: proposed\n");
        let doc = format!("---\n{y}---\n{}", self.body);
        if self.fenced {
            format!("{}\n```markdown\n{doc}\n```\n", self.preamble)
        } else {
            format!("{}\n{doc}", self.preamble)
        }
    }
}

fn adr_case() -> impl Strategy<Value = AdrCase> {
    let path = prop_oneof![
        prop::sample::select(EXISTING.to_vec()).prop_map(str::to_string),
        "[a-z]{1,8}(/[a-z]{1,8})?\\.(md|rs)",
    ];
    let plain_line = "[A-Za-z0-9 ,.éü]{0,40}";
    (
        prop::collection::vec(plain_line, 0..3).prop_map(|l| l.join("\n")),
        any::<bool>(),
        prop::collection::vec(path.clone(), 1..6),
        prop::collection::vec("[a-z]{1,8}\\.txt", 0..3),
        any::<bool>(),
        any::<bool>(),
        prop::option::of(("x_[a-z]{1,6}", "[a-z]{1,10}")),
        prop::collection::vec(plain_line, 0..4)
            .prop_map(|l| format!("## Kontext\n{}\n", l.join("\n"))),
    )
        .prop_map(
            |(preamble, fenced, modify, create, create_first, comment, extra_key, body)| AdrCase {
                preamble,
                fenced,
                modify,
                create,
                create_first,
                comment,
                extra_key,
                body,
            },
        )
}

fn yaml_of(text: &str) -> Yaml {
    let fm = find_adr(text).expect("front matter found");
    serde_yaml_ng::from_str(fm.yaml_text(text)).expect("valid YAML")
}

fn list(doc: &Yaml, key: &str) -> Vec<String> {
    doc.get("files")
        .and_then(|f| f.get(key))
        .and_then(Yaml::as_sequence)
        .map(|s| {
            s.iter()
                .filter_map(|v| v.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

fn sorted(mut v: Vec<String>) -> Vec<String> {
    v.sort();
    v
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn front_matter_detection_never_panics_and_ranges_are_valid(text in tokens()) {
        if let Some(fm) = find_adr(&text) {
            prop_assert!(text.get(fm.yaml.clone()).is_some(), "yaml range {:?}", fm.yaml);
            prop_assert!(text.get(fm.body.clone()).is_some(), "body range {:?}", fm.body);
            prop_assert!(fm.open <= fm.yaml.start);
            let _ = fm.field_value(&text, "adr_id");
        }
    }

    #[test]
    fn front_matter_is_found_after_any_preamble_bare_or_fenced(case in adr_case()) {
        let text = case.render();
        let fm = find_adr(&text);
        prop_assert!(fm.is_some(), "no ADR found in {text:?}");
        let fm = fm.expect("checked");
        prop_assert_eq!(fm.field_value(&text, "adr_id"), Some("ADR-9"));
        prop_assert!(fm.closed);
    }

    #[test]
    fn files_repair_moves_exactly_the_missing_paths_and_nothing_else(case in adr_case()) {
        let (_dir, root) = project();
        let v = FileRefs::new("file_refs", &root);
        let text = case.render();
        let issues = block_on(v.validate(&text, &Context::new())).expect("verdict");
        let missing: Vec<String> = case
            .modify
            .iter()
            .filter(|p| !EXISTING.contains(&p.as_str()))
            .cloned()
            .collect();
        prop_assert_eq!(
            issues.iter().filter(|i| i.code == FILE_NOT_FOUND).count(),
            missing.len()
        );
        let Some(fixed) = v.repair(&text, &Context::new(), &issues) else {
            prop_assert!(missing.is_empty(), "no repair although {missing:?} are missing");
            return Ok(());
        };
        prop_assert!(!missing.is_empty(), "a repair without anything missing");
        // Outside the front matter nothing changed, byte for byte.
        let before = find_adr(&text).expect("adr");
        let after = find_adr(&fixed).expect("adr after repair");
        prop_assert_eq!(&text[..before.yaml.start], &fixed[..after.yaml.start]);
        prop_assert_eq!(&text[before.yaml.end..], &fixed[after.yaml.end..]);
        // Inside: only the two lists changed; every other key is as it was.
        let (old, new) = (yaml_of(&text), yaml_of(&fixed));
        for key in ["adr_id", "title", "status"] {
            prop_assert_eq!(old.get(key), new.get(key));
        }
        if let Some((k, _)) = &case.extra_key {
            prop_assert_eq!(old.get(k.as_str()), new.get(k.as_str()));
        }
        let kept: Vec<String> = case.modify.iter().filter(|p| EXISTING.contains(&p.as_str())).cloned().collect();
        prop_assert_eq!(sorted(list(&new, "modify")), sorted(kept));
        let mut expected_create = case.create.clone();
        expected_create.extend(missing.iter().cloned());
        prop_assert_eq!(sorted(list(&new, "create")), sorted(expected_create));
        if case.comment {
            prop_assert!(fixed.contains("  # the files this touches\n"));
        }
        // Repairing twice changes nothing more.
        let again = block_on(v.validate(&fixed, &Context::new())).expect("verdict");
        prop_assert!(again.iter().all(|i| i.code != FILE_NOT_FOUND), "{again:?}");
        let twice = v.repair(&fixed, &Context::new(), &again);
        prop_assert!(twice.is_none() || twice.as_deref() == Some(fixed.as_str()));
    }

    #[test]
    fn files_validation_and_repair_accept_any_text(text in tokens()) {
        let (_dir, root) = project();
        let v = FileRefs::new("file_refs", &root);
        let issues = block_on(v.validate(&text, &Context::new())).expect("verdict");
        if let Some(fixed) = v.repair(&text, &Context::new(), &issues) {
            let again = block_on(v.validate(&fixed, &Context::new())).expect("verdict");
            prop_assert!(again.iter().all(|i| i.code != FILE_NOT_FOUND), "{fixed:?}: {again:?}");
        }
    }

    #[test]
    fn step_extraction_never_panics(text in tokens()) {
        if let Some(step) = extract_step(&text) {
            prop_assert!(!step.is_empty());
            prop_assert_eq!(step.clone(), step.to_lowercase());
        }
    }

    #[test]
    fn the_last_marker_outside_fences_wins(
        prose in "[A-Za-z0-9 .,\n]{0,200}",
        earlier in prop::sample::select(DEFAULT_STEPS.to_vec()),
        step in prop::sample::select(DEFAULT_STEPS.to_vec()),
        fenced in prop::sample::select(DEFAULT_STEPS.to_vec()),
    ) {
        let text = format!(
            "<!-- STEP: {earlier} -->\n{prose}\n<!-- STEP: {step} -->\n```\n<!-- STEP: {fenced} -->\n```\n"
        );
        prop_assert_eq!(extract_step(&text), Some(step.to_string()));
    }

    #[test]
    fn step_repair_yields_an_allowed_marker_and_is_idempotent(text in tokens()) {
        let v = StepMarker::default();
        let issues = block_on(v.validate(&text, &Context::new())).expect("verdict");
        let errors: Vec<_> = issues.iter().filter(|i| i.severity == Severity::Error).cloned().collect();
        if errors.is_empty() {
            return Ok(());
        }
        if let Some(fixed) = v.repair(&text, &Context::new(), &errors) {
            let after = block_on(v.validate(&fixed, &Context::new())).expect("verdict");
            prop_assert!(
                after.iter().all(|i| i.severity != Severity::Error),
                "repair of {text:?} gave {fixed:?} with {after:?}"
            );
            let step = extract_step(&fixed);
            prop_assert!(step.as_deref().is_some_and(|s| DEFAULT_STEPS.contains(&s)), "{step:?}");
            let again: Vec<_> = after.into_iter().filter(|i| i.severity == Severity::Error).collect();
            let twice = v.repair(&fixed, &Context::new(), &again);
            prop_assert!(twice.is_none() || twice.as_deref() == Some(fixed.as_str()));
        }
    }

    #[test]
    fn claude_result_parser_accepts_any_text(text in tokens()) {
        if let Ok(result) = enforce_runner::parse_result(&text) {
            let _ = result.into_reply();
        }
    }

    #[test]
    fn claude_result_parser_reads_every_well_formed_result(
        text in any::<String>(),
        session in "[a-f0-9-]{1,36}",
        verbose in any::<bool>(),
        is_error in any::<bool>(),
        cost in 0.0f64..10.0,
    ) {
        let result = serde_json::json!({
            "type": "result", "subtype": if is_error { "error_during_execution" } else { "success" },
            "is_error": is_error, "result": text, "session_id": session,
            "num_turns": 1, "duration_ms": 12, "total_cost_usd": cost,
            "usage": {"input_tokens": 3, "output_tokens": 6}
        });
        let stdout = if verbose {
            serde_json::json!([{"type": "system", "subtype": "init"}, {"type": "assistant"}, result]).to_string()
        } else {
            result.to_string()
        };
        let parsed = enforce_runner::parse_result(&stdout);
        prop_assert!(parsed.is_ok(), "{stdout}: {parsed:?}");
        let reply = parsed.expect("checked").into_reply();
        if is_error {
            prop_assert!(reply.is_err());
        } else {
            let reply = reply.expect("success result");
            prop_assert_eq!(reply.text, text);
            prop_assert_eq!(reply.session_id.as_deref(), Some(session.as_str()));
        }
    }

    #[test]
    fn openai_completion_and_error_parsers_accept_any_text(text in tokens()) {
        let _ = enforce_runner::parse_completion(&text);
        let _ = enforce_runner::error_message(&text);
        let _ = enforce_runner::parse_retry_after(&text);
    }

    #[test]
    fn sse_parser_accepts_any_text(text in tokens()) {
        let stream = parse_sse(&text);
        for event in &stream.events {
            prop_assert!(!event.data.ends_with('\n') || event.data.len() > 1 || event.data == "\n");
        }
    }

    #[test]
    fn sse_round_trips_events_with_any_data(
        events in prop::collection::vec(("[^\r\n]{0,30}(\n[^\r\n]{0,30}){0,3}", any::<bool>()), 0..8)
    ) {
        let mut body = String::new();
        for (data, comment_before) in &events {
            if *comment_before {
                body.push_str(": keepalive\n\n");
            }
            for line in data.split('\n') {
                body.push_str("data: ");
                body.push_str(line);
                body.push('\n');
            }
            body.push('\n');
        }
        let stream = parse_sse(&body);
        prop_assert!(!stream.torn_tail);
        let got: Vec<&str> = stream.events.iter().map(|e| e.data.as_str()).collect();
        let want: Vec<&str> = events.iter().map(|(d, _)| d.as_str()).collect();
        prop_assert_eq!(got, want);
        prop_assert_eq!(stream.comments.len(), events.iter().filter(|(_, c)| *c).count());
    }
}

/// File references never resolve outside the root, symlinks included: whatever relative path a
/// model writes, `check_path` says `Exists` only for a file whose real location is below the
/// root; files that exist only outside are `Outside` or `NotFound`, never `Exists`.
#[cfg(unix)]
#[test]
fn file_references_never_resolve_outside_the_root() {
    use enforce_documents::file_refs::{check_path, PathCheck};
    use proptest::test_runner::{Config, TestRunner};
    let (dir, root) = project();
    let outside = tempfile::tempdir().expect("outside");
    std::fs::write(outside.path().join("secret.txt"), "").expect("secret");
    let link = |target: &std::path::Path, name: &str| {
        std::os::unix::fs::symlink(target, dir.path().join(name)).expect("symlink")
    };
    link(outside.path(), "escape");
    link(std::path::Path::new("../.."), "src/up");
    link(std::path::Path::new("src"), "alias");
    link(&outside.path().join("secret.txt"), "secret-link");
    link(std::path::Path::new("self"), "self");
    let parts = prop::collection::vec(
        prop::sample::select(vec![
            "..",
            ".",
            "src",
            "escape",
            "up",
            "alias",
            "a.rs",
            "c.rs",
            "secret.txt",
            "secret-link",
            "self",
            "",
            "/",
            "\\",
            "~",
        ]),
        1..7,
    );
    let mut runner = TestRunner::new(Config {
        cases: 512,
        failure_persistence: None,
        ..Config::default()
    });
    runner
        .run(&parts, |parts| {
            let listed = parts.join("/");
            let verdict = check_path(&root, &listed);
            if verdict == PathCheck::Exists {
                // check_path reads `\\` as a separator too (models write Windows paths).
                let cleaned: Vec<String> = listed
                    .replace('\\', "/")
                    .split('/')
                    .filter(|p| !p.is_empty())
                    .map(str::to_string)
                    .collect();
                // `a.rs/..` is read lexically by check_path (and is the root); the OS refuses
                // it. Only a path the OS resolves can be compared.
                if let Ok(real) = root.join(cleaned.join("/")).canonicalize() {
                    prop_assert!(
                        real.starts_with(&root),
                        "{listed:?} said Exists but is {real:?}"
                    );
                }
            }
            if listed.contains("secret") {
                prop_assert!(
                    verdict != PathCheck::Exists,
                    "{listed:?}: the outside file was reached"
                );
            }
            Ok(())
        })
        .expect("property holds");
}
