"""`enforce_llm.eval`: `enforce eval` with a Python callable as the model, against the wheel
`cargo xtask test` builds. The model here answers prose first and the contract's JSON once it
is shown its answer and the feedback, so each arm's valid count is known in advance."""

import json
import textwrap

import pytest

import enforce_llm

CONFIG = textwrap.dedent(
    """\
    validators:
      city:
        type: json
        bare: true
        schema:
          type: object
          required: [city]
    profiles:
      city_json:
        validators: [city]
        max_retries: 2
    """
)

CASES = ["Paris", "Lima", "Oslo"]


@pytest.fixture
def files(tmp_path):
    config = tmp_path / "enforce.yaml"
    config.write_text(CONFIG)
    dataset = tmp_path / "cities.jsonl"
    dataset.write_text(
        "".join(json.dumps({"id": c.lower(), "prompt": f"{c} as JSON"}) + "\n" for c in CASES)
    )
    return config, dataset


class LearnsFromFeedback:
    """Prose to a first ask and to a resample (the prompt alone); JSON once the conversation
    holds its previous answer (a re-ask with feedback). Counts its calls."""

    def __init__(self):
        self.calls = 0

    def __call__(self, messages):
        self.calls += 1
        if any(m["role"] == "assistant" for m in messages):
            return json.dumps({"city": messages[0]["content"].split()[0]})
        return "Surely a fine city."


def valid(summary):
    return {arm["arm"]: (arm["valid"]["k"], arm["valid"]["n"]) for arm in summary["arms"]}


def test_each_arm_counts_the_valid_answers_the_model_gives_it(files, tmp_path):
    config, dataset = files
    model = LearnsFromFeedback()
    summary = enforce_llm.eval(
        dataset,
        model,
        config=config,
        profile="city_json",
        arms="none,resample,feedback",
        repeats=2,
        seed=3,
    )
    assert valid(summary) == {"none": (0, 6), "resample": (0, 6), "feedback": (6, 6)}
    assert summary["setup"]["runner"] == "python"
    assert summary["setup"]["seed"] == 3
    pair = next(p for p in summary["pairs"] if (p["a"], p["b"]) == ("none", "feedback"))
    assert (pair["paired"], pair["only_a"], pair["only_b"]) == (6, 0, 6)
    assert sorted(tmp_path.iterdir()) == sorted(files), "nothing written without output_dir"


def test_an_output_dir_gets_the_files_and_a_rerun_asks_nothing_again(files, tmp_path):
    config, dataset = files
    out = tmp_path / "results"
    model = LearnsFromFeedback()
    first = enforce_llm.eval(
        dataset, model, config=config, profile="city_json", arms=["none", "feedback"], output_dir=out
    )
    for name in ["attempts.jsonl", "answers.jsonl", "summary.json", "junit.xml", "report.html"]:
        assert (out / name).is_file(), name
    assert json.loads((out / "summary.json").read_text()) == first
    calls = model.calls
    again = enforce_llm.eval(
        dataset, model, config=config, profile="city_json", arms="none,feedback", output_dir=out
    )
    assert model.calls == calls
    assert valid(again) == {"none": (0, 3), "feedback": (3, 3)}


def test_an_async_model_runs_concurrently(files):
    config, dataset = files

    async def model(messages):
        if any(m["role"] == "assistant" for m in messages):
            return '{"city": "somewhere"}'
        return "prose"

    summary = enforce_llm.eval(
        dataset, model, config=config, profile="city_json", arms="feedback", concurrency=3
    )
    assert valid(summary) == {"feedback": (3, 3)}


def test_bad_input_raises_value_error_naming_it(files, tmp_path):
    config, dataset = files
    model = LearnsFromFeedback()
    with pytest.raises(ValueError, match="unknown word `feedbak`"):
        enforce_llm.eval(dataset, model, config=config, profile="city_json", arms="feedbak")
    with pytest.raises(ValueError, match="no profile named `nope`"):
        enforce_llm.eval(dataset, model, config=config, profile="nope")
    with pytest.raises(ValueError, match="absent.jsonl"):
        enforce_llm.eval(tmp_path / "absent.jsonl", model, config=config, profile="city_json")
    assert model.calls == 0


