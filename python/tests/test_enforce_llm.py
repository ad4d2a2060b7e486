"""The Python API of enforce (the `enforce-llm` wheel), run by `cargo xtask test` against the
wheel it builds and installs into target/python-venv."""

import asyncio
import json
import textwrap

import pytest

import enforce_llm

CONFIG = textwrap.dedent(
    """\
    validators:
      no_secrets:
        type: pattern
        forbidden:
          - regex: 'SECRET-\\d+'
            code: LEAKED_SECRET
            message: "Do not reveal '{match}'."
            hint: Leave the secret out.
      answer_json:
        type: json
        schema:
          type: object
          required: [summary]
          properties:
            summary: {type: string}
      no_disclaimer:
        type: pattern
        forbidden:
          - regex: '(?i)as an ai,? '
            code: AI_DISCLAIMER
            replacement: ""
    profiles:
      strict:
        validators: [no_secrets]
        max_retries: 2
        partial_check_bytes: 8
      summary_json:
        validators: [answer_json]
        max_retries: 2
      plain:
        validators: [no_disclaimer]
    """
)


@pytest.fixture
def config(tmp_path):
    path = tmp_path / "enforce.yaml"
    path.write_text(CONFIG)
    return path


def test_check_reports_the_issues_of_a_builtin_profile():
    outcome = enforce_llm.check("Which database do you use?", profile="chat")
    assert outcome.status == "unresolved"
    assert not outcome.ok
    assert outcome.attempts == 0
    assert "MISSING_STEP_MARKER" in outcome.codes
    issue = outcome.issues[0]
    assert issue.severity == "error"
    assert issue.message
    assert outcome.answer == "Which database do you use?"


def test_check_passes_clean_text_from_a_yaml_profile(config):
    outcome = enforce_llm.check("Nothing to hide.", profile="strict", config=config)
    assert outcome.status == "passed", outcome
    assert outcome.ok and outcome.issues == []
    leaked = enforce_llm.check("It is SECRET-7.", profile="strict", config=str(config))
    assert leaked.status == "unresolved"
    [issue] = leaked.issues
    assert (issue.code, issue.line, issue.hint) == ("LEAKED_SECRET", 1, "Leave the secret out.")
    assert "SECRET-7" in issue.message


def test_repair_applies_the_deterministic_repairs(config):
    outcome = enforce_llm.repair("As an AI, I think so.", profile="plain", config=config)
    assert outcome.status == "repaired", outcome
    assert outcome.answer == "I think so."
    assert outcome.repairs == ["no_disclaimer"]
    builtin = enforce_llm.repair("Which database do you use?", profile="chat")
    assert builtin.status == "repaired"
    assert builtin.answer.endswith("<!-- STEP: what -->")


def test_a_failed_answer_is_asked_again_with_the_feedback(config):
    calls = []

    def model(messages):
        calls.append(messages)
        return "The code is SECRET-42." if len(calls) == 1 else "I cannot share the code."

    enforcer = enforce_llm.Enforcer(profile="strict", model=model, config=config)
    outcome = enforcer.run("What is the code?")
    assert outcome.status == "passed", outcome
    assert outcome.answer == "I cannot share the code."
    assert outcome.attempts == 2
    assert calls[0] == [{"role": "user", "content": "What is the code?"}]
    reask = calls[1]
    assert reask[:2] == [
        {"role": "user", "content": "What is the code?"},
        {"role": "assistant", "content": "The code is SECRET-42."},
    ]
    assert reask[2]["role"] == "user"
    feedback = reask[2]["content"]
    assert "LEAKED_SECRET" in feedback and "Leave the secret out." in feedback


