"""Hostile inputs, round 2 (issue #17): each class here was an exit 3, a traceback reported as exit
1, a hang, gigabytes of memory, a wrong result or a partial write. Now each is one line on stderr
and exit 2 (or an ordinary report), quickly. One test (or parametrized test) per class; the
random search over the same classes is tests/fuzz.py's `--round2` share (tests/test_fuzz.py).

Tests that run the CLI in a fresh process do so where the class is about the process itself
(closed stdout, encodings, memory).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from .helpers import cli
from .test_hardening import one_line_exit_2, write

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(ROOT), "RUST_BACKTRACE": "0"}
needs_fifo = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no named pipes here")


def run_process(*args: str, env: dict | None = None, timeout: float = 120, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "stopdoctor", *args], capture_output=True, text=True,
                          env={**ENV, **(env or {})}, timeout=timeout, **kwargs)


@pytest.fixture
def model(synth_root, tmp_path):
    """A copy of the clean ChatML model whose files a test may overwrite (JSON values as dicts)."""

    def make(**files: object) -> Path:
        folder = tmp_path / "model"
        if not folder.exists():
            shutil.copytree(synth_root / "clean-chatml", folder)
        for name, content in files.items():
            path = folder / name
            if isinstance(content, bytes):
                path.write_bytes(content)
            elif isinstance(content, str):
                path.write_text(content, encoding="utf-8")
            else:
                path.write_text(json.dumps(content))
        return folder

    return make


def tokenizer_with(folder: Path, **changes: object) -> dict:
    document = json.loads((folder / "tokenizer.json").read_text())
    document.update(changes)
    return document


# --- the process: stdout closed or unable to encode, a native panic ------------------------------


def test_closed_stdout_is_exit_2(synth_root, tmp_path):
    run = subprocess.run(
        [sys.executable, "-m", "stopdoctor", "rules"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        env=ENV, timeout=120, preexec_fn=lambda: os.close(1))
    assert run.returncode == 2, run.stderr
    assert "stdout is closed" in run.stderr and "internal error" not in run.stderr
    # With -o the report does not need stdout.
    out = tmp_path / "report.txt"
    run = subprocess.run([sys.executable, "-m", "stopdoctor", "inspect", str(synth_root / "clean-chatml"), "-o", str(out)],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=ENV, timeout=120,
                         preexec_fn=lambda: os.close(1))
    assert run.returncode == 0, run.stderr
    assert out.read_text()


def test_stdout_that_cannot_encode_the_report_is_exit_2():
    run = run_process("inspect", str(ROOT / "fixtures" / "examples" / "llama3-eot-missing"),
                      env={"PYTHONIOENCODING": "ascii"})
    assert run.returncode == 2, run.stderr
    assert "stdout's encoding (ascii) cannot encode" in run.stderr and "PYTHONIOENCODING=utf-8" in run.stderr
    assert "Traceback" not in run.stderr


@needs_fifo
def test_output_file_that_is_a_pipe_or_folder_is_refused(synth_root, tmp_path):
    os.mkfifo(tmp_path / "pipe")
    started = time.monotonic()
    one_line_exit_2(cli("inspect", str(synth_root / "clean-chatml"), "-o", str(tmp_path / "pipe")), "not a regular file")
    one_line_exit_2(cli("inspect", str(synth_root / "clean-chatml"), "-o", str(tmp_path)), "not a regular file")
    assert time.monotonic() - started < 30


def test_a_tokenizer_regex_that_panics_is_exit_2(model):
    folder = model()
    split = {"type": "Split", "pattern": {"Regex": "(a+)+$"}, "behavior": "Isolated", "invert": False}
    model(**{"tokenizer.json": tokenizer_with(folder, pre_tokenizer=split)})
    run = run_process("render", str(folder), "-m", "user", "a" * 40 + "b")
    assert run.returncode == 2, run.stderr
    assert "stopdoctor: error: a native library failed on this input" in run.stderr
    assert "Traceback" not in run.stderr


# --- tokenizers: special token texts with a colon or a space, the file's padding -----------------


def colon_gguf(path: Path) -> Path:
    """A GGUF whose bos and eos texts hold a colon and a space, both added by the tokenizer."""
    import struct

    from .test_hardening import ARRAY, STRING, UINT32, gguf, gguf_ints, gguf_str, gguf_strings

    tokens = ["<b:s>", "</e s>", "<|im_start|>", "<|im_end|>", *map(chr, range(97, 123)), "Ġ", "Ċ", "ab"]
    path.write_bytes(gguf({
        "general.architecture": (STRING, gguf_str("llama")),
        "tokenizer.ggml.model": (STRING, gguf_str("gpt2")),
        "tokenizer.ggml.tokens": (ARRAY, gguf_strings(tokens)),
        "tokenizer.ggml.token_type": (ARRAY, gguf_ints([3, 3, 3, 3] + [1] * (len(tokens) - 4))),
        "tokenizer.ggml.merges": (ARRAY, gguf_strings(["a b"])),
        "tokenizer.ggml.bos_token_id": (UINT32, struct.pack("<I", 0)),
        "tokenizer.ggml.eos_token_id": (UINT32, struct.pack("<I", 1)),
        "tokenizer.ggml.add_bos_token": (7, b"\x01"),
        "tokenizer.ggml.add_eos_token": (7, b"\x01"),
        "tokenizer.chat_template": (STRING, gguf_str("{% for m in messages %}<|im_start|>{{ m.role }}\n"
                                                     "{{ m.content }}<|im_end|>\n{% endfor %}")),
    }))
    return path


def test_bos_and_eos_texts_with_a_colon_or_a_space(tmp_path):
    from stopdoctor.api import load

    path = colon_gguf(tmp_path / "colon.gguf")
    for command in (["render", str(path), "-m", "user", "hi"], ["probe-stop", "<|im_end|>", "--model", str(path)]):
        run = cli(*command)
        assert run.code == 0, (command, run.stderr)
    encoding = load(str(path)).vocab.tokenizer().encode("hi")
    assert encoding.tokens == ["<b:s>", "h", "i", "</e s>"]  # both still added, as the file says


@pytest.mark.slow
def test_gemma_gguf_with_a_colon_in_its_bos_text(real_gguf_models, tmp_path_factory):
    """The issue's case: a one-byte patch of the real Gemma 3 GGUF, `<bos>` -> `<b:s>`."""
    folder = tmp_path_factory.mktemp("gemma-colon")
    patched = folder / "gemma-colon.gguf"
    shutil.copyfile(real_gguf_models.gemma_gguf, patched)
    with open(patched, "r+b") as handle:
        data = handle.read(64 << 20)
        at = data.index(b"\x05\x00\x00\x00\x00\x00\x00\x00<bos>")  # the token list entry, length-prefixed
        handle.seek(at + 8 + 2)
        handle.write(b":")
    template = folder / "chat.jinja"
    template.write_text("{{ bos_token }}{% for m in messages %}<start_of_turn>{{ m.role }}\n{{ m.content }}<end_of_turn>\n{% endfor %}")
    for command in (["render", str(patched), "--template", str(template), "-m", "user", "hi"],
                    ["probe-stop", "<end_of_turn>", "--model", str(patched)]):
        run = cli(*command)
        assert run.code == 0, (command, run.stderr)


