"""Static checks as tests, so that the README's test command runs them too: ruff and
mypy, configured in pyproject.toml (mypy checks planner/, models/ and cli.py with
every function typed). Skipped, saying why, where a tool is not installed
(``pip install -e '.[test]'`` installs both)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _tool(name: str) -> list[str]:
    """The command that runs ``name`` from this interpreter's environment, or a skip."""
    try:
        __import__(name)
    except ImportError:
        exe = shutil.which(name)
        if exe is None:
            pytest.skip(f"{name} is not installed (pip install -e '.[test]')")
        return [exe]
    return [sys.executable, "-m", name]


def _run(cmd: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600,
                          check=False)


def test_ruff_finds_nothing() -> None:
    done = _run([*_tool("ruff"), "check", "--no-cache", "."])
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.slow
def test_mypy_finds_nothing() -> None:
    done = _run([*_tool("mypy")])
    assert done.returncode == 0, done.stdout + done.stderr
