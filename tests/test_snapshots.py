"""Renderer snapshots on the bundled examples: fixed width, colour off, version and paths redacted.
Regenerate after an intended change with STOPDOCTOR_UPDATE_SNAPSHOTS=1."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from stopdoctor import __version__

from .helpers import cli

ROOT = Path(__file__).resolve().parents[1]
SNAPSHOTS = Path(__file__).parent / "snapshots"
CASES = {
    "inspect-llama3-eot-missing.txt": ["inspect", "fixtures/examples/llama3-eot-missing"],
    "inspect-llama3-eot-missing.json": ["inspect", "--json", "fixtures/examples/llama3-eot-missing"],
    "inspect-chatml-ok.txt": ["inspect", "fixtures/examples/chatml-ok"],
    "render-chatml-ok.txt": ["render", "fixtures/examples/chatml-ok", "-m", "user", "What is the capital of France?", "--ids"],
    "check-llama3-eot-missing.sarif": ["check", "--format", "sarif", "fixtures/examples/llama3-eot-missing"],
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_snapshot(name, monkeypatch):
    monkeypatch.chdir(ROOT)
    run = cli(*CASES[name], env={"NO_COLOR": "1", "COLUMNS": "100"})
    assert run.code in (0, 1), run.stderr
    text = run.stdout.replace(__version__, "<version>").replace(str(ROOT), "<root>")
    path = SNAPSHOTS / name
    if os.environ.get("STOPDOCTOR_UPDATE_SNAPSHOTS"):
        path.write_text(text)
    assert text == path.read_text()
