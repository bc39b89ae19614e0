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


# --------------------------------------------------------------------------------------------
# generate and fix: what the commands decide lives in the API (#29 §2); the API run by hand and
# the command give the same verdict on the same input.

from tests.test_server_finish import chatml, server  # noqa: E402,F401  fixtures: a synth ChatML model, a scripted server

FIX_CASES = {
    "eot-missing": ("fixtures/examples/llama3-eot-missing", None),  # SD101: a diff
    "clean": ("fixtures/examples/chatml-ok", None),  # nothing to fix
    "ignore-eos-request": ("fixtures/examples/chatml-ok", "fixtures/serving/request-bad.json"),  # a serving edit
}


@pytest.mark.parametrize("case", sorted(FIX_CASES))
def test_fix_api_and_cli_agree(case, monkeypatch):
    from stopdoctor import api
    from stopdoctor.fix import prepare_fix

    monkeypatch.chdir(ROOT)
    spec, serving = FIX_CASES[case]
    prepared = prepare_fix(spec, Path(serving) if serving else None)
    prepared.discard()
    report = api.fix_report(prepared.outcome, prepared.fail_on)
    run = cli("fix", spec, *(["--serving", serving] if serving else []), "--format", "json")
    document = run.json()
    assert run.code == report.exit_code() == document["exit_code"], run.stderr
    assert [e["file"] for e in document["edits"]] == [e.label for e in prepared.outcome.plan.edits]
    assert [f["code"] for f in document["remaining"]] == [f.code for f in prepared.outcome.remaining]


@pytest.mark.parametrize(("reply", "code"), [
    ({"text": "Paris.<|im_end|>\n<|im_start|>user\nAnd Spain?", "finish": "length"}, 1),  # wrote the next turn
    ({"text": "I'll check. I'll check. I'll check.", "finish": "repetition"}, 1),  # the server cut a loop
    ({"text": "Paris.", "finish": "stop"}, 0),
])
def test_generate_api_and_cli_agree(reply, code, server, chatml):  # noqa: F811
    from stopdoctor import api
    from stopdoctor.fix import generate_fix

    url, replies, _ = server
    replies.append(reply)
    messages = [{"role": "user", "content": "hi"}]
    plan = api.plan_generation(str(chatml), messages=messages, local=False)
    engine = api.server_engine(plan, url, str(chatml), model_name="served")
    runs = api.run_generation(plan, engine, 64, served=True, fixer=generate_fix)
    report = api.generation_report(str(chatml), runs)
    run = cli("generate", str(chatml), "--server", url, "--server-model", "served", "-m", "user", "hi", "--format", "json")
    assert run.code == report.exit_code() == code, run.stderr
    document, result = run.json(), runs.runs[0].result
    assert document["finish_reason"] == result.generation.finish_reason
    assert (document["hallucinated_turn"] is None) == (result.diagnosis.hallucinated_turn is None)
    assert (document["fix"] is None) == (runs.runs[0].fix is None)


@pytest.mark.parametrize(("reply", "verdict", "code"), [
    ({"text": "the rain in Spain falls mainly on the plain and on and on", "finish": "length"}, "base", 1),
    ({"text": "Paris.", "finish": "stop"}, "instruct", 0),
])
def test_fragment_test_api_and_cli_agree(reply, verdict, code, server, chatml):  # noqa: F811
    from stopdoctor import api

    url, replies, _ = server
    replies.append(reply)
    plan = api.plan_generation(str(chatml), local=False, fragment=True)
    engine = api.server_engine(plan, url, str(chatml), model_name="served")
    probe = api.fragment_test(plan, engine, 64)
    report = api.fragment_report(str(chatml), plan.context.analysis, probe)
    run = cli("generate", str(chatml), "--server", url, "--server-model", "served", "--fragment-test", "--format", "json")
    assert run.code == report.exit_code() == code, run.stderr
    assert run.json()["verdict"] == probe.verdict == verdict


@pytest.mark.parametrize(("argv", "call"), [
    (["--max-new-tokens", "0", "-m", "user", "hi"], lambda api: api.check_budget(0)),
    (["--fragment-test", "--max-new-tokens", "4"], lambda api: api.check_budget(4, fragment=True)),
    (["--temperature", "-1", "-m", "user", "hi"], lambda api: api.sampling(-1.0)),
    (["--seed", str(2**64), "-m", "user", "hi"], lambda api: api.sampling(0.0, 1.0, 2**64)),
])
def test_generate_refuses_what_the_api_refuses(argv, call, chatml):  # noqa: F811
    from stopdoctor import api
    from stopdoctor.core.errors import InputError

    with pytest.raises(InputError) as refused:
        call(api)
    run = cli("generate", str(chatml), *argv)
    assert run.code == 2 and f"stopdoctor: error: {refused.value.message}" in run.stderr
