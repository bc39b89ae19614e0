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
from pathlib import Path

import pytest

from .helpers import CpuClock, cli
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
    work = CpuClock()  # CPU seconds: a busy machine's other processes are not counted
    one_line_exit_2(cli("inspect", str(synth_root / "clean-chatml"), "-o", str(tmp_path / "pipe")), "not a regular file")
    one_line_exit_2(cli("inspect", str(synth_root / "clean-chatml"), "-o", str(tmp_path)), "not a regular file")
    assert work.seconds < 30


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
    work = CpuClock()  # CPU seconds: a busy machine's other processes are not counted
    with pytest.raises(TemplateLimitError):
        render_chat(template, [{"role": "user", "content": "hi"}])
    assert work.seconds < 10
    assert (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024 < 100


def test_sum_format_and_strftime_still_work():
    from stopdoctor.template.render import render_chat

    out = render_chat("{{ [1, 2, 3]|sum }} {{ [{'a': 1}, {'a': 2}]|sum(attribute='a') }} {{ [[1], [2]]|sum(start=[]) }} "
                      "{{ '{0:>5}|{1:.2f}'.format('x', 1.5) }} {{ '{a}'.format_map({'a': 'b'}) }} {{ '%(a)5s' % {'a': 'y'} }} "
                      "{{ '%05.1f'|format(2.5) }} {{ strftime_now('%Y-%m-%d') | length }}", [{"role": "user", "content": "hi"}])
    assert out == "6 3 [1, 2]     x|1.50 b     y 002.5 10"


# --- generate: every check before torch is imported ---------------------------------------------


def safetensors_bytes(tensors: dict[str, tuple[str, list[int], int]] | None = None, header: bytes | None = None,
                      length: int | None = None, data: bytes = b"") -> bytes:
    """A safetensors file: {name: (dtype, shape, bytes of data)} laid out in order, or a raw header."""
    import struct

    if header is None:
        document, offset = {}, 0
        for name, (dtype, shape, nbytes) in (tensors or {}).items():
            document[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + nbytes]}
            offset += nbytes
        header = json.dumps(document).encode()
        data = b"\0" * offset
    return struct.pack("<Q", len(header) if length is None else length) + header + data


EMBEDDING = {"model.embed_tokens.weight": ("F32", [640, 64], 640 * 64 * 4)}
NESTED_HEADER = ('{"a": ' + "[" * 100_000 + "]" * 100_000 + "}").encode()


@pytest.mark.parametrize("weights, expected", [
    (safetensors_bytes({"w": ("F32", [1024, 64], 1024 * 64 * 4)})[:4096], "truncated or corrupt"),
    (safetensors_bytes(header=b"{}", length=2**63), "header length 9223372036854775808 bytes is over the"),
    (safetensors_bytes(header=NESTED_HEADER), "nested too deeply"),
    (safetensors_bytes(header=json.dumps({"w": {"dtype": "F32", "shape": [2**40, 2**40], "data_offsets": [0, 8]}}).encode(), data=b"\0" * 8),
     "needs 4835703278458516698824704 bytes"),
    (safetensors_bytes(header=b'{"w": {"dtype": "Q9", "shape": [1], "data_offsets": [0, 1]}}', data=b"\0"), "unknown dtype"),
    (safetensors_bytes({}), "hold no tensors"),  # transformers ran a randomly initialised model, exit 0
    (safetensors_bytes(header=b"[1, 2]"), "not a JSON object"),
    (b"\1\0\0", "shorter than the 8-byte header length"),
])
def test_generate_refuses_hostile_safetensors_before_loading(model, weights, expected):
    folder = model(**{"model.safetensors": weights})
    work = CpuClock()  # CPU seconds: a busy machine's other processes are not counted
    one_line_exit_2(cli("generate", str(folder), "-m", "user", "hi", "--device", "cpu"), expected)
    assert work.seconds < 20


@pytest.mark.parametrize("config, expected", [
    ({"hidden_size": 2**31}, "describes a model of at least"),
    ({"num_hidden_layers": 10**6}, "but the .safetensors weights hold 40,960"),
    ({"vocab_size": 64000}, "but the .safetensors weights hold"),
])
def test_generate_refuses_a_config_the_weights_do_not_hold(model, config, expected):
    folder = model()
    document = json.loads((folder / "config.json").read_text())
    model(**{"config.json": {**document, **config}, "model.safetensors": safetensors_bytes(EMBEDDING)})
    one_line_exit_2(cli("generate", str(folder), "-m", "user", "hi", "--device", "cpu"), expected)


