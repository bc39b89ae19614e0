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
