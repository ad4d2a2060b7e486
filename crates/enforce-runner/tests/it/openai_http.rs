//! The OpenAI-compatible runner against the in-process mock server.

use enforce_core::Ask;
use enforce_core::{
    Context, Enforcer, Issue, Message, Reply, Request, Runner, RunnerError, Status,
};
use enforce_runner::{OpenAiConfig, OpenAiRunner, RetryConfig};
use enforce_testkit::{ErrorShape, MockOpenAi, MockReply, MockScript, Then};
use serde_json::json;
use std::time::{Duration, Instant};

fn runner(mock: &MockOpenAi, max_retries: u32) -> OpenAiRunner {
    OpenAiRunner::new(config(mock, max_retries)).unwrap()
}

fn config(mock: &MockOpenAi, max_retries: u32) -> OpenAiConfig {
    OpenAiConfig {
        base_url: mock.url(),
        api_key: Some("sk-test".into()),
        model: "upstream-model".into(),
        params: serde_json::from_value(json!({"temperature": 0.1, "max_tokens": 50})).unwrap(),
        timeout_secs: 5.0,
        retry: RetryConfig {
            max_retries,
            initial_backoff_ms: 5,
            max_backoff_ms: 20,
            max_retry_after_secs: 5,
        },
        ..OpenAiConfig::default()
    }
}

#[tokio::test]
async fn success_sends_model_messages_params_and_reads_usage() {
    let mock = MockOpenAi::start(MockScript::new().reply(MockReply::text("Hi!")))
        .await
        .unwrap();
    let mut request = Request {
        messages: vec![Message::system("Be kind."), Message::user("Hello")],
        ..Request::default()
    };
    request.params.insert("temperature".into(), json!(0.7));
    request.params.insert("stream".into(), json!(true));
    request.params.insert("model".into(), json!("client-model"));
    let reply = runner(&mock, 0)
        .ask(Ask::new(&request))
        .reply()
        .await
        .unwrap();
    assert_eq!(reply.text, "Hi!");
    assert!(reply.usage.unwrap().input_tokens > 0);
    assert!(reply.duration.is_some());

    let sent = mock.chat_requests();
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].authorization.as_deref(), Some("Bearer sk-test"));
    let body = &sent[0].body;
    assert_eq!(body["model"], "upstream-model");
    assert_eq!(body["stream"], false);
    assert_eq!(body["temperature"], 0.7, "request params override config");
    assert_eq!(body["max_tokens"], 50);
    assert_eq!(
        sent[0].messages(),
        [
            ("system".to_string(), "Be kind.".to_string()),
            ("user".to_string(), "Hello".to_string())
        ]
    );
}

#[tokio::test]
async fn rate_limit_then_success_honours_retry_after() {
    let mock = MockOpenAi::start(
        MockScript::new()
            .reply(MockReply::rate_limited(1))
            .reply(MockReply::text("after the wait")),
    )
    .await
    .unwrap();
    let started = Instant::now();
    let reply = runner(&mock, 3)
        .ask(Ask::new(&Request::prompt("q")))
        .reply()
        .await
        .unwrap();
    assert_eq!(reply.text, "after the wait");
    assert!(
        started.elapsed() >= Duration::from_millis(950),
        "Retry-After: 1 not honoured ({:?})",
        started.elapsed()
    );
    assert_eq!(mock.chat_requests().len(), 2);
}

