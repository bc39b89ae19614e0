"""The Python API and the CLI agree: every API call in the Python examples of the README and the
manual (docs/api.md), run as written and as the matching command, gives the same findings (codes
and severities).

A default that changes a verdict must live in the API (or its stage), never in `cli/`; this
test is what says so. The labels example also runs over every dataset in fixtures/labels/
(the README's call on text.jsonl is where the two used to differ: SD604 against nothing).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from tests.helpers import cli

ROOT = Path(__file__).resolve().parent.parent

# API function -> the command line that does the same (positional args, then keyword args, as
# the README writes them); the CLI's JSON output carries the findings.
COMMANDS = {
    "inspect_model": lambda spec: ["inspect", spec],
    "check_labels": lambda spec, data: ["labels", spec, "--data", data],
    "analyze_log_files": lambda paths: ["logs", *paths],
}
# API calls in the examples that are no command of their own (they shape a result already made).
NOT_COMMANDS = {"inspect_report"}


def _api_blocks() -> list[str]:
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    text = "\n".join(page.read_text(encoding="utf-8") for page in pages if "incoming" not in page.parts)
    blocks = re.findall(r"^```python\n(.*?)^```", text, flags=re.S | re.M)
    return [b for b in blocks if "from stopdoctor import api" in b or "stopdoctor.api" in b]


def _api_calls() -> list[tuple[str, tuple, dict]]:
    """Each `api.NAME(...)` call of the README's API examples: (NAME, args, kwargs)."""
    calls = []
    for block in _api_blocks():
        for node in ast.walk(ast.parse(block)):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and isinstance(node.func.value, ast.Name) and node.func.value.id == "api"):
                name = node.func.attr
                if name in NOT_COMMANDS:
                    continue
                # Arguments that are not literals refer to the example's own variables: not a command.
                args = tuple(ast.literal_eval(a) for a in node.args)
                kwargs = {k.arg: ast.literal_eval(k.value) for k in node.keywords}
                calls.append((name, args, kwargs))
    return calls


def _cases() -> list:
    cases = []
    for name, args, kwargs in _api_calls():
        cases.append(pytest.param(name, args, kwargs, id=f"readme-{name}"))
        if name == "check_labels":  # the same call over every labels dataset in the fixtures
            for data in sorted((ROOT / "fixtures" / "labels").glob("*.jsonl")):
                other = (args[0], f"fixtures/labels/{data.name}", *args[2:])
                if other != args:
                    cases.append(pytest.param(name, other, kwargs, id=f"readme-{name}-{data.stem}"))
    return cases


def test_readme_has_api_examples_and_each_call_has_a_command():
    calls = _api_calls()
    assert calls, "the README shows no `from stopdoctor import api` example"
    unknown = sorted({name for name, _, _ in calls} - set(COMMANDS))
    assert not unknown, f"README API calls with no matching command in this test: {unknown}"


def test_readme_api_examples_run(monkeypatch, capsys):
    monkeypatch.chdir(ROOT)
    for block in _api_blocks():
        exec(compile(block, "README.md", "exec"), {})  # the example as a reader would paste it


@pytest.mark.parametrize(("name", "args", "kwargs"), _cases())
def test_api_and_cli_give_the_same_findings(name, args, kwargs, monkeypatch):
    from stopdoctor import api

    monkeypatch.chdir(ROOT)
    result = getattr(api, name)(*args, **kwargs)
    from_api = sorted((f.code, f.severity.name.lower()) for f in result.findings)
    run = cli(*COMMANDS[name](*args, **kwargs), "--format", "json")
    assert run.code in (0, 1), run.stderr
    from_cli = sorted((f["code"], f["severity"]) for f in run.json()["findings"])
    assert from_api == from_cli, f"{name}{args}: the API found {from_api}, the CLI {from_cli}"