def test_generate_refuses_a_prompt_longer_than_the_context(model):
    folder = model()
    document = json.loads((folder / "config.json").read_text())
    model(**{"config.json": {**document, "max_position_embeddings": 32}})
    one_line_exit_2(cli("generate", str(folder), "-m", "user", "hello " * 40, "--device", "cpu"),
                    "more than the model's context of 32 tokens", "max_position_embeddings")


@pytest.mark.parametrize("args, expected", [
    (["--seed", "18446744073709551616", "--temperature", "1"], "--seed 18446744073709551616"),
    (["--seed", "-1", "--temperature", "1"], "must be between 0 and 2^64"),
    (["--server", "http://[::1"], "not a valid URL"),
    (["--server", "http://host:99999"], "not a valid URL"),
    (["--server", "http://"], "names no host"),
    (["--server", "https://a b"], "no spaces or control characters"),  # found by tests/fuzz_hostile.py
])
def test_generate_options_out_of_range(model, args, expected):
    one_line_exit_2(cli("generate", str(model()), "-m", "user", "hi", *args), expected)


def test_generate_thread_count_is_bounded():
    from stopdoctor.actions.generate.local import cpu_threads
    from stopdoctor.core.errors import InputError

    assert cpu_threads({"STOPDOCTOR_THREADS": "1"}) == 1
    for value in ("1000000000", "0", "9" * 5000):
        with pytest.raises(InputError, match="STOPDOCTOR_THREADS"):
            cpu_threads({"STOPDOCTOR_THREADS": value})


@pytest.mark.parametrize("content, expected", [
    ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
    (b'[{"role": "user", "content": "\xff"}]', "not UTF-8"),
    ('[{"role": "user", "content": 1' + "0" * 5000 + "}]", "integer of more than"),
    ('[[{"role": "user", "content": "a"}], [{"role": "user", "content": "b"}]]', "holds 2 conversations"),
    ('[{"content": "no role"}]', "with a role"),
])
def test_generate_messages_file_uses_the_guarded_reader(model, tmp_path, content, expected):
    path = write(tmp_path, "messages.json", content)
    one_line_exit_2(cli("generate", str(model()), "--messages", path), expected)


@needs_fifo
def test_generate_messages_that_are_a_pipe_or_a_device(model, tmp_path):
    os.mkfifo(tmp_path / "pipe.json")
    work = CpuClock()  # CPU seconds: a busy machine's other processes are not counted
    one_line_exit_2(cli("generate", str(model()), "--messages", str(tmp_path / "pipe.json")), "not a regular file")
    if Path("/dev/zero").exists():
        one_line_exit_2(cli("generate", str(model()), "--messages", "/dev/zero"), "not a regular file")
    assert work.seconds < 20


# --- hangs: probe-stop of thousands of strings, render --compare of huge outputs -----------------


def test_probe_stop_of_10000_strings_is_refused_at_once(model):
    work = CpuClock()  # CPU seconds: a busy machine's other processes are not counted
    one_line_exit_2(cli("probe-stop", *[f"stop{i}" for i in range(10_000)], "--model", str(model())),
                    "10000 stop strings are more than the 256")
    assert work.seconds < 20


@pytest.mark.slow  # two 500k-character renders tokenized and diffed (~10 s); the bounded diff's own test is quick
def test_render_compare_of_two_250k_line_outputs(model, tmp_path):
    folder = model(**{"chat_template.jinja": "{{ 'a\\n' * 250000 }}{% for m in messages %}{{ m.content }}{% endfor %}"})
    other = write(tmp_path, "other.jinja", "{{ 'b\\n' * 250000 }}{% for m in messages %}{{ m.content }}{% endfor %}")
    work = CpuClock()  # CPU seconds: a busy machine's other processes are not counted
    run = cli("render", str(folder), "--compare", other, "-m", "user", "hi", "--json")
    assert run.code in (0, 1), run.stderr
    assert work.seconds < 30


def test_bounded_diff_is_difflibs_when_small_and_one_hunk_when_huge(monkeypatch):
    import difflib

    from stopdoctor.actions import render

    a, b = ["x", "a", "b", "c", "y"], ["x", "a", "B", "c", "y", "z"]
    assert render.bounded_unified_diff(a, b, "l", "r") == list(difflib.unified_diff(a, b, "l", "r", lineterm="", n=2))
    monkeypatch.setattr(render, "MAX_DIFF_PAIRS", 0)
    assert render.bounded_unified_diff(a, b, "l", "r") == [
        "--- l", "+++ r", "@@ -1,5 +1,6 @@", " x", " a", "-b", "-c", "-y", "+B", "+c", "+y", "+z"]
    assert render.bounded_unified_diff(a, a, "l", "r") == []