def test_messages_and_context_reach_the_loop(config):
    seen = []

    def model(messages):
        seen.append(messages)
        return '{"summary": "ok"}'

    enforcer = enforce_llm.Enforcer(profile="summary_json", model=model, config=config)
    outcome = enforcer.run(
        [{"role": "system", "content": "Answer in JSON."}, {"role": "user", "content": "Go."}],
        context={"company_name": "ACME"},
    )
    assert outcome.ok, outcome
    assert [m["role"] for m in seen[0]] == ["system", "user"]
    record = json.loads(outcome.to_json())
    assert record["status"] == "passed" and len(record["attempts"]) == 1


def test_a_json_schema_contract_is_met_after_a_reask(config):
    answers = iter(['{"title": "x"}', '{"summary": "fixed"}'])
    seen = []

    def model(messages):
        seen.append(messages[-1]["content"])
        return next(answers)

    outcome = enforce_llm.Enforcer(profile="summary_json", model=model, config=config).run("Go.")
    assert outcome.status == "passed", outcome
    assert json.loads(outcome.answer) == {"summary": "fixed"}
    assert "SCHEMA_VIOLATION" in seen[1]


def test_an_async_callable_is_awaited(config):
    calls = []

    async def model(messages):
        await asyncio.sleep(0)
        calls.append(messages)
        return "SECRET-1" if len(calls) == 1 else "Nothing."

    enforcer = enforce_llm.Enforcer(profile="strict", model=model, config=config)
    outcome = asyncio.run(enforcer.arun("Tell me."))
    assert outcome.status == "passed", outcome
    assert outcome.attempts == 2
    assert "LEAKED_SECRET" in calls[1][-1]["content"]
    # The same callable from synchronous code.
    calls.clear()
    assert enforcer.run("Tell me.").status == "passed"
    assert len(calls) == 2


def test_arun_keeps_the_event_loop_free(config):
    async def model(messages):
        await asyncio.sleep(0.05)
        return "Nothing."

    async def main():
        ticks = 0

        async def tick():
            nonlocal ticks
            while True:
                ticks += 1
                await asyncio.sleep(0.001)

        ticker = asyncio.ensure_future(tick())
        outcome = await enforce_llm.Enforcer(profile="strict", model=model, config=config).arun("x")
        ticker.cancel()
        return outcome, ticks

    outcome, ticks = asyncio.run(main())
    assert outcome.ok
    assert ticks > 5, "the event loop was blocked while the model ran"


def streaming_model(state):
    """A model whose first answer streams a secret early and then a lot more text."""

    def model(messages):
        state["calls"] += 1
        if state["calls"] > 1:
            return iter(["All ", "clear."])

        def chunks():
            try:
                yield "Sure. "
                yield "The code is SECRET-42 "
                for _ in range(1000):
                    state["consumed_after_secret"] += 1
                    yield "and more text "
            finally:
                state["closed"] = True

        # Kept alive here, so only an explicit close() (not garbage collection) closes it.
        state["stream"] = chunks()
        return state["stream"]

    return model


def test_early_abort_stops_consuming_a_streamed_answer(config):
    state = {"calls": 0, "consumed_after_secret": 0, "closed": False}
    enforcer = enforce_llm.Enforcer(profile="strict", model=streaming_model(state), config=config)
    outcome = enforcer.run("What is the code?")
    assert outcome.status == "passed", outcome
    assert outcome.answer == "All clear."
    assert state["closed"], "the cut stream was not closed"
    assert state["consumed_after_secret"] < 5, state
    first = json.loads(outcome.to_json())["attempts"][0]
    assert first["cut"]["codes"] == ["LEAKED_SECRET"]


def test_early_abort_stops_an_async_stream(config):
    state = {"calls": 0, "consumed_after_secret": 0, "closed": False, "streams": []}

    def model(messages):
        state["calls"] += 1

        async def chunks(call):
            if call > 1:
                yield "All clear."
                return
            try:
                yield "The code is SECRET-42 "
                for _ in range(1000):
                    state["consumed_after_secret"] += 1
                    yield "and more text "
            finally:
                state["closed"] = True

        state["streams"].append(chunks(state["calls"]))
        return state["streams"][-1]

    enforcer = enforce_llm.Enforcer(profile="strict", model=model, config=config)

    async def main():
        outcome = await enforcer.arun("What is the code?")
        # Before asyncio.run's shutdown closes every async generator left open.
        return outcome, state["closed"]

    outcome, closed = asyncio.run(main())
    assert outcome.status == "passed", outcome
    assert closed, "the cut async stream was not closed"
    assert state["consumed_after_secret"] < 5, state


