//! `reask: auto` in `enforce serve`: each request's outcome adds to the statistics the next
//! re-asks choose by, and the statistics file is written back at shutdown.

use crate::serve::{body, client, config_for, temp_dir, Proxy};
use enforce_testkit::{MockOpenAi, MockReply, MockScript};
use serde_json::Value;

/// Feedback looks better than resample at start (1 of 2 against 0 of 2).
const STATS: &str = r#"{"version": 1, "rows": [
  {"model": "mock-model", "profile": "auto_p", "code": "MISSING_OK", "strategy": "feedback",
   "attempts": 2, "fixed": 1, "valid": 1},
  {"model": "mock-model", "profile": "auto_p", "code": "MISSING_OK", "strategy": "resample",
   "attempts": 2}
]}"#;

fn tally(stats: &Value, strategy: &str) -> (u64, u64) {
    let rows = stats["rows"].as_array().expect("rows");
    let row = rows
        .iter()
        .find(|r| r["strategy"] == strategy)
        .unwrap_or_else(|| panic!("no {strategy} row: {stats}"));
    (
        row["attempts"].as_u64().unwrap_or(0),
        row["valid"].as_u64().unwrap_or(0),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_choice_follows_live_outcomes_and_the_file_is_written_back() {
    let upstream = MockOpenAi::start(MockScript::new()).await.unwrap();
    // Every answer lacks its OK: every re-ask fails.
    upstream.push(MockReply::text("No."));
    let dir = temp_dir("auto");
    std::fs::write(dir.join("stats.json"), STATS).unwrap();
    let server = format!(
        "validators:\n  needs_ok:\n    type: pattern\n    required:\n      - regex: 'OK$'\n        code: MISSING_OK\n        message: The answer must end with OK.\n        severity: error\n\
         profiles:\n  auto_p:\n    validators: [needs_ok]\n    max_retries: 1\n    reask: auto\n    reask_auto: {{stats: stats.json, explore: false, min_attempts: 1}}\n\
         server:\n  audit_log: {}\n",
        dir.join("audit.jsonl").display()
    );
    let config = config_for(&dir, &upstream.url(), "", &server)
        .to_string_lossy()
        .into_owned();
    let config_text = std::fs::read_to_string(&config)
        .unwrap()
        .replace("profile: chat", "profile: auto_p");
    std::fs::write(&config, config_text).unwrap();
    let proxy = Proxy::start(&["--config", &config]);
    let c = client();
    // Feedback's posterior mean falls with each failed re-ask, (1 + 1) / (2 + 2 + n) after n,
    // until it is below resample's 1 / 4 (the fallback's rung wins a tie): after the fifth.
    for _ in 0..6 {
        c.post(proxy.url("/chat/completions"))
            .json(&body(false))
            .send()
            .await
            .unwrap();
    }
    assert!(proxy.terminate().success());

    let audit = std::fs::read_to_string(dir.join("audit.jsonl")).unwrap();
    let reasks: Vec<String> = audit
        .lines()
        .map(|line| {
            let record: Value = serde_json::from_str(line).unwrap();
            record["attempts"][1]["reask"]
                .as_str()
                .unwrap_or("")
                .to_string()
        })
        .collect();
    let mut expected = vec!["feedback"; 5];
    expected.push("resample");
    assert_eq!(reasks, expected, "{audit}");
    let written: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("stats.json")).unwrap()).unwrap();
    assert_eq!(tally(&written, "feedback"), (7, 1), "{written}");
    assert_eq!(tally(&written, "resample"), (3, 0), "{written}");
}
