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
