"""Untrusted text in every output (issue #32 "Injection into output", #26 §3), and `fix --write` on a
GGUF that must be written all or nothing (#32 "GGUF fix --write").

A model folder, a log file and a log's finish reason named with escape sequences, a newline followed
by a GitHub workflow command, bidi overrides, `<script>` and control characters go through the human
report, GitHub annotations, JUnit, SARIF, JSON, the HTML page and `logs --show-sql`: each sink
neutralises them where it writes (stopdoctor.reporters.plain, github, junit; logs' SQL literals).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import struct
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from stopdoctor.reporters.plain import no_workflow_commands, terminal_safe
from tests.helpers import cli
from tests.test_hardening import ARRAY, CHATML, STRING, UINT32, gguf, gguf_ints, gguf_str, gguf_strings, one_line_exit_2

HOSTILE = "m\x1b[2J\x1b]8;;http://x\x07\n::error file=a,line=1::forged\r\n##[warning]old\u202eevil\u2066\x01<script>alert(1)</script>"
RAW = ("\x1b", "\x9b", "\x07", "\x01", "\u202e", "\u2066")


def unsafe_lines(text: str, commands_allowed: bool = False) -> list[str]:
    """Lines a CI runner would read as a workflow command (unless ours), or with raw controls."""
    return [line for line in text.splitlines()
            if (not commands_allowed and line.strip().startswith(("::", "##[")))
            or any(char in line for char in RAW)]


@pytest.fixture
def hostile_models(synth_root, tmp_path, monkeypatch):
    """A model with findings in a folder with a hostile name, and a hostile name that does not exist."""
    folder = tmp_path / HOSTILE
    shutil.copytree(synth_root / "llama3-eot-missing", folder)
    monkeypatch.chdir(tmp_path)
    return [HOSTILE, HOSTILE + "-missing"]


def test_human_report_has_no_forged_command_or_raw_escape(hostile_models):
    run = cli("check", *hostile_models, "--format", "human")
    assert run.code == 2, run.stderr  # findings, and a model that cannot be read
    assert "forged" in run.stdout
    assert unsafe_lines(run.stdout + run.stderr) == []


def test_github_annotations_are_ours_only(hostile_models):
    run = cli("check", *hostile_models, "--format", "github")
    lines = run.stdout.splitlines()
    assert lines and all(line.startswith(("::error ", "::warning ", "::notice ")) for line in lines), lines
    assert unsafe_lines(run.stdout, commands_allowed=True) == []
    assert all("%0A::error file%3Da" not in line or line.count("::") >= 2 for line in lines)
    assert any("%0A" in line for line in lines)  # the newline is there, escaped as GitHub documents


def test_junit_is_valid_xml(hostile_models):
    run = cli("check", *hostile_models, "--format", "junit")
    root = ET.fromstring(run.stdout)  # before: "not well-formed (invalid token)"
    assert root.tag == "testsuites"
    assert not any(char in run.stdout for char in RAW)
    assert "forged" in run.stdout


@pytest.mark.parametrize("format", ["sarif", "json"])
def test_json_documents_carry_no_raw_bidi_or_c1(hostile_models, format):
    run = cli("check", *hostile_models, "--format", format)
    document = json.loads(run.stdout)
    assert document
    assert not any(char in run.stdout for char in ("\u202e", "\u2066", "\x9b"))
    assert any(HOSTILE in text for text in _strings(document))  # the same strings, escaped


def _strings(value) -> list[str]:
    if isinstance(value, str):
        return [value]
    items = value.values() if isinstance(value, dict) else value if isinstance(value, list) else []
    return [text for item in items for text in _strings(item)]


def test_logs_html_and_show_sql_neutralise_file_names_and_finish_reasons(tmp_path):
    path = tmp_path / (HOSTILE.replace("/", "_") + ".jsonl")
    line = json.dumps({"choices": [{"finish_reason": HOSTILE, "message": {"role": "assistant", "content": "Hi."}}]})
    path.write_text(line + "\n")
    page = tmp_path / "report.html"
    run = cli("logs", str(path), "--html", str(page))
    assert run.code in (0, 1), run.stderr
    # the page less its own two scripts (the inlined chart library and the drawing code)
    html = re.sub(r"<script>.*?</script>", "", page.read_text(), flags=re.S)
    assert "<script>" not in html and "&lt;script&gt;" in html
    assert not any(char in html for char in RAW) and "<bdi>" in html
    assert unsafe_lines(run.stdout + run.stderr) == []
    sql = cli("logs", "--show-sql", str(path))
    assert sql.code == 0, sql.stderr
    assert unsafe_lines(sql.stdout) == []
    import duckdb  # the printed script still reads the file it names

    con = duckdb.connect()
    con.execute(sql.stdout.rsplit("-- the normalised", 1)[0])
    assert con.execute("SELECT count(*) FROM rec").fetchone()[0] == 1


def test_terminal_safe_defuses_every_line_start():
    text = terminal_safe("a\n  ::error::x\n\u3000##[error]y\nz ::ok")
    assert text == "a\n  \\x3a:error::x\n\u3000\\x23#[error]y\nz ::ok"
    # a colour code before it does not hide it (rich's own styling comes first on a line)
    assert no_workflow_commands("\x1b[1m::error::x") == "\x1b[1m\\x3a:error::x"


# --- GGUF fix --write: all or nothing --------------------------------------------------------------

BOOL, INT8 = 7, 1


def fixable_gguf(path: Path, alignment: tuple[int, bytes] | None = None, data: int = 64, sparse: bool = False,
                 eos: tuple[int, bytes] = (UINT32, struct.pack("<I", 2))) -> Path:
    """A GGUF whose eos (</s>) is not the template's end of turn (<|im_end|>): `fix` sets it to 4.
    One F32 tensor of `data` bytes (a hole, with `sparse`)."""
    entries = {
        "general.architecture": (STRING, gguf_str("llama")),
        "tokenizer.ggml.model": (STRING, gguf_str("gpt2")),
        "tokenizer.ggml.tokens": (ARRAY, gguf_strings(["a", "b", "</s>", "<|im_start|>", "<|im_end|>"])),
        "tokenizer.ggml.token_type": (ARRAY, gguf_ints([1, 1, 3, 3, 3])),
        "tokenizer.ggml.eos_token_id": eos,
        "tokenizer.chat_template": (STRING, gguf_str(CHATML)),
    }
    if alignment is not None:
        entries["general.alignment"] = alignment
    head = gguf(entries)
    head = head[:8] + struct.pack("<Q", 1) + head[16:]
    body = head + gguf_str("w") + struct.pack("<I", 1) + struct.pack("<Q", data // 4) + struct.pack("<IQ", 0, 0)
    padding = 1 if alignment is not None and alignment[0] == BOOL else 32  # what a reader taking True as 1 pads to
    body += b"\0" * (-len(body) % padding)
    with open(path, "wb") as handle:
        handle.write(body)
        if sparse:
            handle.truncate(len(body) + data)
        else:
            handle.write(b"\1" * data)
    return path


@pytest.mark.parametrize("alignment", [(BOOL, b"\x01"), (INT8, b"\x20")])
def test_a_gguf_whose_alignment_is_not_uint32_is_refused_unchanged(tmp_path, alignment):
    path = fixable_gguf(tmp_path / "model.gguf", alignment)
    before = path.read_bytes()
    run = cli("fix", str(path), "--write")
    one_line_exit_2(run, "general.alignment", "not UINT32")
    assert run.stdout == "" and path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.gguf"]


def test_a_uint32_alignment_is_edited(tmp_path):
    path = fixable_gguf(tmp_path / "model.gguf", (UINT32, struct.pack("<I", 32)))
    written(cli("fix", str(path), "--write"))
    assert cli("fix", str(path)).stdout == ""  # no edit left (a finding with no mechanical fix may remain)


def written(run) -> None:
    """fix --write wrote its one edit (exit 1 when a finding with no mechanical fix remains)."""
    assert run.code in (0, 1) and "wrote 1 file(s)" in run.stderr, (run.code, run.stderr)


@pytest.fixture
def gguf_and_request(tmp_path):
    model = fixable_gguf(tmp_path / "model.gguf")
    request = tmp_path / "request.json"
    request.write_text('{"model": "m", "max_tokens": 100, "ignore_eos": true}\n')
    planned = cli("fix", str(model), "--serving", str(request))
    assert planned.code == 1 and planned.stdout.count("+++ b/") == 2, planned.stdout  # two edits
    return model, request, {p: p.read_bytes() for p in (model, request)}


def test_serving_backup_in_the_way_changes_nothing(gguf_and_request):
    model, request, before = gguf_and_request
    request.with_name("request.json.bak").write_text("an earlier backup")
    run = cli("fix", str(model), "--serving", str(request), "--write", "--backup")
    one_line_exit_2(run, "request.json.bak already exists", "nothing was changed")
    assert run.stdout == "" and [line for line in run.stderr.splitlines() if line] == [run.stderr.strip()]
    assert {p: p.read_bytes() for p in before} == before
    assert not model.with_name("model.gguf.bak").exists()


def _immutable(path: Path, on: bool) -> bool:
    try:
        subprocess.run(["chattr", "+i" if on else "-i", str(path)], check=True, capture_output=True)
        return True
    except (OSError, subprocess.CalledProcessError):
        return False


@pytest.mark.parametrize("which", ["request", "model"])
def test_an_immutable_file_changes_nothing(gguf_and_request, monkeypatch, which):
    model, request, before = gguf_and_request
    target = request if which == "request" else model
    if _immutable(target, True):
        try:
            run = cli("fix", str(model), "--serving", str(request), "--write", "--backup")
        finally:
            _immutable(target, False)
    else:  # no chattr here (not root, or a file system without it): the rename fails as it would
        from stopdoctor.writers import edits

        real = os.replace

        def replace(source, destination):
            if Path(destination) == target:
                raise PermissionError(1, "Operation not permitted")
            real(source, destination)

        monkeypatch.setattr(edits.os, "replace", replace)
        run = cli("fix", str(model), "--serving", str(request), "--write", "--backup")
    one_line_exit_2(run, "nothing was changed")
    assert {p: p.read_bytes() for p in before} == before
    assert sorted(p.name for p in model.parent.iterdir()) == ["model.gguf", "request.json"]  # no backup, no temp


def test_a_sparse_gguf_stays_sparse(tmp_path):
    size = 1 << 30  # 1 GiB of tensor data never written: a hole
    path = fixable_gguf(tmp_path / "model.gguf", data=size, sparse=True)
    if path.stat().st_blocks * 512 > 64 << 20:
        pytest.skip("this file system does not keep holes")
    length = path.stat().st_size
    written(cli("fix", str(path), "--write"))
    assert path.stat().st_size == length
    assert path.stat().st_blocks * 512 < 64 << 20  # before: the whole GiB written as zeros
    assert cli("fix", str(path)).stdout == ""


@pytest.mark.parametrize("case", ["symlink", "eos-string"])
def test_fix_write_refusals_are_one_line_and_print_nothing_else(tmp_path, case):
    if case == "symlink":
        real = fixable_gguf(tmp_path / "real.gguf")
        path = tmp_path / "model.gguf"
        path.symlink_to(real)
        expected = "symbolic link"
    else:
        # the eos key typed STRING: the editor edits integers only
        path = fixable_gguf(tmp_path / "model.gguf", eos=(STRING, gguf_str("2")))
        expected = "eos"
    before = path.read_bytes()
    run = cli("fix", str(path), "--write")
    if run.code == 1:
        pytest.fail(run.stdout)
    if run.code == 0:  # nothing to fix in a file the reader refuses the eos of
        return
    one_line_exit_2(run, expected)
    assert run.stdout == "" and len([line for line in run.stderr.splitlines() if line]) == 1, run.stderr
    assert path.read_bytes() == before


def test_a_full_disk_is_one_line_before_any_output(gguf_and_request, monkeypatch):
    # The disk fills while the GGUF's new bytes are staged: nothing printed, nothing renamed, no temp left.
    from stopdoctor.writers import gguf_edit

    model, request, before = gguf_and_request

    def full(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(gguf_edit, "_copy", full)
    run = cli("fix", str(model), "--serving", str(request), "--write")
    one_line_exit_2(run, "No space left on device", "nothing was changed")
    assert run.stdout == "" and len([line for line in run.stderr.splitlines() if line]) == 1, run.stderr
    assert {p: p.read_bytes() for p in before} == before
    assert sorted(p.name for p in model.parent.iterdir()) == ["model.gguf", "request.json"]


def test_an_added_key_keeps_holes_and_data(tmp_path):
    # Adding a key shifts the data section: its bytes (data and holes) are copied exactly.
    from stopdoctor.writers.gguf_edit import data_section_digest, read_layout, set_int_key

    size = 64 << 20
    path = fixable_gguf(tmp_path / "model.gguf", data=size, sparse=True)
    start = read_layout(path).data_start
    with open(path, "r+b") as handle:
        for offset in (0, 5 << 20, size - 4096):
            handle.seek(start + offset)
            handle.write(b"\7" * 4096)
    if path.stat().st_blocks * 512 > 32 << 20:
        pytest.skip("this file system does not keep holes")
    digest = data_section_digest(path)
    set_int_key(path, "tokenizer.ggml.eot_token_id", 4)
    assert data_section_digest(path) == digest
    assert read_layout(path).values["tokenizer.ggml.eot_token_id"][0] == UINT32
    assert path.stat().st_blocks * 512 < 32 << 20
