use super::request::MessagesRequest;
use super::*;
use crate::verdict::enforcement_json;
use enforce_core::{Issue, Message, Status, StopReason};

fn parse(body: Value) -> Result<MessagesRequest, ApiError> {
    parse_messages_request(Bytes::from(body.to_string()))
}

#[test]
fn a_full_request_becomes_the_conversation_and_chat_params() {
    let request = parse(json!({
        "model": "m", "max_tokens": 1024, "stream": true,
        "system": [{"type": "text", "text": "Be brief."},
                   {"type": "text", "text": "Use tools.", "cache_control": {"type": "ephemeral"}}],
        "messages": [
            {"role": "user", "content": "Weather in Oslo?"},
            {"role": "assistant", "content": [
                {"type": "thinking", "thinking": "hmm", "signature": "s"},
                {"type": "text", "text": "Looking."},
                {"type": "tool_use", "id": "toolu_1", "name": "get_weather",
                 "input": {"city": "Oslo"}}]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1",
                 "content": [{"type": "text", "text": "12 C"}]},
                {"type": "text", "text": "And tomorrow?"}]}
        ],
        "tools": [{"name": "get_weather", "description": "Weather",
                   "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}},
                  {"type": "web_search_20250305", "name": "web_search"}],
        "tool_choice": {"type": "tool", "name": "get_weather", "disable_parallel_tool_use": true},
        "stop_sequences": ["END"], "temperature": 0.2, "top_k": 5,
        "metadata": {"user_id": "u-1"},
        "thinking": {"type": "enabled", "budget_tokens": 1024},
        "enforce": {"context": {"a": 1}}
    }))
    .unwrap();
    assert!(request.stream);
    assert_eq!(request.enforce, Some(json!({"context": {"a": 1}})));
    assert_eq!(
        request.messages,
        [
            Message::system("Be brief.\nUse tools."),
            Message::user("Weather in Oslo?"),
            Message::assistant_calling(
                "Looking.",
                vec![ToolCall::new(
                    "toolu_1",
                    "get_weather",
                    r#"{"city":"Oslo"}"#
                )]
            ),
            Message::tool("toolu_1", "12 C"),
            Message::user("And tomorrow?"),
        ]
    );
    assert_eq!(
        Value::Object(request.params.clone()),
        json!({
            "max_tokens": 1024, "temperature": 0.2, "top_k": 5, "stop": ["END"],
            "user": "u-1",
            "tools": [{"type": "function", "function": {"name": "get_weather",
                "description": "Weather", "parameters":
                {"type": "object", "properties": {"city": {"type": "string"}}}}}],
            "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
            "parallel_tool_calls": false
        })
    );
    assert_eq!(request.ignored, ["tools.web_search_20250305", "thinking"]);
    assert_eq!(request.chat_id(None).as_deref(), Some("u-1"));
    assert_eq!(request.chat_id(Some("c-9")).as_deref(), Some("c-9"));
}

#[test]
fn text_blocks_join_as_chat_text_parts_do_and_images_become_chat_parts() {
    let request = parse(
        json!({"model": "m", "messages": [{"role": "user", "content": [
        {"type": "text", "text": "one"},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AA=="}},
        {"type": "text", "text": "two"},
        {"type": "image", "source": {"type": "file", "file_id": "f"}},
        {"type": "document", "source": {"type": "text", "data": "d"}}]}]}),
    )
    .unwrap();
    let mut expected = Message::user("one\ntwo");
    expected.parts = vec![
        json!({"type": "text", "text": "one"}),
        json!({"type": "image_url", "image_url": {"url": "data:image/png;base64,AA=="}}),
        json!({"type": "text", "text": "two"}),
    ];
    assert_eq!(request.messages, [expected]);
    assert_eq!(
        request.ignored,
        ["messages.content.image", "messages.content.document"]
    );
    assert!(!request.stream);
    assert!(request.params.is_empty());
    let request = parse(json!({"model": "m", "messages": [
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t",
                                      "content": "boom", "is_error": true}]}]}))
    .unwrap();
    assert_eq!(request.messages, [Message::tool("t", "[tool error]\nboom")]);
}

