"""`stopdoctor render`: byte-identical to transformers' apply_chat_template (the oracle), readable
output, template comparison, failing and hostile templates, and no heavy imports."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from stopdoctor.api import load
from stopdoctor.cli.app import app
from stopdoctor.core.errors import TemplateError
from stopdoctor.actions.render import render_prompt

from .helpers import CpuClock

ROOT = Path(__file__).resolve().parents[1]
CHATML_OK = ROOT / "fixtures" / "examples" / "chatml-ok"

CONVERSATIONS = [
    [{"role": "user", "content": "What is the capital of France?"}],
    [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello! 🎉"},
        {"role": "user", "content": "Bye\n\n  "},
    ],
    [
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello"},
    ],
]
# Cases with a chat template and a tokenizer.json: everything transformers can render.
SYNTH_RENDERABLE = [
    "clean-llama2", "clean-llama3", "clean-chatml", "clean-gemma", "clean-mistral", "clean-phi3", "clean-zephyr",
    "llama3-eot-missing", "chatml-on-llama3-vocab", "never-closes-turn", "double-bos", "template-separate-file",
    "named-templates", "qwen-base-with-template",
]


def run(*args: str):
    return CliRunner().invoke(app, ["render", *args])


def oracle(folder: Path, messages, **kwargs):
    """transformers' own text and ids, or the exception it raises."""
    transformers = pytest.importorskip("transformers")
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(folder), **kwargs.pop("load", {}))
    try:
        text = tokenizer.apply_chat_template(messages, tokenize=False, **kwargs)
        ids = tokenizer.apply_chat_template(messages, tokenize=True, return_dict=False, **kwargs)
    except Exception as error:  # noqa: BLE001 - the oracle's refusal is what we compare against
        return error
    return text, list(ids)


def assert_same_as_transformers(folder: Path, facts, messages, **kwargs) -> None:
    expected = oracle(folder, messages, **dict(kwargs))
    kwargs.pop("load", None)
    if isinstance(expected, Exception):
        with pytest.raises(TemplateError):
            render_prompt(facts, messages, **kwargs)
        return
    rendered = render_prompt(facts, messages, **kwargs)
    assert rendered.text == expected[0]
    assert rendered.ids == expected[1]


@pytest.mark.parametrize("case", SYNTH_RENDERABLE)
def test_synthetic_fixtures_match_transformers(synth_root: Path, case: str) -> None:
    facts = load(str(synth_root / case))
    for messages in CONVERSATIONS:
        for prompt in (True, False):
            assert_same_as_transformers(synth_root / case, facts, messages, add_generation_prompt=prompt)


def test_continue_final_message_matches_transformers(synth_root: Path) -> None:
    folder = synth_root / "clean-llama3"
    messages = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "The answer is"}]
    assert_same_as_transformers(folder, load(str(folder)), messages, continue_final_message=True,
                                add_generation_prompt=False)


