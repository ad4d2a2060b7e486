#!/usr/bin/env python3
"""Runs a case's tests against the Python code of an answer: the checker of the `code` profile.

Usage: run_tests.py ANSWER_FILE [--timeout SECONDS]

ANSWER_FILE holds the model's whole answer; its ```python blocks are the code (kept at their
line numbers, so a line reported here is a line of the answer). The tests are the `tests` list
of the request context, which enforce's `external` validator passes as JSON in the environment
variable ENFORCE_CONTEXT (or, for a large context, in the file named by ENFORCE_CONTEXT_FILE):

    {"tests": ["assert add(2, 3) == 5", "assert add(-1, 1) == 0"]}

The code and then each assert run in a separate Python process, stopped after --timeout
seconds (default 5). Exit status 0: every assert held. 1: the first failing assert is reported
on stdout as one `SomeError: message` line, what the function returned included; an error
raised inside the answer's code is preceded by a `File "ANSWER_FILE", line N` frame (the line
of the answer), an error of the test itself has no line. 2: no tests or an unreadable answer.

The answer's code runs with your user's rights: run untrusted models' code in a container.
Python standard library only.
"""

import ast
import json
import os
import re
import subprocess
import sys
import tempfile

DEFAULT_TIMEOUT_S = 5.0
MAX_REPR = 200
PROGRESS = "RUNNING "
# The checker's last line must read as `SomeError: message` to enforce's trace parser.
ERROR_NAME = re.compile(r"^[A-Z][A-Za-z]*(?:Error|Exception|Warning)$")
PYTHON_FENCE = re.compile(r"^\s*```\s*(?:python|py|python3)\s*$", re.IGNORECASE)
FENCE_END = re.compile(r"^\s*```\s*$")


def code_of(answer):
    """The answer's ```python blocks, every other line blank: line numbers stay the answer's."""
    lines = answer.split("\n")
    kept = [""] * len(lines)
    inside = False
    found = False
    for i, line in enumerate(lines):
        if inside:
            if FENCE_END.match(line):
                inside = False
            else:
                kept[i] = line
        elif PYTHON_FENCE.match(line):
            inside = True
            found = True
    return "\n".join(kept) if found else None


def tests_of_context():
    """The `tests` list of the request context, or an error message."""
    path = os.environ.get("ENFORCE_CONTEXT_FILE")
    try:
        if path:
            with open(path, encoding="utf-8") as f:
                raw = f.read()
        else:
            raw = os.environ.get("ENFORCE_CONTEXT", "")
        context = json.loads(raw) if raw.strip() else {}
    except (OSError, ValueError) as e:
        return None, f"the request context is not readable JSON ({e})"
    tests = context.get("tests") if isinstance(context, dict) else None
    if isinstance(tests, str):
        # `enforce check --context 'tests=[...]'` passes the list as a JSON string.
        try:
            tests = json.loads(tests)
        except ValueError:
            pass
    if not isinstance(tests, list) or not tests or not all(isinstance(t, str) for t in tests):
        return None, "the request context has no `tests` (a non-empty list of assert lines)"
    return tests, None


def one_line(text):
    text = " ".join(str(text).split())
    return text if len(text) <= MAX_REPR else text[: MAX_REPR - 3] + "..."


def error_line(name, message):
    """`Name: message`, in a form enforce parses as an error (its name must end in Error)."""
    if ERROR_NAME.match(name):
        return f"{name}: {one_line(message)}"
    return f"RuntimeError: {name}: {one_line(message)}"


def answer_frame(tb, answer_path):
    """The innermost traceback frame in the answer's code, or None."""
    line = None
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == answer_path:
            line = (tb.tb_lineno, tb.tb_frame.f_code.co_name)
        tb = tb.tb_next
    return line


def report_exception(exc, answer_path, where, out, code_lines=(), namespace=None):
    """The error at the answer's innermost line; a bare `assert` of the answer's own names
    itself and what it saw."""
    frame = answer_frame(exc.__traceback__, answer_path)
    message = str(exc)
    if frame is not None:
        print(f'  File "{answer_path}", line {frame[0]}, in {frame[1]}', file=out)
        source = code_lines[frame[0] - 1].strip() if frame[0] <= len(code_lines) else ""
        if isinstance(exc, AssertionError) and not message and source.startswith("assert"):
            seen = explain_failed_assert(source, namespace or {})
            message = f"the answer's own {source} failed" + (f": {seen}" if seen else "")
    print(error_line(type(exc).__name__, f"{message} ({where})"), file=out)


