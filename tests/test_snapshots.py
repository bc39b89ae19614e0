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
LLAMA3 = "fixtures/examples/llama3-eot-missing"
CHATML = "fixtures/examples/chatml-ok"
LABELS = ["labels", CHATML, "--data", "fixtures/labels/chat.jsonl", "--collator", "assistant-only"]
LOGS = ["logs", "fixtures/logs/responses.jsonl"]
# name: (exit code, arguments). Every reporter format (human, json, sarif, junit, github) of every
# command that judges (inspect, check, labels, logs) goes through one Report; each is pinned here.
CASES = {
    "inspect-llama3-eot-missing.txt": (1, ["inspect", LLAMA3]),
    "inspect-llama3-eot-missing.json": (1, ["inspect", "--json", LLAMA3]),
    "inspect-llama3-eot-missing.github": (1, ["inspect", "--format", "github", LLAMA3]),
    "inspect-chatml-ok.txt": (0, ["inspect", CHATML]),
    "render-chatml-ok.txt": (0, ["render", CHATML, "-m", "user", "What is the capital of France?", "--ids"]),
    "check-llama3-eot-missing.sarif": (1, ["check", "--format", "sarif", LLAMA3]),
    "check-llama3-eot-missing.junit.xml": (1, ["check", "--format", "junit", LLAMA3]),
    "check-llama3-eot-missing.github": (1, ["check", "--format", "github", LLAMA3]),
    "check-chatml-ok-warning.json": (0, ["check", "--format", "json", "--fail-on", "error", CHATML]),
    "labels-chatml-ok.sarif": (1, [*LABELS, "--format", "sarif"]),
    "labels-chatml-ok.github": (1, [*LABELS, "--format", "github"]),
    "logs-responses.sarif": (1, [*LOGS, "--format", "sarif"]),
    "logs-responses.junit.xml": (0, [*LOGS, "--format", "junit", "--fail-on", "error", "--max-turn-share", "0.5"]),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_snapshot(name, monkeypatch):
    monkeypatch.chdir(ROOT)
    code, args = CASES[name]
    run = cli(*args, env={"NO_COLOR": "1", "COLUMNS": "100"})
    assert run.code == code, run.stderr
    text = run.stdout.replace(__version__, "<version>").replace(str(ROOT), "<root>")
    path = SNAPSHOTS / name
    if os.environ.get("STOPDOCTOR_UPDATE_SNAPSHOTS"):
        path.write_text(text)
    assert text == path.read_text()