# --- GGUF: a tensor table that does not add up is corrupt; a big file is not mapped whole ---------


def gguf_with_tensors(tensors: list[tuple[str, int, list[int], int]], count: int | None = None,
                      data: int | None = None) -> bytes:
    """A vocab-only GGUF header plus a tensor table of (name, ggml type, shape, data offset) entries and
    zeroed data; `count` overrides the header's tensor count, `data` the bytes of data written."""
    import struct

    from .test_hardening import ARRAY, STRING, UINT32, gguf, gguf_ints, gguf_str, gguf_strings

    head = gguf({
        "general.architecture": (STRING, gguf_str("llama")),
        "tokenizer.ggml.model": (STRING, gguf_str("gpt2")),
        "tokenizer.ggml.tokens": (ARRAY, gguf_strings(["a", "b", "</s>"])),
        "tokenizer.ggml.token_type": (ARRAY, gguf_ints([1, 1, 3])),
        "tokenizer.ggml.eos_token_id": (UINT32, struct.pack("<I", 2)),
    })
    head = head[:8] + struct.pack("<Q", len(tensors) if count is None else count) + head[16:]
    table = b"".join(gguf_str(name) + struct.pack("<I", len(shape)) + struct.pack(f"<{len(shape)}Q", *shape)
                     + struct.pack("<IQ", kind, offset) for name, kind, shape, offset in tensors)
    body = head + table
    body += b"\0" * (-len(body) % 32)
    return body + b"\0" * (64 if data is None else data)


F32 = 0


def test_gguf_with_a_sound_tensor_table_passes(tmp_path):
    path = write(tmp_path, "ok.gguf", gguf_with_tensors([("a", F32, [4], 0), ("b", F32, [8], 32)]))
    assert cli("inspect", path).code in (0, 1)


@pytest.mark.parametrize("blob, expected", [
    (gguf_with_tensors([("a", F32, [4], 0), ("b", F32, [8], 32)], count=1), "the header's tensor count (1) may be wrong"),
    (gguf_with_tensors([("a", 99, [4], 0), ("b", F32, [8], 32)]), "unknown ggml type 99"),
    (gguf_with_tensors([("a", F32, [4], 0), ("b", F32, [8], 16)]), "has data offset 16, expected 32"),
    (gguf_with_tensors([("a", F32, [4], 0), ("b", F32, [8], 32)], data=40), "truncated GGUF file"),
])
def test_gguf_whose_tensor_table_does_not_add_up_is_corrupt(tmp_path, blob, expected):
    one_line_exit_2(cli("inspect", write(tmp_path, "bad.gguf", blob)), expected)


def test_a_20_gb_gguf_is_not_mapped_whole(tmp_path):
    import resource

    path = tmp_path / "big.gguf"
    elements = 5 << 30  # 20 GiB of F32, a sparse file
    path.write_bytes(gguf_with_tensors([("w", F32, [elements], 0)], data=0))
    with open(path, "r+b") as handle:
        handle.truncate(path.stat().st_size + elements * 4)
    limit = 2 << 30
    run = run_process("inspect", str(path), preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS, (limit, limit)))
    assert run.returncode in (0, 1), run.stderr


# --- fix --write: every edit or none; only regular files are replaced ----------------------------


def test_fix_write_applies_both_edits_or_neither(synth_root, tmp_path):
    folder = tmp_path / "model"
    shutil.copytree(synth_root / "llama3-eot-missing", folder)
    stale = tmp_path / "stale"
    stale.mkdir()
    (stale / "generation_config.json").write_text('{"eos_token_id": 609}')
    # A name so long that the temporary file beside it cannot be created: the second edit fails.
    serve = tmp_path / ("s" * 243 + ".sh")
    serve.write_text(f"vllm serve {folder} \\\n  --generation-config {stale} \\\n  --port 8000\n")
    before = {path: path.read_bytes() for path in (folder / "generation_config.json", serve)}
    run = cli("fix", str(folder), "--serving", str(serve))
    assert run.code == 1 and run.stdout.count("+++ b/") == 2, run.stdout  # two edits planned
    one_line_exit_2(cli("fix", str(folder), "--serving", str(serve), "--write"), "nothing was changed")
    assert {path: path.read_bytes() for path in before} == before
    assert sorted(p.name for p in folder.iterdir()) == sorted(p.name for p in (synth_root / "llama3-eot-missing").iterdir())


