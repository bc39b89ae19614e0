"""Small helpers shared by tests: run the CLI in-process and read its streams."""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass

from typer.testing import CliRunner


@dataclass
class Run:
    code: int
    stdout: str
    stderr: str

    def json(self):
        return json.loads(self.stdout)


def cli(*args: str, env: dict | None = None) -> Run:
    from stopdoctor.cli.app import app

    result = CliRunner().invoke(app, list(args), env=env)
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return Run(result.exit_code, result.stdout, result.stderr)


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