def test_a_tokenizer_json_padding_of_30_million_is_not_applied(model):
    folder = model()
    padding = {"strategy": {"Fixed": 30_000_000}, "direction": "Right", "pad_to_multiple_of": None,
               "pad_id": 0, "pad_type_id": 0, "pad_token": "<|endoftext|>"}
    truncation = {"direction": "Right", "max_length": 1, "strategy": "LongestFirst", "stride": 0}
    model(**{"tokenizer.json": tokenizer_with(folder, padding=padding, truncation=truncation)})
    run = run_process("render", str(folder), "-m", "user", "hi there", "--ids", "--json",
                      preexec_fn=lambda: __import__("resource").setrlimit(__import__("resource").RLIMIT_AS, (3 << 30, 3 << 30)))
    assert run.returncode == 0, run.stderr
    ids = json.loads(run.stdout)["ids"] if "ids" in json.loads(run.stdout) else None
    assert ids is None or 5 < len(ids) < 100, len(ids)  # neither padded to 30 million nor cut to 1
    assert cli("probe-stop", "<|im_end|>", "--model", str(folder)).code == 0


# --- the sandbox: builtins that run unbounded inside one call ------------------------------------


@pytest.mark.parametrize("template", [
    "{{ ([[0] * 1000] * 20000)|sum(start=[]) }}",  # one quadratic C call: the deadline never ticked
    "{{ ([[0] * 1000] * 2000)|sum(start=[]) }}",
    "{{ (['x' * 1000] * 20000)|sum(start='') }}",
    "{{ '%(a).1999999999f' % {'a': 1.5} }}",  # widths after a mapping key were not seen
    "{{ '%(a)1999999999s' % {'a': 'x'} }}",
    "{{ '{0:{1}}'.format('x', '1999999999') }}",  # a nested width, known only when the field is formatted
    "{{ '{a:{b}}'.format_map({'a': 'x', 'b': '>1999999999'}) }}",
    "{{ '%1999999999s'|format('x') }}",
    "{{ '%(a)1999999999s'|format(a='x') }}",
    "{{ '%*s'|format(1999999999, 'x') }}",
    "{{ strftime_now('%1000Y' * 333333) }}",
    "{{ '%999999s' * 100 % ((1,) * 100) }}",  # many widths, each under the limit
    "{{ ('{:999999}' * 100).format(*((1,) * 100)) }}",
])
def test_one_call_builtins_are_sized_before_the_call(template):
    import resource

    from stopdoctor.template.limits import TemplateLimitError
    from stopdoctor.template.render import render_chat

    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    started = time.monotonic()
    with pytest.raises(TemplateLimitError):
        render_chat(template, [{"role": "user", "content": "hi"}])
    assert time.monotonic() - started < 10
    assert (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024 < 100


def test_sum_format_and_strftime_still_work():
    from stopdoctor.template.render import render_chat

    out = render_chat("{{ [1, 2, 3]|sum }} {{ [{'a': 1}, {'a': 2}]|sum(attribute='a') }} {{ [[1], [2]]|sum(start=[]) }} "
                      "{{ '{0:>5}|{1:.2f}'.format('x', 1.5) }} {{ '{a}'.format_map({'a': 'b'}) }} {{ '%(a)5s' % {'a': 'y'} }} "
                      "{{ '%05.1f'|format(2.5) }} {{ strftime_now('%Y-%m-%d') | length }}", [{"role": "user", "content": "hi"}])
    assert out == "6 3 [1, 2]     x|1.50 b     y 002.5 10"