def test_tools_pick_the_tool_use_template_as_transformers_does(synth_root: Path, tmp_path: Path) -> None:
    folder = synth_root / "named-templates"
    tools = [{"type": "function", "function": {"name": "get_weather", "description": "Weather in a city",
                                               "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]
    expected = oracle(folder, CONVERSATIONS[0], tools=tools, add_generation_prompt=True)
    tools_file = tmp_path / "tools.json"
    tools_file.write_text(json.dumps(tools))
    result = run(str(folder), "--tools", str(tools_file), "-m", "user", CONVERSATIONS[0][0]["content"], "--json")
    assert result.exit_code == 0, result.stderr
    document = json.loads(result.stdout)
    assert document["template"]["name"] == "tool_use"
    assert (document["text"], document["ids"]) == expected
    assert "get_weather" in document["text"]


@pytest.mark.slow
def test_real_smollm2_folder_matches_transformers(real_models) -> None:
    facts = load(str(real_models.smollm2_hf))
    for messages in CONVERSATIONS:
        for prompt in (True, False):
            assert_same_as_transformers(real_models.smollm2_hf, facts, messages, add_generation_prompt=prompt)


@pytest.mark.slow
@pytest.mark.needs_torch
def test_real_smollm2_gguf_matches_transformers(real_models) -> None:
    gguf = Path(real_models.smollm2_gguf)
    facts = load(str(gguf))
    for messages in CONVERSATIONS[:2]:
        assert_same_as_transformers(gguf.parent, facts, messages, add_generation_prompt=True,
                                    load={"gguf_file": gguf.name})


@pytest.mark.slow
@pytest.mark.needs_torch
def test_real_gemma_gguf_ids_match_transformers_with_a_template_file(real_models, synth_root: Path) -> None:
    # The Gemma 3 base GGUF ships no chat template (neither runtime can render it); render it with the
    # synthetic Gemma template given explicitly, as --template FILE does, to check the ids.
    from stopdoctor.actions.render import select_template

    gguf = Path(real_models.gemma_gguf)
    facts = load(str(gguf))
    source = json.loads((synth_root / "clean-gemma" / "tokenizer_config.json").read_text())["chat_template"]
    template_file = synth_root.parent / "gemma-template.jinja"
    template_file.write_text(source)
    chosen = select_template(facts, str(template_file))
    expected = oracle(gguf.parent, CONVERSATIONS[1], chat_template=source, add_generation_prompt=True,
                      load={"gguf_file": gguf.name})
    rendered = render_prompt(facts, CONVERSATIONS[1], template=chosen, add_generation_prompt=True)
    assert (rendered.text, rendered.ids) == expected


def test_double_bos_is_reported_and_ids_hold_one_bos(synth_root: Path) -> None:
    folder = synth_root / "double-bos"
    result = run(str(folder), "-m", "user", "Hi", "--json")
    assert result.exit_code == 0, result.stderr
    document = json.loads(result.stdout)
    assert (document["text"], document["ids"]) == oracle(folder, [{"role": "user", "content": "Hi"}],
                                                         add_generation_prompt=True)
    bos_id = load(str(folder)).vocab.id_of(document["bos"]["token"])
    assert document["ids"][0] == bos_id and document["ids"][1] != bos_id  # apply_chat_template: one BOS
    assert document["bos"]["double_bos_if_reencoded"] is True
    clean = json.loads(run(str(synth_root / "clean-llama3"), "-m", "user", "Hi", "--json").stdout)
    assert clean["bos"]["double_bos_if_reencoded"] is False


# --- output ----------------------------------------------------------------------------------


def test_plain_output_shows_newlines_and_special_tokens() -> None:
    result = run(str(CHATML_OK), "-m", "user", "What is the capital of France?")
    assert result.exit_code == 0, result.stderr
    out = result.stdout
    assert "\x1b[" not in out  # not a terminal: no colour
    assert "legend" in out
    lines = out.splitlines()
    # the trailing newline after the generation prompt is visible on its own line
    assert "<|im_start|>assistant\\n" in lines
    assert "What is the capital of France?<|im_end|>\\n" in lines
    assert "5 special" in out
    assert result.stderr == ""  # messages were given: nothing to say


def test_colour_highlights_special_tokens() -> None:
    result = run(str(CHATML_OK), "-m", "user", "Hi", "--color")
    assert result.exit_code == 0
    assert "\x1b[1;35m<|im_end|>" in result.stdout  # bold magenta


def test_trailing_spaces_are_visible_and_ids_table() -> None:
    result = run(str(CHATML_OK), "-m", "user", "Hi  ", "--ids", "--no-generation-prompt")
    assert result.exit_code == 0
    assert "Hi␣␣<|im_end|>\\n" in result.stdout.splitlines()
    table = [line.split() for line in result.stdout.splitlines() if line.strip().endswith("special")]
    assert table[0] == ["index", "id", "token", "special"]
    assert table[1][:3] == ["0", str(load(str(CHATML_OK)).vocab.id_of("<|im_start|>")), '"<|im_start|>"']
    assert not result.stdout.rstrip().endswith("assistant\\n")


def test_json_spans_cover_every_special_token() -> None:
    result = run(str(CHATML_OK), "-m", "user", "Hi", "--json")
    document = json.loads(result.stdout)
    text = document["text"]
    spans = [(s["start"], s["end"]) for s in document["special_spans"]]
    assert [text[a:b] for a, b in spans] == ["<|im_start|>", "<|im_end|>", "<|im_start|>", "<|im_end|>", "<|im_start|>"]
    assert len(document["ids"]) == len(document["tokens"])
    assert text.endswith("<|im_start|>assistant\n")


def test_no_messages_renders_a_sample_and_says_so() -> None:
    result = run(str(CHATML_OK), "--json")
    assert result.exit_code == 0
    assert "sample conversation" in result.stderr
    assert [m["role"] for m in json.loads(result.stdout)["messages"]] == ["system", "user"]


def test_jsonl_conversations_and_message_file(tmp_path: Path) -> None:
    jsonl = tmp_path / "chats.jsonl"
    jsonl.write_text("\n".join(json.dumps(c) for c in CONVERSATIONS[:2]) + "\n")
    document = json.loads(run(str(CHATML_OK), "--messages", str(jsonl), "--json").stdout)
    assert len(document["conversations"]) == 2
    assert "Bye\n\n  " in document["conversations"][1]["text"]
    single = tmp_path / "chat.json"
    single.write_text(json.dumps(CONVERSATIONS[0]))
    one = json.loads(run(str(CHATML_OK), "--messages", str(single), "--json").stdout)
    assert one["text"] == render_prompt(load(str(CHATML_OK)), CONVERSATIONS[0]).text


def test_message_shorthand_needs_role_and_text() -> None:
    result = run(str(CHATML_OK), "-m", "user")
    assert result.exit_code == 2
    assert "needs a role and a text" in result.stderr


# --- compare ---------------------------------------------------------------------------------


def test_compare_shows_diff_and_end_of_turn_difference(synth_root: Path) -> None:
    result = run(str(synth_root / "clean-chatml"), "-m", "user", "Hi", "--no-generation-prompt",
                 "-m", "assistant", "Hello", "--compare", str(synth_root / "never-closes-turn"))
    assert result.exit_code == 0, result.stderr
    assert "texts differ" in result.stdout
    assert any(line.startswith("-Hello<|im_end|>\\n") for line in result.stdout.splitlines())
    assert "end of turn  differ" in result.stdout
    document = json.loads(run(str(synth_root / "clean-chatml"), "-m", "user", "Hi", "--compare",
                              str(synth_root / "never-closes-turn"), "--json").stdout)
    assert document["compare"]["end_of_turn"]["model"] == ["<|im_end|>\n"]
    assert document["compare"]["end_of_turn"]["compare"] == []
    assert document["compare"]["end_of_turn"]["differs"] is True


def test_compare_with_a_template_file_that_matches(tmp_path: Path) -> None:
    source = json.loads((CHATML_OK / "tokenizer_config.json").read_text())["chat_template"]
    (tmp_path / "same.jinja").write_text(source)
    document = json.loads(run(str(CHATML_OK), "--compare", str(tmp_path / "same.jinja"), "--json", "-m", "user", "Hi").stdout)
    assert document["compare"]["identical"] is True and document["compare"]["ids_identical"] is True
    assert document["compare"]["diff"] == []
    assert document["compare"]["end_of_turn"]["differs"] is False


# --- failing and hostile templates ---------------------------------------------------------------


def test_template_that_rejects_roles_exits_2_with_its_message_and_line(synth_root: Path) -> None:
    result = run(str(synth_root / "clean-mistral"), "-m", "user", "a", "-m", "user", "b")
    assert result.exit_code == 2
    first = result.stderr.splitlines()[0]
    assert first.startswith("stopdoctor: error: chat template raised:")
    assert "alternate" in first  # the template's own message
    assert "template line" in first and "raise_exception" in first  # the line number and the line itself


def test_unknown_template_name_lists_the_names(synth_root: Path) -> None:
    result = run(str(synth_root / "named-templates"), "--template", "nope")
    assert result.exit_code == 2
    assert "default" in result.stderr and "tool_use" in result.stderr


HOSTILE = {
    "python-internals": "{{ ''.__class__.__mro__[1].__subclasses__() }}",
    "huge-loop": "{% for i in range(10**7) %}{% for j in range(10**7) %}{% endfor %}{% endfor %}",
    "huge-output": "{{ 'x' * 10**10 }}",
    "string-doubling": "{% set ns = namespace(s='xxxxxxxx') %}{% for i in range(60) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s }}",
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_template_is_refused_at_the_cli(tmp_path: Path, name: str) -> None:
    folder = tmp_path / name
    shutil.copytree(CHATML_OK, folder)
    config = json.loads((folder / "tokenizer_config.json").read_text())
    config["chat_template"] = HOSTILE[name]
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    work = CpuClock()  # the child's CPU seconds: a busy machine's other processes are not counted
    proc = subprocess.run([sys.executable, "-m", "stopdoctor", "render", str(folder), "-m", "user", "Hi"],
                          capture_output=True, text=True, timeout=60, env={**os.environ, "STOPDOCTOR_DEBUG": ""})
    assert proc.returncode == 2, proc.stderr
    assert work.seconds < 10
    assert proc.stderr.startswith("stopdoctor: error: chat template")
    assert len(proc.stderr.splitlines()[0]) < 400 and "Traceback" not in proc.stderr
    assert proc.stdout == ""


# --- no heavy imports ------------------------------------------------------------------------------


def test_cold_import_of_the_commands_pulls_no_torch_or_transformers() -> None:
    code = ("import stopdoctor.cli, sys; import stopdoctor.cli.render, stopdoctor.cli.probe; "
            "print('torch' in sys.modules, 'transformers' in sys.modules)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.stdout.split() == ["False", "False"], proc.stderr


@pytest.mark.parametrize("args", [
    ["render", str(CHATML_OK), "-m", "user", "Hi", "--ids"],
    ["render", str(CHATML_OK), "--compare", str(CHATML_OK), "--json"],
    ["probe-stop", "\\nUser:", "User:", "--from-template", "--model", str(CHATML_OK)],
])
def test_commands_run_without_importing_transformers(args: list[str]) -> None:
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "stopdoctor", *args],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr[-2000:]
    imported = {line.split("|")[-1].strip().split(".")[0] for line in proc.stderr.splitlines() if "|" in line}
    assert "stopdoctor" in imported  # the check really saw the imports
    assert "transformers" not in imported and "torch" not in imported


def test_render_without_messages_falls_back_when_the_template_rejects_a_system_turn(synth_root):
    from .helpers import cli

    run = cli("render", "--json", str(synth_root / "clean-mistral"))
    assert run.code == 0, run.stderr
    assert "rejects a system turn" in run.stderr
    assert "What is the capital of France?" in run.json()["text"]


def test_json_token_list_is_every_token_whatever_the_text_holds() -> None:
    """The token list is written as text (a million tokens as dicts took ~1.5 GB): it must still
    be exactly the tokens, with quotes, escapes and look-alike marks in the messages."""
    from stopdoctor.reporters.prompt_text import render_prompt_json

    facts = load(str(CHATML_OK))
    tricky = 'say "hi"\\n \u2028 \x00 {"index": 1} ' + '"0123456789abcdef0123456789abcdef:0"'
    prompt = render_prompt(facts, [{"role": "user", "content": tricky}], add_generation_prompt=True)
    document = json.loads(render_prompt_json([prompt]))
    assert document["messages"][0]["content"] == tricky
    assert document["ids"] == prompt.ids
    assert document["tokens"] == [
        {"index": t.index, "id": t.id, "text": t.text, "special": t.special, "start": t.start, "end": t.end}
        for t in prompt.tokens
    ]
