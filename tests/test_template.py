"""stopdoctor.template (render, environment, limits) and stopdoctor.template.turns: byte-identical to transformers' chat template rendering, sandboxed, limited.

The oracle is transformers' own `render_jinja_template` (what `apply_chat_template(tokenize=False)`
calls after normalising messages), imported only here in the tests.
"""

from __future__ import annotations

import subprocess
import sys
import time
import tracemalloc

import jinja2.exceptions
import pytest

from stopdoctor.core.errors import StopdoctorError, TemplateError
from stopdoctor.template.limits import RenderLimits
from stopdoctor.template.render import compile_template, render_chat
from stopdoctor.template.turns import EndOfTurnMarker, analyze_turns, find_end_of_turn, find_turn_headers, template_writes_bos

# ---------------------------------------------------------------------------------------------
# Templates, written after the published ones of each family
# ---------------------------------------------------------------------------------------------

CHATML = (
    "{% for message in messages %}"
    "{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM<|im_end|>\n' }}{% endif %}"
    "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

LLAMA3 = (
    "{% set loop_messages = messages %}{% for message in loop_messages %}"
    "{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'"
    "+ message['content'] | trim + '<|eot_id|>' %}"
    "{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}"
    "{{ content }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}"
)

LLAMA2 = (
    "{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}"
    "{% set system_message = messages[0]['content'] %}"
    "{% else %}{% set loop_messages = messages %}{% set system_message = false %}{% endif %}"
    "{% for message in loop_messages %}"
    "{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}"
    "{% endif %}"
    "{% if loop.index0 == 0 and system_message != false %}"
    "{% set content = '<<SYS>>\\n' + system_message + '\\n<</SYS>>\\n\\n' + message['content'] %}"
    "{% else %}{% set content = message['content'] %}{% endif %}"
    "{% if message['role'] == 'user' %}{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}"
    "{% elif message['role'] == 'assistant' %}{{ ' '  + content.strip() + ' ' + eos_token }}{% endif %}"
    "{% endfor %}"
)

GEMMA = (
    "{{ bos_token }}{% if messages[0]['role'] == 'system' %}"
    "{{ raise_exception('System role not supported') }}{% endif %}"
    "{% for message in messages %}"
    "{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}"
    "{% endif %}"
    "{% if (message['role'] == 'assistant') %}{% set role = 'model' %}"
    "{% else %}{% set role = message['role'] %}{% endif %}"
    "{{ '<start_of_turn>' + role + '\n' + message['content'] | trim + '<end_of_turn>\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{'<start_of_turn>model\n'}}{% endif %}"
)

PHI3 = (
    "{% for message in messages %}"
    "{% if message['role'] == 'system' %}{{'<|system|>\n' + message['content'] + '<|end|>\n'}}"
    "{% elif message['role'] == 'user' %}{{'<|user|>\n' + message['content'] + '<|end|>\n'}}"
    "{% elif message['role'] == 'assistant' %}{{'<|assistant|>\n' + message['content'] + '<|end|>\n'}}"
    "{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>\n' }}{% else %}{{ eos_token }}{% endif %}"
)

# Multi-line, as published: trim_blocks drops the newline after each tag, the `}}\n` ones stay.
ZEPHYR = """{% for message in messages %}
{% if message['role'] == 'user' %}
{{ '<|user|>\n' + message['content'] + eos_token }}
{% elif message['role'] == 'system' %}
{{ '<|system|>\n' + message['content'] + eos_token }}
{% elif message['role'] == 'assistant' %}
{{ '<|assistant|>\n'  + message['content'] + eos_token }}
{% endif %}
{% if loop.last and add_generation_prompt %}
{{ '<|assistant|>' }}
{% endif %}
{% endfor %}"""

MISTRAL = (
    "{{ bos_token }}{% for message in messages %}"
    "{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}"
    "{% endif %}"
    "{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}"
    "{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token}}"
    "{% else %}{{ raise_exception('Only user and assistant roles are supported!') }}{% endif %}"
    "{% endfor %}"
)

# Tools and tool calls through tojson (indent, non-ASCII, no HTML escaping), whitespace control.
TOOLS = """{%- if tools %}
    {{- '<|im_start|>system\\n' }}
    {%- if messages[0].role == 'system' %}{{- messages[0].content + '\\n\\n' }}{%- endif %}
    {{- "# Tools\\n<tools>" }}
    {%- for tool in tools %}
        {{- "\\n" }}{{- tool | tojson }}
    {%- endfor %}
    {{- "\\n</tools><|im_end|>\\n" }}
{%- elif messages[0].role == 'system' %}
    {{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}
{%- endif %}
{%- for message in messages %}
    {%- if message.role == "user" or (message.role == "system" and not loop.first) %}
        {{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}
    {%- elif message.role == "assistant" %}
        {{- '<|im_start|>' + message.role }}
        {%- if message.content %}{{- '\\n' + message.content }}{%- endif %}
        {%- for tool_call in message.tool_calls | default([]) %}
            {{- '\\n<tool_call>\\n' }}{{- tool_call.function | tojson(indent=2, sort_keys=true) }}
            {{- '\\n</tool_call>' }}
        {%- endfor %}
        {{- '<|im_end|>\\n' }}
    {%- elif message.role == "tool" %}
        {{- '<|im_start|>user\\n<tool_response>\\n' + message.content | tojson(ensure_ascii=true) }}
        {{- '\\n</tool_response><|im_end|>\\n' }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}
"""

GENERATION = (
    "{% for message in messages %}"
    "{% if message['role'] == 'assistant' %}{{ '<|im_start|>assistant\n' }}"
    "{% generation %}{{ message['content'] + '<|im_end|>' }}{% endgeneration %}{{ '\n' }}"
    "{% else %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>\n' }}"
    "{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

# loop.last, namespace, loopcontrols, dict(), strip/split, reasoning_content.
NAMESPACE = """{%- set ns = namespace(last_user=-1, sys='') -%}
{%- for m in messages -%}
  {%- if m.role == 'user' %}{% set ns.last_user = loop.index0 %}{% endif -%}
  {%- if m.role == 'system' %}{% set ns.sys = m.content %}{% continue %}{% endif -%}
{%- endfor -%}
{%- set meta = dict(who='me', n=messages|length) -%}
{{ bos_token }}{% if ns.sys %}<sys>{{ ns.sys }}</sys>
{% endif %}
{%- for m in messages if m.role != 'system' -%}
  {%- if loop.index0 > 40 %}{% break %}{% endif -%}
  <{{ m.role }}{% if loop.last %} last="1"{% endif %}>
  {%- if m.role == 'assistant' and m.reasoning_content is defined and loop.index0 > ns.last_user -%}
    <think>{{ m.reasoning_content.strip() }}</think>
  {%- endif -%}
  {{ m.content.split('</think>')[-1].lstrip() }}</{{ m.role }}>{{ eos_token if m.role == 'assistant' }}
{% endfor -%}
{%- if add_generation_prompt %}<assistant>{% endif %}{{ meta.n }}"""

WHITESPACE_CLOSES = "{% for m in messages %}{{ m['role'] | upper }}: {{ m['content'] }}\n\n{% endfor %}"
NEVER_CLOSES = "{% for m in messages %}{{ m['content'] }}{% endfor %}"

TEMPLATES = {
    "chatml": (CHATML, {"eos_token": "<|im_end|>"}),
    "llama3": (LLAMA3, {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"}),
    "llama2": (LLAMA2, {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}),
    "gemma": (GEMMA, {"bos_token": "<bos>", "eos_token": "<eos>", "pad_token": "<pad>"}),
    "phi3": (PHI3, {"bos_token": "<s>", "eos_token": "<|endoftext|>"}),
    "zephyr": (ZEPHYR, {"bos_token": "<s>", "eos_token": "</s>"}),
    "mistral": (MISTRAL, {"bos_token": "<s>", "eos_token": "</s>"}),
    "tools": (TOOLS, {"eos_token": "<|im_end|>"}),
    "generation": (GENERATION, {"eos_token": "<|im_end|>"}),
    "namespace": (NAMESPACE, {"bos_token": "<s>", "eos_token": "</s>"}),
}

SYSTEM = {"role": "system", "content": "You are terse. <b>Bold</b> & \"quoted\"."}
USER1 = {"role": "user", "content": "  Héllo, wörld 🚀\n"}
ASSISTANT1 = {"role": "assistant", "content": "Hi! <think>x</think> Ça va?", "tool_calls": None}
USER2 = {"role": "user", "content": "Second question\twith a tab"}
ASSISTANT2 = {"role": "assistant", "content": "Answer two.", "reasoning_content": "  because  "}

CONVERSATIONS = {
    "user": [USER1],
    "system-user": [SYSTEM, USER1],
    "user-assistant": [USER1, ASSISTANT1],
    "system-two-rounds": [SYSTEM, USER1, ASSISTANT1, USER2],
    "two-rounds-closed": [USER1, ASSISTANT1, USER2, ASSISTANT2],
    "not-alternating": [USER1, USER2],
}

TOOL_SCHEMAS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Weather in a city <now> & later, °C",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    }
]
TOOL_CHAT = [
    SYSTEM,
    USER1,
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Zürich"}}}],
    },
    {"role": "tool", "content": "{\"temp\": \"12°C\"}"},
]


def oracle(source, messages, *, add_generation_prompt=False, continue_final_message=False,
           tools=None, special_tokens=None):
    """What `tokenizer.apply_chat_template(messages, tokenize=False, ...)` returns."""
    from transformers.utils.chat_template_utils import _normalize_chat_messages, render_jinja_template

    rendered, _ = render_jinja_template(
        conversations=[_normalize_chat_messages(messages)],
        tools=tools,
        chat_template=source,
        add_generation_prompt=add_generation_prompt,
        continue_final_message=continue_final_message,
        **(special_tokens or {}),
    )
    return rendered[0]


MODES = [
    {"add_generation_prompt": False},
    {"add_generation_prompt": True},
    {"continue_final_message": True},
]


@pytest.mark.parametrize("mode", MODES, ids=["plain", "generation-prompt", "continue-final"])
@pytest.mark.parametrize("conversation", sorted(CONVERSATIONS))
@pytest.mark.parametrize("family", sorted(TEMPLATES))
def test_render_is_byte_identical_to_transformers(family, conversation, mode):
    source, special = TEMPLATES[family]
    messages = CONVERSATIONS[conversation]
    try:
        expected = oracle(source, messages, special_tokens=special, **mode)
    except Exception as exc:  # transformers refuses: so must we, with a known error
        with pytest.raises(StopdoctorError):
            render_chat(source, messages, special_tokens=special, **mode)
        assert not isinstance(exc, (RecursionError, MemoryError))
        return
    assert render_chat(source, messages, special_tokens=special, **mode) == expected


@pytest.mark.parametrize("mode", MODES[:2], ids=["plain", "generation-prompt"])
def test_tools_render_is_byte_identical_to_transformers(mode):
    expected = oracle(TOOLS, TOOL_CHAT, tools=TOOL_SCHEMAS, **mode)
    got = render_chat(TOOLS, TOOL_CHAT, tools=TOOL_SCHEMAS, **mode)
    assert got == expected
    # Non-ASCII kept and HTML not escaped by tojson; ensure_ascii=true honoured when asked.
    assert "Zürich" in got and "<now> & later" in got and "12\\u00b0C" in got


def test_family_renders_look_as_published():
    # A few fixed renders, so the oracle comparison is not vacuous (both sides empty, say).
    assert render_chat(LLAMA2, [SYSTEM, USER1, ASSISTANT1], special_tokens=TEMPLATES["llama2"][1]) == (
        "<s>[INST] <<SYS>>\nYou are terse. <b>Bold</b> & \"quoted\".\n<</SYS>>\n\n  Héllo, wörld 🚀 [/INST]"
        " Hi! <think>x</think> Ça va? </s>"
    )
    assert render_chat(ZEPHYR, [USER1], add_generation_prompt=True, special_tokens={"eos_token": "</s>"}) == (
        "<|user|>\n  Héllo, wörld 🚀\n</s>\n<|assistant|>\n"
    )
    assert render_chat(CHATML, [USER1, ASSISTANT1], continue_final_message=True).endswith(
        "<|im_start|>assistant\nHi! <think>x</think> Ça va?"
    )


def test_special_tokens_and_extra_variables_reach_the_template():
    source = "{{ bos_token }}|{{ eos_token }}|{{ pad_token }}|{{ unk_token }}|{{ custom }}"
    got = render_chat(source, [USER1], special_tokens={"bos_token": "<s>", "eos_token": "</s>",
                                                       "pad_token": "<pad>", "unk_token": "<unk>"},
                      extra={"custom": "x", "eos_token": "<override>"})
    assert got == "<s>|<override>|<pad>|<unk>|x"


def test_strftime_now_and_undefined_render_like_transformers():
    source = "{{ strftime_now('%Y') }}|{{ missing }}|{{ messages[0].nope }}"
    assert render_chat(source, [USER1]) == oracle(source, [USER1])


def test_compile_is_cached_by_source():
    assert compile_template(CHATML) is compile_template(CHATML)


def test_continue_final_message_refused_when_template_drops_the_content():
    source = "{% for m in messages %}{{ m.role }}{% endfor %}content"
    with pytest.raises(ValueError):
        oracle(source, [USER1, ASSISTANT1], continue_final_message=True)
    with pytest.raises(TemplateError, match="does not appear"):
        render_chat(source, [USER1, ASSISTANT1], continue_final_message=True)


# ---------------------------------------------------------------------------------------------
# End of turn and turn headers, learned from the template
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("family", "marker", "trailing"),
    [
        ("chatml", "<|im_end|>", "\n"),
        ("llama3", "<|eot_id|>", ""),
        ("llama2", "</s>", ""),
        ("gemma", "<end_of_turn>", "\n"),
        ("phi3", "<|end|>", "\n"),
        ("zephyr", "</s>", "\n"),
        ("mistral", "</s>", ""),
        ("tools", "<|im_end|>", "\n"),
        ("generation", "<|im_end|>", "\n"),
        ("namespace", "</s>", "\n"),
    ],
)
def test_end_of_turn_is_read_from_the_template(family, marker, trailing):
    source, special = TEMPLATES[family]
    markers = find_end_of_turn(source, special)
    assert markers, "the template closes assistant turns"
    assert (markers[0].text, markers[0].trailing) == (marker, trailing)
    assert marker in markers[0].evidence


def test_template_that_never_closes_the_assistant_turn_has_no_marker():
    assert find_end_of_turn(NEVER_CLOSES, {"eos_token": "</s>"}) == []
    assert analyze_turns(NEVER_CLOSES, {"eos_token": "</s>"}).style == "none"


def test_whitespace_close_ends_at_the_next_plain_text_header():
    # "USER: ...\n\nASSISTANT: ...\n\n": the turn is closed by whitespace and ends where the next
    # header begins; the stop is that header's text, never a whitespace token.
    turns = analyze_turns(WHITESPACE_CLOSES, {"eos_token": "</s>"})
    assert turns.style == "whitespace"
    assert [(m.text, m.kind) for m in turns.end_of_turn] == [("USER:", "text")]


def test_known_special_tokens_split_the_end_of_turn_text():
    source = (
        "{% for m in messages %}<|{{ m.role }}|>{{ m.content }}"
        "{% if m.role == 'assistant' %}<|end|><|endoftext|>\n{% else %}<|end|>{% endif %}{% endfor %}"
    )
    unknown = find_end_of_turn(source)
    assert [m.text for m in unknown] == ["<|end|><|endoftext|>"]
    # the turn ends with the close's last token; a runtime stopping on the earlier one ends it too
    turns = analyze_turns(source, known_special_texts=["<|end|>", "<|endoftext|>", "<|user|>"])
    assert list(turns.end_of_turn) == [EndOfTurnMarker("<|endoftext|>", "\n", turns.end_of_turn[0].evidence)]
    assert [m.text for m in turns.also_ends] == ["<|end|>"]


def test_eos_token_variable_is_only_known_through_special_tokens():
    # Without the tokenizer's eos text, `content + eos_token` fails, as it does in transformers.
    with pytest.raises(TemplateError, match="eos_token"):
        find_end_of_turn(MISTRAL)
    assert [m.text for m in find_end_of_turn(MISTRAL, {"eos_token": "<|custom_eos|>"})] == ["<|custom_eos|>"]


def test_end_of_turn_surfaces_the_template_error_when_nothing_renders():
    source = "{{ raise_exception('no chats here') }}"
    with pytest.raises(TemplateError, match="chat template raised: no chats here"):
        find_end_of_turn(source)


@pytest.mark.parametrize(
    ("family", "user", "assistant"),
    [
        ("chatml", "<|im_start|>user\n", "<|im_start|>assistant\n"),
        ("llama3", "<|start_header_id|>user<|end_header_id|>\n\n", "<|start_header_id|>assistant<|end_header_id|>\n\n"),
        ("llama2", "<s>[INST] ", " "),
        ("gemma", "<start_of_turn>user\n", "<start_of_turn>model\n"),
        ("phi3", "<|user|>\n", "<|assistant|>\n"),
        ("zephyr", "<|user|>\n", "<|assistant|>\n"),
    ],
)
def test_turn_headers_are_read_from_the_template(family, user, assistant):
    source, special = TEMPLATES[family]
    headers = find_turn_headers(source, special)
    assert headers["user"] == user
    assert headers["assistant"] == assistant


def test_system_header_left_out_when_template_rejects_system():
    assert "system" not in find_turn_headers(GEMMA, TEMPLATES["gemma"][1])
    assert find_turn_headers(CHATML)["system"] == "<|im_start|>system\n"


@pytest.mark.parametrize(
    ("family", "writes"),
    [("llama3", True), ("llama2", True), ("gemma", True), ("mistral", True), ("chatml", False), ("phi3", False)],
)
def test_template_writes_bos(family, writes):
    source, special = TEMPLATES[family]
    assert template_writes_bos(source, special.get("bos_token", "<s>"), special) is writes


def test_a_turn_header_that_begins_with_the_bos_text_is_not_a_bos():
    # SmolLM2 declares bos <|im_start|>: its ChatML prompt starts with it, as a header, not a bos
    source, special = TEMPLATES["chatml"]
    assert template_writes_bos(source, "<|im_start|>", special) is False


# ---------------------------------------------------------------------------------------------
# Errors and hostile templates
# ---------------------------------------------------------------------------------------------


def test_raise_exception_message_is_verbatim_with_template_line():
    source = "{% for m in messages %}\n{% if m.role == 'user' %}\n{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}\n{% endif %}{% endfor %}"
    with pytest.raises(TemplateError) as info:
        render_chat(source, [USER1])
    assert info.value.message == (
        "chat template raised: Conversation roles must alternate user/assistant/user/assistant/... "
        "(template line 3)"
    )
    assert info.value.line == 3
    inner = info.value.__cause__
    assert isinstance(inner, jinja2.exceptions.TemplateError)
    assert inner.args == ("Conversation roles must alternate user/assistant/user/assistant/...",)


def test_syntax_error_names_its_line():
    with pytest.raises(TemplateError) as info:
        compile_template("fine\n{{ ok }}\n{% if %}")
    assert info.value.line == 3
    assert info.value.message.startswith("chat template syntax error:")
    assert "\n" not in info.value.message


@pytest.mark.parametrize("source", [None, ["a", "b"], 3])
def test_non_string_template_is_refused(source):
    with pytest.raises(TemplateError, match="must be a string"):
        compile_template(source)


def test_oversized_template_is_refused_before_parsing():
    with pytest.raises(TemplateError, match="over the 100 limit"):
        compile_template("x" * 101, RenderLimits(max_template_chars=100))
    with pytest.raises(TemplateError, match="Jinja tags"):
        compile_template("{{ a }}" * 3000)


HOSTILE = {
    "huge-range": "{% for i in range(10**9) %}x{% endfor %}",
    "string-times": "{{ 'a' * 10**9 }}",
    "list-times": "{{ ([1] * 10**9) | length }}",
    "big-power": "{{ 2 ** 100000000 }}",
    "percent-width": "{{ '%0999999999d' % 1 }}",
    "format-width": "{{ '{:>999999999}'.format(1) }}",
    "method-width": "{{ 'x'.ljust(10**9) }}",
    "filter-width": "{{ 'x' | center(1000000000) }}",
    "tojson-indent": "{{ messages | tojson(indent=1000000000) }}",
    "replace-blowup": "{% set s = 'a' * 1000000 %}{{ s.replace('a', s) }}",
    "concat-doubling": "{% set ns = namespace(s='ab') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
    "plus-doubling": "{% set ns = namespace(l=[1]) %}{% for i in range(64) %}{% set ns.l = ns.l + ns.l %}{% endfor %}",
    "macro-doubling": "{% macro d(s) %}{{ s }}{{ s }}{% endmacro %}{% set ns = namespace(s='ab') %}"
    "{% for i in range(64) %}{% set ns.s = d(ns.s) %}{% endfor %}",
    "block-set-loop": "{% set x %}{% for i in range(100000) %}{{ 'y' * 1000 }}{% endfor %}{% endset %}",
    "huge-output": "{% for i in range(100000) %}{{ 'z' * 1000 }}{% endfor %}",
    "hoarding": "{% set ns = namespace(d={}) %}{% for i in range(100000) %}"
    "{% set ns.d = dict(ns.d, **{i|string: ('y' * 1000000) ~ i}) %}{% endfor %}",
    "recursion": "{% macro m(n) %}{{ m(n + 1) }}{% endmacro %}{{ m(0) }}",
    "class-mro": "{{ ''.__class__.__mro__[1].__subclasses__() }}",
    "globals": "{{ raise_exception.__globals__['os'] }}",
    "cycler-globals": "{{ cycler.__init__.__globals__.os }}",
    "namespace-dunder": "{% set ns = namespace(_hidden=1) %}",
    # str() of a list of namespaces is sized before it is built (limits.py reaches jinja2's
    # Namespace through sys.modules, so that commands that never render do not import jinja2)
    "namespace-repr": "{% set ns = namespace(s='x' * 1000000) %}{{ ([ns] * 1000) | string }}",
    "mutate-messages": "{{ messages.append(messages) }}",
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_template_is_refused_fast_and_small(name):
    tracemalloc.start()
    start = time.process_time()  # work, not a busy machine's seconds
    try:
        with pytest.raises(TemplateError) as info:
            render_chat(HOSTILE[name], [USER1])
        elapsed = time.process_time() - start
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert elapsed < 5.0
    assert peak < 150 * 1024 * 1024, f"peak {peak / 1e6:.0f} MB"
    assert "\n" not in info.value.message and info.value.hint


@pytest.mark.parametrize(
    "source",
    [
        "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
        "{% set r = range(100000) %}{% for a in r %}{% for b in r %}{{ '' }}{% endfor %}{% endfor %}",
        "{% for i in range(100000) %}{% for j in range(100000) %}{% if i == j %}{% endif %}{% endfor %}{% endfor %}",
    ],
)
def test_endless_loops_stop_at_the_time_limit(source):
    start = time.process_time()  # the render's own CPU time is the limit: measure work, not seconds
    with pytest.raises(TemplateError, match="ran longer than 0.5 s"):
        render_chat(source, [USER1], limits=RenderLimits(max_seconds=0.5))
    assert time.process_time() - start < 2.0


def test_output_limit_is_exact():
    source = "{{ 'x' * 100 }}"
    assert render_chat(source, [USER1], limits=RenderLimits(max_output_chars=100)) == "x" * 100
    with pytest.raises(TemplateError, match=r"\b99\b"):
        render_chat(source, [USER1], limits=RenderLimits(max_output_chars=99))


def test_hostile_template_in_end_of_turn_detection_is_refused():
    source = "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}"
    start = time.process_time()
    with pytest.raises(TemplateError, match="ran longer than 0.5 s"):
        find_end_of_turn(source, limits=RenderLimits(max_seconds=0.5))
    assert time.process_time() - start < 2.0  # stops at the first conversation, not one per shape
    with pytest.raises(TemplateError, match="ran longer"):
        find_turn_headers(source, limits=RenderLimits(max_seconds=0.2))


def test_importing_the_renderer_does_not_import_transformers_or_torch():
    code = "import sys, stopdoctor.template.render, stopdoctor.template.turns; print('transformers' in sys.modules, 'torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False False"


def test_headers_keep_literal_text_that_equals_the_bos_token():
    # SmolLM2's GGUF/tokenizer sets bos_token to "<|im_start|>", which ChatML also writes literally.
    special = {"bos_token": "<|im_start|>", "eos_token": "<|im_end|>"}
    headers = find_turn_headers(CHATML, special)
    assert headers["system"] == "<|im_start|>system\n"
    assert headers["user"] == "<|im_start|>user\n"
    # ...while a template that writes the bos_token variable has it removed from the header.
    assert find_turn_headers(LLAMA3, TEMPLATES["llama3"][1])["system"] == "<|start_header_id|>system<|end_header_id|>\n\n"


def test_continue_final_message_on_a_named_field_matches_transformers():
    chat = [USER1, {"role": "assistant", "content": "Answer.", "reasoning_content": "  because  "}]
    special = TEMPLATES["namespace"][1]
    expected = oracle(NAMESPACE, chat, continue_final_message="reasoning_content", special_tokens=special)
    got = render_chat(NAMESPACE, chat, continue_final_message="reasoning_content", special_tokens=special)
    assert got == expected
    assert got.endswith("<think>because")
