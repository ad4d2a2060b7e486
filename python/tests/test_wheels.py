"""The CLI wheel (``enforce-cli``) as pip installed it, and what both wheels hold.

``cargo xtask test`` builds both wheels, installs them into ``target/python-venv`` and sets
``ENFORCE_TEST_CLI_WHEEL`` and ``ENFORCE_TEST_LLM_WHEEL`` to their paths. Then a wheel that is
missing or not installed fails these tests; without the variables (pytest run by hand with only
the library installed) they are skipped, saying why.
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import sysconfig
import zipfile
from importlib import metadata

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
CLI_WHEEL = os.environ.get("ENFORCE_TEST_CLI_WHEEL")
LLM_WHEEL = os.environ.get("ENFORCE_TEST_LLM_WHEEL")

if CLI_WHEEL is None:
    enforce_cli = pytest.importorskip(
        "enforce_cli",
        reason="enforce-cli is not installed and ENFORCE_TEST_CLI_WHEEL is not set "
        "(cargo xtask pytest builds and installs it)",
    )
else:
    import enforce_cli


def run(*args: str, cwd: pathlib.Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=60)


def test_find_enforce_bin_is_the_command_pip_installed_in_this_environment():
    path = enforce_cli.find_enforce_bin()
    # The environment's scripts directory: where pip put it, and what an activated venv has
    # on PATH.
    assert os.path.dirname(path) == sysconfig.get_path("scripts")
    assert os.path.basename(path) == "enforce" + (sysconfig.get_config_var("EXE") or "")
    assert os.access(path, os.X_OK)
    installed = metadata.distribution("enforce-cli").files or []
    assert any(str(f).endswith("/enforce") or str(f) == "enforce" for f in installed), installed


def test_enforce_version_names_the_installed_package_version():
    for command in ([enforce_cli.find_enforce_bin()], [sys.executable, "-m", "enforce_cli"]):
        done = run(*command, "--version")
        assert done.returncode == 0, done.stderr
        assert done.stdout.split() == ["enforce", metadata.version("enforce-cli")], done.stdout


def test_enforce_check_reports_the_issue_of_a_sample_file(tmp_path):
    (tmp_path / "answer.md").write_text("Which database do you use?\n", encoding="utf-8")
    (tmp_path / "done.md").write_text(
        "Which database do you use?\n\n<!-- STEP: what -->\n", encoding="utf-8"
    )
    enforce = enforce_cli.find_enforce_bin()
    failed = run(enforce, "check", "--profile", "chat", "answer.md", cwd=tmp_path)
    assert failed.returncode == 1, (failed.stdout, failed.stderr)
    out = failed.stdout + failed.stderr
    assert "answer.md: error[MISSING_STEP_MARKER]" in out, out
    assert "= help:" in out, out
    passed = run(enforce, "check", "--profile", "chat", "done.md", cwd=tmp_path)
    assert passed.returncode == 0, (passed.stdout, passed.stderr)
    assert "MISSING_STEP_MARKER" not in passed.stdout + passed.stderr


def test_a_missing_binary_is_a_file_not_found_error(monkeypatch, tmp_path):
    # Nowhere pip could have put it: the helper says so instead of returning a bad path.
    monkeypatch.setattr(sysconfig, "get_path", lambda *a, **k: str(tmp_path))
    monkeypatch.setattr(enforce_cli, "__file__", str(tmp_path / "pkg" / "enforce_cli" / "x.py"))
    with pytest.raises(FileNotFoundError):
        enforce_cli.find_enforce_bin()


@pytest.mark.parametrize("wheel", [CLI_WHEEL, LLM_WHEEL], ids=["enforce-cli", "enforce-llm"])
def test_both_wheels_hold_the_repository_licenses(wheel):
    if wheel is None:
        pytest.skip("ENFORCE_TEST_*_WHEEL not set (cargo xtask pytest sets them)")
    with zipfile.ZipFile(wheel) as zipped:
        names = zipped.namelist()
        for license_file in ("LICENSE-MIT", "LICENSE-APACHE"):
            inside = [n for n in names if n.endswith(".dist-info/licenses/" + license_file)]
            assert len(inside) == 1, names
            assert zipped.read(inside[0]) == (REPO / license_file).read_bytes()
        meta = next(n for n in names if n.endswith(".dist-info/METADATA"))
        text = zipped.read(meta).decode()
        assert "License-Expression: MIT OR Apache-2.0" in text
        assert "License-File: LICENSE-MIT" in text and "License-File: LICENSE-APACHE" in text
