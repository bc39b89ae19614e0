"""`stopdoctor check` as a CI job runs it: exit codes, stdout carrying only the document,
--output, several models with one unloadable, configuration from the working directory, --live."""

from __future__ import annotations

import json
import shutil
import xml.etree.ElementTree as ET

import pytest
from typer.testing import CliRunner

from stopdoctor.cli.app import app


@pytest.fixture
def repo(tmp_path, synth_root, monkeypatch):
    shutil.copytree(synth_root / "llama3-eot-missing", tmp_path / "models" / "runaway")
    shutil.copytree(synth_root / "clean-chatml", tmp_path / "models" / "clean")
    shutil.copytree(synth_root / "pad-is-eos", tmp_path / "models" / "pad")  # SD104 warning only
    monkeypatch.chdir(tmp_path)
    for name in ("MODELS", "SERVING", "FAIL_ON", "SELECT", "IGNORE", "SEVERITY", "FORMAT", "CONFIG"):
        monkeypatch.delenv(f"STOPDOCTOR_{name}", raising=False)
    return tmp_path


def run(*args: str, env: dict | None = None):
    return CliRunner().invoke(app, ["check", *args], env=env)


def test_clean_model_exits_0(repo):
    result = run("models/clean", "--format", "json")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["models"][0]["findings"] == []


def test_findings_at_fail_on_exit_1_and_exit_zero_reports_without_failing(repo):
    assert run("models/runaway").exit_code == 1
    assert run("models/pad").exit_code == 0
    assert run("models/pad", "--fail-on", "warning").exit_code == 1
    result = run("models/runaway", "--exit-zero", "--format", "github")
    assert result.exit_code == 0 and "::error file=models/runaway/generation_config.json" in result.stdout
    assert "--exit-zero" in result.stderr


def test_stdout_is_only_the_document_and_talk_goes_to_stderr(repo):
    result = run("models/runaway", "models/clean", "--format", "sarif")
    document = json.loads(result.stdout)  # nothing else on stdout
    assert document["version"] == "2.1.0"
    assert "2 of 2 model(s) checked" in result.stderr


def test_unloadable_model_exits_2_but_the_others_are_reported(repo):
    result = run("models/runaway", "models/nothing-here", "models/clean", "--format", "junit")
    assert result.exit_code == 2
    suites = [s.get("name") for s in ET.fromstring(result.stdout.encode()).iter("testsuite")]
    assert suites == ["models/runaway", "models/nothing-here", "models/clean"]
    assert "models/nothing-here" in result.stderr and "the other models are reported" in result.stderr


def test_output_file_gets_the_document(repo):
    result = run("models/runaway", "--format", "sarif", "--output", "out/stopdoctor.sarif")
    assert result.exit_code == 1 and result.stdout == ""
    document = json.loads((repo / "out" / "stopdoctor.sarif").read_text())
    assert {r["ruleId"] for r in document["runs"][0]["results"]} == {"SD101"}
    assert "wrote sarif report to out/stopdoctor.sarif" in result.stderr


def test_configuration_from_the_working_directory_and_environment(repo):
    (repo / "pyproject.toml").write_text(
        "[tool.stopdoctor]\nmodels = ['models/pad']\nfail-on = 'warning'\nformat = 'json'\n"
        "[tool.stopdoctor.severity]\nSD104 = 'info'\n")
    result = run()
    assert result.exit_code == 0, result.stderr  # SD104 lowered to info, below fail-on warning
    finding = json.loads(result.stdout)["models"][0]["findings"][0]
    assert (finding["code"], finding["severity"]) == ("SD104", "info")
    assert "pyproject.toml" in result.stderr
    assert run(env={"STOPDOCTOR_FAIL_ON": "info"}).exit_code == 1  # environment over the file
    assert run("--fail-on", "error", env={"STOPDOCTOR_FAIL_ON": "info"}).exit_code == 0  # flag over environment
    assert run(env={"STOPDOCTOR_MODELS": "models/runaway"}).exit_code == 1


def test_unknown_config_key_exits_2_naming_key_and_file(repo):
    (repo / "stopdoctor.toml").write_text("models = ['models/clean']\nfail_on = 'warning'\n")
    result = run()
    assert result.exit_code == 2
    assert "unknown key fail_on" in result.stderr and "stopdoctor.toml" in result.stderr
    assert result.stdout == ""


def test_bad_flags_exit_2(repo):
    assert run("models/clean", "--format", "xml").exit_code == 2
    assert run("models/clean", "--select", "SD9").exit_code == 2
    assert run("models/clean", "--fail-on", "fatal").exit_code == 2
    result = run()
    assert result.exit_code == 2 and "no model to check" in result.stderr


def test_expectation_failure_fails_the_gate(repo):
    (repo / "stopdoctor.toml").write_text(
        "[[model]]\npath = 'models/clean'\nexpect-end-of-turn = '<|eot_id|>'\n")
    result = run("--format", "github")
    assert result.exit_code == 1
    assert "title=SD501 expectation-failed::" in result.stdout
    assert "file=models/clean/tokenizer_config.json" in result.stdout


def test_serving_file_findings_point_at_the_serving_file(repo):
    from pathlib import Path

    serving = Path(__file__).resolve().parents[1] / "fixtures" / "serving" / "request-bad.json"
    shutil.copy(serving, repo / "request.json")
    result = run("models/clean", "--serving", "request.json", "--format", "json")
    assert result.exit_code == 1
    findings = json.loads(result.stdout)["models"][0]["findings"]
    assert any(f["code"] == "SD405" and f["path"] == "request.json" and f["line"] for f in findings)
    bad = run("models/clean", "--serving", "nope.sh")
    assert bad.exit_code == 2 and "nope.sh" in bad.stderr


@pytest.mark.needs_torch
def test_live_without_weights_is_exit_2_with_a_clear_line(repo):
    result = run("models/clean", "--live", "--format", "json")
    assert result.exit_code == 2
    assert "live probe" in result.stderr


def test_human_format_shows_each_model_and_its_findings(repo):
    result = run("models/runaway", "models/clean", "--no-color")
    assert result.exit_code == 1
    assert "SD101" in result.stdout and "models/clean" in result.stdout and "No findings." in result.stdout
