"""The reasoning structure (template/reasoning.py), its inspect block, and the SD15x/SD45x rules, on
synthetic reasoning folders (fixtures/reasoning.py) whose templates are written here."""

from __future__ import annotations

import json

import pytest

from fixtures.reasoning import HARMONY, HYBRID, PREFILLED, build_reasoning
from fixtures.synth import _template_chatml, build_family
from stopdoctor.api import inspect_model, inspect_report, serving_findings
from stopdoctor.runtimes.serving import load_serving
from stopdoctor.reporters.human import render_inspect_human
from stopdoctor.reporters.inspect_json import render_inspect_json
from stopdoctor.template.reasoning import analyze_reasoning

SPECIALS = {"eos_token": "<|im_end|>"}


def test_hybrid_template_thinks_unless_switched_off():
    r = analyze_reasoning(HYBRID, SPECIALS)
    assert (r.style, r.open, r.close, r.prefilled) == ("think-tags", "<think>", "</think>", False)
    assert r.can_disable == "enable_thinking=false" and r.history_stripped is True and r.default_on is True


def test_prefilled_prompt_is_seen():
    r = analyze_reasoning(PREFILLED, SPECIALS)
    assert (r.style, r.open, r.close, r.prefilled, r.can_disable) == ("think-tags", "<think>", "</think>", True, None)


def test_harmony_channels_and_stops():
    r = analyze_reasoning(HARMONY, {"eos_token": "<|return|>"})
    assert (r.style, r.open, r.close) == ("harmony", "<|channel|>analysis<|message|>", "<|end|>")
    assert r.answer_open == "<|channel|>final<|message|>" and r.stop_texts == ("<|return|>", "<|call|>")
    for token in ("<|end|>", "<|message|>", "<|channel|>", "<|start|>"):
        assert r.stop_hazard(token) is not None, token
    assert r.stop_hazard("<|return|>") is None and r.stop_hazard("<|call|>") is None


@pytest.mark.parametrize("source", [
    _template_chatml(),
    # renders a thought when given one and strips it from history, but never prompts one (Qwen3-2507 Instruct)
    HYBRID.replace("{%- if enable_thinking is defined and enable_thinking is false %}{{- '<think>\\n\\n</think>\\n\\n' }}{%- endif %}", ""),
    # merely mentions tags in a system prompt
    "{{ 'Answer in <answer></answer> tags.' }}" + _template_chatml(),
    # its default system text names tool-call tags, not a thought's
    "{{ 'Call tools within <tool_call></tool_call> tags.' }}" + _template_chatml(),
])
def test_chat_templates_are_not_reasoning(source):
    assert analyze_reasoning(source, SPECIALS).style == "none"