def test_a_failing_model_is_a_failed_attempt():
    def model(messages):
        raise ConnectionError("upstream down")

    outcome = enforce_llm.Enforcer(profile="chat", model=model).run("Hi")
    assert outcome.status == "aborted"
    assert outcome.stop_reason == "runner_failed"
    assert "upstream down" in outcome.error

    def interrupted(messages):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        enforce_llm.Enforcer(profile="chat", model=interrupted).run("Hi")


def test_a_bad_config_raises_with_file_line_and_key(tmp_path):
    path = tmp_path / "enforce.yaml"
    path.write_text("profiles:\n  p:\n    validatorz: [json]\n")
    with pytest.raises(enforce_llm.ConfigError) as raised:
        enforce_llm.check("x", config=path)
    message = str(raised.value)
    assert message.startswith(f"{path}:3:"), message
    assert "profiles.p.validatorz" in message
    assert isinstance(raised.value, ValueError)

    path.write_text("validators:\n  v:\n    type: pattern\n    forbidden: [{regex: '('}]\n")
    with pytest.raises(enforce_llm.ConfigError, match=r"enforce\.yaml:\d+:.*validators\.v"):
        enforce_llm.Enforcer(config=path)

    with pytest.raises(enforce_llm.ConfigError, match="no profile named 'nope'"):
        enforce_llm.check("x", profile="nope")


def test_a_changed_config_is_read_again(tmp_path):
    path = tmp_path / "enforce.yaml"
    path.write_text("validators:\n  v: {type: length, max: 3}\nprofiles:\n  p: {validators: [v]}\n")
    assert enforce_llm.check("four words right here", profile="p", config=path).codes == [
        "TOO_LONG"
    ]
    path.write_text(
        "validators:\n  v: {type: length, max: 30}\nprofiles:\n  p: {validators: [v]}\n"
    )
    assert enforce_llm.check("four words right here", profile="p", config=path).ok


def test_report_summarises_audit_records_as_enforce_report_does(config, tmp_path):
    answers = iter(["The code is SECRET-42.", "I cannot share the code.", "SECRET-1", "SECRET-2", "SECRET-3"])
    enforcer = enforce_llm.Enforcer(profile="strict", model=lambda messages: next(answers), config=config)
    fixed = enforcer.run("What is the code?")
    leaked = enforcer.run("And now?")
    assert (fixed.status, leaked.status) == ("passed", "unresolved")
    log = tmp_path / "audit.jsonl"
    log.write_text(fixed.to_json() + "\n" + leaked.to_json() + "\n" + '{"torn": \n')

    summary = enforce_llm.report(log)
    assert summary["outcomes"]["total"] == 2
    assert summary["outcomes"]["passed"] == 1
    assert summary["outcomes"]["unresolved"] == 1
    assert summary["input"]["invalid"] == 1
    assert summary["attempts"]["total"] == 5
    leaks = [c for c in summary["issue_codes"] if c["code"] == "LEAKED_SECRET"]
    assert [(c["occurrences"], c["requests"]) for c in leaks] == [(4, 2)]
    assert json.loads(json.dumps(summary)) == summary

    assert enforce_llm.report([log, str(log)])["outcomes"]["total"] == 4
    with pytest.raises(OSError, match="absent.jsonl"):
        enforce_llm.report(tmp_path / "absent.jsonl")
    with pytest.raises(ValueError, match="last tuesday"):
        enforce_llm.report(log, since="last tuesday")