/// A field sent twice counts once (the last), `enforce: null` stays one, a `null` sampling
/// field and an empty `stop_sequences` are not forwarded and every unread field is listed once, after the server tools.
#[test]
fn repeats_nulls_and_unread_fields_are_read_as_a_map_reads_them() {
    let request = parse_messages_request(Bytes::from_static(
        br#"{"model":"a","model":"b","max_tokens":5,"enforce":null,"temperature":null,
        "top_k":3,"top_k":4,"zeta":1,"alpha":2,"alpha":3,"stop_sequences":[],
        "tools":[{"type":"web_search_20250305","name":"w"}],
        "messages":[{"role":"user","content":"q"}]}"#,
    ))
    .expect("read");
    assert_eq!(request.model, "b");
    assert_eq!(request.enforce, Some(Value::Null));
    assert_eq!(
        Value::Object(request.params),
        json!({"max_tokens": 5, "top_k": 4})
    );
    assert_eq!(
        request.ignored,
        ["tools.web_search_20250305", "alpha", "zeta"]
    );
    let refused = parse(json!({"model": "m", "max_tokens": null,
        "messages": [{"role": "user", "content": "q"}]}));
    assert_eq!(refused.expect_err("refused").param, Some("max_tokens"));
}

#[test]
fn malformed_requests_are_400s_naming_the_field() {
    for (body, param) in [
        (
            json!({"messages": [{"role": "user", "content": "x"}]}),
            "model",
        ),
        (json!({"model": "m"}), "messages"),
        (json!({"model": "m", "messages": []}), "messages"),
        (
            json!({"model": "m", "messages": [{"role": "system", "content": "x"}]}),
            "messages",
        ),
        (
            json!({"model": "m", "messages": [{"role": "user", "content": 5}]}),
            "messages",
        ),
        (
            json!({"model": "m", "messages": [{"role": "user", "content": [
            {"type": "tool_use", "id": "t", "name": "f", "input": {}}]}]}),
            "messages",
        ),
        (
            json!({"model": "m", "messages": [{"role": "user", "content": [
            {"type": "tool_result", "content": "x"}]}]}),
            "messages",
        ),
        (
            json!({"model": "m", "messages": [{"role": "assistant", "content": [
            {"type": "tool_use", "name": "f", "input": {}}]}]}),
            "messages",
        ),
        (
            json!({"model": "m", "max_tokens": 0, "messages": [{"role": "user", "content": "x"}]}),
            "max_tokens",
        ),
        (
            json!({"model": "m", "system": 3, "messages": [{"role": "user", "content": "x"}]}),
            "system",
        ),
        (
            json!({"model": "m", "stop_sequences": "END", "messages": [{"role": "user", "content": "x"}]}),
            "stop_sequences",
        ),
        (
            json!({"model": "m", "tools": [{"name": "f"}], "messages": [{"role": "user", "content": "x"}]}),
            "tools",
        ),
        (
            json!({"model": "m", "tool_choice": {"type": "maybe"}, "messages": [{"role": "user", "content": "x"}]}),
            "tool_choice",
        ),
    ] {
        let error = parse(body.clone()).expect_err(&body.to_string());
        assert_eq!(error.status, StatusCode::BAD_REQUEST, "{body}");
        assert_eq!(error.param, Some(param), "{body}: {}", error.message);
    }
    assert!(parse_messages_request(Bytes::from_static(b"{not json")).is_err());
    assert!(parse_messages_request(Bytes::from_static(b"[1]")).is_err());
}

fn outcome(status: Status, calls: Vec<ToolCall>) -> Outcome {
    let mut outcome = Outcome {
        status,
        stop_reason: StopReason::Clean,
        response: Some("Sunny.".into()),
        tool_calls: calls,
        issues: Vec::new(),
        warnings: Vec::new(),
        attempts: Vec::new(),
        input: None,
        fallback_used: false,
        session_id: None,
        usage: Some(Usage {
            input_tokens: 20,
            output_tokens: 7,
        }),
        cost_usd: None,
        total_us: 0,
        runner_us: 0,
        unavailable_statuses: Default::default(),
    };
    if status != Status::Passed {
        outcome.issues = vec![Issue::error("json", "INVALID_JSON", "Not JSON.")];
    }
    outcome
}

