"""What a new user hit, trying stopdoctor as the README shows it: one test per rough edge."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.helpers import cli

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "fixtures" / "examples" / "llama3-eot-missing"


@pytest.fixture
def readme_project(tmp_path, monkeypatch):
    """The README's configuration example: the model in `models = [...]` and in `[[model]]`."""
    shutil.copytree(EXAMPLE, tmp_path / "models" / "my-finetune")
    (tmp_path / "pyproject.toml").write_text(
        '[tool.stopdoctor]\nmodels = ["models/my-finetune"]\nfail-on = "error"\n\n'
        '[[tool.stopdoctor.model]]\npath = "models/my-finetune"\nexpect-kind = "instruct"\n'
        'expect-end-of-turn = "<|im_end|>"\n')
    monkeypatch.chdir(tmp_path)
    for name in ("MODELS", "SERVING", "FAIL_ON", "SELECT", "IGNORE", "SEVERITY", "FORMAT", "CONFIG"):
        monkeypatch.delenv(f"STOPDOCTOR_{name}", raising=False)
    return tmp_path


def _sarif_rules(run) -> list[str]:
    return sorted(r["ruleId"] for r in json.loads(run.stdout)["runs"][0]["results"])


def test_a_model_listed_twice_in_the_config_is_checked_once(readme_project):
    result = cli("check", "--format", "sarif")
    assert result.code == 1
    assert _sarif_rules(result) == ["SD101", "SD501"]
    assert "1 of 1 model(s) checked" in result.stderr


@pytest.mark.parametrize("spec", ["models/my-finetune", "./models/my-finetune/"])
def test_check_model_applies_that_models_configured_expectation(readme_project, spec):
    result = cli("check", spec, "--format", "sarif")
    assert _sarif_rules(result) == ["SD101", "SD501"]


def _fake_probe(monkeypatch):
    from stopdoctor import gate
    from stopdoctor.analysis.diagnose import Generation, StopCause
    from stopdoctor.actions.generate.run import FragmentProbe, FragmentVerdict

    generation = Generation("stop", StopCause("eos", 2, "<|im_end|>"), "Paris.")
    verdict = FragmentVerdict("instruct", "answered the question and ended its turn after 3 tokens (<|im_end|>)",
                              (FragmentProbe("chat question", "What is the capital of France?", generation, True),))
    monkeypatch.setattr(gate, "require_live", lambda: None)
    monkeypatch.setattr(gate, "live_probe", lambda result: verdict)
    return verdict


def test_check_live_shows_what_it_ran_and_found(readme_project, monkeypatch):
    _fake_probe(monkeypatch)
    human = cli("check", "--live", "--no-color")
    assert "live probe" in human.stdout and "chat question" in human.stdout
    assert "verdict   instruct: answered the question" in human.stdout
    document = cli("check", "--live", "--format", "json").json()
    live = document["models"][0]["live"]
    assert live["verdict"] == "instruct" and live["probes"][0]["name"] == "chat question"
    assert live["probes"][0]["text"] == "Paris."
    assert cli("check", "--format", "json").json()["models"][0]["live"] is None


def test_version_and_short_help():
    from stopdoctor import __version__

    version = cli("--version")
    assert version.code == 0 and version.stdout == f"stopdoctor {__version__}\n"
    assert cli("-h").code == 0 and "Commands" in cli("-h").stdout
    short = cli("inspect", "-h")
    assert short.code == 0 and short.stdout.startswith("Usage: stopdoctor inspect [OPTIONS] MODEL\n")


@pytest.mark.parametrize("command", ["inspect", "render", "generate", "fix"])
def test_usage_names_the_model_argument_plainly(command):
    usage = cli(command, "-h").stdout.splitlines()[0]
    assert usage.endswith(" MODEL") and "{" not in usage


def test_empty_model_argument_is_an_error_not_the_current_folder(tmp_path, monkeypatch):
    shutil.copytree(EXAMPLE, tmp_path, dirs_exist_ok=True)  # the current folder IS a model
    monkeypatch.chdir(tmp_path)
    result = cli("inspect", "")
    assert result.code == 2 and result.stderr.startswith("stopdoctor: error: empty model argument\n")


