"""The linter and the type checker on the package (issue #29 §4), so that the README's test command
runs them as CI does: `ruff check stopdoctor` and `mypy stopdoctor`, each with its configuration in
pyproject.toml ([tool.ruff], [tool.mypy]) and its version pinned in the `dev` extra. A tool that is
missing, or not the pinned version, fails the test: the dev extra installs both, and another version
checks other things."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def pinned(tool: str) -> str:
    """The version the `dev` extra pins for `tool`."""
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["dev"]
    found = [m.group(1) for spec in extras if (m := re.fullmatch(rf"{tool}==(\S+)", spec))]
    assert found, f"the dev extra pins no {tool}"
    return found[0]


def run_tool(tool: str, *args: str) -> subprocess.CompletedProcess:
    if importlib.util.find_spec(tool) is None:
        pytest.fail(f"{tool} is not installed: pip install -e '.[dev]' installs it ({tool}=={pinned(tool)})")
    installed = importlib.metadata.version(tool)
    if installed != pinned(tool):
        pytest.fail(f"{tool} {installed} is installed, the dev extra pins {pinned(tool)}: pip install -e '.[dev]'")
    return subprocess.run([sys.executable, "-m", tool, *args], cwd=ROOT, capture_output=True, text=True, timeout=900)


def test_ruff_finds_nothing_in_the_package():
    done = run_tool("ruff", "check", "--no-fix", "stopdoctor")
    assert done.returncode == 0, f"ruff check stopdoctor:\n{done.stdout}{done.stderr}"


def test_mypy_finds_nothing_in_the_package():
    done = run_tool("mypy", "stopdoctor")
    assert done.returncode == 0, f"mypy stopdoctor:\n{done.stdout}{done.stderr}"
