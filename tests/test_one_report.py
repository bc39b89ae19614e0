"""Every command on the one Report (#29 §3): each writes `--format json` (a document that parses)
and `-o FILE` (the same text), and exits by one rule, `Report.exit_code`: 0 clean, 1 a finding at or
above fail-on, 2 bad input. Each command runs on a failing and a passing real input (the committed
fixtures/, a stand-in OpenAI-compatible server for generate). No module outside reporters/ writes
a JSON document.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from tests.helpers import cli
from tests.test_server_finish import chatml, server  # noqa: F401  fixtures: a synth ChatML model, a scripted server

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"
BROKEN = str(FIXTURES / "examples" / "llama3-eot-missing")  # SD101: its end-of-turn is no stop id
CLEAN = str(FIXTURES / "examples" / "chatml-ok")
CHAT = str(FIXTURES / "labels" / "chat.jsonl")

# (command line, exit code): a failing and a passing input for every command that judges
# something; render and rules judge nothing (0), and say 2 on bad input like every command.
CASES = {
    "inspect-fails": (["inspect", BROKEN], 1),
    "inspect-passes": (["inspect", CLEAN], 0),
    "check-fails": (["check", BROKEN], 1),
    "check-passes": (["check", CLEAN], 0),
    "labels-fails": (["labels", CLEAN, "--data", CHAT, "--collator", "assistant-only"], 1),  # SD601
    "labels-passes": (["labels", CLEAN, "--data", CHAT], 0),
    "logs-fails": (["logs", str(FIXTURES / "logs" / "responses.jsonl")], 1),
    "logs-passes": (["logs", str(FIXTURES / "logs" / "lies.jsonl")], 0),
    "diff-fails": (["diff", CLEAN, BROKEN], 1),  # another end-of-turn: stop-relevant
    "diff-passes": (["diff", CLEAN, CLEAN], 0),
    "probe-stop-fails": (["probe-stop", "--model", CLEAN, "--from-template", "--fail-on-miss"], 1),
    "probe-stop-passes": (["probe-stop", "--model", CLEAN, "--from-template"], 0),  # misses are warnings
    "fix-fails": (["fix", BROKEN], 1),  # a diff shown, not written
    "fix-passes": (["fix", CLEAN], 0),
    "render": (["render", CLEAN, "-m", "user", "Hi"], 0),
    "render-bad-input": (["render", CLEAN, "--messages", str(FIXTURES / "labels" / "no-such-file.json")], 2),
    "rules": (["rules"], 0),
    "rules-one": (["rules", "SD101"], 0),
    "rules-bad-input": (["rules", "SD999"], 2),
}


def _steady(text: str) -> object:
    """A JSON document without the fields that time the run (`logs` says how long its query took)."""
    def drop(value):
        if isinstance(value, dict):
            return {k: drop(v) for k, v in value.items() if k not in ("seconds", "query_seconds")}
        return [drop(v) for v in value] if isinstance(value, list) else value

    return drop(json.loads(text))


@pytest.mark.parametrize("name", sorted(CASES))
def test_json_parses_o_writes_the_same_and_the_exit_code_is_the_rule(name, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # check and fix read a stopdoctor.toml upward: none here
    argv, code = CASES[name]
    shown = cli(*argv, "--format", "json")
    assert shown.code == code, (argv, shown.stderr)
    if code == 2:
        assert shown.stdout == "" and "stopdoctor: error:" in shown.stderr and "Traceback" not in shown.stderr
        return
    document = json.loads(shown.stdout)
    assert document["schema_version"] == 1 and document["schema"].startswith("stopdoctor.")
    written = cli(*argv, "--format", "json", "-o", str(tmp_path / "out.json"))
    assert written.code == code and written.stdout == ""
    assert _steady((tmp_path / "out.json").read_text(encoding="utf-8")) == _steady(shown.stdout)
    human = cli(*argv, "-o", str(tmp_path / "out.txt"))
    assert human.code == code and human.stdout == ""


@pytest.mark.parametrize(("lie", "code"), [(True, 1), (False, 0)])
def test_probe_server_json_o_and_exit_code(lie, code, tmp_path):
    """A stand-in server that says `stop` for answers cut at max_tokens fails a probe (1); an honest one passes (0)."""
    from tests.standin_server import Behaviour, standin_server

    with standin_server(Behaviour(lie_finish=lie)) as url:
        shown = cli("probe-server", url, "--format", "json")
        written = cli("probe-server", url, "--format", "json", "-o", str(tmp_path / "probe.json"))
    assert shown.code == written.code == code and shown.json()["exit_code"] == code, shown.stderr
    assert written.stdout == "" and _steady((tmp_path / "probe.json").read_text()) == _steady(shown.stdout)


def test_render_format_json_is_the_json_document():
    # `render --format json` used to be a usage error; it is `render --json`'s document
    by_format = cli("render", CLEAN, "-m", "user", "Hi", "--format", "json")
    by_flag = cli("render", CLEAN, "-m", "user", "Hi", "--json")
    assert by_format.code == 0 and by_format.stdout == by_flag.stdout
    assert json.loads(by_format.stdout)["schema"] == "stopdoctor.render/1"


def test_ci_formats_where_there_are_findings_and_a_clear_refusal_elsewhere():
    fixed = cli("fix", BROKEN, "--format", "sarif")
    assert fixed.code == 1
    results = json.loads(fixed.stdout)["runs"][0]["results"]
    assert [r["ruleId"] for r in results] == ["fix-not-written"]  # SD101 has a mechanical fix: in the diff
    refused = cli("diff", CLEAN, BROKEN, "--format", "sarif")
    assert refused.code == 2 and "diff writes human or json" in refused.stderr


def test_generate_exits_by_the_rule_on_a_runaway_and_on_a_clean_stop(server, chatml, tmp_path):  # noqa: F811
    url, replies, _ = server
    argv = ["generate", str(chatml), "--server", url, "--server-model", "served", "-m", "user", "hi", "--format", "json"]
    replies.append({"text": "Paris.<|im_end|>\n<|im_start|>user\nAnd Spain?", "finish": "length"})
    runaway = cli(*argv)
    assert runaway.code == 1 and runaway.json()["hallucinated_turn"] is not None
    written = cli(*argv, "-o", str(tmp_path / "run.json"))
    assert written.code == 1 and json.loads((tmp_path / "run.json").read_text()) == runaway.json()
    replies[0] = {"text": "Paris.", "finish": "stop"}
    clean = cli(*argv)
    assert clean.code == 0 and clean.json()["hallucinated_turn"] is None


def test_the_fragment_test_exits_by_its_verdict(server, chatml):  # noqa: F811
    """An instruct model (its files say so) that never ends its turn behaves as a base model: SD501,
    exit 1, as `check --live` judges it; one that answers and ends its turn exits 0."""
    url, replies, _ = server
    argv = ["generate", str(chatml), "--server", url, "--server-model", "served", "--fragment-test", "--json"]
    replies.append({"text": "the rain in Spain falls mainly on the plain and on and on", "finish": "length"})
    runs_on = cli(*argv)
    assert runs_on.json()["verdict"] == "base" and runs_on.code == 1, runs_on.stderr
    replies[0] = {"text": "Paris.", "finish": "stop"}
    answers = cli(*argv)
    assert answers.json()["verdict"] == "instruct" and answers.code == 0, answers.stderr


# --------------------------------------------------------------------------------------------
# JSON documents are written by reporters/ only


# Modules outside reporters/ that call json.dumps for something that is no output document, and why.
NOT_OUTPUT = {
    "stopdoctor/facts/model_facts.py": "quotes a bad value in an error message",
    "stopdoctor/facts/http_client.py": "the body of an HTTP request",
    "stopdoctor/fix.py": "the text of a file the fix writes (JSON, a Modelfile's quoted stop)",
    "stopdoctor/actions/generate/local.py": "the GGUF conversion cache's source marker",
    "stopdoctor/actions/generate/server.py": "quotes a stop string in a message",
    "stopdoctor/rules/provenance.py": "quotes a dropped value in a finding's message",
    "stopdoctor/template/static_turns.py": "quotes a template's text in evidence",
    "stopdoctor/template/environment.py": "the templates' own tojson filter",
    "stopdoctor/template/turns.py": "quotes a template's text in evidence",
    "stopdoctor/facts/tokenizer_json.py": "tokenizer.json without its vocabulary, handed to the tokenizers library to check",
}


def _json_writes(path: Path) -> list[int]:
    """Lines calling json.dump / json.dumps (also through `import json as x`)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names = {"json"} | {a.asname for n in ast.walk(tree) if isinstance(n, ast.Import)
                        for a in n.names if a.name == "json" and a.asname}
    direct = {a.asname or a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module == "json"
              for a in n.names if a.name in ("dump", "dumps")}
    return [n.lineno for n in ast.walk(tree) if isinstance(n, ast.Call) and (
        (isinstance(n.func, ast.Attribute) and n.func.attr in ("dump", "dumps")
         and isinstance(n.func.value, ast.Name) and n.func.value.id in names)
        or (isinstance(n.func, ast.Name) and n.func.id in direct))]