def test_a_path_typo_under_an_existing_folder_is_no_such_folder(tmp_path, monkeypatch):
    shutil.copytree(EXAMPLE, tmp_path / "models" / "my-finetune")
    monkeypatch.chdir(tmp_path)
    result = cli("inspect", "models/my-finetun")
    assert result.code == 2
    assert result.stderr.splitlines() == ["stopdoctor: error: models/my-finetun: no such folder or file in models/",
                                          "hint: did you mean models/my-finetune?"]
    dotted = cli("inspect", "./models/my-finetun")
    assert dotted.code == 2 and dotted.stderr.splitlines()[1] == "hint: did you mean models/my-finetune?"
    hub_like = cli("inspect", "model/my-finetune")  # neither a folder here nor a cached hub model
    assert hub_like.code == 2 and "no such local folder" in hub_like.stderr


def test_error_lines_are_bounded_and_show_control_characters(tmp_path):
    from stopdoctor.core.errors import InputError

    error = InputError("x" * 5_000_000)
    assert len(error.message) < 1100 and error.message.endswith("(4999000 more characters)")
    model = tmp_path / "m"
    shutil.copytree(EXAMPLE, model)
    config = json.loads((model / "tokenizer_config.json").read_text())
    config["chat_template"] = "{{ raise_exception('\x1b[2J\x1b[31mboom' + 'y' * 1500000) }}"
    (model / "tokenizer_config.json").write_text(json.dumps(config))
    result = cli("inspect", str(model))
    assert result.code == 2
    assert "\x1b" not in result.stderr and "\\x1b[2J" in result.stderr
    assert len(result.stderr) < 5000


def test_template_escape_sequences_never_reach_the_terminal(tmp_path):
    model = tmp_path / "m"
    shutil.copytree(ROOT / "fixtures" / "examples" / "chatml-ok", model)
    config = json.loads((model / "tokenizer_config.json").read_text())
    config["chat_template"] = config["chat_template"].replace("<|im_end|>", "<|im_end|>\x1b]0;pwned\x07\x1b[2J")
    (model / "tokenizer_config.json").write_text(json.dumps(config))
    for color in ("--no-color", "--color"):
        for command in (["inspect", str(model)], ["render", str(model), "-m", "user", "hi"]):
            result = cli(*command, color, env={"NO_COLOR": "1"} if color == "--no-color" else None)
            assert result.code in (0, 1), result.stderr
            assert "\x1b]" not in result.stdout and "\x1b[2J" not in result.stdout and "\x07" not in result.stdout
            assert "\\x1b" in result.stdout or command[0] == "inspect"


def _header_ok(document: dict, schema: str) -> None:
    from stopdoctor import __version__

    assert list(document)[:3] == ["schema_version", "schema", "tool"]
    assert document["schema_version"] == 1 and document["schema"] == schema
    assert document["tool"] == {"name": "stopdoctor", "version": __version__}


def test_rules_json_has_the_header_every_document_has():
    document = cli("rules", "--json").json()
    _header_ok(document, "stopdoctor.rules/1")
    assert [r["code"] for r in document["rules"]][:2] == ["SD000", "SD101"]
    _header_ok(cli("rules", "--json", "SD101").json(), "stopdoctor.rules/1")


def test_check_json_flag_is_format_json(readme_project):
    result = cli("check", "--json")
    _header_ok(result.json(), "stopdoctor.check/1")
    assert result.json()["models"][0]["spec"].endswith("my-finetune")
    clash = cli("check", "--json", "--format", "sarif")
    assert clash.code == 2 and "two formats" in clash.stderr


def test_fix_json_shows_the_edits_and_writes_with_write(tmp_path):
    model = tmp_path / "m"
    shutil.copytree(EXAMPLE, model)
    shown = cli("fix", "--json", str(model))
    assert shown.code == 1
    document = shown.json()
    _header_ok(document, "stopdoctor.fix/1")
    assert [e["file"] for e in document["edits"]] == ["generation_config.json"]
    assert '+  "eos_token_id": [609, 617],' in document["diff"] and document["written"] is False
    written = cli("fix", "--json", "--write", str(model))
    assert written.code == 0 and written.json()["written"] is True
    clean = cli("fix", "--json", str(model))
    assert clean.code == 0 and clean.json()["edits"] == [] and clean.json()["exit_code"] == 0