#[test]
fn an_answer_renders_as_a_message_with_enforcement() {
    let calls = vec![ToolCall::new(
        "toolu_1",
        "get_weather",
        r#"{"city":"Oslo"}"#,
    )];
    let outcome_1 = outcome(Status::Passed, calls);
    let message =
        serde_json::to_value(MessageBody::of("msg_1", "m", "Sunny.", &outcome_1)).unwrap();
    assert_eq!(message["type"], "message");
    assert_eq!(message["role"], "assistant");
    assert_eq!(
        message["content"],
        json!([{"type": "text", "text": "Sunny."},
               {"type": "tool_use", "id": "toolu_1", "name": "get_weather",
                "input": {"city": "Oslo"}}])
    );
    assert_eq!(message["stop_reason"], "tool_use");
    assert_eq!(
        message["usage"],
        json!({"input_tokens": 20, "output_tokens": 7})
    );
    assert_eq!(message["enforcement"]["status"], "passed");
    let outcome_2 = outcome(Status::Repaired, vec![]);
    let message = serde_json::to_value(MessageBody::of("msg_2", "m", "", &outcome_2)).unwrap();
    assert_eq!(message["content"], json!([]));
    assert_eq!(message["stop_reason"], "end_turn");
    assert_eq!(message["enforcement"]["status"], "repaired");
}

/// The answer holds every field of a Messages response: text, tool calls, escapes.
#[test]
fn the_message_holds_every_field_of_the_answer() {
    let calls = vec![ToolCall::new(
        "toolu_1",
        "get_weather",
        r#"{"city":"Oslo"}"#,
    )];
    for (text, calls) in [
        ("Sunny.", calls),
        ("", Vec::new()),
        ("Both \"quoted\".", Vec::new()),
    ] {
        let outcome = outcome(Status::Passed, calls);
        let mut content = Vec::new();
        if !text.is_empty() {
            content.push(json!({"type": "text", "text": text}));
        }
        for call in &outcome.tool_calls {
            content.push(json!({"type": "tool_use", "id": call.id, "name": call.name,
                                "input": serde_json::from_str::<Value>(&call.arguments).unwrap()}));
        }
        let expected = json!({
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "model": "m",
            "content": content,
            "stop_reason": stop_reason(&outcome),
            "stop_sequence": null,
            "usage": {"input_tokens": 20, "output_tokens": 7},
            "enforcement": enforcement_json(&outcome),
        });
        let message = MessageBody::of("msg_1", "m", text, &outcome);
        assert_eq!(serde_json::to_value(&message).unwrap(), expected, "{text}");
    }
}

/// The events of a stream, as (event name, data) pairs, checked to be well formed: every
/// `event:` line's name equals its data's `type`.
fn parse_events(bytes: &[u8]) -> Vec<(String, Value)> {
    let text = std::str::from_utf8(bytes).unwrap();
    text.split("\n\n")
        .filter(|e| !e.is_empty())
        .map(|event| {
            let mut lines = event.lines();
            let name = lines.next().unwrap().strip_prefix("event: ").unwrap();
            let data: Value =
                serde_json::from_str(lines.next().unwrap().strip_prefix("data: ").unwrap())
                    .unwrap();
            assert_eq!(data["type"], name, "{event}");
            assert!(lines.next().is_none());
            (name.to_string(), data)
        })
        .collect()
}

#[test]
fn a_stream_holds_everything_until_the_verdict_then_writes_it_whole() {
    let calls = vec![ToolCall::new(
        "toolu_1",
        "get_weather",
        r#"{ "city" : "Oslo" }"#,
    )];
    let outcome = outcome(Status::Passed, calls);
    let mut writer = MessagesEvents::new("msg_1", "m");
    let mut out = Vec::new();
    writer.open(&mut out);
    writer.finish(
        "Sunny.",
        &outcome,
        &Enforcement::of(&outcome),
        None,
        &mut out,
    );
    let names: Vec<String> = parse_events(&out).into_iter().map(|(n, _)| n).collect();
    assert_eq!(
        names,
        [
            "message_start",
            "content_block_start",
            "content_block_delta",
            "content_block_stop",
            "content_block_start",
            "content_block_delta",
            "content_block_stop",
            "message_delta",
            "message_stop"
        ]
    );
    let events = parse_events(&out);
    assert_eq!(events[0].1["message"]["id"], "msg_1");
    assert_eq!(
        events[2].1["delta"],
        json!({"type": "text_delta", "text": "Sunny."})
    );
    assert_eq!(events[4].1["index"], 1);
    assert_eq!(events[4].1["content_block"]["name"], "get_weather");
    let partial = events[5].1["delta"]["partial_json"].as_str().unwrap();
    assert_eq!(
        serde_json::from_str::<Value>(partial).unwrap(),
        json!({"city": "Oslo"})
    );
    assert_eq!(events[7].1["delta"]["stop_reason"], "tool_use");
    assert_eq!(events[7].1["usage"]["output_tokens"], 7);
    assert_eq!(events[7].1["enforcement"]["status"], "passed");
}

