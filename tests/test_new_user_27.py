"""What a new user tripped over (issue #27, section 7): one test per rough edge, each asserting what
a user would check, each written to fail before its fix."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

from tests.helpers import cli
from tests.test_new_user_trips import CHATML, LLAMA3, ROOT, SERVING, clean_env  # noqa: F401 (a fixture)


def wrong_family(tmp_path: Path) -> Path:
    """A ChatML model shipped with a Llama-3 template: its markers are no tokens of this vocabulary."""
    model = tmp_path / "wrong-family"
    shutil.copytree(CHATML, model)
    config = json.loads((model / "tokenizer_config.json").read_text())
    config["chat_template"] = json.loads((LLAMA3 / "tokenizer_config.json").read_text())["chat_template"]
    (model / "tokenizer_config.json").write_text(json.dumps(config, indent=2))
    return model


# --- fix: never "nothing to fix" on a model check fails ------------------------------------------


def test_fix_on_a_wrong_family_template_says_what_remains_and_exits_as_check(clean_env):
    model = wrong_family(clean_env)
    check = cli("check", str(model))
    assert check.code == 1 and "SD201" in check.stdout
    fixed = cli("fix", str(model))
    assert fixed.code == check.code, fixed.stderr
    assert "nothing to fix" not in fixed.stderr
    assert "SD201" in fixed.stderr and "no mechanical fix" in fixed.stderr
    assert "use the chat template made for this tokenizer" in fixed.stderr  # what to do by hand
    document = cli("fix", str(model), "--json").json()
    assert document["exit_code"] == 1 and [f["code"] for f in document["remaining"]] == ["SD201"]
    assert cli("fix", str(CHATML)).code == 0 == cli("check", str(CHATML)).code  # clean: still nothing to fix


def test_fix_write_exits_0_only_when_check_then_passes(clean_env):
    model = clean_env / "llama3"
    shutil.copytree(LLAMA3, model)
    assert cli("fix", str(model)).code == 1  # a diff to apply
    written = cli("fix", str(model), "--write")
    assert written.code == 0 and cli("check", str(model)).code == 0, written.stderr
    broken = wrong_family(clean_env)
    request = clean_env / "request.json"
    request.write_text('{"model": "m", "ignore_eos": true, "max_tokens": 512}\n')
    both = cli("fix", str(broken), "--serving", str(request), "--write")
    assert '"ignore_eos": false' in request.read_text()  # SD405 written ...
    assert both.code == 1 == cli("check", str(broken), "--serving", str(request)).code  # ... SD201 left for a person
    assert "SD201" in both.stderr and "wrote 1 file" in both.stderr


# --- stop-odds without torch: its own name, the README's install line -----------------------------


def test_stop_odds_without_torch_names_itself_and_the_readme_install_line(monkeypatch):
    from stopdoctor.actions.generate.local import TORCH_CPU_INSTALL

    monkeypatch.setitem(sys.modules, "torch", None)  # import torch now raises ImportError
    result = cli("stop-odds", str(CHATML))
    assert result.code == 2
    assert "stopdoctor stop-odds runs" in result.stderr and "generate" not in result.stderr, result.stderr
    assert TORCH_CPU_INSTALL in result.stderr
    assert TORCH_CPU_INSTALL in (ROOT / "README.md").read_text()  # one install line, the README's


# --- check: the serving files it read, each with its verdict ---------------------------------------


def test_check_human_report_lists_each_serving_file_with_its_verdict(clean_env):
    good, bad = SERVING / "Modelfile.good", SERVING / "request-bad.json"
    result = cli("check", str(LLAMA3), "--serving", str(good), "--serving", str(bad))
    lines = [line for line in result.stdout.splitlines() if line.lstrip().startswith("serving ")]
    assert len(lines) == 2, result.stdout
    assert str(good) in lines[0] and "ollama" in lines[0] and "ok" in lines[0]
    assert str(bad) in lines[1] and "1 error" in lines[1] and "SD405" in lines[1]


# --- diff: what got worse leads, values as text ------------------------------------------------------


def test_diff_leads_with_a_runtime_that_no_longer_stops_and_prints_values_as_text(tmp_path):
    worse = tmp_path / "no-im-end"
    shutil.copytree(CHATML, worse)
    config = json.loads((worse / "generation_config.json").read_text())
    assert config["eos_token_id"] == [610, 608]  # <|im_end|>, <|endoftext|>
    config["eos_token_id"], config["temperature"] = 608, 0.5  # harmful, and a harmless change beside it
    (worse / "generation_config.json").write_text(json.dumps(config, indent=2))
    result = cli("diff", str(CHATML), str(worse))
    assert result.code == 1
    body = [line for line in result.stdout.splitlines()[1:] if line.strip()]
    assert body[0].startswith("worse in b")
    assert "transformers" in body[1] and "no longer stops on the end of turn <|im_end|>" in body[1]
    assert not any("transformers" in line for line in body[2:] if line.startswith("  "))  # listed once, first
    harmless = next(line for line in body if "temperature" in line)
    assert body.index(harmless) > body.index(next(line for line in body if line.startswith("other differences")))
    assert "[" not in body[1].split("  [")[0] and "'" not in body[1]  # no Python list or quotes in the values
    assert "<|endoftext|> (608), <|im_end|> (610) → <|endoftext|> (608)" in body[1]
    document = cli("diff", str(CHATML), str(worse), "--json").json()
    assert document["worse"] == 1
    assert [d["what"] for d in document["differences"] if d["effect"] == "worse"] == ["transformers"]
    assert cli("diff", str(worse), str(CHATML), "--json").json()["worse"] == 0  # the fix is no harm


# --- probe-stop: no recommended stop that still cuts the sample answers -----------------------------


def test_probe_stop_never_recommends_an_anchored_stop_that_still_cuts_sample_answers():
    from stopdoctor.analysis.probe import FalsePositive, _recommend

    transcript = [("transcript", "Here is a dialogue:\nQuestion: why?\nAnswer: because.")]
    mid_line = [FalsePositive("transcript", "a dialogue:\nQuestion: why", 20),
                FalsePositive("chat", "so the Question: here", 7)]
    # the anchored form misses fewer contexts and hits fewer answers, but still cuts the transcript
    recs = _recommend("Question:", 1, 12, [[1], [2]], None, mid_line, transcript, None, lambda text: 0)
    assert not any(r.startswith("Anchor") for r in recs), recs
    assert any("'\\nQuestion:' still fires 1 time(s)" in r and "end-of-turn token" in r for r in recs)
    clean = _recommend("Question:", 1, 12, [[1], [2]], None, [], [("plain", "No label here.")], None, lambda text: 0)
    assert any(r.startswith("Anchor it to a line start: '\\nQuestion:'") and "no hit" in r for r in clean)


# --- stop-odds --data: a bad line is skipped; chat and plain-text rows never share a verdict ----------


@pytest.mark.slow  # loads SmolLM2-135M-Instruct
def test_stop_odds_data_skips_a_bad_line_and_judges_chat_rows_apart_from_plain_text(real_models, tmp_path):
    data = tmp_path / "rows.jsonl"
    chat = [{"messages": [{"role": "user", "content": "What is the capital of Italy?"},
                          {"role": "assistant", "content": "The capital of Italy is Rome."}]},
            {"messages": [{"role": "user", "content": "Who wrote Hamlet?"},
                          {"role": "assistant", "content": "William Shakespeare wrote Hamlet."}]}]
    text = [{"text": "Once upon a time there was a fox. It ran off into the woods and was never seen again, the"},
            {"text": "The quick brown fox jumps over the lazy dog and then, without a pause, the"},
            {"text": "Chapter one: in which our heroes meet, and the"}]  # mid-sentence: P(eos) ~ 0
    data.write_text("\n".join([json.dumps(chat[0]), "{not json", *map(json.dumps, text), json.dumps(chat[1])]) + "\n")
    run = cli("stop-odds", str(real_models.smollm2_hf), "--data", str(data), "--json")
    assert run.code == 0, run.stderr  # the healthy model's chat rows end their turns
    document = run.json()
    assert document["skipped"][0]["source"] == f"{data}:2" and "not JSON" in document["skipped"][0]["why"]
    assert document["verdict"] == "stops" and document["verdict_rows"] == "chat"
    chat_p = sorted(e["p_end_of_turn"] for e in document["examples"] if e["kind"] == "chat")
    assert document["median_p_end_of_turn"] == pytest.approx(sum(chat_p) / 2)  # over the 2 chat rows only
    assert document["median_apart"] is not None and document["median_apart"] < 0.01
    human = cli("stop-odds", str(real_models.smollm2_hf), "--data", str(data))
    assert "skipped" in human.stdout and "line 2" in human.stdout
    assert "3 plain-text row(s)" in human.stdout and "not in the verdict" in human.stdout


# --- render --thinking, as generate --thinking ----------------------------------------------------


def test_render_has_thinking_and_renders_what_generate_sends(tmp_path):
    from fixtures.reasoning import build_reasoning
    from stopdoctor.api import plan_generation

    model = build_reasoning("hybrid", tmp_path / "qwen3-style")
    off = cli("render", str(model), "-m", "user", "Hi", "--thinking", "off", "--json")
    assert off.code == 0, off.stderr
    document = off.json()
    assert document["thinking"] == "off" and document["text"].endswith("<think>\n\n</think>\n\n")
    sent = plan_generation(str(model), messages=[{"role": "user", "content": "Hi"}], thinking="off").prompts[0]
    assert document["text"] == sent.text and document["ids"] == list(sent.ids)  # what generate sends
    both = cli("render", str(model), "-m", "user", "Hi", "--thinking", "both")
    assert both.code == 0
    assert "thinking  on" in both.stdout and "thinking  off  (enable_thinking=false)" in both.stdout
    refused = cli("render", str(CHATML), "-m", "user", "Hi", "--thinking", "on")
    assert refused.code == 2 and "shows no thought" in refused.stderr  # never pretends


# --- render -m usr, "a instruct", annotations through a link ------------------------------------------


def test_a_typed_role_that_is_a_typo_is_refused_with_the_role_meant():
    for command in ("render", "generate"):
        typo = cli(command, str(CHATML), "-m", "usr", "Hi")
        assert typo.code == 2, (command, typo.stdout)
        assert "'usr'" in typo.stderr and "did you mean 'user'?" in typo.stderr and "Traceback" not in typo.stderr
    fine = cli("render", str(CHATML), "-m", "system", "Be brief.", "-m", "user", "Hi", "-m", "assistant", "Hello",
               "-m", "tool", "{}")
    assert fine.code == 0, fine.stderr


def test_a_role_the_template_names_is_accepted(tmp_path):
    model = tmp_path / "with-critic"
    shutil.copytree(CHATML, model)
    config = json.loads((model / "tokenizer_config.json").read_text())
    config["chat_template"] = config["chat_template"].replace(
        "{%- if message['role'] == 'assistant' -%}", "{%- if message['role'] in ['assistant', 'critic'] -%}")
    (model / "tokenizer_config.json").write_text(json.dumps(config))
    assert cli("render", str(model), "-m", "user", "Hi", "-m", "critic", "ok").code == 0


def test_expect_kind_mismatch_reads_an_instruct_model(clean_env):
    base = clean_env / "base"
    shutil.copytree(CHATML, base)
    config = json.loads((base / "tokenizer_config.json").read_text())
    del config["chat_template"]
    config["name_or_path"] = "synth/Qwen2.5-0.5B"
    (base / "tokenizer_config.json").write_text(json.dumps(config))
    (clean_env / "stopdoctor.toml").write_text('[[model]]\npath = "base"\nexpect-kind = "instruct"\n')
    result = cli("check")
    assert "expected an instruct model, stopdoctor judges it" in result.stdout, result.stdout
    assert "a instruct" not in result.stdout


@pytest.mark.parametrize("format", ["github", "sarif", "junit"])
def test_annotations_name_a_linked_model_where_it_sits_in_the_repository(clean_env, tmp_path_factory, format):
    outside = tmp_path_factory.mktemp("model-store") / "llama3"  # e.g. a models volume mounted elsewhere
    shutil.copytree(LLAMA3, outside)
    (clean_env / "models").mkdir()
    (clean_env / "models" / "llama3").symlink_to(outside, target_is_directory=True)
    result = cli("check", "models/llama3", "--format", format)
    assert result.code == 1
    assert "models/llama3/generation_config.json" in result.stdout, result.stdout
    assert str(outside) not in result.stdout and "model-store" not in result.stdout


# --- logs --engine spark: the JVM's and pyspark's talk stays off the user's stderr --------------------


@pytest.mark.slow  # a JVM starts
def test_logs_engine_spark_prints_no_jvm_or_pandas_warning(tmp_path):
    import os
    import subprocess

    if shutil.which("java") is None:
        pytest.skip("no Java runtime: apt-get install -y default-jre-headless (the .ci/run script does)")
    pytest.importorskip("pyspark", reason="pyspark not installed: pip install 'stopdoctor[spark]'")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TMPDIR": str(tmp_path)}
    env.pop("STOPDOCTOR_DEBUG", None)
    run = subprocess.run([sys.executable, "-m", "stopdoctor", "logs", str(ROOT / "fixtures" / "logs" / "responses.jsonl"),
                          "--engine", "spark"], env=env, capture_output=True, text=True, timeout=900, check=False)
    assert run.returncode == 1, run.stderr  # the fixture's runaways are findings
    assert run.stdout.startswith("stopdoctor logs ") and "9 responses" in run.stdout
    for noise in ("WARN", "log4j", "incubator", "FutureWarning", "pandas", "setLogLevel", "[Stage"):
        assert noise not in run.stderr, run.stderr
    assert not list(tmp_path.glob("stopdoctor-spark-*.log"))  # the JVM's log is removed at exit
