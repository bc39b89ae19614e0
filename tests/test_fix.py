"""`stopdoctor fix`: surgical JSON edits, Modelfile/vLLM/request fixes, exit codes, and that the
defect is gone after --write (on copies in tmp_path; fixtures and ../shared are never touched)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

import stopdoctor.cli.fix  # noqa: F401  (registers the command until cli/__init__ imports it)
from stopdoctor.api import inspect_model
from stopdoctor.cli.app import app
from stopdoctor.fix import plan_fixes, set_top_level_ids
from stopdoctor.api import serving_findings
from stopdoctor.runtimes.serving import load_serving

ROOT = Path(__file__).resolve().parents[1]
SERVING = ROOT / "fixtures" / "serving"
REALWORLD_CASES = ("SmartMaster35Rus__Llama3-GGuf", "ananddhanabal__gemma", "colorfulandcjy0806__cjy_chat",
                   "hashvibe007__smollm2__final_model")


def run(*args):
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.stdout


def sd101(folder: Path) -> list:
    return [f for f in inspect_model(str(folder)).findings if f.code == "SD101"]


def assert_only_value_changed(before: str, after: str, key: str) -> None:
    """Every byte outside the value of `key` is unchanged."""
    from stopdoctor.fix import top_level_spans

    b, a = top_level_spans(before)[key], top_level_spans(after)[key]
    assert before[: b[0]] == after[: a[0]]
    assert before[b[1]:] == after[a[1]:]


@pytest.mark.parametrize("text", [
    '{\n  "bos_token_id": 1,\n  "eos_token_id": 2,\n  "transformers_version": "4.40"\n}\n',
    '{"eos_token_id":2,"pad_token_id":0}',
    '{\r\n\t"eos_token_id": [\r\n\t\t2\r\n\t],\r\n\t"x": "é"\r\n}',
    '\ufeff{ "a": {"eos_token_id": 5}, "eos_token_id" : 2 }',
])
def test_json_edit_touches_only_the_value(text):
    after = set_top_level_ids(text, "eos_token_id", [2, 9])
    assert_only_value_changed(text, after, "eos_token_id")
    assert json.loads(after.lstrip("\ufeff"))["eos_token_id"] == [2, 9]
    if "a" in json.loads(text.lstrip("\ufeff")):
        assert json.loads(after.lstrip("\ufeff"))["a"] == {"eos_token_id": 5}  # nested key untouched


def test_json_edit_adds_a_missing_key_in_the_file_style():
    text = '{\n    "bos_token_id": 1\n}\n'
    after = set_top_level_ids(text, "eos_token_id", [2])
    assert after == '{\n    "eos_token_id": [2],\n    "bos_token_id": 1\n}\n'


def fixed_copy(source: Path, tmp_path: Path) -> Path:
    dest = tmp_path / source.name
    shutil.copytree(source, dest)
    return dest


@pytest.mark.parametrize("case", ["llama3-eot-missing", "chatml-eos-endoftext"])
def test_fix_synth_cases(synth_root, tmp_path, case):
    folder = fixed_copy(synth_root / case, tmp_path)
    before = (folder / "generation_config.json").read_text()
    assert sd101(folder)
    code, out = run("fix", str(folder))
    assert code == 1 and out.startswith("--- a/generation_config.json")
    assert (folder / "generation_config.json").read_text() == before  # not written without --write
    code, _ = run("fix", str(folder), "--write")
    assert code == 0
    assert_only_value_changed(before, (folder / "generation_config.json").read_text(), "eos_token_id")
    assert not sd101(folder)
    assert run("fix", str(folder)) == (0, "")


@pytest.mark.parametrize("case", REALWORLD_CASES)
def test_fix_realworld(realworld, tmp_path, case):
    folder = fixed_copy(realworld / case, tmp_path)
    untouched = {p.name: p.read_bytes() for p in folder.iterdir() if p.name != "generation_config.json"}
    assert sd101(folder)
    assert run("fix", str(folder), "--write")[0] == 0
    assert not sd101(folder)
    assert {p.name: p.read_bytes() for p in folder.iterdir() if p.name != "generation_config.json"} == untouched


def test_missing_generation_config_is_created_from_config(synth_root, tmp_path):
    folder = fixed_copy(synth_root / "llama3-eot-missing", tmp_path)
    (folder / "generation_config.json").unlink()
    assert sd101(folder)
    code, out = run("fix", str(folder))
    assert code == 1 and out.startswith("--- /dev/null\n+++ b/generation_config.json")
    assert run("fix", str(folder), "--write")[0] == 0
    assert not sd101(folder)


def test_clean_model_has_nothing_to_fix(synth_root):
    assert run("fix", str(synth_root / "clean-llama3")) == (0, "")


def test_modelfile_stop_is_added_and_check_passes(tmp_path):
    model = ROOT / "fixtures" / "examples" / "llama3-eot-missing"
    modelfile = tmp_path / "Modelfile"
    shutil.copy(SERVING / "Modelfile.nostop", modelfile)
    before = modelfile.read_text()
    analysis = inspect_model(str(model)).analysis
    plan = plan_fixes(analysis, load_serving(modelfile))
    edit = next(e for e in plan.edits if e.path == modelfile)
    assert edit.after == before + 'PARAMETER stop "<|eot_id|>"\n'
    model_copy = fixed_copy(model, tmp_path)
    assert run("fix", str(model_copy), "--serving", str(modelfile), "--write")[0] == 0
    assert not serving_findings(analysis, load_serving(modelfile))


def test_vllm_generation_config_folder_becomes_auto(tmp_path, synth_root):
    model = fixed_copy(synth_root / "llama3-eot-missing", tmp_path)
    stale = tmp_path / "stale"
    stale.mkdir()
    (stale / "generation_config.json").write_text('{"eos_token_id": 609}')
    serve = tmp_path / "serve.sh"
    serve.write_text(f"vllm serve {model} \\\n  --generation-config {stale} \\\n  --port 8000\n")
    code, out = run("fix", str(model), "--serving", str(serve))
    assert code == 1 and "+  --generation-config auto \\" in out
    assert run("fix", str(model), "--serving", str(serve), "--write")[0] == 0
    assert serve.read_text() == f"vllm serve {model} \\\n  --generation-config auto \\\n  --port 8000\n"
    analysis = inspect_model(str(model)).analysis
    assert not [f for f in serving_findings(analysis, load_serving(serve)) if f.code == "SD401"]


def test_request_ignore_eos_is_turned_off(tmp_path):
    model = ROOT / "fixtures" / "examples" / "llama3-eot-missing"
    request = tmp_path / "request.json"
    request.write_text('{\n  "model": "m",\n  "ignore_eos": true,\n  "max_tokens": 512\n}\n')
    analysis = inspect_model(str(model)).analysis
    plan = plan_fixes(analysis, load_serving(request))
    edit = next(e for e in plan.edits if e.path == request)
    assert edit.after == '{\n  "model": "m",\n  "ignore_eos": false,\n  "max_tokens": 512\n}\n'


def test_bad_input_exits_2(tmp_path):
    assert run("fix", str(tmp_path / "absent"))[0] == 2
    bad = tmp_path / "r.json"
    bad.write_text("{")
    assert run("fix", str(ROOT / "fixtures" / "examples" / "chatml-ok"), "--serving", str(bad))[0] == 2
