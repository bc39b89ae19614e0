"""Small helpers shared by tests: run the CLI in-process and read its streams; count the CPU time
a block of work took (never wall-clock seconds, which a busy machine stretches)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from dataclasses import dataclass

from typer.testing import CliRunner


@dataclass
class Run:
    code: int
    stdout: str
    stderr: str

    def json(self):
        return json.loads(self.stdout)


WEIGHT_FILES = (".safetensors", ".gguf", ".bin", ".pt", ".pth")


def model_copy(src, dst):
    """A copy of a model folder for a test to edit: every file is copied but the weights, which are
    hard-linked (SmolLM2's 540 MB model.safetensors copied by a dozen tests was ~20 s of the quick
    loop's CPU). Editing a weight file in place would edit the original: a test that does copies
    it first (fixtures/broken_weights.py); a rewrite by rename (every stopdoctor write) replaces
    the link, not the original."""
    def copy(source: str, target: str) -> str:
        if source.endswith(WEIGHT_FILES):
            try:
                os.link(source, target)
                return target
            except OSError:  # another file system, or no links: a real copy
                pass
        return shutil.copy2(source, target)

    shutil.copytree(src, dst, copy_function=copy)
    return dst


def cli(*args: str, env: dict | None = None) -> Run:
    from stopdoctor.cli.app import app

    result = CliRunner().invoke(app, list(args), env=env)
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return Run(result.exit_code, result.stdout, result.stderr)


def _cpu_seconds() -> float:
    try:
        import resource
    except ImportError:  # no resource module (Windows): this process's own time only
        return time.process_time()
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


class CpuClock:
    """CPU seconds spent since it was made, by this process (all its threads) and by the children it
    has waited for (subprocess.run waits): the work a command did. A bound on it fails when the
    command does too much, never because other processes shared the cores (issue 28)."""

    def __init__(self) -> None:
        self.start = _cpu_seconds()

    @property
    def seconds(self) -> float:
        return _cpu_seconds() - self.start


def test_models_dir():
    """Where fixtures/realmodels.py put the real test models ($STOPDOCTOR_TEST_MODELS, else
    ~/.cache/stopdoctor/test-models)."""
    from fixtures.realmodels import default_cache_dir

    return default_cache_dir()


test_models_dir.__test__ = False  # a helper, not a test


def stop_server(process: subprocess.Popen) -> None:
    """Terminate a server a test started; kill it when it does not exit within 15 s."""
    process.terminate()
    try:
        process.wait(timeout=15)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def bench_log_lines(count: int) -> list[str]:
    """The first `count` lines of `benchmarks/bench_logs.py`'s synthetic log (its five shapes, mixed
    line by line, seed 0)."""
    import importlib.util
    import random
    from pathlib import Path

    spec = importlib.util.spec_from_file_location("bench_logs", Path(__file__).resolve().parents[1] / "benchmarks" / "bench_logs.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    rng = random.Random(0)
    return [bench.synthetic_line(i, rng) for i in range(count)]
