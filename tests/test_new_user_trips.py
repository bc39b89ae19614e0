"""What a new user tripped over (issue #22, section 2): one test per rough edge, each written to
fail before its fix."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from tests.helpers import cli

ROOT = Path(__file__).resolve().parents[1]
LLAMA3 = ROOT / "fixtures" / "examples" / "llama3-eot-missing"
CHATML = ROOT / "fixtures" / "examples" / "chatml-ok"
SERVING = ROOT / "fixtures" / "serving"


@pytest.fixture
def clean_env(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    for name in ("MODELS", "SERVING", "FAIL_ON", "SELECT", "IGNORE", "SEVERITY", "FORMAT", "CONFIG"):
        monkeypatch.delenv(f"STOPDOCTOR_{name}", raising=False)
    return tmp_path


# --- check --live: each model its own render deadline -----------------------------------------


class _SlowClock:
    """time as the sandbox sees it, where each live probe (model load + generation) takes 11 s."""

    def __init__(self) -> None:
        self.offset = 0.0

    def monotonic(self) -> float:
        return time.monotonic() + self.offset

    def __getattr__(self, name):
        return getattr(time, name)


def test_check_live_on_several_models_gives_each_its_own_render_deadline(clean_env, monkeypatch):
    from stopdoctor import gate
    from stopdoctor.analysis.diagnose import Generation, StopCause
    from stopdoctor.actions.generate.run import FragmentProbe, FragmentVerdict
    from stopdoctor.template import limits, render

    clock = _SlowClock()
    for module in (limits, render):  # every clock the sandbox reads
        if hasattr(module, "time"):
            monkeypatch.setattr(module, "time", clock)

    def slow_probe(result):
        clock.offset += 11.0  # loading and generating with a model is no template rendering
        generation = Generation("stop", StopCause("eos", 2, "<|im_end|>"), "Paris.")
        return FragmentVerdict("instruct", "answered", (FragmentProbe("chat question", "Q", generation, True),))

    monkeypatch.setattr(gate, "require_live", lambda: None)
    monkeypatch.setattr(gate, "live_probe", slow_probe)
    specs = [str(CHATML), str(LLAMA3), str(CHATML) + "/", str(LLAMA3) + "/"]
    result = cli("check", *specs, "--live", "--format", "json")
    assert "rendering the template took more than" not in result.stderr, result.stderr
    assert result.code != 2, result.stderr
    assert all(model["live"] is not None for model in result.json()["models"])


# --- one escape rule for stop strings ----------------------------------------------------------


def test_generate_reads_stop_string_escapes_as_probe_stop_does(monkeypatch):
    from stopdoctor.actions.generate import request
    from stopdoctor.core.errors import InputError

    seen = {}

    def capture(analysis, stops, stop_ids, stop_strings):
        seen["strings"] = stop_strings
        raise InputError("captured")

    monkeypatch.setattr(request, "resolve_stops", capture)
    cli("generate", str(CHATML), "-m", "user", "Hi", "--stop", "\\nQ:", "--stop", "a\\\\nb", "--stop", "\\x")
    assert seen["strings"] == ["\nQ:", "a\\nb", "\\x"]


def test_the_stop_escape_rule_is_documented_once_for_every_command():
    page = (ROOT / "docs" / "stop-strings.md").read_text()
    assert page.startswith("# Stop strings on the command line")
    for command in ("generate", "probe-stop"):
        assert "escapes" in cli(command, "--help").stdout.replace("\n", " ")


# --- labels: the default models TRL ----------------------------------------------------------


def test_labels_default_appends_eos_to_plain_text_as_trl_does(tmp_path):
    data = tmp_path / "text.jsonl"
    data.write_text(json.dumps({"text": "The quick brown fox."}) + "\n"
                    + json.dumps({"prompt": "Say hi:", "completion": " hi"}) + "\n")
    trl = cli("labels", str(CHATML), "--data", str(data), "--json")
    assert trl.code == 0, trl.stdout + trl.stderr
    assert not [f for f in trl.json()["findings"] if f["code"] == "SD604"]
    plain = cli("labels", str(CHATML), "--data", str(data), "--no-append-eos", "--json")
    assert plain.code == 1 and any(f["code"] == "SD604" for f in plain.json()["findings"])
    legacy = cli("labels", str(CHATML), "--data", str(data), "--collator", "pad-id", "--json")
    assert any(f["code"] == "SD604" for f in legacy.json()["findings"])  # a plain transformers loop adds none


# --- probe-stop: a gate must not fail the right answer -----------------------------------------


def test_probe_stop_gate_passes_the_models_own_end_of_turn_token():
    result = cli("probe-stop", "<|im_end|>", "--model", str(CHATML), "--fail-on-miss", "--json")
    assert result.code == 0, result.stdout
    stop = result.json()["stops"][0]
    assert stop["special_token_id"] is not None
    assert cli("probe-stop", "User:", "--model", str(CHATML), "--fail-on-miss").code == 1


# --- serving: one root cause, one finding ----------------------------------------------------


def test_ignore_eos_is_one_finding_not_three(tmp_path):
    from stopdoctor.api import inspect_model, serving_findings
    from stopdoctor.runtimes.serving import load_serving

    llama3 = inspect_model(str(LLAMA3)).analysis
    only = tmp_path / "serve.sh"
    only.write_text("llama-server -m m.gguf --jinja --ignore-eos\n")
    found = {f.code: f for f in serving_findings(llama3, load_serving(only))}
    assert set(found) == {"SD405"}, found
    assert found["SD405"].evidence.get("end_of_turn") == "<|eot_id|>"
    readme_case = {f.code: f for f in serving_findings(llama3, load_serving(SERVING / "llama-server.sh"))}
    assert "SD401" not in readme_case  # its cause is the wrong template (SD402) and --ignore-eos (SD405)
    assert {"SD402", "SD405"} <= set(readme_case)
    assert "SD401" in readme_case["SD402"].evidence.get("also", "")


# --- bad input: one clear line ---------------------------------------------------------------


@pytest.mark.parametrize("args", [["labels", str(CHATML), "--data", "/dev/null"], ["logs", "/dev/null"]])
def test_dev_null_is_not_called_no_such_file(args):
    result = cli(*args)
    assert result.code == 2
    assert "no such" not in result.stderr and "not a regular file" in result.stderr, result.stderr


def test_a_bad_row_is_counted_and_labels_goes_on(tmp_path):
    data = tmp_path / "rows.jsonl"
    good = json.dumps({"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}]})
    data.write_text("\n".join([good, "{not json", json.dumps({"conversations": []}), good, json.dumps([1])]) + "\n")
    result = cli("labels", str(CHATML), "--data", str(data), "--json")
    assert result.code == 0, result.stderr
    document = result.json()
    assert document["examples"]["read"] == 2 and document["examples"]["bad_lines"] == 3
    assert document["bad_lines"][0].startswith("line 2 is not JSON") and document["bad_lines"][1].startswith("line 3: ")
    human = cli("labels", str(CHATML), "--data", str(data))
    assert "3 bad lines skipped" in human.stdout
    only_bad = tmp_path / "bad.jsonl"
    only_bad.write_text("{not json\n")
    refused = cli("labels", str(CHATML), "--data", str(only_bad))
    assert refused.code == 2 and "no valid example" in refused.stderr and "line 1" in refused.stderr


# --- generate: the fix names the file and key, also for a server ------------------------------


class _FakeEngine:
    """Writes the answer, the end-of-turn <|eot_id|> (617), then a user turn of its own."""

    name, device = "transformers", "cpu"

    def __init__(self, *args, **kwargs) -> None:
        pass

    @classmethod
    def load(cls, *args, **kwargs):
        return cls()

    def pick_model(self, *args) -> str:
        return "m"

    def generate(self, prompt, stops, max_new_tokens, sampling=None):
        from stopdoctor.analysis.diagnose import Generation, Step, StopCause

        pieces = [(1, "Paris", False), (617, "<|eot_id|>", True), (2, "<|start_header_id|>", True), (3, "user", False),
                  (4, "<|end_header_id|>", True), (5, "\n\nHi", False)]
        steps = tuple(Step(i, tid, text, special) for i, (tid, text, special) in enumerate(pieces))
        text = "".join(p[1] for p in pieces)
        if self.server:
            return Generation("length", StopCause("length"), text, (), server={"finish_reason": "length", "url": "u", "route": "chat"})
        return Generation("length", StopCause("length"), text, steps)

    server = False


class _FakeServer(_FakeEngine):
    name, device = "server", "http://127.0.0.1:1"
    server = True


def test_generate_fix_names_the_file_and_key(monkeypatch):
    from stopdoctor.actions.generate import local

    monkeypatch.setattr(local, "LocalEngine", _FakeEngine)
    result = cli("generate", str(LLAMA3), "-m", "user", "Hi", "--max-new-tokens", "6", "--json")
    assert result.code == 1, result.stderr
    fix = result.json()["fix"]
    assert fix["file"] == "generation_config.json" and fix["key"] == "eos_token_id"
    assert fix["text"] == 'set generation_config.json "eos_token_id": [609, 617]'
    human = cli("generate", str(LLAMA3), "-m", "user", "Hi", "--max-new-tokens", "6", "--no-color")
    assert 'set generation_config.json "eos_token_id": [609, 617]' in human.stdout


def test_generate_server_runaway_gets_a_fix_line(monkeypatch):
    from stopdoctor.actions.generate import server

    monkeypatch.setattr(server, "ServerEngine", _FakeServer)
    result = cli("generate", str(LLAMA3), "-m", "user", "Hi", "--server", "http://127.0.0.1:1", "--json")
    assert result.code == 1, result.stderr
    fix = result.json()["fix"]
    assert fix is not None and "617" in fix["text"] and "stop_token_ids" in fix["text"]
    human = cli("generate", str(LLAMA3), "-m", "user", "Hi", "--server", "http://127.0.0.1:1", "--no-color")
    assert "\n  fix " in human.stdout


def test_kind_scores_are_explained():
    human = cli("inspect", str(LLAMA3), "--no-color")
    line = next(line for line in human.stdout.splitlines() if line.startswith("  kind "))
    assert "score +4" in line and "instruct at +1 or more" in line, line
    verdict = cli("inspect", str(LLAMA3), "--json").json()["verdict"]
    assert verdict["score"] == 4 and "base at -2 or less" in verdict["rule"]


def test_help_says_what_is_required_and_names_arguments_plainly():
    probe = cli("probe-stop", "--help").stdout
    assert probe.startswith("Usage: stopdoctor probe-stop --model MODEL [OPTIONS] [STOP...]"), probe.splitlines()[0]
    model_help = probe[probe.index("--model"):].split("--corpus")[0]
    assert "[required]" in model_help
    logs = cli("logs", "--help").stdout
    assert logs.startswith("Usage: stopdoctor logs [OPTIONS] FILE..."), logs.splitlines()[0]
    assert "{files}" not in logs and "files..." not in logs


# --- CI: a baseline of accepted findings ----------------------------------------------------


def test_baseline_accepts_listed_findings_and_fails_only_new_ones(clean_env):
    baseline = clean_env / "stopdoctor-baseline.json"
    written = cli("check", str(LLAMA3), "--baseline", str(baseline), "--write-baseline")
    assert written.code == 0, written.stderr
    entries = json.loads(baseline.read_text())["findings"]
    assert [e["code"] for e in entries] == ["SD101"]
    again = cli("check", str(LLAMA3), "--baseline", str(baseline), "--format", "json")
    assert again.code == 0, again.stderr
    findings = again.json()["models"][0]["findings"]
    assert [(f["code"], f["baseline"]) for f in findings] == [("SD101", True)]  # still listed
    sarif = cli("check", str(LLAMA3), "--baseline", str(baseline), "--format", "sarif").json()
    assert [r["baselineState"] for r in sarif["runs"][0]["results"]] == ["unchanged"]
    new = cli("check", str(LLAMA3), "--serving", str(SERVING / "llama-server.sh"), "--baseline", str(baseline),
              "--format", "json")
    assert new.code == 1
    states = {f["code"]: f["baseline"] for f in new.json()["models"][0]["findings"]}
    assert states["SD101"] is True and states["SD405"] is False
    human = cli("check", str(LLAMA3), "--baseline", str(baseline), "--no-color")
    assert human.code == 0 and "baseline" in human.stdout and "1 in the baseline" in human.stderr


def test_a_missing_or_broken_baseline_is_one_line_exit_2(clean_env):
    missing = cli("check", str(LLAMA3), "--baseline", str(clean_env / "nope.json"))
    assert missing.code == 2 and "no such baseline file" in missing.stderr and "--write-baseline" in missing.stderr
    broken = clean_env / "broken.json"
    broken.write_text("{")
    result = cli("check", str(LLAMA3), "--baseline", str(broken))
    assert result.code == 2 and "not a stopdoctor baseline" in result.stderr
    assert len(result.stderr.strip().splitlines()) <= 3


# --- CI from this repository: a composite action and a pre-commit hook ------------------------


def _action_check_script() -> tuple[dict, str]:
    import yaml

    action = yaml.safe_load((ROOT / "action.yml").read_text())
    assert action["runs"]["using"] == "composite"
    step = next(s for s in action["runs"]["steps"] if "stopdoctor check" in s["run"] and "pip" not in s["run"])
    return step["env"], step["run"]


def test_the_composite_action_installs_from_its_own_checkout_and_gates():
    import yaml

    action = yaml.safe_load((ROOT / "action.yml").read_text())
    install = action["runs"]["steps"][0]["run"]
    assert "${{ github.action_path }}" in install and "git+" not in install
    assert set(action["inputs"]) >= {"models", "serving", "fail-on", "baseline", "sarif"}


def test_the_composite_action_check_step_runs(clean_env):
    import os
    import shutil
    import subprocess
    import sys

    if shutil.which("bash") is None:
        pytest.skip("no bash")
    env_map, script = _action_check_script()
    inputs = {"models": str(LLAMA3), "serving": "", "fail-on": "", "baseline": "", "sarif": "out.sarif"}
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for name, value in env_map.items():
        env[name] = value.replace("${{ inputs.", "").replace(" }}", "")
        env[name] = inputs[env[name]]
    bin_dir = clean_env / "bin"
    bin_dir.mkdir()
    (bin_dir / "stopdoctor").write_text(f"#!/bin/sh\nexec {sys.executable} -m stopdoctor \"$@\"\n")
    (bin_dir / "stopdoctor").chmod(0o755)
    env["PATH"] = f"{bin_dir}{os.pathsep}{env['PATH']}"
    failing = subprocess.run(["bash", "-ec", script], env=env, cwd=clean_env, capture_output=True, text=True, timeout=300)
    assert failing.returncode == 1, failing.stderr
    assert json.loads((clean_env / "out.sarif").read_text())["runs"][0]["results"][0]["ruleId"] == "SD101"
    assert "::error" in failing.stdout  # annotations on the job
    baseline = clean_env / "baseline.json"
    assert cli("check", str(LLAMA3), "--baseline", str(baseline), "--write-baseline").code == 0
    env["SD_BASELINE"] = str(baseline)
    accepted = subprocess.run(["bash", "-ec", script], env=env, cwd=clean_env, capture_output=True, text=True, timeout=300)
    assert accepted.returncode == 0, accepted.stderr


def test_readme_ci_snippets_name_no_placeholder_owner():
    page = (ROOT / "docs" / "ci.md").read_text()
    assert "OWNER" not in page and "OWNER" not in (ROOT / "README.md").read_text()
    assert "uses: ./" in page and "action.yml" in page and "repo: local" in page


def test_readme_first_screen_says_which_command_and_how_to_try_it():
    readme = (ROOT / "README.md").read_text()
    first = readme[:readme.index("## Develop")]
    assert "## Which command for which symptom" in first and "## Try it on your model" in first
    assert "--index-url https://download.pytorch.org/whl/cpu" in first
    for command in ("inspect", "generate", "check", "probe-stop", "labels", "logs"):
        assert f"stopdoctor {command}" in first
