"""The peers' side of scenarios 1 and 2 and of the real-model section, and the TensorZero HTTP
gateway launcher.

Run by `enforce-bench peers` inside each peer's virtualenv; every mode prints one JSON line.
Traffic goes only to the mock on 127.0.0.1.
"""
import json
import re
import statistics
import sys
import time

EMAIL_REGEX = r"[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[A-Za-z]{2,}"
PROMPT = "Who is Ada? Answer as JSON with name and age."


def strings(n):
    out = []
    for i in range(n):
        if i % 3 == 0:
            out.append(f"Message {i}: please write to user{i}@example.com about the invoice.")
        else:
            out.append(f"Message {i}: the invoice for order {i} is attached, thank you.")
    return out


ADR_FIELDS = ("adr_id", "title", "status")
ADR_SECTIONS = (("kontext", "context"), ("entscheidung", "decision"),
                ("akzeptanzkriterien", "acceptance criteria"))


def plain_adr_errors(text):
    """The adr profile's structural rules in plain Python (front matter, fields, sections)."""
    import yaml
    errors = []
    m = re.search(r"^---\s*\n(.*?)\n---\s*$", text, re.S | re.M)
    if not m:
        return ["MISSING_YAML_HEADER"]
    try:
        header = yaml.safe_load(m.group(1))
    except yaml.YAMLError:
        return ["INVALID_YAML"]
    if not isinstance(header, dict):
        return ["INVALID_YAML"]
    for f in ADR_FIELDS:
        if not header.get(f):
            errors.append("MISSING_ADR_FIELD")
    headings = [h.strip().lower() for h in re.findall(r"^##\s+(.*)$", text, re.M)]
    for aliases in ADR_SECTIONS:
        if not any(h in aliases for h in headings):
            errors.append("MISSING_ADR_SECTION")
    return errors


def median_of(fn, repeat):
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def validators(n, adr_path, guard_n):
    rx = re.compile(EMAIL_REGEX)
    items = strings(n)
    plain = median_of(lambda: [rx.search(s) for s in items], 5) / n * 1e9
    adr = open(adr_path, encoding="utf-8").read()
    plain_adr = median_of(lambda: plain_adr_errors(adr), 200) * 1e6
    out = {"strings": n, "plain_regex_ns_per_string": plain, "plain_adr_us_per_document": plain_adr}
    try:
        from guardrails import Guard, OnFailAction
        from guardrails.validators import (FailResult, PassResult, Validator,
                                           register_validator)

        @register_validator(name="bench/no_email", data_type="string")
        class NoEmail(Validator):
            def _validate(self, value, metadata):
                if rx.search(value):
                    return FailResult(error_message="contains an e-mail address")
                return PassResult()

        @register_validator(name="bench/adr_structure", data_type="string")
        class AdrStructure(Validator):
            def _validate(self, value, metadata):
                errs = plain_adr_errors(value)
                return FailResult(error_message=", ".join(errs)) if errs else PassResult()

        guard = Guard().use(NoEmail(on_fail=OnFailAction.NOOP))
        sub = items[:guard_n]
        for s in sub[:50]:
            guard.validate(s)
        flagged = 0
        t = time.perf_counter()
        for s in sub:
            if not guard.validate(s).validation_passed:
                flagged += 1
        out["guard_regex_ns_per_string"] = (time.perf_counter() - t) / len(sub) * 1e9
        out["guard_strings"] = len(sub)
        out["guard_flagged"] = flagged
        adr_guard = Guard().use(AdrStructure(on_fail=OnFailAction.NOOP))
        out["guard_adr_us_per_document"] = median_of(lambda: adr_guard.validate(adr), 100) * 1e6
    except Exception as e:  # recorded, not hidden
        out["guard_error"] = f"{type(e).__name__}: {e}"
    return out



def person_model():
    from pydantic import BaseModel

    class Person(BaseModel):
        name: str
        age: int
    return Person