def test_a_template_passed_as_serving_file_is_named_and_no_findings_is_not_claimed(tmp_path):
    model = tmp_path / "m"
    shutil.copytree(ROOT / "fixtures" / "examples" / "chatml-ok", model)
    template = tmp_path / "chat.jinja"
    template.write_text("{{ bos_token }}{% for m in messages %}{{ m['content'] }}{% endfor %}")
    result = cli("check", str(model), "--serving", str(template), "--no-color")
    assert result.code == 2
    assert "is a Jinja chat template, not a serving configuration" in result.stderr
    assert "invalid JSON" not in result.stderr + result.stdout
    assert "No findings." not in result.stdout and "not fully checked" in result.stdout


def test_generate_exits_1_when_the_model_wrote_a_turn_itself_though_something_later_stopped_it():
    from stopdoctor.analysis.diagnose import Generation, Step, StopCause, TurnEnder, diagnose, runaway

    tokens = [(504, "Paris", False), (30, ".", False), (2, "<|im_end|>", True), (198, "\n", False),
              (1, "<|im_start|>", True), (4093, "user", False), (198, "\n", False), (57, "Hi", False),
              (0, "<|endoftext|>", True)]
    steps = tuple(Step(i, tid, text, special) for i, (tid, text, special) in enumerate(tokens))
    enders = {2: TurnEnder(2, "<|im_end|>", ("chat template",)), 0: TurnEnder(0, "<|endoftext|>", ("eos",))}
    text = "".join(s.text for s in steps[:-1])
    generation = Generation("stop", StopCause("eos", 0, "<|endoftext|>", step=8), text, steps)
    diagnosis = diagnose(generation, enders, [0], {"user": "<|im_start|>user\n"}, ["<|im_start|>", "<|im_end|>"])
    assert diagnosis.should_have_stopped.id == 2 and diagnosis.hallucinated_turn.role == "user"
    assert runaway(generation, diagnosis) is not None


def test_the_test_suite_cleans_up_its_temp_folders():
    import subprocess
    import sys

    import os

    probe = ("import tests.conftest as c, json; print(json.dumps(c.TEMP_FOLDERS))")
    # a test process of its own (not an xdist worker sharing this run's folders)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTEST_XDIST_WORKER", "STOPDOCTOR_TEST_FOLDERS")}
    out = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, check=True, env=env)
    folders = json.loads(out.stdout)
    assert folders and not any(Path(f).exists() for f in folders)
    config = (ROOT / "pyproject.toml").read_text()
    assert 'tmp_path_retention_policy = "failed"' in config


def test_torch_threads_leave_busy_cores_alone(monkeypatch):
    import os

    from stopdoctor.core.errors import InputError
    from stopdoctor.actions.generate.local import cpu_threads

    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    monkeypatch.setattr(os, "getloadavg", lambda: (2.7, 2.5, 1.5))
    assert cpu_threads({}) == 1  # 2 cores, both busy with others: one thread
    monkeypatch.setattr(os, "getloadavg", lambda: (1.0, 1.0, 1.0))
    assert cpu_threads({}) == 2  # only this process: every core
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(16)), raising=False)
    monkeypatch.setattr(os, "getloadavg", lambda: (5.0, 5.0, 5.0))
    assert cpu_threads({}) == 12
    assert cpu_threads({"STOPDOCTOR_THREADS": "3"}) == 3
    with pytest.raises(InputError):
        cpu_threads({"STOPDOCTOR_THREADS": "many"})


def test_gguf_conversion_reports_tensors_as_progress_lines():
    from stopdoctor.actions.generate.local import _tensor_progress

    heard: list[str] = []
    items = list(_tensor_progress(heard.append, "m.gguf")(range(272), desc="Converting and de-quantizing"))
    assert items == list(range(272))
    assert heard[0] == "converting m.gguf: 0/272 tensors de-quantised (once; cached after)…"
    assert heard[-1] == "converting m.gguf: 272/272 tensors de-quantised…" and len(heard) <= 12


@pytest.mark.slow
@pytest.mark.needs_torch
def test_gguf_generate_gives_progress_and_converts_once(tmp_path):
    import os
    import subprocess
    import sys

    from tests.helpers import test_models_dir

    gguf = test_models_dir() / "SmolLM2-135M-Instruct.Q4_1.gguf"
    if not gguf.is_file():
        pytest.skip("run fixtures/realmodels.py for the real test models")
    env = {**os.environ, "STOPDOCTOR_CACHE": str(tmp_path / "cache"), "PYTHONPATH": str(ROOT)}
    command = [sys.executable, "-m", "stopdoctor", "generate", str(gguf), "-m", "user", "Hi", "--max-new-tokens", "6",
               "--device", "cpu"]
    first = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600, check=False)
    assert first.returncode == 0, first.stderr
    assert "tensors de-quantised" in first.stderr
    assert "Converting and de-quantizing" not in first.stderr and "%|" not in first.stderr  # transformers' bars
    converted = list((tmp_path / "cache" / "gguf-models").iterdir())
    assert len(converted) == 1 and (converted[0] / "model.safetensors").is_file()
    second = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600, check=False)
    assert second.returncode == 0, second.stderr
    assert "converted once, cached" in second.stderr and "de-quantised" not in second.stderr
    assert second.stdout == first.stdout