def test_a_default_system_message_that_asks_for_the_thought_is_reasoning():
    # Phi-4-reasoning's template: no switch, a plain assistant prompt, and a default system message
    # that asks for "<think> {Thought section} </think> {Solution section}".
    source = ("{% set system = 'Think first. Structure your response as <think> {Thought} </think> {Solution}.' %}"
              "{% if messages[0]['role'] == 'system' %}{% set system = messages[0]['content'] %}"
              "{% set messages = messages[1:] %}{% endif %}<|im_start|>system\n{{ system }}<|im_end|>\n"
              "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
              "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
    r = analyze_reasoning(source, SPECIALS)
    assert (r.style, r.open, r.close, r.prefilled, r.default_on) == ("think-tags", "<think>", "</think>", False, True)
    assert any("asks for the thought" in e for e in r.evidence)


def test_inspect_shows_the_reasoning_block(tmp_path):
    result = inspect_model(str(build_reasoning("hybrid", tmp_path / "m")))
    document = json.loads(render_inspect_json(result))["reasoning"]
    assert {k: document[k] for k in ("style", "open", "close", "prefilled", "can_disable", "history_stripped")} == {
        "style": "think-tags", "open": "<think>", "close": "</think>", "prefilled": False,
        "can_disable": "enable_thinking=false", "history_stripped": True}
    assert document["stop_ids_needed"] == result.analysis.required_stop_ids()
    text = render_inspect_human(result)
    assert "reasoning  style think-tags" in text and "turned off with enable_thinking=false" in text
    assert inspect_report(result).exit_code() == 0


def test_chat_model_says_none(tmp_path):
    result = inspect_model(str(build_family("chatml", tmp_path / "m")))
    assert json.loads(render_inspect_json(result))["reasoning"]["style"] == "none"
    assert "reasoning" not in render_inspect_human(result)


def test_harmony_model_never_gets_end_as_a_stop(tmp_path):
    result = inspect_model(str(build_reasoning("harmony", tmp_path / "m")))
    analysis = result.analysis
    end = analysis.facts.vocab.is_single_token("<|end|>")
    assert end not in analysis.required_stop_ids() and end not in analysis.suggested_stop_ids([])
    assert analysis.stop_hazard(end) is not None
    assert [analysis.facts.vocab.text_of(i) for i in analysis.reasoning_stop_ids()] == ["<|return|>", "<|call|>"]
    assert not [f for f in result.findings if f.code == "SD150"]


def test_sd150_harmony_stop_set(tmp_path):
    result = inspect_model(str(build_reasoning("harmony", tmp_path / "m", gen_eos=("<|return|>", "<|end|>"),
                                               config_eos=("<|return|>", "<|end|>"))))
    found = [f for f in result.findings if f.code == "SD150"]
    assert any("<|end|>" in f.message and f.severity.label == "error" for f in found)
    assert any("<|call|>" in f.message for f in found)


def test_sd151_greedy_on_a_thinking_model(tmp_path):
    bad = inspect_model(str(build_reasoning("hybrid", tmp_path / "bad", sampling={"do_sample": False})))
    assert [f.code for f in bad.findings] == ["SD151"]
    assert bad.findings[0].location.file == "generation_config.json"
    ok = inspect_model(str(build_reasoning("hybrid", tmp_path / "ok")))
    assert "SD151" not in {f.code for f in ok.findings}
    chat = inspect_model(str(build_family("chatml", tmp_path / "chat", sampling={"do_sample": False})))
    assert "SD151" not in {f.code for f in chat.findings}


def _serving(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return load_serving(path)


def test_sd450_deepseek_parser_on_a_switchable_model(tmp_path):
    analysis = inspect_model(str(build_reasoning("hybrid", tmp_path / "m"))).analysis
    bad = serving_findings(analysis, _serving(tmp_path, "serve.sh", "vllm serve m --reasoning-parser deepseek_r1\n"))
    assert [f.code for f in bad] == ["SD450"] and "reasoning_content" in bad[0].message
    assert bad[0].location.key == "--reasoning-parser"
    assert not serving_findings(analysis, _serving(tmp_path, "ok.sh", "vllm serve m --reasoning-parser qwen3\n"))
    prefilled = inspect_model(str(build_reasoning("prefilled", tmp_path / "p"))).analysis
    assert not serving_findings(prefilled, _serving(tmp_path, "p.sh", "vllm serve m --reasoning-parser deepseek_r1\n"))


def test_sd450_harmony_parser_mismatch_and_reasoning_format_none(tmp_path):
    harmony = inspect_model(str(build_reasoning("harmony", tmp_path / "h"))).analysis
    bad = serving_findings(harmony, _serving(tmp_path, "h.sh", "vllm serve m --reasoning-parser deepseek_r1\n"))
    assert [(f.code, f.severity.label) for f in bad] == [("SD450", "error")]
    assert not serving_findings(harmony, _serving(tmp_path, "hok.sh", "vllm serve m --reasoning-parser openai_gptoss\n"))
    hybrid = inspect_model(str(build_reasoning("hybrid", tmp_path / "m"))).analysis
    raw = serving_findings(hybrid, _serving(tmp_path, "l.sh", "llama-server -m m.gguf --jinja --reasoning-format none\n"))
    assert [f.code for f in raw] == ["SD450"]


def test_sd450_qwen3_parser_on_a_prefilled_template(tmp_path):
    # vLLM's qwen3 parser before 0.16.1 needs <think> in the output; a prefilled prompt holds it.
    prefilled = inspect_model(str(build_reasoning("prefilled", tmp_path / "p"))).analysis
    bad = serving_findings(prefilled, _serving(tmp_path, "p.sh", "vllm serve m --reasoning-parser qwen3\n"))
    assert [f.code for f in bad] == ["SD450"] and "0.16.1" in bad[0].message and "content" in bad[0].message
    # the model writes <think> itself: the parser sees both tags
    hybrid = inspect_model(str(build_reasoning("hybrid", tmp_path / "m"))).analysis
    assert not serving_findings(hybrid, _serving(tmp_path, "h.sh", "vllm serve m --reasoning-parser qwen3\n"))
    # SGLang's qwen3 parser is another program: not judged by vLLM's history
    sglang = "python -m sglang.launch_server --model-path m --reasoning-parser qwen3\n"
    assert not serving_findings(prefilled, _serving(tmp_path, "s.sh", sglang))


def test_sd450_llamacpp_reasoning_off_and_budget(tmp_path):
    prefilled = inspect_model(str(build_reasoning("prefilled", tmp_path / "p"))).analysis
    hybrid = inspect_model(str(build_reasoning("hybrid", tmp_path / "m"))).analysis
    chat = inspect_model(str(build_family("chatml", tmp_path / "c"))).analysis
    off = "llama-server -m m.gguf --jinja --reasoning off\n"
    # a template whose switch is `thinking`, not enable_thinking: --reasoning off turns nothing off
    other_switch = inspect_model(str(build_reasoning("hybrid", tmp_path / "t", chat_template=HYBRID.replace(
        "enable_thinking", "thinking")))).analysis
    bad = serving_findings(other_switch, _serving(tmp_path, "off.sh", off))
    assert [f.code for f in bad] == ["SD450"] and "thinking=false" in bad[0].message and bad[0].location.key == "--reasoning"
    assert not serving_findings(hybrid, _serving(tmp_path, "off2.sh", off))  # enable_thinking=false does turn it off
    # a prompt that opens the thought: llama.cpp closes it itself when enable_thinking is false
    # (common/chat.cpp appends the close marker to a prompt ending with the open one)
    assert not serving_findings(prefilled, _serving(tmp_path, "off3.sh", off))
    budget = "llama-server -m m.gguf --no-jinja --reasoning-budget 512\n"
    ignored = serving_findings(hybrid, _serving(tmp_path, "b.sh", budget))
    assert [f.code for f in ignored] == ["SD450"] and "--no-jinja" in ignored[0].message
    assert not serving_findings(hybrid, _serving(tmp_path, "b2.sh", "llama-server -m m.gguf --reasoning-budget 512\n"))
    assert not serving_findings(hybrid, _serving(tmp_path, "b3.sh", "llama-server -m m.gguf --no-jinja --reasoning-budget -1\n"))
    nothing = serving_findings(chat, _serving(tmp_path, "b4.sh", "llama-server -m m.gguf --reasoning-budget 0\n"))
    assert [(f.code, f.severity.label) for f in nothing] == [("SD450", "info")]


def test_sd451_budget_below_the_card(tmp_path):
    folder = build_reasoning("hybrid", tmp_path / "m")
    (folder / "README.md").write_text("# Model\n\nWe recommend an output length of 32,768 tokens for most queries.\n")
    analysis = inspect_model(str(folder)).analysis
    bad = serving_findings(analysis, _serving(tmp_path, "r.json", '{"model": "m", "max_tokens": 200}'))
    assert [f.code for f in bad] == ["SD451"] and "32,768" in bad[0].message
    assert not serving_findings(analysis, _serving(tmp_path, "ok.json", '{"model": "m", "max_tokens": 32768}'))
    chat = inspect_model(str(build_family("chatml", tmp_path / "c"))).analysis
    assert not serving_findings(chat, _serving(tmp_path, "c.json", '{"model": "m", "max_tokens": 200}'))


def test_sd452_stop_inside_the_thought(tmp_path):
    analysis = inspect_model(str(build_reasoning("prefilled", tmp_path / "m"))).analysis
    bad = serving_findings(analysis, _serving(tmp_path, "r.json", '{"model": "m", "stop": ["\\n\\n", "</think>"]}'))
    # "</think>" is written inside the turn: SD420 reports it, once (#27); SD452 the blank line
    assert sorted((f.code, f.severity.label) for f in bad if f.code in ("SD420", "SD452")) == [("SD420", "error"), ("SD452", "warning")]
    chat = inspect_model(str(build_family("chatml", tmp_path / "c"))).analysis
    assert "SD452" not in {f.code for f in serving_findings(chat, _serving(tmp_path, "c.json", '{"model": "m", "stop": ["\\n\\n"]}'))}


def test_sd453_presence_penalty_and_greedy_against_the_card(tmp_path):
    folder = build_reasoning("hybrid", tmp_path / "m")
    (folder / "README.md").write_text("# Model-AWQ\n\nWe suggest Temperature=0.6, TopP=0.95, TopK=20 and "
                                      "presence_penalty=1.5 for quantized models to suppress repetitive outputs.\n")
    analysis = inspect_model(str(folder)).analysis
    bad = serving_findings(analysis, _serving(tmp_path, "r.json", '{"model": "m", "max_tokens": 32768, "temperature": 0}'))
    assert sorted(f.code for f in bad) == ["SD453", "SD453"]
    assert any("presence_penalty 1.5" in f.message and "README.md:3" in f.message for f in bad)
    assert any("temperature 0" in f.message for f in bad)
    good = '{"model": "m", "max_tokens": 32768, "temperature": 0.6, "presence_penalty": 1.5}'
    assert not serving_findings(analysis, _serving(tmp_path, "ok.json", good))
    assert [f.code for f in serving_findings(analysis, _serving(tmp_path, "Modelfile", "FROM m.gguf\n"))] == ["SD453"]
    assert not serving_findings(analysis, _serving(tmp_path, "l.sh", "llama-server -m m.gguf --presence-penalty 1.5\n"))
    assert not serving_findings(analysis, _serving(tmp_path, "v.sh", "vllm serve m\n"))  # per request on vLLM
    # no card, or a card that does not ask for it: nothing to compare
    plain = inspect_model(str(build_reasoning("hybrid", tmp_path / "n"))).analysis
    assert not serving_findings(plain, _serving(tmp_path, "n.json", '{"model": "m", "max_tokens": 32768}'))
    chat = build_family("chatml", tmp_path / "c")
    (chat / "README.md").write_text("Use presence_penalty=1.5.\n")
    assert not serving_findings(inspect_model(str(chat)).analysis, _serving(tmp_path, "c.json", '{"model": "m"}'))
    # a card that gives a value per mode: a served value it names for some mode follows the card
    modes = build_reasoning("hybrid", tmp_path / "modes")
    (modes / "README.md").write_text("# Model\n\nThinking mode: presence_penalty=1.5, Temperature=0.6.\n\n"
                                     "For coding tasks use presence_penalty=0.0 and temperature=0.\n")
    by_mode = inspect_model(str(modes)).analysis
    assert not serving_findings(by_mode, _serving(tmp_path, "m.json", '{"model": "m", "max_tokens": 32768, "temperature": 0}'))
    # a Modelfile's value is a default a request may override, and the message says so
    served = serving_findings(analysis, _serving(tmp_path, "Modelfile2", "FROM m.gguf\n"))
    assert "a request that sets its own overrides it" in served[0].message


# --- probe-stop inside the thought -----------------------------------------------------------


def _probe(folder, stops):
    from stopdoctor.actions.probe import probe_model
    from stopdoctor.api import load

    return probe_model(load(str(folder)), stops)


def test_probe_stop_fires_inside_the_thought(tmp_path):
    from stopdoctor.reporters.probe_text import render_probe_human, render_probe_json

    report = _probe(build_reasoning("hybrid", tmp_path / "m"), ["\n\n", "</think>", "<|im_end|>"])
    blank, close, eot = report.stops
    assert blank.fires_inside_thought and blank.failed and report.failed
    assert not any(m.at_close for m in blank.inside_thought.matches)
    assert close.fires_inside_thought and all(m.at_close for m in close.inside_thought.matches)
    assert eot.inside_thought is not None and not eot.inside_thought.fires and not eot.fires_inside_thought
    document = json.loads(render_probe_json(report))
    first = document["stops"][0]["inside_thought"]
    assert first["fires"] is True and first["close"] == "</think>" and len(first["firing_samples"]) == 4
    assert document["stops"][2]["inside_thought"]["fires"] is False
    text = render_probe_human(report)
    assert "inside thought  fires in 4 of 4 sample thoughts (<think>…</think>): the reply would end inside" in text
    assert "never stop on </think>" in text


def test_probe_stop_thought_of_a_prefilled_template_starts_inside_it(tmp_path):
    report = _probe(build_reasoning("prefilled", tmp_path / "m"), ["<think>", "Wait,"])
    opened, wait = report.stops
    assert not opened.inside_thought.fires  # the prompt wrote <think>: the model never generates it
    assert wait.fires_inside_thought and wait.failed


def test_probe_stop_harmony_message_token_fires_in_the_analysis_channel(tmp_path):
    report = _probe(build_reasoning("harmony", tmp_path / "m"), ["<|message|>", "<|return|>"])
    assert report.stops[0].fires_inside_thought and not report.stops[1].fires_inside_thought


def test_probe_stop_on_a_chat_model_probes_no_thought(tmp_path):
    from stopdoctor.reporters.probe_text import render_probe_human, render_probe_json

    report = _probe(build_family("chatml", tmp_path / "m"), ["\n\n", "<|im_end|>"])
    assert all(s.inside_thought is None and not s.fires_inside_thought for s in report.stops)
    assert not report.stops[1].failed and report.reasoning is None
    assert all(s["inside_thought"] is None for s in json.loads(render_probe_json(report))["stops"])
    assert "inside thought" not in render_probe_human(report)


def test_probe_stop_cli_fail_on_miss_inside_the_thought(tmp_path):
    from typer.testing import CliRunner

    from stopdoctor.cli.app import app

    folder = build_reasoning("hybrid", tmp_path / "m")
    runner = CliRunner()
    # </think> is one special token: an id match never misses it and no answer holds it; it fails
    # only because it ends every thought
    bad = runner.invoke(app, ["probe-stop", "</think>", "--model", str(folder), "--fail-on-miss"])
    assert bad.exit_code == 1, bad.output
    ok = runner.invoke(app, ["probe-stop", "<|im_end|>", "--model", str(folder), "--fail-on-miss"])
    assert ok.exit_code == 0, ok.output


def test_sd450_reads_sglang_reasoning_parser(tmp_path):
    harmony = inspect_model(str(build_reasoning("harmony", tmp_path / "h"))).analysis
    line = "python -m sglang.launch_server --model-path m --reasoning-parser deepseek-r1\n"
    bad = serving_findings(harmony, _serving(tmp_path, "s.sh", line))
    assert [(f.code, f.severity.label) for f in bad] == [("SD450", "error")]
    ok = "python -m sglang.launch_server --model-path m --reasoning-parser gpt-oss\n"
    assert not serving_findings(harmony, _serving(tmp_path, "ok.sh", ok))