def learn(dataset, config, arms, seed=0, **stats):
    """`eval` of `LearnsFromFeedback` on the cities, twice each; `stats` and `stats_from` as
    `eval` takes them."""
    return enforce_llm.eval(
        dataset,
        LearnsFromFeedback(),
        config=config,
        profile="city_json",
        arms=arms,
        repeats=2,
        seed=seed,
        **stats,
    )


def auto_config(tmp_path, stats, fallback):
    """A configuration whose profile re-asks with `reask: auto` by `stats`, choosing by the best
    mean, with `fallback` where the statistics have no data."""
    auto = tmp_path / "auto.yaml"
    auto.write_text(
        CONFIG.replace(
            "    max_retries: 2",
            f"    max_retries: 2\n    reask: auto\n    reask_auto:\n"
            f"      stats: {stats}\n      fallback: {fallback}\n      explore: false",
        )
    )
    return auto


def test_stats_one_eval_writes_make_auto_choose_what_paid_in_another(files, tmp_path):
    _, dataset = files
    # A profile whose own ladder resamples, which never pays with this model.
    config = tmp_path / "resample.yaml"
    resampling = CONFIG.replace("    max_retries: 2", "    max_retries: 2\n    reask: resample")
    config.write_text(resampling)

    stats = tmp_path / "stats.json"
    learn(dataset, config, "resample,feedback", seed=7, stats=stats)
    rows = json.loads(stats.read_text())["rows"]
    feedback = [r for r in rows if r["strategy"] == "feedback"]
    # Six trials, each fixed by its one feedback re-ask (counted under each code it fixed).
    assert feedback and all((r["attempts"], r["valid"]) == (6, 6) for r in feedback)
    assert all(r["valid"] == 0 for r in rows if r["strategy"] == "resample")

    summary = learn(dataset, config, "resample,auto", seed=1000, stats_from=stats)
    assert valid(summary) == {"resample": (0, 6), "auto": (6, 6)}
    with pytest.raises(ValueError, match="stats_from"):
        learn(dataset, config, "auto")


def test_a_profile_with_reask_auto_chooses_by_the_statistics_an_eval_wrote(files, tmp_path):
    config, dataset = files
    stats = tmp_path / "stats.json"
    learn(dataset, config, "resample,feedback", stats=stats)
    # The fallback ladder resamples, which never pays with this model: only the statistics
    # can make the re-ask a feedback one.
    auto = auto_config(tmp_path, stats, fallback="resample")
    profile = enforce_llm.Profile("city_json", config=auto)
    outcome = profile.run([{"role": "user", "content": "Quito as JSON"}], LearnsFromFeedback())
    assert outcome.ok and outcome.attempts == 2, outcome
    reask = json.loads(outcome.to_json())["attempts"][1]
    assert reask["reask"] == "feedback", reask
    assert reask["reask_choice"]["by"] == "mean", reask

    # An unreadable statistics file is a configuration error naming the key.
    auto.write_text(auto.read_text().replace(str(stats), str(tmp_path / "absent.json")))
    with pytest.raises(enforce_llm.ConfigError, match="reask_auto.stats"):
        enforce_llm.Profile("city_json", config=auto)


def test_a_profile_chooses_by_what_a_later_eval_added_to_its_statistics(files, tmp_path):
    config, dataset = files
    stats = tmp_path / "stats.json"
    auto = auto_config(tmp_path, stats, fallback="feedback")

    def reasks():
        profile = enforce_llm.Profile("city_json", config=auto)
        outcome = profile.run([{"role": "user", "content": "Quito as JSON"}], LearnsFromFeedback())
        return outcome.ok, [a["reask"] for a in json.loads(outcome.to_json())["attempts"][1:]]

    # Only resample measured: the one strategy with data is taken, though it never pays here.
    learn(dataset, config, "resample", stats=stats)
    # (The resampled answer repeats the first, so the loop stops there: no progress.)
    assert reasks() == (False, ["resample"])
    # The same configuration file, its statistics file added to: the next profile reads it.
    learn(dataset, config, "feedback", stats=stats)
    assert reasks() == (True, ["feedback"])