def test_probe_stop_suggests_only_what_measures_better():
    from stopdoctor.analysis.probe import _recommend

    def recs(misses_of, false_hits=()):
        return _recommend("Question:", 1, 12, [[1], [2]], None, list(false_hits), [], "<|user|>\n", misses_of)

    worse = recs(lambda text: 4)  # the anchored form misses more: no suggestion
    assert not any("Anchor" in r or "user header" in r for r in worse)
    better = recs(lambda text: 0)
    assert any(r.startswith("Anchor it to a line start: '\\nQuestion:' (id match misses in 0 of 12") for r in better)
    assert any("user header" in r for r in better)
    same = recs(lambda text: 1)  # as good, not better: nothing to gain from changing
    assert not any("Anchor" in r for r in same)


@pytest.mark.slow  # Gemma's 262k-token GGUF vocabulary takes seconds to convert
def test_probe_stop_on_gemma_does_not_suggest_an_anchor_that_misses_more(real_gguf_models):
    run = cli("probe-stop", "Question:", "--model", str(real_gguf_models.gemma_gguf), "--json")
    stop = run.json()["stops"][0]
    assert stop["id_match_misses"] == 1
    assert not any("\\nQuestion:" in r for r in stop["recommendations"]), stop["recommendations"]


def test_readme_pre_commit_example_pins_a_release_tag():
    import re

    from stopdoctor import __version__

    page = (ROOT / "docs" / "ci.md").read_text()
    revs = re.findall(r"^\s*rev:\s*(\S+)", page, flags=re.MULTILINE)
    assert revs == [f"v{__version__}"]


def _with_tokenizer_config(tmp_path, **changes) -> Path:
    model = tmp_path / "m"
    shutil.copytree(ROOT / "fixtures" / "examples" / "chatml-ok", model)
    config = json.loads((model / "tokenizer_config.json").read_text())
    config.update(changes)
    (model / "tokenizer_config.json").write_text(json.dumps(config))
    return model


@pytest.mark.parametrize("entries", [
    [{"name": "default"}],  # no template
    [{"template": "{{ messages }}"}],  # no name: transformers reads entry["name"]
    [{"name": "default", "template": 5}],
    ["{{ messages }}"],
])
def test_a_broken_chat_template_list_is_an_error_not_no_template(tmp_path, entries):
    result = cli("inspect", str(_with_tokenizer_config(tmp_path, chat_template=entries)))
    assert result.code == 2
    assert result.stderr.startswith("stopdoctor: error: tokenizer_config.json: chat_template[0] is not a")
    assert "SD203" not in result.stdout


def test_a_well_formed_chat_template_list_still_loads(tmp_path):
    source = json.loads((ROOT / "fixtures" / "examples" / "chatml-ok" / "tokenizer_config.json").read_text())["chat_template"]
    result = cli("inspect", "--json", str(_with_tokenizer_config(tmp_path, chat_template=[{"name": "default", "template": source}])))
    assert result.code == 0 and result.json()["templates"][0]["key"] == "chat_template[0]"


@pytest.mark.parametrize("file,content,expected", [
    ("config.json", "[1, 2]", "config.json: expected a JSON object {…}, found a list"),
    ("generation_config.json", "null", "generation_config.json: expected a JSON object {…}, found null"),
    ("tokenizer.json", "{}", "tokenizer.json: valid JSON, but not a tokenizer the tokenizers library reads: Model missing."),
    ("tokenizer.json", "[1]", ("tokenizer.json: valid JSON, but not a tokenizer the tokenizers library reads: "
                               "invalid type: sequence, expected struct Tokenizer")),
    ("tokenizer.json", '{"x": ', "tokenizer.json: cannot be loaded by the tokenizers library: expected `,` or `}` at line 1"),
])
def test_wrong_schema_json_is_not_called_a_syntax_error(tmp_path, file, content, expected):
    model = tmp_path / "m"
    shutil.copytree(ROOT / "fixtures" / "examples" / "chatml-ok", model)
    (model / file).write_text(content)
    result = cli("inspect", str(model))
    assert result.code == 2
    first = result.stderr.splitlines()[0]
    assert first.startswith(f"stopdoctor: error: {expected}"), first
    if "valid JSON" in expected or "expected a JSON object" in expected:
        assert "line" not in first and "column" not in first


