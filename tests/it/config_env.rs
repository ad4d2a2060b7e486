//! `${VAR}` references in `enforce.yaml`, through the binary: the value set in the
//! environment decides the check, and an unset variable is refused with file:line:column.

use crate::{text, BIN};
use std::io::Write;
use std::path::Path;
use std::process::{Command, Output, Stdio};

const CONFIG: &str = "\
# The limit comes from ${MAX_CHARS}; this comment needs no variable.
validators:
  short:
    type: length
    max: ${MAX_CHARS:-1000}
    unit: ${LENGTH_UNIT}
profiles:
  p:
    validators: [short]
";

fn check(config: &Path, env: &[(&str, &str)], input: &str) -> Output {
    let mut command = Command::new(BIN);
    command
        .args(["check", "--format", "json", "--profile", "p", "--config"])
        .arg(config)
        .arg("-")
        .env_remove("MAX_CHARS")
        .env_remove("LENGTH_UNIT")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in env {
        command.env(k, v);
    }
    let mut child = command.spawn().unwrap();
    let _ = child.stdin.take().unwrap().write_all(input.as_bytes());
    child.wait_with_output().unwrap()
}

#[test]
fn environment_variables_set_values_and_unset_ones_are_located() {
    let dir = std::env::temp_dir().join(format!("enforce-e2e-env-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("enforce.yaml");
    std::fs::write(&config, CONFIG).unwrap();
    let input = "twelve chars";

    // The default (1000) lets it pass; the variable (5) makes it too long.
    let o = check(&config, &[("LENGTH_UNIT", "chars")], input);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let o = check(
        &config,
        &[("LENGTH_UNIT", "chars"), ("MAX_CHARS", "5")],
        input,
    );
    assert_eq!(o.status.code(), Some(1), "{}", text(&o.stderr));
    assert!(text(&o.stdout).contains("TOO_LONG"), "{}", text(&o.stdout));

    // No LENGTH_UNIT and no default: refused at the reference, naming the variable.
    let o = check(&config, &[], input);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o.stdout));
    let stderr = text(&o.stderr);
    let at = format!("{}:6:11: ", config.display());
    assert!(stderr.contains(&at), "{stderr}");
    assert!(stderr.contains("`LENGTH_UNIT` is not set"), "{stderr}");
    let _ = std::fs::remove_dir_all(&dir);
}
