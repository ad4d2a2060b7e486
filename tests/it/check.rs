//! End-to-end tests of `enforce check`: exit codes, JSON shape, text format, --fix/--write,
//! configuration errors and nasty input.

use crate::{repo, text, BIN};
use serde_json::Value;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// A scratch directory removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new(tag: &str) -> Self {
        use std::sync::atomic::{AtomicUsize, Ordering};
        static N: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "enforce-e2e-{tag}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }

    fn write(&self, name: &str, contents: impl AsRef<[u8]>) -> PathBuf {
        let p = self.0.join(name);
        std::fs::write(&p, contents).unwrap();
        p
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn enforce(dir: &Path, args: &[&str], stdin: Option<&[u8]>) -> Output {
    let mut child = Command::new(BIN)
        .arg("check")
        .args(args)
        .current_dir(dir)
        .env_remove("NO_COLOR")
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    if let Some(input) = stdin {
        let mut s = child.stdin.take().unwrap();
        let _ = s.write_all(input); // the command may exit before reading
    }
    child.wait_with_output().unwrap()
}

fn code(o: &Output) -> i32 {
    o.status.code().expect("exited normally, not by a signal")
}

const ADR_OK: &str = "examples/adr-0007-validate-llm-output.md";

#[test]
fn the_sample_adr_passes_the_adr_profile() {
    let o = enforce(&repo(), &["--profile", "adr", ADR_OK], None);
    assert_eq!(code(&o), 0, "{}{}", text(&o.stdout), text(&o.stderr));
    assert!(text(&o.stdout).contains("passed"));
}

#[test]
fn json_output_has_exactly_the_documented_shape() {
    let s = Scratch::new("json");
    s.write("bad.md", "---\nadr_id: 1\ntitle: T\nstatus: Proposed\n---\n## Kontext\n## Entscheidung\n## Akzeptanzkriterien\n- [ ] a\n<!-- STEP: dance -->\n");
    s.write("good.md", "Fine.\n<!-- STEP: done -->\n");
    let o = enforce(
        &s.0,
        &["--profile", "adr", "--format", "json", "bad.md", "good.md"],
        None,
    );
    assert_eq!(code(&o), 1);
    let doc: Value = serde_json::from_slice(&o.stdout).expect("exactly one JSON document");
    let results = doc["results"].as_array().unwrap();
    assert_eq!(doc.as_object().unwrap().len(), 1);
    assert_eq!(results.len(), 2);
    let bad = &results[0];
    let mut keys: Vec<_> = bad.as_object().unwrap().keys().cloned().collect();
    keys.sort();
    assert_eq!(
        keys,
        vec!["issues", "source", "status"],
        "no 'repaired' without --fix"
    );
    assert_eq!(bad["source"], "bad.md");
    assert_eq!(bad["status"], "failed");
    let issues = bad["issues"].as_array().unwrap();
    for issue in issues {
        let mut k: Vec<_> = issue.as_object().unwrap().keys().cloned().collect();
        k.sort();
        assert_eq!(
            k,
            vec![
                "code",
                "hint",
                "line",
                "message",
                "repair_fixes",
                "repairable",
                "severity",
                "validator"
            ]
        );
    }
    let step = issues.iter().find(|i| i["code"] == "INVALID_STEP").unwrap();
    assert_eq!(step["validator"], "step_marker");
    assert_eq!(step["severity"], "error");
    assert_eq!(step["line"], 10);
    assert_eq!(step["repairable"], true);
    assert_eq!(
        step["repair_fixes"], true,
        "the step marker's repair sets a marker"
    );
    let criteria = issues
        .iter()
        .find(|i| i["code"] == "INSUFFICIENT_CRITERIA")
        .unwrap();
    assert_eq!(criteria["severity"], "warning");
    assert_eq!(
        criteria["repair_fixes"], false,
        "adr_structure has no repair"
    );
    assert_eq!(results[1]["status"], "passed");
    assert_eq!(results[1]["issues"], Value::Array(vec![]));
}

#[test]
fn text_output_is_compiler_style_without_colour_when_piped() {
    let s = Scratch::new("text");
    s.write("a.md", "Intro line\n<!-- STEP: dance -->\n");
    let o = enforce(&s.0, &["a.md"], None);
    assert_eq!(code(&o), 1);
    let out = text(&o.stdout);
    assert!(
        out.contains("a.md:2: error[INVALID_STEP] The step marker names 'dance'"),
        "{out}"
    );
    assert!(
        out.contains("help: End the answer with <!-- STEP:"),
        "{out}"
    );
    assert!(out.contains("2 | <!-- STEP: dance -->"), "{out}");
    assert!(out.contains("^^^^^"), "underline: {out}");
    assert!(
        !out.contains('\u{1b}'),
        "no colour codes when not a terminal: {out:?}"
    );
    assert!(
        out.contains("a.md: failed (1 error(s), 0 warning(s))"),
        "{out}"
    );
}

#[test]
fn warnings_alone_pass() {
    let s = Scratch::new("warn");
    s.write("w.md", "---\nadr_id: 1\ntitle: T\nstatus: Proposed\n---\n## Kontext\n## Entscheidung\n## Akzeptanzkriterien\n- [ ] only one\n<!-- STEP: generate -->\n");
    let o = enforce(&s.0, &["--profile", "adr", "w.md"], None);
    assert_eq!(code(&o), 0, "{}", text(&o.stdout));
    assert!(text(&o.stdout).contains("warning[INSUFFICIENT_CRITERIA]"));
}

#[test]
fn fix_prints_the_repaired_text_and_diagnostics_go_to_stderr() {
    let o = enforce(
        &repo(),
        &["--fix", "-"],
        Some(b"Which database do you use?"),
    );
    assert_eq!(code(&o), 0, "{}", text(&o.stderr));
    assert_eq!(
        text(&o.stdout),
        "Which database do you use?\n\n<!-- STEP: what -->\n"
    );
    assert!(
        text(&o.stderr).contains("<stdin>") || text(&o.stderr).contains("-: repaired"),
        "{}",
        text(&o.stderr)
    );

    let o = enforce(
        &repo(),
        &["--fix", "--format", "json", "-"],
        Some(b"All done."),
    );
    let doc: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(doc["results"][0]["status"], "repaired");
    assert_eq!(doc["results"][0]["source"], "-");
    assert_eq!(
        doc["results"][0]["repaired"],
        "All done.\n\n<!-- STEP: done -->"
    );
    assert_eq!(
        doc["results"][0]["issues"][0]["code"],
        "MISSING_STEP_MARKER"
    );
}

#[test]
fn fix_write_replaces_the_file_atomically() {
    let s = Scratch::new("write");
    let root = s.0.join("proj");
    std::fs::create_dir_all(root.join("src")).unwrap();
    std::fs::write(root.join("src/lib.rs"), "").unwrap();
    let original = "---\nadr_id: 9\ntitle: T\nstatus: Proposed\nfiles:\n  modify:\n    - src/lib.rs  # exists\n    - src/new.rs\n---\n## Kontext\n## Entscheidung\n## Akzeptanzkriterien\n- [ ] a\n- [ ] b\n- [ ] c\n";
    let path = s.write("adr.md", original);
    let o = enforce(
        &s.0,
        &[
            "--profile",
            "adr",
            "--root",
            "proj",
            "--fix",
            "--write",
            "adr.md",
        ],
        None,
    );
    assert_eq!(code(&o), 0, "{}{}", text(&o.stdout), text(&o.stderr));
    let written = std::fs::read_to_string(&path).unwrap();
    assert!(
        written.contains("  modify:\n    - src/lib.rs  # exists\n  create:\n    - src/new.rs\n"),
        "{written}"
    );
    assert!(
        written.trim_end().ends_with("<!-- STEP: generate -->"),
        "{written}"
    );
    let leftovers: Vec<_> = std::fs::read_dir(&s.0)
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().contains(".tmp"))
        .collect();
    assert!(leftovers.is_empty());
    // Now it passes as it is.
    let o = enforce(
        &s.0,
        &["--profile", "adr", "--root", "proj", "adr.md"],
        None,
    );
    assert_eq!(code(&o), 0, "{}", text(&o.stdout));
}