@pytest.mark.parametrize("source", [
    "\n".join("{% for x" + str(i) + " in messages %}" for i in range(25)) + "x" + "{% endfor %}" * 25,
    "\n".join("{% if messages %}" for _ in range(120)) + "x" + "{% endif %}" * 120,
])
def test_a_template_error_never_quotes_the_generated_codes_line(tmp_path, source):
    result = cli("render", str(_with_tokenizer_config(tmp_path, chat_template=source)), "-m", "user", "hi")
    assert result.code == 2
    first = result.stderr.splitlines()[0]
    assert "nests its blocks too deeply" in first
    assert "<template>" not in first and ", line " not in first


def _gguf_with_tensors(path: Path) -> Path:
    np = pytest.importorskip("numpy")
    gguf = pytest.importorskip("gguf")
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_name("Tiny")
    writer.add_tokenizer_model("gpt2")
    tokens = ["<s>", "</s>"] + [f"t{i}" for i in range(40)]
    writer.add_token_list(tokens)
    writer.add_token_types([3, 3] + [1] * 40)
    writer.add_token_merges(["t 0"])
    writer.add_bos_token_id(0)
    writer.add_eos_token_id(1)
    for index in range(20):
        writer.add_tensor(f"blk.{index}.attn_q.weight", np.ones((8, 8), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


@pytest.mark.parametrize("change", [-1, +1, -3])
def test_a_gguf_with_a_wrong_metadata_count_is_refused(tmp_path, change):
    import struct

    good = _gguf_with_tensors(tmp_path / "good.gguf")
    assert cli("inspect", str(good)).code == 0
    blob = bytearray(good.read_bytes())
    (kv_count,) = struct.unpack_from("<Q", blob, 16)
    struct.pack_into("<Q", blob, 16, kv_count + change)
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(bytes(blob))
    result = cli("inspect", str(bad))
    assert result.code == 2, result.stdout
    assert result.stderr.startswith(f"stopdoctor: error: {bad}: ") and len(result.stderr.splitlines()) <= 2


@pytest.mark.parametrize("where", ["inside the tensor table", "inside the tensor data"])
def test_a_gguf_cut_inside_its_tensors_is_refused(tmp_path, where):
    good = _gguf_with_tensors(tmp_path / "good.gguf")
    blob = good.read_bytes()
    cut = blob.index(b"blk.10.attn_q.weight") if where == "inside the tensor table" else len(blob) - 100
    bad = tmp_path / "cut.gguf"
    bad.write_bytes(blob[:cut])
    result = cli("inspect", str(bad))
    assert result.code == 2, result.stdout
    assert "truncated GGUF file" in result.stderr


def test_an_empty_model_path_in_the_config_is_an_error(tmp_path, monkeypatch):
    shutil.copytree(EXAMPLE, tmp_path, dirs_exist_ok=True)  # the config's folder IS a model
    (tmp_path / "stopdoctor.toml").write_text('models = [""]\n')
    monkeypatch.chdir(tmp_path)
    result = cli("check")
    assert result.code == 2 and "empty model path" in result.stderr
    assert cli("check", "", "--config", str(tmp_path / "stopdoctor.toml")).code == 2


def test_long_work_keeps_saying_it_is_alive(monkeypatch, capsys):
    import re
    import time

    from stopdoctor.cli.output import working

    monkeypatch.setattr(working, "FIRST", 0.05)
    monkeypatch.setattr(working, "HEARTBEAT", 0.2)
    with working("reading m.gguf…") as status:
        time.sleep(0.5)
        status.update("converting m.gguf: 1/2 tensors…")
    lines = capsys.readouterr().err.splitlines()
    assert lines[0] == "stopdoctor: reading m.gguf…"
    assert re.fullmatch(r"stopdoctor: still reading m\.gguf \(\d+ s\)", lines[1]), lines
    assert lines[-1] == "stopdoctor: converting m.gguf: 1/2 tensors…"
