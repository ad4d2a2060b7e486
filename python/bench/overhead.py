"""What a check costs from Python through enforce_llm, per call (manual, not a test).

    cargo xtask pytest     # builds and installs the wheel into target/python-venv (debug)
    target/python-venv/bin/python python/bench/overhead.py

Prints one JSON line. `empty_ns_per_check` is a profile without validators: the call from
Python, the loop's bookkeeping and the `Outcome` object, i.e. the package's overhead per check.
`regex_ns_per_check` is the regex rule of `cargo xtask bench-peers` (an e-mail address is
forbidden) over the same strings. `loop_us_per_run` is the JSON-schema re-ask loop with a
scripted callable that answers wrong once, then right. With Guardrails installed in the same
environment, `guard_regex_ns_per_string` is the same rule through `Guard.validate`. Build the
wheel with `cargo xtask wheels` (release) for figures worth publishing.
"""

import json
import os
import re
import statistics
import sys
import tempfile
import time

import enforce_llm

# The regex rule and the strings of bench-peers' scenario 1.
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "crates", "enforce-bench", "python"))
from peers import EMAIL_REGEX, strings  # noqa: E402

CONFIG = f"""\
validators:
  no_email:
    type: pattern
    forbidden:
      - regex: '{EMAIL_REGEX}'
        code: EMAIL_ADDRESS
  person:
    type: json
    schema:
      type: object
      required: [name, age]
      properties:
        name: {{type: string}}
        age: {{type: integer}}
profiles:
  empty:
    validators: []
  regex:
    validators: [no_email]
  person:
    validators: [person]
    max_retries: 2
"""


def per_call_ns(fn, items, repeat=5):
    runs = []
    for _ in range(repeat):
        t = time.perf_counter()
        for s in items:
            fn(s)
        runs.append((time.perf_counter() - t) / len(items) * 1e9)
    return statistics.median(runs)


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 20000
    items = strings(n)
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "enforce.yaml")
        with open(path, "w") as f:
            f.write(CONFIG)
        empty = enforce_llm.Profile("empty", path)
        regex = enforce_llm.Profile("regex", path)
        flagged = sum(not regex.check(s).ok for s in items)
        out = {
            "strings": n,
            "flagged": flagged,
            "empty_ns_per_check": per_call_ns(empty.check, items),
            "regex_ns_per_check": per_call_ns(regex.check, items),
            "module_check_ns": per_call_ns(
                lambda s: enforce_llm.check(s, profile="regex", config=path), items[:5000]
            ),
            "python_regex_ns_per_string": per_call_ns(re.compile(EMAIL_REGEX).search, items),
        }

        def model_factory():
            answers = iter(['{"name": "Ada", "age": "unknown"}', '{"name": "Ada", "age": 36}'])
            return lambda messages: next(answers)

        runs = []
        for _ in range(200):
            enforcer = enforce_llm.Enforcer("person", model_factory(), path)
            t = time.perf_counter()
            outcome = enforcer.run("Who is Ada? Answer as JSON with name and age.")
            runs.append((time.perf_counter() - t) * 1e6)
            assert outcome.status == "passed" and outcome.attempts == 2, outcome
        out["loop_us_per_run"] = statistics.median(runs)
    try:
        from guardrails import Guard, OnFailAction
        from guardrails.validators import FailResult, PassResult, Validator, register_validator

        rx = re.compile(EMAIL_REGEX)

        @register_validator(name="bench/no_email_overhead", data_type="string")
        class NoEmail(Validator):
            def _validate(self, value, metadata):
                return FailResult(error_message="e-mail") if rx.search(value) else PassResult()

        guard = Guard().use(NoEmail(on_fail=OnFailAction.NOOP))
        out["guard_regex_ns_per_string"] = per_call_ns(guard.validate, items[:2000], repeat=1)
    except ImportError:
        out["guard_regex_ns_per_string"] = None
    print(json.dumps(out))


if __name__ == "__main__":
    main()