#[test]
fn drafts_are_a_thinking_block_closed_before_the_answer_or_the_error() {
    let outcome = outcome(Status::Passed, vec![]);
    let mut writer = MessagesEvents::new("msg_1", "m");
    let mut out = Vec::new();
    writer.draft("first try", &mut out);
    writer.draft(" more", &mut out);
    writer.finish(
        "Sunny.",
        &outcome,
        &Enforcement::of(&outcome),
        None,
        &mut out,
    );
    let events = parse_events(&out);
    assert_eq!(events[0].0, "message_start");
    assert_eq!(events[1].1["content_block"]["type"], "thinking");
    assert_eq!(events[2].1["delta"]["thinking"], "first try");
    assert_eq!(events[3].1["delta"]["thinking"], " more");
    assert_eq!(
        events[4].1,
        json!({"type": "content_block_stop", "index": 0})
    );
    assert_eq!(events[5].1["index"], 1);
    assert_eq!(events[5].1["content_block"]["type"], "text");

    let mut writer = MessagesEvents::new("msg_2", "m");
    let mut out = Vec::new();
    writer.draft("try", &mut out);
    let mut error = ApiError::new(
        StatusCode::UNPROCESSABLE_ENTITY,
        "enforcement_error",
        "enforcement_unresolved",
        "The answer still broke the format.",
    );
    error.enforcement = Some(Box::new(json!({"status": "unresolved"})));
    writer.fail(&error, &mut out);
    let events = parse_events(&out);
    let (last_name, last) = events.last().unwrap();
    assert_eq!(events[events.len() - 2].0, "content_block_stop");
    assert_eq!(last_name, "error");
    assert_eq!(
        last,
        &json!({"type": "error", "error": {"type": "invalid_request_error",
                "message": "The answer still broke the format.",
                "code": "enforcement_unresolved"},
                "enforcement": {"status": "unresolved"}})
    );
}

#[test]
fn errors_take_anthropics_shape_with_the_message_first() {
    let mut error = ApiError::new(
        StatusCode::TOO_MANY_REQUESTS,
        "rate_limit_error",
        "too_many_requests",
        "Too many requests at once.",
    );
    error.retry_after = Some(2);
    error.enforcement = Some(Box::new(json!({"status": "aborted"})));
    let body = error_body(&error);
    assert!(
        body.starts_with(r#"{"type":"error","error":{"type":"rate_limit_error","message":"Too many requests at once.""#),
        "{body}"
    );
    let response = error_response(error);
    assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(response.headers()["retry-after"], "2");
    for (status, kind) in [
        (400, "invalid_request_error"),
        (401, "authentication_error"),
        (403, "permission_error"),
        (404, "not_found_error"),
        (413, "request_too_large"),
        (422, "invalid_request_error"),
        (502, "api_error"),
        (503, "overloaded_error"),
        (504, "timeout_error"),
    ] {
        assert_eq!(error_type(StatusCode::from_u16(status).unwrap()), kind);
    }
    let tail = unfinished_tail();
    let events = parse_events(&tail);
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].1["error"]["code"], "stream_interrupted");
}