def explain_failed_assert(test, namespace):
    """What the failing `assert` saw: the value its left side returned, and the expected one."""
    try:
        node = ast.parse(test.strip(), mode="exec").body[0]
    except (SyntaxError, IndexError):
        return ""
    if not isinstance(node, ast.Assert):
        return ""
    check = node.test

    # Evaluated again: a function with side effects runs once more, for the message only.
    def value_of(expr):
        return repr(eval(compile(ast.Expression(expr), "<test>", "eval"), namespace))

    try:
        if isinstance(check, ast.Compare) and len(check.ops) == 1:
            got = value_of(check.left)
            said = f"{ast.unparse(check.left)} returned {one_line(got)}"
            if isinstance(check.ops[0], ast.Eq):
                said += f", expected {one_line(value_of(check.comparators[0]))}"
            return said
        if isinstance(check, ast.UnaryOp) and isinstance(check.op, ast.Not):
            return f"{ast.unparse(check.operand)} returned {one_line(value_of(check.operand))}"
        return f"{ast.unparse(check)} returned {one_line(value_of(check))}"
    except BaseException:  # the value cannot be shown again; the failure stands
        return ""


def run_child(answer_path, tests):
    """In the child process: load the code, run the asserts, print the first failure."""
    verdict, progress = sys.stdout, sys.stderr
    with open(answer_path, encoding="utf-8", errors="replace") as f:
        code = code_of(f.read())
    if code is None:
        print("ValueError: the answer has no ```python block with the code to test", file=verdict)
        return 1
    try:
        compiled = compile(code, answer_path, "exec")
    except SyntaxError as e:
        print(f'  File "{answer_path}", line {e.lineno or 1}', file=verdict)
        print(error_line("SyntaxError", e.msg), file=verdict)
        return 1
    lines = code.split("\n")
    # What the answer prints is not the verdict.
    sys.stdout = sys.stderr = open(os.devnull, "w")
    # Not "__main__": the answer's `if __name__ == "__main__":` demo does not run.
    namespace = {"__name__": "answer"}
    try:
        exec(compiled, namespace)
    except BaseException as e:
        report_exception(e, answer_path, "while loading the answer's code", verdict, lines, namespace)
        return 1
    for test in tests:
        test = test.strip()
        progress.write(PROGRESS + test + "\n")
        progress.flush()
        try:
            exec(compile(test, "<test>", "exec"), namespace)
        except AssertionError as e:
            if answer_frame(e.__traceback__, answer_path) is not None:
                report_exception(e, answer_path, f"in: {test}", verdict, lines, namespace)
            else:
                seen = explain_failed_assert(test, namespace)
                said = f"{test} failed" + (f": {seen}" if seen else "")
                print(error_line("AssertionError", said), file=verdict)
            return 1
        except BaseException as e:
            report_exception(e, answer_path, f"in: {test}", verdict, lines, namespace)
            return 1
    return 0


def running_test(stderr):
    """The assert the child was running when it was stopped."""
    last = None
    for line in (stderr or "").splitlines():
        if line.startswith(PROGRESS):
            last = line[len(PROGRESS):]
    return last


def run(answer_path, timeout_s):
    tests, problem = tests_of_context()
    if problem:
        print(error_line("ValueError", problem))
        return 2
    if not os.path.isfile(answer_path):
        print(error_line("FileNotFoundError", f"no answer file {answer_path}"))
        return 2
    answer_path = os.path.abspath(answer_path)
    # Isolated as `-I` would be (no user site, no script directory on the path, no PYTHON*
    # variables but one), with string hashing fixed: one answer, one verdict. With per-process
    # hashing, an answer that relies on the order of a set of strings would pass in one run and
    # fail in the next.
    child = [sys.executable, "-s", "-P", os.path.abspath(__file__), "--child", answer_path]
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    env["PYTHONHASHSEED"] = "0"
    with tempfile.TemporaryDirectory() as scratch:
        try:
            done = subprocess.run(child, input=json.dumps(tests), capture_output=True, text=True,
                                  timeout=timeout_s, cwd=scratch, env=env)
        except subprocess.TimeoutExpired as e:
            stderr = e.stderr.decode("utf-8", "replace") if isinstance(e.stderr, bytes) else e.stderr
            test = running_test(stderr)
            where = f"in: {test}" if test else "while loading the answer's code"
            print(error_line("TimeoutError", f"the code did not finish within {timeout_s:g} s ({where})"))
            return 1
    sys.stdout.write(done.stdout)
    if done.returncode == 0:
        return 0
    if not done.stdout.strip():
        test = running_test(done.stderr)
        where = f"in: {test}" if test else "while loading the answer's code"
        print(error_line("RuntimeError", f"the code ended the test run with status {done.returncode} ({where})"))
    return 1


def main(argv):
    if len(argv) == 2 and argv[0] == "--child":
        return run_child(argv[1], json.loads(sys.stdin.read()))
    timeout_s = DEFAULT_TIMEOUT_S
    args = list(argv)
    if "--timeout" in args:
        i = args.index("--timeout")
        try:
            timeout_s = float(args[i + 1])
        except (IndexError, ValueError):
            print("usage: run_tests.py ANSWER_FILE [--timeout SECONDS]", file=sys.stderr)
            return 2
        del args[i : i + 2]
    if len(args) != 1 or args[0] in ("-h", "--help"):
        print(__doc__.strip(), file=sys.stderr)
        return 0 if args[:1] in (["-h"], ["--help"]) else 2
    return run(args[0], timeout_s)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
