"""CLI-wide behaviour: rules docs, colour, fast imports (the rules' pages: tests/test_docs.py)."""

from __future__ import annotations

import subprocess
import sys

from stopdoctor.rules.runner import REGISTRY

from .helpers import cli


def test_every_check_is_documented():
    for check in REGISTRY.values():
        assert check.summary, check.code
        assert set(check.sections) - {"How the runtimes decide (source)"} == {"What it checks", "Why it matters", "Example", "Fix"}, check.code
        assert all(body.strip() for body in check.sections.values()), check.code


def test_rules_lists_and_explains():
    run = cli("rules")
    assert run.code == 0
    for check in REGISTRY.values():
        assert check.code in run.stdout and check.name in run.stdout
    detail = cli("rules", "end-of-turn-not-a-stop-id")
    assert detail.code == 0
    assert "SD101 end-of-turn-not-a-stop-id" in detail.stdout and "Why it matters" in detail.stdout
    assert cli("rules", "--json", "SD104").json()["rules"][0]["name"] == "pad-is-eos"


def test_colour_only_when_asked(synth_root):
    plain = cli("inspect", str(synth_root / "llama3-eot-missing"))
    assert "\x1b[" not in plain.stdout  # CliRunner is not a terminal
    coloured = cli("inspect", "--color", str(synth_root / "llama3-eot-missing"))
    assert "\x1b[" in coloured.stdout
    no_color = cli("inspect", "--color", str(synth_root / "llama3-eot-missing"), env={"NO_COLOR": "1"})
    assert "\x1b[" in no_color.stdout  # an explicit flag wins over the environment


def test_static_commands_do_not_import_torch_or_transformers(synth_root):
    code = (
        "import sys\n"
        "from typer.testing import CliRunner\n"
        "from stopdoctor.cli import app\n"
        f"r = CliRunner().invoke(app, ['inspect', '--json', {str(synth_root / 'clean-chatml')!r}])\n"
        "assert r.exit_code == 0, r.output\n"
        "print(sorted(m for m in ('torch', 'transformers') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_console_script_help():
    out = subprocess.run([sys.executable, "-m", "stopdoctor", "--help"], capture_output=True, text=True)
    assert out.returncode == 0 and "inspect" in out.stdout


def test_slow_work_says_so_on_stderr_after_a_second(monkeypatch, capsys):
    import time

    from stopdoctor.cli.output import working

    with working("converting the GGUF tokenizer…"):
        time.sleep(1.3)
    with working("fast"):
        pass
    time.sleep(1.2)  # a cancelled timer must stay silent
    err = capsys.readouterr().err
    assert err == "stopdoctor: converting the GGUF tokenizer…\n"


def test_needs_torch_tests_skip_with_a_reason_where_torch_cannot_be_imported(monkeypatch):
    from tests.conftest import torch_missing

    torch_missing.cache_clear()
    monkeypatch.setitem(sys.modules, "torch", None)  # import torch now raises ImportError
    try:
        reason = torch_missing()
    finally:
        torch_missing.cache_clear()
    assert reason is not None and "torch, which cannot be imported" in reason and "pip install -e '.[runtime]'" in reason
