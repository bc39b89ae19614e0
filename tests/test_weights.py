"""`inspect --weights`: the guarded safetensors reader, GGUF row de-quantisation, the untrained-row
verdict and SD801 on real models and their broken copies (no model is loaded: no torch)."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from stopdoctor.core.errors import InputError
from stopdoctor.facts.safetensors import LocalFile, read_header, read_rows

from .helpers import cli


def _safetensors(path: Path, header: dict | bytes, data: bytes = b"", length: int | None = None) -> Path:
    raw = header if isinstance(header, bytes) else json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw) if length is None else length) + raw + data)
    return path


HOSTILE = {
    "truncated": lambda p: (p.write_bytes(b"\x10\x00\x00"), p)[1],
    "length 2^63": lambda p: _safetensors(p, {}, length=2**63),
    "length past the end": lambda p: _safetensors(p, {}, length=10_000),
    "nested 10^5 deep": lambda p: _safetensors(p, b"[" * 100_000 + b"]" * 100_000),
    "shape 2^40 x 2^40": lambda p: _safetensors(p, {"w": {"dtype": "F32", "shape": [2**40, 2**40], "data_offsets": [0, 16]}}, b"\0" * 16),
    "offsets past the end": lambda p: _safetensors(p, {"w": {"dtype": "F32", "shape": [4, 4], "data_offsets": [0, 64]}}, b"\0" * 16),
    "not JSON": lambda p: _safetensors(p, b"{not json"),
    "a list": lambda p: _safetensors(p, b"[1, 2]"),
    "unknown dtype": lambda p: _safetensors(p, {"w": {"dtype": "Q4", "shape": [1], "data_offsets": [0, 1]}}, b"\0"),
    "boolean shape": lambda p: _safetensors(p, {"w": {"dtype": "U8", "shape": [True], "data_offsets": [0, 1]}}, b"\0"),
    "negative offset": lambda p: _safetensors(p, {"w": {"dtype": "U8", "shape": [1], "data_offsets": [-1, 0]}}, b"\0"),
    "millions of objects": lambda p: _safetensors(p, b'{"a": [' + b"{}," * 2_100_000 + b"{}]}"),
    "not UTF-8": lambda p: _safetensors(p, b'{"\xff": 1}'),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_safetensors_header_is_one_input_error(tmp_path, case):
    path = HOSTILE[case](tmp_path / "model.safetensors")
    with LocalFile(path) as handle, pytest.raises(InputError) as error:
        read_header(handle)
    assert "\n" not in error.value.message and len(error.value.message) < 300


@pytest.mark.parametrize("case", ["length 2^63", "nested 10^5 deep", "shape 2^40 x 2^40", "truncated"])
def test_inspect_weights_refuses_a_hostile_file_with_exit_2(tmp_path, synth_root, case):
    import shutil

    folder = tmp_path / "model"
    shutil.copytree(synth_root / "clean-chatml", folder)
    HOSTILE[case](folder / "model.safetensors")
    run = cli("inspect", "--weights", str(folder))
    assert run.code == 2, run.stdout
    assert run.stderr.count("\n") <= 2 and "safetensors" in run.stderr and "Traceback" not in run.stderr


def test_rows_match_the_safetensors_library(tmp_path):
    from safetensors.numpy import save_file

    rng = np.random.default_rng(0)
    tensors = {"a": rng.standard_normal((50, 8)).astype(np.float32), "b": rng.standard_normal((30, 6)).astype(np.float16)}
    save_file(tensors, str(tmp_path / "m.safetensors"))
    with LocalFile(tmp_path / "m.safetensors") as handle:
        header = read_header(handle)
        rows = read_rows(handle, header.tensors["a"], [0, 7, 49, 50, 10**9])
        half = read_rows(handle, header.tensors["b"], [3])
    assert sorted(rows) == [0, 7, 49]  # ids past the matrix are left out
    assert np.array_equal(rows[7], tensors["a"][7])
    assert np.array_equal(half[3], tensors["b"][3].astype(np.float32))


def test_bf16_and_fp8_rows_match_torch(tmp_path):
    torch = pytest.importorskip("torch")
    from safetensors.torch import save_file

    base = torch.randn(20, 16) * 3
    tensors = {"bf16": base.to(torch.bfloat16), "e4m3": base.to(torch.float8_e4m3fn), "e5m2": base.to(torch.float8_e5m2)}
    save_file(tensors, str(tmp_path / "m.safetensors"))
    with LocalFile(tmp_path / "m.safetensors") as handle:
        header = read_header(handle)
        for name, tensor in tensors.items():
            assert header.tensors[name].dtype == {"bf16": "BF16", "e4m3": "F8_E4M3", "e5m2": "F8_E5M2"}[name]
            rows = read_rows(handle, header.tensors[name], range(20))
            expected = tensor.float().numpy()
            assert all(np.array_equal(rows[i], expected[i]) for i in range(20)), name


def test_every_fp8_e4m3_value_matches_torch():
    torch = pytest.importorskip("torch")
    from stopdoctor.facts.floats import row_of

    raw = bytes(range(256))
    ours = np.asarray(row_of(raw, "F8_E4M3"))
    theirs = torch.frombuffer(bytearray(raw), dtype=torch.uint8).view(torch.float8_e4m3fn).float().numpy()
    assert np.array_equal(np.isnan(ours), np.isnan(theirs))
    assert np.array_equal(ours[~np.isnan(ours)], theirs[~np.isnan(theirs)])


def test_gguf_rows_match_a_full_dequantisation(real_gguf_models):
    """Our row reads against gguf-py de-quantising whole tensors: Q8_0 token_embd (SmolLM2), and
    Gemma's Q4_K / Q5_K / Q6_K / F32 tensors read as rows."""
    import gguf
    from gguf.quants import dequantize

    from stopdoctor.facts.gguf import read_header as read_gguf
    from stopdoctor.facts.gguf_rows import read_gguf_rows

    for path in (real_gguf_models.smollm2_gguf, real_gguf_models.gemma_gguf):
        header = read_gguf(path)
        by_type = {}
        for tensor in header.tensors.values():
            if len(tensor.shape) == 2:
                by_type.setdefault(tensor.type, tensor)
        reader = gguf.GGUFReader(path) if path == real_gguf_models.smollm2_gguf else None
        for tensor in by_type.values():
            width, count = tensor.shape
            ids = [0, 1, count // 2, count - 1]
            rows = read_gguf_rows(path, tensor, ids)
            qtype = gguf.GGMLQuantizationType(tensor.type)
            block, block_bytes = gguf.GGML_QUANT_SIZES[qtype]
            raw = np.memmap(path, dtype=np.uint8, mode="r", offset=tensor.start, shape=(count, width // block * block_bytes))
            full = dequantize(np.asarray(raw[ids]), qtype).reshape(len(ids), width)
            for k, token_id in enumerate(ids):
                assert np.array_equal(rows[token_id], full[k].astype(np.float32)), (path.name, tensor.name)
        if reader is not None:
            embd = next(t for t in reader.tensors if t.name == "token_embd.weight")
            # gguf-py's own offsets and blocks; a row de-quantises from its own blocks alone, so
            # the three rows compared are de-quantised, not all 49,152 (seconds on a busy machine)
            picked = [2, 100, 49151]
            whole = dict(zip(picked, dequantize(np.asarray(embd.data[picked]), embd.tensor_type)))
            rows = read_gguf_rows(path, header.tensors["token_embd.weight"], picked)
            assert all(np.array_equal(rows[i], whole[i]) for i in picked)


def _untrained(spec: Path) -> dict[int, dict]:
    run = cli("inspect", "--weights", "--json", str(spec))
    assert run.code in (0, 1), run.stderr
    document = run.json()
    return document, {row["id"]: row for row in document["weights"]["rows"]}


def test_originals_have_trained_end_of_turn_rows(real_models):
    for spec in (real_models.smollm2_hf, real_models.smollm2_gguf, real_models.gemma_gguf):
        document, rows = _untrained(spec)
        assert not [f for f in document["findings"] if f["code"] == "SD801"], spec
        targets = document["weights"]["targets"]
        assert targets and not any(rows[i]["untrained"] for i in targets), spec
    # SmolLM2's reserved rows 5, 7-16 are near-identical (untrained, unused): seen, never a finding
    document, rows = _untrained(real_models.smollm2_hf)
    assert document["weights"]["untrained_special_rows"] == [5, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16]
    assert rows[2]["text"] == "<|im_end|>" and "end-of-turn" in rows[2]["roles"]
    assert document["weights"]["tied"] is True and document["weights"]["baseline"]["embedding"]["rows"] == 256


@pytest.mark.parametrize("copy, reason", [("zeroed_hf", "all zeros"), ("reserved_hf", "copy of id"),
                                          ("zeroed_gguf", "all zeros")])
def test_broken_copies_are_flagged(broken_weights, copy, reason):
    spec = getattr(broken_weights, copy)
    document, rows = _untrained(spec)
    found = [f for f in document["findings"] if f["code"] == "SD801"]
    assert len(found) == 1 and found[0]["evidence"]["id"] == 2 and reason in found[0]["message"]
    assert rows[2]["untrained"] and rows[2]["unsloth_untrained"] == (reason == "all zeros")
    human = cli("inspect", "--weights", str(spec))
    assert human.code == 1 and "SD801 end-of-turn-untrained" in human.stdout


def test_inspect_weights_stays_static(real_models):
    """Reading weight rows never imports torch or transformers, and takes well under a second."""
    code = (
        "import sys, time\n"
        "from typer.testing import CliRunner\n"
        "from stopdoctor.cli import app\n"
        "t = time.perf_counter()\n"
        f"r = CliRunner().invoke(app, ['inspect', '--weights', '--json', {str(real_models.gemma_gguf)!r}])\n"
        "assert r.exit_code == 0, r.output\n"
        "print(sorted(m for m in ('torch', 'transformers') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_a_folder_without_weights_says_so(synth_root):
    run = cli("inspect", "--weights", str(synth_root / "clean-chatml"))
    assert run.code == 2 and "no .safetensors weights" in run.stderr


def _modules_after(*args: str) -> set[str]:
    """The modules a cold `stopdoctor ARGS` imported (run in a fresh interpreter)."""
    code = (
        "import sys\n"
        "from stopdoctor.cli import main\n"
        f"sys.argv = ['stopdoctor', *{list(args)!r}]\n"
        "try:\n"
        "    main()\n"
        "except SystemExit as exit_:\n"
        "    assert exit_.code in (0, 1), exit_.code\n"
        "sys.stdout = sys.__stderr__\n"
        "print('\\n'.join(sorted(sys.modules)), file=sys.__stderr__)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return set(out.stderr.split())


def test_inspect_imports_only_what_it_uses(synth_root, real_gguf_models):
    """A cold `inspect` pays for no module it does not run: no numpy without --weights, no rich for
    JSON, nothing of labels or logs (their analyses, duckdb), no torch or transformers."""
    never = {"torch", "transformers", "duckdb", "rich", "stopdoctor.logs.query", "stopdoctor.labels.build"}
    plain = _modules_after("inspect", "--json", str(synth_root / "clean-chatml"))
    assert not plain & (never | {"numpy"})
    weights = _modules_after("inspect", "--json", "--weights", str(real_gguf_models.gemma_gguf))
    assert "numpy" in weights and not weights & never and "numpy.ma" not in weights


def test_inspect_weights_of_a_safetensors_folder_imports_no_numpy(real_models):
    """Its rows are read and judged with the standard library (numpy's import was ~55 ms of a
    ~350 ms cold `inspect --weights`, issue 28); a GGUF's quantised rows still need it (above)."""
    modules = _modules_after("inspect", "--json", "--weights", str(real_models.smollm2_hf))
    assert "stopdoctor.analysis.weights" in modules and "numpy" not in modules


THREADS_AFTER_INSPECT = """
import os, sys
from stopdoctor.cli import main
sys.argv = ['stopdoctor', 'inspect', '--weights', '--json', sys.argv[1]]
try:
    main()
except SystemExit as exit_:
    assert exit_.code in (0, 1), exit_.code
print(len(os.listdir('/proc/self/task')), os.environ.get('OPENBLAS_NUM_THREADS'), file=sys.__stderr__)
"""


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="counts threads in /proc (Linux)")
def test_inspect_weights_starts_no_blas_threads_unless_the_user_asks(real_models):
    """numpy's OpenBLAS started a spinning thread a core for one small matrix product (~100 ms of
    CPU, issue 28): a cold `inspect --weights` now ends with its one thread; a user's own
    OPENBLAS_NUM_THREADS is kept as it was."""
    def run(**env: str) -> list[str]:
        out = subprocess.run([sys.executable, "-c", THREADS_AFTER_INSPECT, str(real_models.smollm2_hf)],
                             capture_output=True, text=True, check=True,
                             env={k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"} | env)
        return out.stderr.split()[-2:]

    assert run() == ["1", "1"]
    assert run(OPENBLAS_NUM_THREADS="2")[1] == "2"


GC_AFTER_INSPECT = """
import gc, sys
from stopdoctor.__main__ import main  # as the `stopdoctor` script starts
sys.argv = ['stopdoctor', *sys.argv[1:]]
try:
    main()
except SystemExit as exit_:
    assert exit_.code in (0, 1), exit_.code
print(sum(s['collections'] for s in gc.get_stats()), file=sys.__stderr__)
"""


def test_a_cold_inspect_collects_cycles_a_few_times_not_dozens(real_models):
    """Work, not seconds: the cyclic collector ran ~40 times in a cold GGUF inspect and ~75 with
    --weights (most while the modules are imported), over objects that live to the end; `inspect`
    now lets it run a few times. Other commands (logs over millions of lines, generate) keep
    Python's own thresholds. Counted from the entry point on (Python's own start-up runs it ~16
    times before any of stopdoctor is imported)."""
    startup = int(subprocess.run([sys.executable, "-c", "import gc; print(sum(s['collections'] for s in gc.get_stats()))"],
                                 capture_output=True, text=True, check=True).stdout)

    def collections(*args: str) -> int:
        out = subprocess.run([sys.executable, "-c", GC_AFTER_INSPECT, *args], capture_output=True, text=True, check=True)
        return int(out.stderr.split()[-1]) - startup

    assert collections("inspect", "--json", str(real_models.gemma_gguf)) <= 5
    assert collections("inspect", "--weights", "--json", str(real_models.smollm2_hf)) <= 5
    assert collections("render", str(real_models.smollm2_hf)) > 5  # the default thresholds elsewhere
