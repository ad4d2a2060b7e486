//! The command runner with ordinary Unix programs.

use enforce_core::Ask;
use enforce_core::{Message, Reply, Request, Runner, RunnerError};
use enforce_runner::{CommandConfig, CommandRunner};
use enforce_testkit::process_is_gone;
use std::time::{Duration, Instant};

fn sh(script: &str, timeout_secs: f64) -> CommandRunner {
    CommandRunner::new(CommandConfig {
        program: "sh".into(),
        args: vec!["-c".into(), script.into()],
        timeout_secs,
        kill_grace_secs: 0.2,
        ..CommandConfig::default()
    })
    .unwrap()
}

#[tokio::test]
async fn stdin_in_stdout_out() {
    let r = sh("tr a-z A-Z", 10.0);
    let request = Request {
        messages: vec![Message::system("sys"), Message::user("hello")],
        ..Request::default()
    };
    let reply = r.ask(Ask::new(&request)).reply().await.unwrap();
    assert_eq!(reply.text, "SYS\n\nHELLO");
}

#[tokio::test]
async fn follow_up_is_a_transcript_with_one_earlier_answer() {
    let r = sh("cat", 10.0);
    let reply = r
        .ask(Ask::follow_up(
            &Request::prompt("Q"),
            &Reply::text("A2"),
            "fix",
        ))
        .reply()
        .await
        .unwrap();
    assert_eq!(reply.text, "User:\nQ\n\nAssistant:\nA2\n\nUser:\nfix");
}

#[tokio::test]
async fn failure_carries_exit_code_and_stderr() {
    let r = sh("echo 'model not loaded' >&2; exit 3", 10.0);
    match r.ask(Ask::new(&Request::prompt("q"))).reply().await {
        Err(RunnerError::Process { message, exit_code }) => {
            assert_eq!(exit_code, Some(3));
            assert!(message.contains("model not loaded"), "{message}");
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn timeout_kills_the_whole_group() {
    let dir = enforce_testkit::ScratchDir::new("cmd-runner").unwrap();
    let pid_file = dir.path().join("pid");
    // A background grandchild that would outlive a plain kill of `sh`.
    let script = format!("sleep 300 & echo $! > {}; wait", pid_file.display());
    let started = Instant::now();
    let result = sh(&script, 0.5)
        .ask(Ask::new(&Request::prompt("q")))
        .reply()
        .await;
    assert_eq!(result, Err(RunnerError::Timeout { after_ms: 500 }));
    assert!(started.elapsed() < Duration::from_secs(5));
    let pid: u32 = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(3);
    while !process_is_gone(pid) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(process_is_gone(pid), "sleep {pid} outlived the call");
}

#[tokio::test]
async fn leftovers_of_a_finished_command_are_killed() {
    let dir = enforce_testkit::ScratchDir::new("cmd-runner").unwrap();
    let pid_file = dir.path().join("pid");
    // Exits at once but leaves a child holding stdout open.
    let script = format!("sleep 300 & echo $! > {}; echo done", pid_file.display());
    let started = Instant::now();
    let reply = sh(&script, 10.0)
        .ask(Ask::new(&Request::prompt("q")))
        .reply()
        .await
        .unwrap();
    assert_eq!(reply.text, "done");
    assert!(started.elapsed() < Duration::from_secs(5));
    let pid: u32 = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(3);
    while !process_is_gone(pid) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(process_is_gone(pid));
}

#[tokio::test]
async fn endless_output_is_stopped() {
    let started = Instant::now();
    let result = sh("yes", 30.0)
        .ask(Ask::new(&Request::prompt("q")))
        .reply()
        .await;
    match result {
        Err(RunnerError::Process { message, .. }) => {
            assert!(message.contains("printed more than"), "{message}")
        }
        other => panic!("{other:?}"),
    }
    assert!(started.elapsed() < Duration::from_secs(20));
}