#[cfg(unix)]
#[test]
fn fix_write_through_a_symlink_repairs_its_target_and_keeps_the_link() {
    let s = Scratch::new("symlink");
    std::fs::create_dir_all(s.0.join("real")).unwrap();
    let target = s.write("real/answer.md", "All done.");
    let link = s.0.join("link.md");
    std::os::unix::fs::symlink("real/answer.md", &link).unwrap();
    let o = enforce(&s.0, &["--fix", "--write", "link.md"], None);
    assert_eq!(code(&o), 0, "{}{}", text(&o.stdout), text(&o.stderr));
    assert!(
        std::fs::symlink_metadata(&link).unwrap().is_symlink(),
        "the link was replaced by a file"
    );
    let repaired = std::fs::read_to_string(&target).unwrap();
    assert!(repaired.contains("<!-- STEP: done -->"), "{repaired}");
}

/// A FIFO, a device and a directory are refused at once (a FIFO used to wait for a writer
/// forever, `/dev/zero` was read up to the limit); a file over the limit is refused unread.
#[cfg(unix)]
#[test]
fn only_regular_files_are_read_and_oversized_ones_are_refused_unread() {
    let s = Scratch::new("special");
    let fifo = s.0.join("pipe.md");
    let made = Command::new("mkfifo").arg(&fifo).status().expect("mkfifo");
    assert!(made.success());
    std::fs::create_dir(s.0.join("dir.md")).unwrap();
    let huge = std::fs::File::create(s.0.join("huge.md")).unwrap();
    huge.set_len((256 << 20) + 1).unwrap(); // sparse: nothing to read until it is read
    drop(huge);
    for (input, what) in [
        ("pipe.md", "is a FIFO, not a regular file"),
        ("/dev/zero", "is a device, not a regular file"),
        ("dir.md", "is a directory, not a regular file"),
        ("huge.md", "huge.md is larger than 256 MiB"),
    ] {
        let o = enforce_within(&s.0, input, Duration::from_secs(10))
            .unwrap_or_else(|| panic!("`enforce check {input}` did not end within 10 s"));
        assert_eq!(code(&o), 2, "{input}");
        assert!(
            text(&o.stderr).contains(what),
            "{input}: {}",
            text(&o.stderr)
        );
    }
}

