"""Bad input: one clear line (plus an optional hint) on stderr, exit code 2, never a traceback."""

from __future__ import annotations

import json
import shutil
import struct

import pytest

from .helpers import cli


def _model(tmp_path, files: dict[str, object]):
    folder = tmp_path / "model"
    folder.mkdir()
    for name, content in files.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        elif isinstance(content, str):
            path.write_text(content)
        else:
            path.write_text(json.dumps(content))
    return folder


def _gguf_bytes(version=3, n_tensors=0, kvs=b"", n_kv=0):
    return b"GGUF" + struct.pack("<IQQ", version, n_tensors, n_kv) + kvs


def _kv_string(key: str, value: bytes) -> bytes:
    key_bytes = key.encode()
    return struct.pack("<Q", len(key_bytes)) + key_bytes + struct.pack("<I", 8) + struct.pack("<Q", len(value)) + value


CHATML = "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"


def _with_template(template, **more):
    return {"config.json": {"eos_token_id": 2}, "tokenizer_config.json": {"chat_template": template, "eos_token": "</s>", **more}}


CASES = {
    "missing path": (lambda tmp: str(tmp / "nope"), "no such folder or file"),
    "not a hub id": (lambda tmp: "a/b/c/d", "no such folder or file"),
    "empty folder": (lambda tmp: str(_model(tmp, {})), "no model files found"),
    "folder with only a README": (lambda tmp: str(_model(tmp, {"README.md": "# hi"})), "no model files found"),
    "plain file": (lambda tmp: str(_model(tmp, {"notes.txt": "x"}) / "notes.txt"), "not a .gguf model"),
    "malformed config.json": (lambda tmp: str(_model(tmp, {"config.json": '{"eos_token_id": 2,,}'})), "config.json: invalid JSON at line 1"),
    "truncated generation_config.json": (lambda tmp: str(_model(tmp, {"generation_config.json": '{"eos_token_id": [1, 2'})), "generation_config.json: invalid JSON"),
    "config.json is a list": (lambda tmp: str(_model(tmp, {"config.json": [1, 2]})), "expected a JSON object"),
    "non-UTF-8 config": (lambda tmp: str(_model(tmp, {"config.json": b'{"a": "\xff\xfe"}'})), "not UTF-8"),
    "eos id is a string": (lambda tmp: str(_model(tmp, {"generation_config.json": {"eos_token_id": "<|im_end|>"}})), "eos_token_id must be an integer or a list of integers"),
    "eos id list holds a string": (lambda tmp: str(_model(tmp, {"config.json": {"eos_token_id": [2, "3"]}})), "eos_token_id must be an integer"),
    "eos id is a bool": (lambda tmp: str(_model(tmp, {"config.json": {"eos_token_id": True}})), "eos_token_id must be an integer"),
    "chat_template is a number": (lambda tmp: str(_model(tmp, {"tokenizer_config.json": {"chat_template": 3}})), "chat_template must be a string"),
    "non-UTF-8 template file": (lambda tmp: str(_model(tmp, {"config.json": {}, "chat_template.jinja": b"{{ '\xff' }}"})), "chat_template.jinja: is not UTF-8"),
    "template syntax error": (lambda tmp: str(_model(tmp, _with_template("{% for m in messages %}{{ m.content }"))), "template"),
    "template that raises": (lambda tmp: str(_model(tmp, _with_template("{{ raise_exception('Only user roles are supported here!') }}"))), "Only user roles are supported here!"),
    "template reaching python internals": (lambda tmp: str(_model(tmp, _with_template("{{ messages.__class__.__mro__[1].__subclasses__() }}"))), "template"),
    "template with a huge loop": (lambda tmp: str(_model(tmp, _with_template("{% for i in range(10**9) %}{{ i }}{% endfor %}"))), "template"),
    "template with a huge output": (lambda tmp: str(_model(tmp, _with_template("{{ 'x' * 10**9 }}"))), "template"),
    "50 MB template": (lambda tmp: str(_model(tmp, _with_template("{# " + "x" * 50_000_000 + " #}" + CHATML))), "tokenizer_config.json: 50.0 MB is larger than"),
    "2 MB template": (lambda tmp: str(_model(tmp, _with_template("{# " + "x" * 2_000_000 + " #}" + CHATML))), "template"),
    "malformed tokenizer.json": (lambda tmp: str(_model(tmp, {"config.json": {}, "tokenizer.json": "{not json"})), "tokenizer.json: cannot be loaded by the tokenizers library"),
    "not a GGUF despite the name": (lambda tmp: str(_model(tmp, {"m.gguf": b"PK\x03\x04 zip"}) / "m.gguf"), "GGUF"),
    "empty GGUF": (lambda tmp: str(_model(tmp, {"m.gguf": b""}) / "m.gguf"), "GGUF"),
    "truncated GGUF header": (lambda tmp: str(_model(tmp, {"m.gguf": _gguf_bytes()[:10]}) / "m.gguf"), "GGUF"),
    "GGUF with an absurd key count": (lambda tmp: str(_model(tmp, {"m.gguf": _gguf_bytes(n_kv=2**60)}) / "m.gguf"), "GGUF"),
    "GGUF string past the end": (lambda tmp: str(_model(tmp, {"m.gguf": _gguf_bytes(n_kv=1, kvs=_kv_string("general.name", b"x")[:-1] + struct.pack("<Q", 10**12)[:0])}) / "m.gguf"), "GGUF"),
    "GGUF of unsupported version": (lambda tmp: str(_model(tmp, {"m.gguf": _gguf_bytes(version=99)}) / "m.gguf"), "version"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_input_is_one_line_and_exit_2(tmp_path, case):
    make, expected = CASES[case]
    spec = make(tmp_path)
    run = cli("inspect", spec)
    assert run.code == 2, (run.stdout, run.stderr)
    assert run.stdout == ""
    lines = run.stderr.splitlines()
    assert 1 <= len(lines) <= 2, run.stderr
    assert lines[0].startswith("stopdoctor: error: ")
    assert expected.lower() in lines[0].lower(), lines[0]
    assert "Traceback" not in run.stderr
    if len(lines) == 2:
        assert lines[1].startswith("hint: ")


def test_missing_tokenizer_json_is_reported_not_fatal(synth_root, tmp_path):
    folder = tmp_path / "m"
    shutil.copytree(synth_root / "clean-chatml", folder)
    (folder / "tokenizer.json").unlink()
    doc = cli("inspect", "--json", str(folder)).json()
    assert doc["model"]["missing_files"] == ["tokenizer.json"]
    # the end-of-turn is still known from tokenizer_config.json added_tokens_decoder
    assert doc["end_of_turn"][0]["single_special_token"] is True


def test_rules_unknown_code_exit_2():
    run = cli("rules", "SD999")
    assert run.code == 2 and "no rule 'SD999'" in run.stderr


def test_internal_error_is_exit_3_without_traceback(monkeypatch, synth_root):
    import stopdoctor.api

    def broken(*args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr(stopdoctor.api, "inspect_model", broken)
    run = cli("inspect", str(synth_root / "clean-chatml"))
    assert run.code == 3
    assert run.stderr.splitlines()[0] == "stopdoctor: internal error: RuntimeError: boom"
    assert "Traceback" not in run.stderr
