"""Lines recorded where a file is parsed: a JSON key path's own line (a nested `text_config` key
never stands for the top-level one), a Modelfile command's line as its own field, in every format."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from stopdoctor.config import read_config, with_flags
from stopdoctor.runtimes.serving import load_serving
from stopdoctor.gate import run_gate
from stopdoctor.reporters.formats import Options, render

ROOT = Path(__file__).resolve().parents[1]
SD105_POSITIVE = ROOT / "tests" / "rules" / "SD105" / "positive"


def _nested_first(realworld: Path, tmp_path: Path) -> Path:
    """The SD105 positive fixture whose config.json opens with the `text_config` of a real multimodal
    config (Qwen3.5, it declares its own eos_token_id) before the top-level keys, as files written
    by hand or by json.dump without sort_keys are ordered."""
    model = tmp_path / "models" / "nested"
    shutil.copytree(SD105_POSITIVE, model)
    real = json.loads((realworld / "Arp1tMoga__fast_qwen" / "config.json").read_text(encoding="utf-8"))
    assert "eos_token_id" in real["text_config"]
    config = json.loads((model / "config.json").read_text(encoding="utf-8"))
    (model / "config.json").write_text(json.dumps({"text_config": real["text_config"], **config}, indent=2) + "\n")
    return model


def _top_level_line(path: Path, key: str) -> int:
    """The line of `key` at the top level of an indent=2 file: read here by indentation, not by the tool."""
    lines = path.read_text(encoding="utf-8").splitlines()
    return next(i for i, text in enumerate(lines, 1) if text.startswith(f'  "{key}"'))


def test_sd105_points_at_the_top_level_eos_in_every_format(realworld, tmp_path, monkeypatch):
    model = _nested_first(realworld, tmp_path)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "stopdoctor.toml").write_text("")
    report = run_gate(with_flags(read_config(tmp_path / "stopdoctor.toml"), models=["models/nested"], fail_on="error"))
    config = model / "config.json"
    want = _top_level_line(config, "eos_token_id")
    nested = config.read_text(encoding="utf-8").splitlines().index('    "eos_token_id": 248044,') + 1
    assert nested < want  # the first `"eos_token_id":` in the text is the wrong one

    sarif = json.loads(render("sarif", report, Options(base=tmp_path)))
    result = next(r for r in sarif["runs"][0]["results"] if r["ruleId"] == "SD105")
    physical = result["locations"][0]["physicalLocation"]
    assert physical["artifactLocation"]["uri"] == "models/nested/config.json"
    assert physical["region"]["startLine"] == want

    github = render("github", report, Options(base=tmp_path))
    line = next(text for text in github.splitlines() if "SD105" in text)
    assert f"file=models/nested/config.json,line={want}," in line

    human = render("human", report, Options(base=tmp_path, width=200))
    header = next(text for text in human.splitlines() if "SD105" in text)
    assert header.endswith(f"config.json:{want} eos_token_id"), header
    nested_finding = next(text for text in human.splitlines() if "SD103" in text)  # the nested id's own finding
    assert nested_finding.endswith(f"config.json:{nested} text_config.eos_token_id"), nested_finding


def test_json_key_lines_keeps_paths_apart(realworld):
    from stopdoctor.facts.lines import json_key_lines

    text = (realworld / "Arp1tMoga__fast_qwen" / "config.json").read_text(encoding="utf-8")
    lines = json_key_lines(text)
    rows = text.splitlines()
    assert rows[lines["eos_token_id"] - 1].startswith('  "eos_token_id"')
    assert rows[lines["text_config"] - 1].startswith('  "text_config"')
    assert rows[lines["text_config.eos_token_id"] - 1].startswith('    "eos_token_id"')
    assert lines["text_config"] < lines["text_config.eos_token_id"]
    assert "text_config.rope_parameters.rope_type" not in lines  # deeper than recorded
    escaped = '{"a\\"b": {"c": [1,\n 2]},\n "list": [{"name": "x"},\n {"name": "y"}], "s": "\\\\"}'
    stepped_over = '{"a": {"b": {"c": "}]{[\\"", "d": [1,\n2]}},\n"e": [[3], "]"]}'  # brackets inside strings
    assert json_key_lines(stepped_over) == {"a": 1, "a.b": 1, "e": 3, "e[0]": 3, "e[1]": 3}
    assert json_key_lines(escaped) == {'a"b': 1, 'a"b.c': 1, "list": 3, "list[0]": 3, "list[1]": 4, "s": 4}


def test_json_key_lines_bounds_what_it_records():
    """A 150k-entry vocabulary is scanned but only its first members recorded: memory stays flat."""
    from stopdoctor.facts.lines import MEMBERS_RECORDED, json_key_lines

    text = '{"model": {"vocab": {' + ",".join(f'"t{i}": {i}' for i in range(3 * MEMBERS_RECORDED)) + '}}, "last": 1}'
    lines = json_key_lines(text, depth=3)
    assert "model.vocab.t0" in lines and f"model.vocab.t{MEMBERS_RECORDED}" not in lines
    assert lines["last"] == 1 and len(lines) == MEMBERS_RECORDED + 3


def test_modelfile_settings_carry_their_line_apart_from_the_key(tmp_path):
    modelfile = tmp_path / "Modelfile"
    modelfile.write_text('FROM ./llama3.gguf\n# two stops\nPARAMETER stop "User:"\n\nPARAMETER stop "<|eot_id|>"\n'
                         "PARAMETER num_predict 8\n")
    serving = load_serving(modelfile)
    assert [(s.key, s.line) for s in serving.stop] == [("PARAMETER stop", 3), ("PARAMETER stop", 5)]
    assert serving.model.key == "FROM" and serving.model.line == 1
    assert serving.location(serving.stop[1]).line == 5 and serving.location(serving.stop[1]).key == "PARAMETER stop"
    assert serving.location("PARAMETER num_predict").line == 6


def test_a_modelfile_finding_names_its_line_and_key_cleanly(synth_root, tmp_path, monkeypatch):
    """SD401-style stop findings on the second `PARAMETER stop` point at that line, and the key
    the finding names is the command itself, with no line number folded into it."""
    shutil.copytree(synth_root / "llama3-eot-missing", tmp_path / "models" / "llama3")
    modelfile = tmp_path / "Modelfile"
    modelfile.write_text('FROM ./models/llama3\nPARAMETER stop "<|eot_id|>"\n\nPARAMETER stop "User:"\n')
    monkeypatch.chdir(tmp_path)
    (tmp_path / "stopdoctor.toml").write_text("")
    report = run_gate(with_flags(read_config(tmp_path / "stopdoctor.toml"), models=["models/llama3"],
                                 serving=["Modelfile"], fail_on="error"))
    document = json.loads(render("json", report, Options(base=tmp_path)))
    found = [f for f in _findings(document) if (f.get("location") or {}).get("file", "").endswith("Modelfile")
             and (f.get("evidence") or {}).get("stop") == "User:"]
    assert found, document
    for finding in found:
        assert finding["location"]["key"] == "PARAMETER stop" and finding["location"]["line"] == 4
        assert "(line" not in finding["message"]


def _findings(document) -> list[dict]:
    out = []
    if isinstance(document, dict):
        if "code" in document and "location" in document:
            out.append(document)
        for value in document.values():
            out += _findings(value)
    elif isinstance(document, list):
        for value in document:
            out += _findings(value)
    return out