/// `enforce check INPUT`, killed when it runs longer than `limit` (then `None`).
fn enforce_within(dir: &Path, input: &str, limit: Duration) -> Option<Output> {
    let mut child = Command::new(BIN)
        .args(["check", input])
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let started = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if started.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Some(child.wait_with_output().unwrap())
}

#[test]
fn usage_config_and_read_errors_exit_2() {
    let s = Scratch::new("errors");
    s.write("ok.md", "ok <!-- STEP: done -->");
    // usage
    assert_eq!(code(&enforce(&s.0, &[], None)), 2);
    assert_eq!(code(&enforce(&s.0, &["--write", "ok.md"], None)), 2);
    assert_eq!(
        code(&enforce(&s.0, &["--fix", "--write", "-"], Some(b"x"))),
        2
    );
    let o = enforce(&s.0, &["--profile", "nope", "ok.md"], None);
    assert_eq!(code(&o), 2);
    assert!(
        text(&o.stderr).contains("no profile named 'nope'"),
        "{}",
        text(&o.stderr)
    );
    // read
    let o = enforce(&s.0, &["missing.md"], None);
    assert_eq!(code(&o), 2);
    assert!(
        text(&o.stderr).contains("cannot read missing.md"),
        "{}",
        text(&o.stderr)
    );
    s.write("latin1.md", b"caf\xe9 <!-- STEP: done -->");
    let o = enforce(&s.0, &["ok.md", "latin1.md"], None);
    assert_eq!(code(&o), 2);
    assert!(
        text(&o.stderr).contains("latin1.md is not valid UTF-8"),
        "{}",
        text(&o.stderr)
    );
    assert!(
        text(&o.stdout).contains("ok.md: passed"),
        "the other input is still checked"
    );
    // config: unknown key, bad regex, missing file — each names file, line and key
    s.write(
        "unknown.yaml",
        "defaults:\n  max_retries: 1\n  retries: 3\n",
    );
    let o = enforce(&s.0, &["--config", "unknown.yaml", "ok.md"], None);
    assert_eq!(code(&o), 2);
    assert!(
        text(&o.stderr).contains("unknown.yaml:3:3: defaults.retries: unknown field `retries`"),
        "{}",
        text(&o.stderr)
    );
    s.write(
        "regex.yaml",
        "validators:\n  rules:\n    type: pattern\n    forbidden:\n      - regex: '(unclosed'\n",
    );
    let o = enforce(&s.0, &["--config", "regex.yaml", "ok.md"], None);
    assert_eq!(code(&o), 2);
    assert!(
        text(&o.stderr)
            .contains("regex.yaml:5:9: validators.rules.forbidden[0].regex: invalid regex"),
        "{}",
        text(&o.stderr)
    );
    s.write(
        "file.yaml",
        "validators:\n  j:\n    type: json\n    schema_file: nowhere.json\n",
    );
    let o = enforce(&s.0, &["--config", "file.yaml", "ok.md"], None);
    assert_eq!(code(&o), 2);
    assert!(
        text(&o.stderr).contains("file.yaml:4:5: validators.j.schema_file: cannot read"),
        "{}",
        text(&o.stderr)
    );
    let o = enforce(&s.0, &["--config", "absent.yaml", "ok.md"], None);
    assert_eq!(code(&o), 2);
    assert!(
        text(&o.stderr).contains("absent.yaml"),
        "{}",
        text(&o.stderr)
    );
}