def test_no_module_outside_reporters_writes_a_json_document():
    found = {}
    for path in sorted((ROOT / "stopdoctor").rglob("*.py")):
        relative = path.relative_to(ROOT).as_posix()
        if relative.startswith("stopdoctor/reporters/"):
            continue
        lines = _json_writes(path)
        if lines:
            found[relative] = lines
    unexplained = {module: lines for module, lines in found.items() if module not in NOT_OUTPUT}
    assert not unexplained, f"JSON written outside reporters/ (write it with a reporter): {unexplained}"
    assert not [m for m in found if m.startswith(("stopdoctor/cli/", "stopdoctor/api.py", "stopdoctor/gate.py"))]
    stale = sorted(set(NOT_OUTPUT) - set(found))
    assert not stale, f"no longer calling json.dumps, drop them from NOT_OUTPUT: {stale}"


def test_one_exit_code_function():
    """Every command's exit code comes from `Report.exit_code`: no other function computes one, and
    the codes 0 and 1 are named nowhere else (2 and 3 are the error handler's)."""
    functions, named = [], []
    for path in sorted((ROOT / "stopdoctor").rglob("*.py")):
        relative = path.relative_to(ROOT).as_posix()
        tree = ast.parse(path.read_text(encoding="utf-8"))
        functions += [f"{relative}:{n.name}" for n in ast.walk(tree)
                      if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and "exit_code" in n.name]
        named += [relative for n in ast.walk(tree) if isinstance(n, ast.Name) and n.id in ("EXIT_OK", "EXIT_FINDINGS")
                  and relative not in ("stopdoctor/core/errors.py", "stopdoctor/core/findings.py")]
    assert functions == ["stopdoctor/core/findings.py:exit_code"]
    assert not named, f"an exit code decided outside Report.exit_code: {sorted(set(named))}"