/// The events of an answer, in order: text in one piece and in several, tool calls with and
/// without text, after a draft, with a route and warnings.
#[test]
fn the_events_hold_the_answer_in_order() {
    fn event(out: &mut Vec<u8>, name: &str, data: &Value) {
        out.extend_from_slice(b"event: ");
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(b"\ndata: ");
        out.extend_from_slice(data.to_string().as_bytes());
        out.extend_from_slice(b"\n\n");
    }
    /// The events `open` and `finish` write; `first`: the first block's index (after a
    /// draft's thinking block, closed here).
    fn reference(
        id: &str,
        first: usize,
        text: &str,
        outcome: &Outcome,
        enforcement: Value,
        warnings: Option<&Value>,
    ) -> Vec<u8> {
        let mut out = Vec::new();
        if first == 0 {
            event(
                &mut out,
                "message_start",
                &json!({"type": "message_start", "message": {
                "id": id, "type": "message", "role": "assistant", "model": "m",
                "content": [], "stop_reason": null, "stop_sequence": null,
                "usage": {"input_tokens": 0, "output_tokens": 0}}}),
            );
        } else {
            event(
                &mut out,
                "content_block_stop",
                &json!({"type": "content_block_stop", "index": 0}),
            );
        }
        let mut index = first;
        if !text.is_empty() {
            event(
                &mut out,
                "content_block_start",
                &json!({"type": "content_block_start", "index": index,
                "content_block": {"type": "text", "text": ""}}),
            );
            for piece in crate::stream::pieces(text, 2048) {
                event(
                    &mut out,
                    "content_block_delta",
                    &json!({"type": "content_block_delta",
                    "index": index, "delta": {"type": "text_delta", "text": piece}}),
                );
            }
            event(
                &mut out,
                "content_block_stop",
                &json!({"type": "content_block_stop", "index": index}),
            );
            index += 1;
        }
        for call in &outcome.tool_calls {
            event(
                &mut out,
                "content_block_start",
                &json!({"type": "content_block_start", "index": index,
                "content_block": {"type": "tool_use", "id": call.id, "name": call.name, "input": {}}}),
            );
            let input = tool_input(call).to_string();
            for piece in crate::stream::pieces(&input, 2048) {
                event(
                    &mut out,
                    "content_block_delta",
                    &json!({"type": "content_block_delta",
                    "index": index, "delta": {"type": "input_json_delta", "partial_json": piece}}),
                );
            }
            event(
                &mut out,
                "content_block_stop",
                &json!({"type": "content_block_stop", "index": index}),
            );
            index += 1;
        }
        let usage = outcome.usage.unwrap_or_default();
        let mut delta = json!({"type": "message_delta",
            "delta": {"stop_reason": stop_reason(outcome), "stop_sequence": null},
            "usage": {"input_tokens": usage.input_tokens, "output_tokens": usage.output_tokens},
            "enforcement": enforcement});
        if let Some(warnings) = warnings {
            delta["warnings"] = warnings.clone();
        }
        event(&mut out, "message_delta", &delta);
        event(&mut out, "message_stop", &json!({"type": "message_stop"}));
        out
    }

    let call = ToolCall::new("toolu_1", "get_weather", r#"{ "city" : "Oslo \"N\"" }"#);
    let mut with_usage = outcome(Status::Unresolved, Vec::new());
    with_usage.usage = Some(enforce_core::Usage {
        input_tokens: 5,
        output_tokens: 9,
    });
    let long = "ø".repeat(3000);
    let answers = [
        ("Sunny \"and\" warm.", outcome(Status::Passed, Vec::new())),
        ("", outcome(Status::Passed, vec![call.clone()])),
        ("Looking.", outcome(Status::Repaired, vec![call])),
        (long.as_str(), with_usage),
    ];
    let route = json!({"name": "r", "profile": "p", "by": "label"});
    let ignored = vec!["top_k".to_string()];
    for (text, outcome) in &answers {
        for (drafted, routed, warned) in [(false, false, false), (true, true, true)] {
            let mut writer = MessagesEvents::new("msg_\"1", "m");
            let mut typed = Vec::new();
            if drafted {
                writer.draft("a draft", &mut typed);
            }
            // What `finish` writes; after a draft, from the thinking block's end.
            let start = typed.len();
            let route = routed.then_some(&route);
            let enforcement = Enforcement::of(outcome).routed(route);
            let warnings = if warned {
                crate::pipeline::Warnings::of(&ignored)
            } else {
                None
            };
            writer.finish(text, outcome, &enforcement, warnings.as_ref(), &mut typed);
            let written = &typed[start..];
            let mut expected_enforcement = enforcement_json(outcome);
            if let (Some(route), Some(object)) = (route, expected_enforcement.as_object_mut()) {
                object.insert("route".into(), route.clone());
            }
            let expected_warnings = warned.then(|| {
                serde_json::to_value(crate::pipeline::Warnings::of(&ignored)).expect("warnings")
            });
            let expected = reference(
                "msg_\"1",
                usize::from(drafted),
                text,
                outcome,
                expected_enforcement,
                expected_warnings.as_ref(),
            );
            assert_eq!(
                parse_events(written),
                parse_events(&expected),
                "{text:?}, drafted {drafted}"
            );
        }
    }
}