def test_fix_write_rolls_back_when_a_rename_fails(synth_root, tmp_path, monkeypatch):
    from stopdoctor.writers import edits

    first, second = tmp_path / "a.json", tmp_path / "b.json"
    first.write_text("old a")
    plan = edits.FixPlan((edits.FileEdit(first, "a.json", "old a", "new a", "r"),
                          edits.FileEdit(second, "b.json", None, "new b", "r")), ())
    real_replace = os.replace

    def replace(source, target):
        if Path(target) == second:
            raise OSError(28, "No space left on device")
        real_replace(source, target)

    monkeypatch.setattr(edits.os, "replace", replace)
    with pytest.raises(edits.InputError, match="nothing was changed"):
        plan.write()
    monkeypatch.setattr(edits.os, "replace", real_replace)
    assert first.read_text() == "old a" and not second.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.json"]  # no temporary file left


@needs_fifo
@pytest.mark.parametrize("kind", ["fifo", "folder"])
def test_fix_write_never_replaces_a_pipe_or_a_folder(synth_root, tmp_path, kind):
    folder = tmp_path / "model"
    shutil.copytree(synth_root / "llama3-eot-missing", folder)
    target = folder / "generation_config.json"
    target.unlink()
    os.mkfifo(target) if kind == "fifo" else target.mkdir()
    work = CpuClock()  # CPU seconds: a busy machine's other processes are not counted
    run = cli("fix", str(folder), "--write")
    assert run.code == 2, (run.code, run.stderr)
    assert "not a regular file" in run.stderr and "hard links" not in run.stderr
    assert (target.is_fifo() if kind == "fifo" else target.is_dir())
    assert work.seconds < 20


# --- logs: a path is a path, a bad line is a bad line, lines and expansion have limits ------------

LOG_LINE = json.dumps({"choices": [{"finish_reason": "stop", "message": {"role": "assistant", "content": "Hi."}}]})


def test_logs_paths_are_never_globs(tmp_path):
    for name in ("x1.jsonl", "xa.jsonl", "xb.jsonl"):
        write(tmp_path, name, LOG_LINE + "\n")
    write(tmp_path, "x[1].jsonl", LOG_LINE + "\n" + LOG_LINE + "\n")
    run = cli("logs", str(tmp_path / "x[1].jsonl"), "--json")
    assert run.code == 0, run.stderr
    assert run.json()["lines"]["total"] == 2  # its own two lines, not x1.jsonl's one
    one_line_exit_2(cli("logs", str(tmp_path / "x*.jsonl")), "no such file")


def test_logs_line_that_is_not_utf8_is_one_bad_line(tmp_path):
    import gzip

    raw = (LOG_LINE + "\n").encode() + b'{"choices": [{"finish_reason": "stop", "text": "caf\xe9"}]}\n' + (LOG_LINE + "\n").encode()
    for name, data in (("latin1.jsonl", raw), ("latin1.jsonl.gz", gzip.compress(raw))):
        run = cli("logs", write(tmp_path, name, data), "--json")
        assert run.code == 0, run.stderr
        lines = run.json()["lines"]
        assert (lines["total"], lines["responses"], lines["bad"]) == (3, 2, 1), lines


@needs_fifo
def test_logs_folder_or_pipe_is_not_a_regular_file(tmp_path):
    os.mkfifo(tmp_path / "pipe.jsonl")
    (tmp_path / "dir.jsonl").mkdir()
    for name in ("pipe.jsonl", "dir.jsonl"):
        one_line_exit_2(cli("logs", str(tmp_path / name)), "not a regular file")


_MEASURE = """
import resource, subprocess, sys
run = subprocess.run([sys.executable, "-m", "stopdoctor", *sys.argv[1:]], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
sys.stderr.buffer.write(run.stderr)
print(run.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024)
"""


def peak_rss_mb(args: list[str], timeout: float = 120) -> tuple[int, str, float]:
    """Run the CLI in a grandchild started by a small Python process (a child forked from this test
    process would count this process's resident pages as its own): exit code, stderr, peak MB."""
    run = subprocess.run([sys.executable, "-c", _MEASURE, *args], capture_output=True, text=True, env=ENV, timeout=timeout)
    code, peak = run.stdout.split()
    return int(code), run.stderr, float(peak)