/// The gRPC target's start-up errors name file, line and key like every configuration error:
/// the `.proto` is compiled and the method looked up before any input is read.
#[cfg(feature = "grpc")]
#[test]
fn grpc_target_errors_name_file_line_and_key() {
    let s = Scratch::new("grpc");
    s.write("ok.md", "text\n");
    s.write(
        "parser.proto",
        "syntax = \"proto3\";\npackage avap;\nservice Parser { rpc Validate(Req) returns (Res); }\nmessage Req { string code = 1; }\nmessage Res { bool valid = 1; string trace = 2; }\n",
    );
    let config = |proto: &str, method: &str| {
        format!(
            "validators:\n  avap_parser:\n    type: external\n    grpc:\n      url: http://127.0.0.1:1\n      proto: {proto}\n      method: {method}\n      request: {{ code_field: code }}\n      response: {{ valid_field: valid, trace_field: trace }}\n"
        )
    };
    let cases = [
        (
            config("parser.proto", "avap.Parser/Check"),
            "grpc.yaml:7:7: validators.avap_parser.grpc.method: avap.Parser has no method 'Check' (methods: Validate)",
        ),
        (
            config("missing.proto", "avap.Parser/Validate"),
            "grpc.yaml:6:7: validators.avap_parser.grpc.proto: cannot read",
        ),
    ];
    for (yaml, expected) in cases {
        s.write("grpc.yaml", &yaml);
        let o = enforce(&s.0, &["--config", "grpc.yaml", "ok.md"], None);
        assert_eq!(code(&o), 2, "{}", text(&o.stderr));
        assert!(text(&o.stderr).contains(expected), "{}", text(&o.stderr));
    }
    // The same configuration with a method the file declares is accepted.
    s.write("grpc.yaml", config("parser.proto", "avap.Parser/Validate"));
    let o = enforce(&s.0, &["--config", "grpc.yaml", "ok.md"], None);
    assert_ne!(code(&o), 2, "{}", text(&o.stderr));
}

