"""What a new user hit, trying stopdoctor as the README shows it: one test per rough edge."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.helpers import cli

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "fixtures" / "examples" / "llama3-eot-missing"


@pytest.fixture
def readme_project(tmp_path, monkeypatch):
    """The README's configuration example: the model in `models = [...]` and in `[[model]]`."""
    shutil.copytree(EXAMPLE, tmp_path / "models" / "my-finetune")
    (tmp_path / "pyproject.toml").write_text(
        '[tool.stopdoctor]\nmodels = ["models/my-finetune"]\nfail-on = "error"\n\n'
        '[[tool.stopdoctor.model]]\npath = "models/my-finetune"\nexpect-kind = "instruct"\n'
        'expect-end-of-turn = "<|im_end|>"\n')
    monkeypatch.chdir(tmp_path)
    for name in ("MODELS", "SERVING", "FAIL_ON", "SELECT", "IGNORE", "SEVERITY", "FORMAT", "CONFIG"):
        monkeypatch.delenv(f"STOPDOCTOR_{name}", raising=False)
    return tmp_path


def _sarif_rules(run) -> list[str]:
    return sorted(r["ruleId"] for r in json.loads(run.stdout)["runs"][0]["results"])


def test_a_model_listed_twice_in_the_config_is_checked_once(readme_project):
    result = cli("check", "--format", "sarif")
    assert result.code == 1
    assert _sarif_rules(result) == ["SD101", "SD501"]
    assert "1 of 1 model(s) checked" in result.stderr


@pytest.mark.parametrize("spec", ["models/my-finetune", "./models/my-finetune/"])
def test_check_model_applies_that_models_configured_expectation(readme_project, spec):
    result = cli("check", spec, "--format", "sarif")
    assert _sarif_rules(result) == ["SD101", "SD501"]


def _fake_probe(monkeypatch):
    from stopdoctor import config
    from stopdoctor.diagnose import Generation, StopCause
    from stopdoctor.generate import FragmentProbe, FragmentVerdict

    generation = Generation("stop", StopCause("eos", 2, "<|im_end|>"), "Paris.")
    verdict = FragmentVerdict("instruct", "answered the question and ended its turn after 3 tokens (<|im_end|>)",
                              (FragmentProbe("chat question", "What is the capital of France?", generation, True),))
    monkeypatch.setattr(config, "require_live", lambda: None)
    monkeypatch.setattr(config, "live_probe", lambda result: verdict)
    return verdict


def test_check_live_shows_what_it_ran_and_found(readme_project, monkeypatch):
    _fake_probe(monkeypatch)
    human = cli("check", "--live", "--no-color")
    assert "live probe" in human.stdout and "chat question" in human.stdout
    assert "verdict   instruct: answered the question" in human.stdout
    document = cli("check", "--live", "--format", "json").json()
    live = document["models"][0]["live"]
    assert live["verdict"] == "instruct" and live["probes"][0]["name"] == "chat question"
    assert live["probes"][0]["text"] == "Paris."
    assert cli("check", "--format", "json").json()["models"][0]["live"] is None
