"""What a check costs from Python through enforce_llm, per call (by hand; the published figures
come from `cargo xtask bench-peers --python`, which runs the same code against Guardrails and
Instructor and writes them to BENCHMARKS.md).

    cargo xtask pytest     # builds and installs the wheel into target/python-venv (debug)
    target/python-venv/bin/python python/bench/overhead.py [STRINGS]

Prints one JSON line: `python_check` of crates/enforce-bench/python/peers.py. `empty_ns_per_check`
is a profile without validators (the call from Python, the loop's bookkeeping and the `Outcome`
object: the package's own cost per check), `regex_ns_per_check` scenario 1's regex rule over its
strings, `scripted_loop_us` the JSON-schema re-ask loop with a scripted callable that answers
wrong once, then right; with Guardrails installed in the same environment,
`guard_ns_per_validate` is the same rule through `Guard.validate`. Build the wheel with
`cargo xtask wheels` (the `dist` profile) for figures worth comparing.
"""

import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "crates", "enforce-bench", "python"))
from peers import python_check  # noqa: E402

if __name__ == "__main__":
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 20000
    print(json.dumps(python_check(n, 2000)))