#[test]
fn enforce_yaml_in_the_current_directory_is_picked_up() {
    let s = Scratch::new("auto");
    s.write("enforce.yaml", "defaults:\n  profile: strict\nprofiles:\n  strict:\n    validators: [step_marker, short]\nvalidators:\n  short:\n    type: length\n    max: 3\n");
    s.write("a.md", "one two three four <!-- STEP: done -->");
    let o = enforce(&s.0, &["--format", "json", "a.md"], None);
    let doc: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(doc["results"][0]["issues"][0]["code"], "TOO_LONG");
    assert_eq!(code(&o), 1);
}

#[test]
fn context_values_reach_the_validators() {
    let s = Scratch::new("ctx");
    s.write("c.yaml", "profiles:\n  p:\n    validators: [names]\nvalidators:\n  names:\n    type: terms\n    required: ['{{company_name}}']\n");
    s.write("a.md", "Made by ACME.");
    let ok = enforce(
        &s.0,
        &[
            "--config",
            "c.yaml",
            "--profile",
            "p",
            "--context",
            "company_name=ACME",
            "a.md",
        ],
        None,
    );
    assert_eq!(code(&ok), 0, "{}", text(&ok.stdout));
    let bad = enforce(
        &s.0,
        &[
            "--config",
            "c.yaml",
            "--profile",
            "p",
            "--context",
            "company_name=Initech",
            "a.md",
        ],
        None,
    );
    assert_eq!(code(&bad), 1);
    assert!(text(&bad.stdout).contains("MISSING_TERM"));
    assert_eq!(
        code(&enforce(&s.0, &["--context", "novalue", "a.md"], None)),
        2
    );
}

#[test]
fn a_10_mb_response_is_handled() {
    let s = Scratch::new("big");
    let mut big = "Lorem ipsum dolor sit amet. ".repeat(10 * 1024 * 1024 / 28);
    big.push_str("\n<!-- STEP: done -->\n");
    s.write("big.md", &big);
    let started = Instant::now();
    let o = enforce(&s.0, &["--profile", "adr", "big.md"], None);
    assert_eq!(code(&o), 0, "{}", text(&o.stderr));
    assert!(started.elapsed() < Duration::from_secs(30));
}

#[test]
fn yaml_bombs_in_config_and_response_are_bounded() {
    let s = Scratch::new("bomb");
    let mut bomb = String::from(
        "validators:\n  x:\n    type: length\n    max: 3\n    a: &a [x, x, x, x, x, x, x, x, x]\n",
    );
    for i in 0..9 {
        let prev = if i == 0 {
            "a".to_string()
        } else {
            format!("l{}", i - 1)
        };
        bomb.push_str(&format!("    l{i}: &l{i} [*{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}]\n"));
    }
    s.write("bomb.yaml", &bomb);
    s.write("ok.md", "ok <!-- STEP: done -->");
    let started = Instant::now();
    let o = enforce(&s.0, &["--config", "bomb.yaml", "ok.md"], None);
    assert_eq!(code(&o), 2, "{}", text(&o.stderr));
    assert!(started.elapsed() < Duration::from_secs(10));
    s.write(
        "deep.yaml",
        format!("validators:\n  x: {}\n", "[".repeat(1_000_000)),
    );
    let started = Instant::now();
    let o = enforce(&s.0, &["--config", "deep.yaml", "ok.md"], None);
    assert_eq!(code(&o), 2);
    assert!(
        text(&o.stderr).contains("nesting deeper"),
        "{}",
        text(&o.stderr)
    );
    assert!(started.elapsed() < Duration::from_secs(10));
    // The same shapes inside an ADR's front matter are issues, not hangs.
    let adr = format!(
        "---\nadr_id: 1\ntitle: T\nstatus: S\n{}---\n<!-- STEP: done -->\n",
        bomb.replace("validators:\n  x:\n", "").replace("    ", "")
    );
    s.write("adr.md", &adr);
    let started = Instant::now();
    let o = enforce(
        &s.0,
        &["--profile", "adr", "--format", "json", "adr.md"],
        None,
    );
    assert_eq!(code(&o), 1);
    let doc: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(doc["results"][0]["issues"][0]["code"], "INVALID_YAML");
    assert!(started.elapsed() < Duration::from_secs(10));
}
