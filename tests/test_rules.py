"""Every rule against its own fixtures, as ruff and check-jsonschema test theirs: one parametrized
test walks tests/rules/<CODE>/{positive,negative}/, runs the command the case's `case.toml` names
(`args`, run from inside the case folder, `--json` added; default `inspect .`) through the real
CLI, and asserts the code is among the findings of the positive and absent from the negative.

The fixtures are written by fixtures/rule_cases.py (`python fixtures/rule_cases.py` rewrites
them; a test here fails when the committed files and the script disagree).
"""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest

from fixtures import rule_cases
from .helpers import cli

RULES = Path(__file__).parent / "rules"
POLARITIES = ("positive", "negative")
DEFAULT_ARGS = ("inspect", ".")


def fixture_folders() -> list[tuple[str, str, Path]]:
    return [(code.name, polarity, code / polarity)
            for code in sorted(RULES.glob("SD[0-9][0-9][0-9]")) for polarity in POLARITIES if (code / polarity).is_dir()]


def finding_codes(document: object) -> list[str]:
    """The code of every finding anywhere in a command's JSON document (`findings` lists: at the
    top for inspect/labels/logs, per model for check)."""
    codes: list[str] = []
    if isinstance(document, dict):
        for key, value in document.items():
            if key == "findings" and isinstance(value, list):
                codes += [f["code"] for f in value if isinstance(f, dict) and "code" in f]
            else:
                codes += finding_codes(value)
    elif isinstance(document, list):
        for value in document:
            codes += finding_codes(value)
    return codes


def run_case(folder: Path, monkeypatch) -> tuple[int, list[str], str]:
    case = tomllib.loads((folder / "case.toml").read_text(encoding="utf-8"))
    args = [str(a) for a in case.get("args", DEFAULT_ARGS)]
    monkeypatch.chdir(folder)
    for name in ("MODELS", "SERVING", "FAIL_ON", "SELECT", "IGNORE", "SEVERITY", "FORMAT", "CONFIG"):
        monkeypatch.delenv(f"STOPDOCTOR_{name}", raising=False)
    run = cli(*args, "--json")
    codes = finding_codes(run.json()) if run.stdout.strip() else []
    return run.code, codes, run.stderr


@pytest.mark.parametrize("code, polarity, folder",
                         [pytest.param(*f, id=f"{f[0]}-{f[1]}") for f in fixture_folders()])
def test_rule_fires_on_its_positive_fixture_only(code, polarity, folder, monkeypatch):
    exit_code, codes, stderr = run_case(folder, monkeypatch)
    about = tomllib.loads((folder / "case.toml").read_text(encoding="utf-8"))["about"]
    # 2 (could not run) or 3 (internal error) would make a negative pass for the wrong reason
    assert exit_code in (0, 1), (exit_code, stderr)
    assert "SD000" not in codes, (codes, stderr)
    if polarity == "positive":
        assert code in codes, f"{code} did not fire on {folder} ({about}); findings: {codes}"
    else:
        assert code not in codes, f"{code} fired on {folder} ({about}); findings: {codes}"


def test_every_rule_has_a_positive_and_a_negative_fixture():
    run = cli("rules", "--json")  # what the tool itself lists; SD000 stands for a crashed rule
    assert run.code == 0, run.stderr
    registered = {rule["code"] for rule in run.json()["rules"]}
    assert len(registered) > 20
    have = {(code, polarity) for code, polarity, _ in fixture_folders()}
    missing = [f"{code}/{polarity}" for code in sorted(registered - {"SD000"})
               for polarity in POLARITIES if (code, polarity) not in have]
    assert not missing, f"rules without fixtures under tests/rules/: {missing}"
    unknown = sorted({code for code, _ in have} - registered)
    assert not unknown, f"fixtures for codes no rule has: {unknown}"


def test_every_case_says_what_it_shows_and_runs_one_command():
    commands = {"inspect", "check", "labels", "logs"}
    for _, _, folder in fixture_folders():
        case = tomllib.loads((folder / "case.toml").read_text(encoding="utf-8"))
        assert set(case) <= {"about", "args"} and case["about"].strip(), folder
        assert list(case.get("args", DEFAULT_ARGS))[0] in commands, folder
        assert "--json" not in case.get("args", ()), folder  # the test adds it


def test_fixtures_are_what_the_script_writes():
    expected, committed = rule_cases.render(), rule_cases.written(RULES)
    stale = sorted(p for p in expected.keys() | committed.keys() if expected.get(p) != committed.get(p))
    assert not stale, f"tests/rules/ is not what fixtures/rule_cases.py writes: {stale}; run `python fixtures/rule_cases.py`"


def test_the_test_fails_when_a_positive_fixture_stops_firing(tmp_path, monkeypatch):
    """The parametrized test above could pass vacuously: show a fixed positive fails it."""
    import shutil

    folder = tmp_path / "SD104" / "positive"
    shutil.copytree(RULES / "SD104" / "positive", folder)
    config = json.loads((folder / "tokenizer_config.json").read_text(encoding="utf-8"))
    config["pad_token"] = "<|endoftext|>"  # the fix: pad is no longer the eos
    (folder / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")
    with pytest.raises(AssertionError, match="SD104 did not fire"):
        test_rule_fires_on_its_positive_fixture_only("SD104", "positive", folder, monkeypatch)