#[tokio::test]
async fn server_error_until_retries_are_spent() {
    let mock = MockOpenAi::start(MockScript::new().reply(MockReply::error(
        ErrorShape::OpenAi,
        500,
        "The server had an error",
    )))
    .await
    .unwrap();
    match runner(&mock, 2)
        .ask(Ask::new(&Request::prompt("q")))
        .reply()
        .await
    {
        Err(RunnerError::Upstream { status, message }) => {
            assert_eq!(status, Some(500));
            assert!(message.contains("The server had an error"), "{message}");
            assert!(message.contains("3 tries"), "{message}");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(mock.chat_requests().len(), 3, "first try + 2 retries");
}

#[tokio::test]
async fn client_errors_are_not_retried() {
    let mock = MockOpenAi::start(MockScript::new().reply(MockReply::error(
        ErrorShape::OpenAi,
        400,
        "bad request",
    )))
    .await
    .unwrap();
    let result = runner(&mock, 3)
        .ask(Ask::new(&Request::prompt("q")))
        .reply()
        .await;
    assert!(matches!(
        result,
        Err(RunnerError::Upstream {
            status: Some(400),
            ..
        })
    ));
    assert_eq!(mock.chat_requests().len(), 1);
}

#[tokio::test]
async fn too_long_retry_after_is_not_waited_for() {
    let mock = MockOpenAi::start(MockScript::new().reply(MockReply::rate_limited(3600)))
        .await
        .unwrap();
    let started = Instant::now();
    let result = runner(&mock, 3)
        .ask(Ask::new(&Request::prompt("q")))
        .reply()
        .await;
    // Busy, with the server's wait, which the proxy passes on as its own `Retry-After`.
    assert!(
        matches!(
            result,
            Err(RunnerError::Busy {
                status: 429,
                retry_after_secs: Some(3600),
                ..
            })
        ),
        "{result:?}"
    );
    assert!(started.elapsed() < Duration::from_secs(2));
    assert_eq!(mock.chat_requests().len(), 1);
}

#[tokio::test]
async fn every_error_shape_yields_its_message() {
    for (shape, status, expect) in [
        (
            ErrorShape::OpenAi,
            404,
            "model `x` does not exist (type: invalid_request_error)",
        ),
        (ErrorShape::OllamaString, 404, "model `x` does not exist"),
        (
            ErrorShape::VllmTopLevel,
            400,
            "model `x` does not exist (type: BadRequestError, code: 400)",
        ),
        (
            ErrorShape::LlamaCpp,
            400,
            "model `x` does not exist (type: invalid_request_error, code: 400)",
        ),
    ] {
        let mock = MockOpenAi::start(MockScript::new().reply(MockReply::error(
            shape,
            status,
            "model `x` does not exist",
        )))
        .await
        .unwrap();
        match runner(&mock, 0)
            .ask(Ask::new(&Request::prompt("q")))
            .reply()
            .await
        {
            Err(RunnerError::Upstream { status: s, message }) => {
                assert_eq!(s, Some(status), "{shape:?}");
                assert_eq!(message, expect, "{shape:?}");
            }
            other => panic!("{shape:?}: {other:?}"),
        }
    }
}

#[tokio::test]
async fn error_in_a_200_and_garbage_are_errors() {
    let mock = MockOpenAi::start(
        MockScript::new()
            .reply(MockReply::Garbage(
                json!({"object": "error", "message": "vLLM says no"}).to_string(),
            ))
            .reply(MockReply::Garbage("<html>oops</html>".into()))
            .reply(MockReply::Garbage(json!({"choices": null}).to_string())),
    )
    .await
    .unwrap();
    let r = runner(&mock, 0);
    assert!(matches!(
        r.ask(Ask::new(&Request::prompt("q"))).reply().await,
        Err(RunnerError::Upstream { message, .. }) if message == "vLLM says no"
    ));
    assert!(matches!(
        r.ask(Ask::new(&Request::prompt("q"))).reply().await,
        Err(RunnerError::Protocol { message }) if message.contains("<html>oops</html>")
    ));
    assert!(matches!(
        r.ask(Ask::new(&Request::prompt("q"))).reply().await,
        Err(RunnerError::Protocol { message }) if message.contains("no choices")
    ));
}

#[tokio::test]
async fn connect_errors_are_retried_then_reported() {
    // Bind and drop a listener: the port is (almost certainly) closed now.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let r = OpenAiRunner::new(OpenAiConfig {
        base_url: format!("http://127.0.0.1:{port}/v1"),
        model: "m".into(),
        retry: RetryConfig {
            max_retries: 1,
            initial_backoff_ms: 5,
            max_backoff_ms: 10,
            max_retry_after_secs: 1,
        },
        ..OpenAiConfig::default()
    })
    .unwrap();
    match r.ask(Ask::new(&Request::prompt("q"))).reply().await {
        Err(RunnerError::Upstream {
            status: None,
            message,
        }) => {
            assert!(message.contains("cannot connect"), "{message}");
            assert!(message.contains("2 tries"), "{message}");
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn slow_server_is_a_timeout() {
    let mock = MockOpenAi::start(
        MockScript::new().reply(MockReply::text("late").delayed(Duration::from_secs(3))),
    )
    .await
    .unwrap();
    let r = OpenAiRunner::new(OpenAiConfig {
        base_url: mock.url(),
        model: "m".into(),
        timeout_secs: 0.3,
        ..OpenAiConfig::default()
    })
    .unwrap();
    assert_eq!(
        r.ask(Ask::new(&Request::prompt("q"))).reply().await,
        Err(RunnerError::Timeout { after_ms: 300 })
    );
}

#[tokio::test]
async fn stateless_follow_up_carries_exactly_one_earlier_answer() {
    struct NeedsFixed;
    #[enforce_core::async_trait]
    impl enforce_core::Validator for NeedsFixed {
        fn name(&self) -> &str {
            "needs_fixed"
        }
        async fn validate(&self, response: &str, _: &Context) -> enforce_core::Validation {
            // A different code each attempt, so the loop sees progress and keeps asking.
            let word = response
                .rsplit(' ')
                .next()
                .unwrap_or_default()
                .to_uppercase();
            Ok(if response.contains("FIXED") {
                vec![]
            } else {
                vec![Issue::error(
                    "needs_fixed",
                    format!("NOT_FIXED_{word}"),
                    "Not fixed.",
                )]
            })
        }
    }
    let mock = MockOpenAi::start(MockScript::new().replies([
        MockReply::text("attempt one"),
        MockReply::text("attempt two"),
        MockReply::text("attempt three FIXED"),
    ]))
    .await
    .unwrap();
    let r = runner(&mock, 0);
    let request = Request {
        messages: vec![Message::system("sys"), Message::user("the question")],
        ..Request::default()
    };
    let outcome = Enforcer::new(vec![Box::new(NeedsFixed)])
        .run(&r, &request, &Context::new())
        .await;
    assert_eq!(outcome.status, Status::Passed, "{}", outcome.summary());

    let sent = mock.chat_requests();
    assert_eq!(sent.len(), 3);
    assert_eq!(sent[0].messages().len(), 2);
    let third = sent[2].messages();
    assert_eq!(
        third.len(),
        4,
        "system, user, ONE assistant answer, feedback"
    );
    assert_eq!(third[0], ("system".into(), "sys".into()));
    assert_eq!(third[1], ("user".into(), "the question".into()));
    assert_eq!(third[2], ("assistant".into(), "attempt two".into()));
    assert_eq!(third[3].0, "user");
    assert!(third[3].1.contains("NOT_FIXED_TWO"), "{}", third[3].1);
    assert!(!sent[2].body.to_string().contains("attempt one"));

    // The same through the trait directly.
    let _ = r
        .ask(Ask::follow_up(&request, &Reply::text("prev"), "feedback"))
        .reply()
        .await;
    let last = mock.chat_requests().pop().unwrap().messages();
    let assistants: Vec<_> = last.iter().filter(|(r, _)| r == "assistant").collect();
    assert_eq!(assistants.len(), 1);
}

/// An error until the answer says "FIXED".
struct SaysFixed;

#[enforce_core::async_trait]
impl enforce_core::Validator for SaysFixed {
    fn name(&self) -> &str {
        "says_fixed"
    }
    async fn validate(&self, response: &str, _: &Context) -> enforce_core::Validation {
        Ok(if response.contains("FIXED") {
            vec![]
        } else {
            vec![Issue::error("says_fixed", "NOT_FIXED", "Not fixed.")]
        })
    }
}

/// The seeds the chat requests sent, in order.
fn sent_seeds(mock: &MockOpenAi) -> Vec<serde_json::Value> {
    mock.chat_requests()
        .iter()
        .map(|r| r.body["seed"].clone())
        .collect()
}

#[tokio::test]
async fn a_feedback_reask_sends_a_new_seed_the_requests_or_the_configured_one() {
    let replies = [MockReply::text("wrong"), MockReply::text("FIXED")];
    let mock = MockOpenAi::start(MockScript::new().replies(replies.clone()))
        .await
        .unwrap();
    let mut request = Request::prompt("q");
    request.params.insert("seed".into(), json!(41));
    let enforcer = Enforcer::new(vec![Box::new(SaysFixed)]);
    let outcome = enforcer
        .run(&runner(&mock, 0), &request, &Context::new())
        .await;
    assert_eq!(outcome.status, Status::Passed, "{}", outcome.summary());
    assert_eq!(sent_seeds(&mock), vec![json!(41), json!(42)]);

    // A seed in the runner's configuration, none in the request: advanced the same way.
    let mock = MockOpenAi::start(MockScript::new().replies(replies))
        .await
        .unwrap();
    let mut configured = config(&mock, 0);
    configured.params.insert("seed".into(), json!(7));
    let seeded = OpenAiRunner::new(configured).unwrap();
    let outcome = enforcer
        .run(&seeded, &Request::prompt("q"), &Context::new())
        .await;
    assert_eq!(outcome.status, Status::Passed, "{}", outcome.summary());
    assert_eq!(sent_seeds(&mock), vec![json!(7), json!(8)]);
}

#[tokio::test]
async fn fail_first_mode_and_token_echo() {
    let mock = MockOpenAi::start(MockScript::new().then(Then::FailFirst {
        invalid: "bad {{token}}".into(),
        valid: "good {{token}}".into(),
        marker: "FEEDBACK".into(),
    }))
    .await
    .unwrap();
    let r = runner(&mock, 0);
    let request = Request::prompt("hello [token:abc123]");
    let first = r.ask(Ask::new(&request)).reply().await.unwrap();
    assert_eq!(first.text, "bad abc123");
    let second = r
        .ask(Ask::follow_up(&request, &first, "FEEDBACK: fix"))
        .reply()
        .await
        .unwrap();
    assert_eq!(second.text, "good abc123");
}
