"""``llm_judge`` validators from Python: the judge is a callable given as ``judge=`` (its
``runner:`` in the file is what the CLI and the proxy ask); without one the configuration is
refused with a ``ConfigError`` that says what to pass."""

import textwrap

import pytest

import enforce_llm

# The runner points nowhere: from Python it is never built, the judge callable stands in.
CONFIG = textwrap.dedent(
    """\
    validators:
      polite:
        type: llm_judge
        runner: {type: openai, base_url: "http://127.0.0.1:9/v1", model: judge}
        prompt: "Is this answer polite? {{response}} Answer YES or NO and why."
        fail_mode: closed
    profiles:
      judged:
        validators: [polite]
        max_retries: 2
    """
)


@pytest.fixture
def config(tmp_path):
    path = tmp_path / "enforce.yaml"
    path.write_text(CONFIG)
    return path


def rude_detector(seen):
    def judge(messages):
        seen.append(messages)
        question = messages[-1]["content"]
        return "NO: it calls the reader an idiot" if "idiot" in question else "YES"

    return judge


def test_without_a_judge_the_profile_is_refused_with_what_to_pass(config):
    for load in (
        lambda: enforce_llm.Profile("judged", config),
        lambda: enforce_llm.check("Hello.", profile="judged", config=config),
        lambda: enforce_llm.Enforcer("judged", lambda m: "x", config),
    ):
        with pytest.raises(enforce_llm.ConfigError) as raised:
            load()
        message = str(raised.value)
        assert f"{config}:4:5: validators.polite.runner:" in message, message
        assert "judge=" in message, message


def test_the_judge_callable_gives_the_verdicts_of_a_check(config):
    seen = []
    profile = enforce_llm.Profile("judged", config, judge=rude_detector(seen))
    rude = profile.check("You idiot, read the manual.")
    assert rude.status == "unresolved"
    assert rude.codes == ["JUDGE_REJECTED"]
    assert "calls the reader an idiot" in rude.issues[0].message
    assert profile.check("Please read the manual.").status == "passed"
    # The judge got the question of the file's prompt, with the answer quoted in it.
    assert len(seen) == 2
    assert seen[0][-1]["role"] == "user"
    assert "Is this answer polite?" in seen[0][-1]["content"]
    assert "You idiot, read the manual." in seen[0][-1]["content"]
    # The module-level functions take it too.
    judge = rude_detector([])
    assert enforce_llm.check("idiot", profile="judged", config=config, judge=judge).codes == [
        "JUDGE_REJECTED"
    ]


def test_the_loop_asks_again_when_the_judge_rejects(config):
    answers = iter(["Read the manual, idiot.", "Please read the manual."])
    got = []

    def model(messages):
        got.append(messages)
        return next(answers)

    enforcer = enforce_llm.Enforcer("judged", model, config, judge=rude_detector([]))
    outcome = enforcer.run("How do I start?")
    assert outcome.status == "passed", outcome.to_json()
    assert outcome.attempts == 2
    assert outcome.answer == "Please read the manual."
    # The re-ask carried the judge's reason as feedback.
    assert "idiot" in got[1][-1]["content"]


def test_a_failing_judge_is_no_verdict_and_fail_mode_decides(config):
    def broken(messages):
        raise RuntimeError("judge down")

    outcome = enforce_llm.Profile("judged", config, judge=broken).check("Hello.")
    # fail_mode: closed: without a verdict the check cannot pass.
    assert outcome.status == "unavailable", outcome.to_json()
    assert not outcome.ok


def test_an_async_judge_is_refused_at_once(config):
    async def judge(messages):
        return "YES"

    with pytest.raises(TypeError, match="async def"):
        enforce_llm.Profile("judged", config, judge=judge)
    with pytest.raises(TypeError, match="callable"):
        enforce_llm.Enforcer("judged", None, config, judge="YES")