def test_logs_line_over_8_mb_is_refused_naming_it(tmp_path):
    path = write(tmp_path, "long.jsonl", LOG_LINE + "\n" + LOG_LINE + "\n" + '{"x": "' + "y" * (9 << 20) + '"}\n')
    one_line_exit_2(cli("logs", path), "line 3 is longer than 8 MB")
    import gzip

    one_line_exit_2(cli("logs", write(tmp_path, "long.jsonl.gz", gzip.compress(Path(path).read_bytes()))), "line 3 is longer")


@pytest.mark.slow
@pytest.mark.parametrize("make", [
    lambda path: path.write_bytes(b"\0" * (1 << 30)),  # a 1 GB line of NULs
    lambda path: path.write_text('{"choices": [{"text": "' + "x" * 200_000_000 + '"}]}\n'),  # a valid 200 MB line
])
def test_logs_huge_lines_are_refused_in_bounded_memory(tmp_path, make):
    path = tmp_path / "big.jsonl"
    make(path)
    work = CpuClock()  # CPU seconds: a busy machine's other processes are not counted
    code, stderr, peak = peak_rss_mb(["logs", str(path)])
    assert code == 2 and "longer than 8 MB" in stderr, stderr
    assert peak < 500, peak
    assert work.seconds < 60


def test_logs_gzip_bomb_is_refused(tmp_path):
    import zlib

    path = tmp_path / "bomb.jsonl.gz"
    compressor = zlib.compressobj(9, zlib.DEFLATED, 31)
    member = compressor.compress(b"{}\n" * (1 << 20)) + compressor.flush()  # one gzip member: 3 MB in ~3 KB
    with open(path, "wb") as handle:
        handle.write(member * 500)  # 1.5 GB of lines in ~1.5 MB: members one after another, as `cat a.gz b.gz`
    work = CpuClock()  # CPU seconds: a busy machine's other processes are not counted
    one_line_exit_2(cli("logs", str(path)), "expands to more than")
    assert work.seconds < 30


# --- labels: rows are read with a cap, never a whole "line" of gigabytes -------------------------


@pytest.mark.parametrize("extra", [[], ["--limit", "1"]])
def test_labels_row_over_16_mb_is_refused_unread(synth_root, tmp_path, extra):
    path = tmp_path / "data.jsonl"
    with open(path, "wb") as handle:  # a sparse 4 GB file with no newline: one 4 GB "line"
        handle.truncate(4 << 30)
    work = CpuClock()  # CPU seconds: a busy machine's other processes are not counted
    code, stderr, peak = peak_rss_mb(["labels", str(synth_root / "clean-chatml"), "--data", str(path), *extra])
    assert code == 2 and "line 1 is longer than 16 MB" in stderr, stderr
    assert peak < 300, peak
    assert work.seconds < 60


def test_labels_200_mb_row_and_a_row_of_a_million_arrays(synth_root, tmp_path):
    row = '{"messages": [{"role": "user", "content": "' + "x" * (17 << 20) + '"}]}\n'
    one_line_exit_2(cli("labels", str(synth_root / "clean-chatml"), "--data", write(tmp_path, "a.jsonl", row)),
                    "line 1 is longer than 16 MB")
    row = '{"messages": [{"role": "user", "content": "hi"}], "x": [' + ",".join(["[]"] * 1_100_000) + "]}\n"
    one_line_exit_2(cli("labels", str(synth_root / "clean-chatml"), "--data", write(tmp_path, "b.jsonl", row)),
                    "line 1 holds more than 1000000 JSON arrays/objects")


@needs_fifo
def test_labels_data_that_is_a_pipe(synth_root, tmp_path):
    os.mkfifo(tmp_path / "pipe.jsonl")
    one_line_exit_2(cli("labels", str(synth_root / "clean-chatml"), "--data", str(tmp_path / "pipe.jsonl")),
                    "not a regular file")


@pytest.mark.slow
def test_generate_refuses_weights_missing_tensors_of_the_model(real_models, tmp_path):
    """Weights that pass the header checks (the embedding alone is most of a small model's bound)
    but lack tensors: transformers would initialise those at random and run the result."""
    from safetensors import safe_open
    from safetensors.numpy import save_file

    folder = tmp_path / "embedding-only"
    shutil.copytree(real_models.smollm2_hf, folder, ignore=shutil.ignore_patterns("*.safetensors"))
    with safe_open(str(real_models.smollm2_hf / "model.safetensors"), "np") as weights:
        save_file({k: weights.get_tensor(k) for k in weights.keys() if "embed" in k}, str(folder / "model.safetensors"))
    one_line_exit_2(cli("generate", str(folder), "-m", "user", "hi", "--max-new-tokens", "4", "--device", "cpu"),
                    "the weights lack", "initialise at random")