def timed_runs(fn, runs, warmup=20):
    for _ in range(warmup):
        fn()
    times, passed = [], 0
    for _ in range(runs):
        t = time.perf_counter()
        ok = fn()
        times.append((time.perf_counter() - t) * 1e3)
        passed += 1 if ok else 0
    return statistics.median(times), passed


def per_call_ns(fn, items, repeat=5):
    """The median over `repeat` passes of the time per item of `fn(item)`, in ns."""
    runs = []
    for _ in range(repeat):
        t = time.perf_counter()
        for s in items:
            fn(s)
        runs.append((time.perf_counter() - t) / len(items) * 1e9)
    return statistics.median(runs)


# What python-check asks enforce_llm: scenario 1's regex rule, a profile without validators (the
# package's own cost per check) and the loop's JSON-schema contract.
PYTHON_CHECK_CONFIG = f"""\
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


def python_check(n, guard_n):
    """The cost of a check called from Python through enforce_llm, and of Guard.validate on the
    same rule and strings in the same interpreter (when Guardrails is installed here)."""
    import os
    import tempfile
    import enforce_llm
    items = strings(n)
    rx = re.compile(EMAIL_REGEX)
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "enforce.yaml")
        with open(path, "w") as f:
            f.write(PYTHON_CHECK_CONFIG)
        empty = enforce_llm.Profile("empty", path)
        regex = enforce_llm.Profile("regex", path)
        for s in items[:1000]:
            regex.check(s)
        out = {
            "strings": n,
            "enforce_llm": enforce_llm.__version__,
            "flagged": sum(not regex.check(s).ok for s in items),
            "python_regex_flagged": sum(1 for s in items if rx.search(s)),
            "empty_ns_per_check": per_call_ns(empty.check, items),
            "regex_ns_per_check": per_call_ns(regex.check, items),
            "module_check_ns": per_call_ns(
                lambda s: enforce_llm.check(s, profile="regex", config=path), items[:5000]),
            "python_regex_ns_per_string": per_call_ns(rx.search, items),
        }

        def scripted():
            answers = iter(['{"name": "Ada", "age": "unknown"}', '{"name": "Ada", "age": 36}'])
            return lambda messages: next(answers)

        runs = []
        for _ in range(300):
            enforcer = enforce_llm.Enforcer("person", scripted(), path)
            t = time.perf_counter()
            outcome = enforcer.run(PROMPT)
            runs.append((time.perf_counter() - t) * 1e6)
            if outcome.status != "passed" or outcome.attempts != 2:
                raise SystemExit(f"the scripted loop did not pass after one re-ask: {outcome}")
        out["scripted_loop_us"] = statistics.median(runs[20:])
    try:
        from guardrails import Guard, OnFailAction
        from guardrails.validators import FailResult, PassResult, Validator, register_validator

        @register_validator(name="bench/no_email_python_check", data_type="string")
        class NoEmail(Validator):
            def _validate(self, value, metadata):
                return FailResult(error_message="e-mail") if rx.search(value) else PassResult()

        guard = Guard().use(NoEmail(on_fail=OnFailAction.NOOP))
        sub = items[:guard_n]
        for s in sub[:50]:
            guard.validate(s)
        out["guard_flagged"] = sum(not guard.validate(s).validation_passed for s in sub)
        out["guard_strings"] = len(sub)
        out["guard_ns_per_validate"] = per_call_ns(guard.validate, sub, repeat=1)
    except ImportError:
        out["guard_ns_per_validate"] = None
    return out


def loop(lib, ok_url, ff_url, runs, config=None):
    import openai
    Person = person_model()
    clients = {u: openai.OpenAI(base_url=u, api_key="sk-bench", max_retries=0) for u in (ok_url, ff_url)}

    def raw():
        r = clients[ok_url].chat.completions.create(
            model="mock", messages=[{"role": "user", "content": PROMPT}])
        return Person.model_validate_json(r.choices[0].message.content) is not None

    raw_ms, _ = timed_runs(raw, runs)
    if lib == "instructor":
        import instructor
        ics = {u: instructor.from_openai(c, mode=instructor.Mode.JSON) for u, c in clients.items()}

        def make(u):
            def call():
                p = ics[u].chat.completions.create(
                    model="mock", response_model=Person, max_retries=2,
                    messages=[{"role": "user", "content": PROMPT}])
                return p.age == 36
            return call
    elif lib == "enforce-llm":
        # enforce's loop in-process from Python: `config` is the profile `enforce serve` uses in
        # the proxy scenario (the same JSON-schema contract), the model a plain openai call.
        import enforce_llm

        def make(u):
            def model(messages):
                r = clients[u].chat.completions.create(model="mock", messages=messages)
                return r.choices[0].message.content
            enforcer = enforce_llm.Enforcer("person", model, config)

            def call():
                outcome = enforcer.run([{"role": "user", "content": PROMPT}])
                return outcome.ok and Person.model_validate_json(outcome.answer).age == 36
            return call
    elif lib == "pydantic-ai":
        from pydantic_ai import Agent, PromptedOutput
        from pydantic_ai.models.openai import OpenAIChatModel
        from pydantic_ai.providers.openai import OpenAIProvider
        agents = {u: Agent(OpenAIChatModel("mock", provider=OpenAIProvider(openai_client=openai.AsyncOpenAI(base_url=u, api_key="sk-bench", max_retries=0))),
                           output_type=PromptedOutput(Person), retries=2)
                  for u in (ok_url, ff_url)}

        def make(u):
            def call():
                return agents[u].run_sync(PROMPT).output.age == 36
            return call
    elif lib == "guardrails":
        from guardrails import Guard, OnFailAction
        from guardrails.validators import (FailResult, PassResult, Validator,
                                           register_validator)

        @register_validator(name="bench/person_json", data_type="string")
        class PersonJson(Validator):
            def _validate(self, value, metadata):
                try:
                    Person.model_validate_json(value)
                    return PassResult()
                except Exception as e:
                    return FailResult(error_message=f"not a valid person: {e}")

        def llm_api(u):
            def api(messages=None, **kwargs):
                r = clients[u].chat.completions.create(model="mock", messages=messages)
                return r.choices[0].message.content
            return api

        guard = Guard().use(PersonJson(on_fail=OnFailAction.REASK))

        def make(u):
            api = llm_api(u)

            def call():
                out = guard(api, messages=[{"role": "user", "content": PROMPT}], num_reasks=1)
                return out.validation_passed
            return call
    else:
        raise SystemExit(f"unknown library {lib}")
    ok_ms, ok_passed = timed_runs(make(ok_url), runs)
    ff_ms, ff_passed = timed_runs(make(ff_url), runs)
    return {"runs": runs, "raw_call_ms": raw_ms, "ok_ms": ok_ms, "fail_first_ms": ff_ms,
            "ok_passed": ok_passed, "fail_first_passed_after_one_reask": ff_passed}


def model_from_schema(schema):
    """A Pydantic model for a flat JSON Schema object (the eval contract's), so that every
    library validates against the same contract enforce checks."""
    from typing import Annotated, Any, List, Optional
    from pydantic import Field, create_model
    kinds = {"string": str, "integer": int, "number": float, "boolean": bool, "array": List[Any],
             "object": dict}
    limits = {"minLength": "min_length", "maxLength": "max_length", "minimum": "ge",
              "maximum": "le"}
    required = set(schema.get("required", []))
    fields = {}
    for name, prop in schema.get("properties", {}).items():
        kind = kinds.get(prop.get("type"), Any)
        bounds = {limits[k]: v for k, v in prop.items() if k in limits}
        if bounds:
            kind = Annotated[kind, Field(**bounds)]
        fields[name] = (kind, ...) if name in required else (Optional[kind], None)
    return create_model(schema.get("title", "Answer"), **fields)


def real_model(lib, url, model, dataset, schema_path, retries, seed, temperature, max_tokens):
    """Each case of `dataset` (JSONL with `prompt`) through `lib`'s own re-ask loop against an
    OpenAI-compatible server in text mode; one result per case, in order."""
    import openai
    with open(schema_path) as f:
        Answer = model_from_schema(json.load(f))
    cases = [json.loads(line) for line in open(dataset) if line.strip()]
    sync = openai.OpenAI(base_url=url, api_key="sk-bench", max_retries=0, timeout=600)
    settings = lambda i: {"temperature": temperature, "seed": seed + i, "max_tokens": max_tokens}
    if lib == "instructor":
        import instructor
        client = instructor.from_openai(sync, mode=instructor.Mode.MD_JSON)

        def ask(i, prompt):
            client.chat.completions.create(model=model, response_model=Answer,
                                           max_retries=retries,
                                           messages=[{"role": "user", "content": prompt}],
                                           **settings(i))
    elif lib == "pydantic-ai":
        from pydantic_ai import Agent, PromptedOutput
        from pydantic_ai.models.openai import OpenAIChatModel
        from pydantic_ai.providers.openai import OpenAIProvider
        agent = Agent(OpenAIChatModel(model, provider=OpenAIProvider(openai_client=openai.AsyncOpenAI(
            base_url=url, api_key="sk-bench", max_retries=0, timeout=600))),
            output_type=PromptedOutput(Answer), retries=retries)

        def ask(i, prompt):
            agent.run_sync(prompt, model_settings=settings(i))
    elif lib == "guardrails":
        from guardrails import Guard, OnFailAction
        from guardrails.validators import (FailResult, PassResult, Validator,
                                           register_validator)

        @register_validator(name="bench/contract_json", data_type="string")
        class ContractJson(Validator):
            def _validate(self, value, metadata):
                try:
                    Answer.model_validate_json(value)
                    return PassResult()
                except Exception as e:
                    return FailResult(error_message=f"not valid JSON of the schema: {e}")

        guard = Guard().use(ContractJson(on_fail=OnFailAction.REASK))

        def ask(i, prompt):
            def api(messages=None, **kwargs):
                r = sync.chat.completions.create(model=model, messages=messages, **settings(i))
                return r.choices[0].message.content
            out = guard(api, messages=[{"role": "user", "content": prompt}], num_reasks=retries)
            if not out.validation_passed:
                raise ValueError("validation failed")
    else:
        raise SystemExit(f"unknown library {lib}")
    results = []
    for i, case in enumerate(cases):
        started = time.perf_counter()
        try:
            ask(i, case["prompt"])
            valid, error = True, None
        except Exception as e:  # the library's way to say no valid answer; recorded
            valid, error = False, f"{type(e).__name__}: {str(e)[:200]}"
        results.append({"id": case.get("id", f"case-{i + 1}"), "valid": valid, "error": error,
                        "wall_ms": (time.perf_counter() - started) * 1e3})
    return {"cases": results}


def tensorzero_gateway(config):
    import tensorzero
    gw = tensorzero._start_http_gateway(config_file=config, clickhouse_url=None, postgres_url=None,
                                        valkey_url=None, async_setup=False)
    print(json.dumps({"base_url": gw.base_url}), flush=True)
    while True:
        time.sleep(3600)


def versions(names):
    from importlib.metadata import version, PackageNotFoundError
    out = {"python": sys.version.split()[0]}
    for n in names:
        try:
            out[n] = version(n)
        except PackageNotFoundError:
            out[n] = None
    return out


def main():
    mode = sys.argv[1]
    if mode == "validators":
        res = validators(int(sys.argv[2]), sys.argv[3], int(sys.argv[4]))
    elif mode == "loop":
        res = loop(sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]), *sys.argv[6:7])
    elif mode == "python-check":
        res = python_check(int(sys.argv[2]), int(sys.argv[3]))
    elif mode == "real-model":
        a = sys.argv[2:]
        res = real_model(a[0], a[1], a[2], a[3], a[4], int(a[5]), int(a[6]), float(a[7]), int(a[8]))
    elif mode == "tensorzero-gateway":
        tensorzero_gateway(sys.argv[2])
        return
    elif mode == "versions":
        res = versions(sys.argv[2:])
    else:
        raise SystemExit(f"unknown mode {mode}")
    print(json.dumps(res), flush=True)


if __name__ == "__main__":
    main()
