"""The synthetic model folders in fixtures/synth.py: deterministic, loadable by transformers, and
each one really has the shape (or the defect) its case says it has.

These tests check the fixtures, not stopdoctor's checks; the check tests consume `CASES[...].expected`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from tokenizers import Tokenizer

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # `pytest` (not `python -m pytest`) does not put the root on sys.path
    sys.path.insert(0, str(ROOT))

from fixtures import synth  # noqa: E402

CHECK_NAMES = {
    "greedy-reasoning",
    "harmony-stop-set",
    "eos-declarations-differ",
    "end-of-turn-not-a-stop-id",
    "no-stop-id",
    "stop-ids-disagree",
    "eos-id-invalid",
    "template-token-not-special",
    "template-never-closes-turn",
    "no-chat-template",
    "pad-is-eos",
    "double-bos",
    "base-model-with-chat-template",
}
TOKENIZER_FILES = {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"}
CONVERSATION = [
    {"role": "user", "content": "What is the capital of France?"},
    {"role": "assistant", "content": "Paris is the capital."},
]
ASSISTANT_TEXT = CONVERSATION[1]["content"]


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return synth.build_all(tmp_path_factory.mktemp("synth"))


def _snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _json(folder: Path, name: str) -> dict:
    return json.loads((folder / name).read_text(encoding="utf-8"))


def _as_list(value: int | list[int] | None) -> list[int]:
    if value is None:
        return []
    return value if isinstance(value, list) else [value]


def _load(folder: Path):
    from transformers import AutoTokenizer, GenerationConfig

    return AutoTokenizer.from_pretrained(folder), GenerationConfig.from_pretrained(folder)


def _is_special(tokenizer, token_id: int) -> bool:
    added = tokenizer.added_tokens_decoder.get(token_id)
    return added is not None and added.special


# ---------------------------------------------------------------------------------------------
# The table itself


def test_every_family_has_a_clean_case_and_cases_name_real_checks() -> None:
    assert {f"clean-{f}" for f in synth.FAMILIES} <= set(synth.CASES)
    for name, case in synth.CASES.items():
        assert case.expected <= CHECK_NAMES, name
        assert case.verdict in synth.VERDICT_KINDS, name
        assert case.description, name
    assert all(not synth.CASES[f"clean-{f}"].expected for f in synth.FAMILIES)


# ---------------------------------------------------------------------------------------------
# Determinism, speed, size


def test_build_is_byte_identical_in_process_and_across_processes(tmp_path: Path) -> None:
    first = synth.build_all(tmp_path / "a")
    synth.build_all(tmp_path / "b")
    env = {**os.environ, "PYTHONHASHSEED": "12345"}  # a different hash seed must not change output
    subprocess.run(
        [sys.executable, str(ROOT / "fixtures" / "synth.py"), str(tmp_path / "c")],
        check=True,
        env=env,
        capture_output=True,
    )
    a, b, c = (_snapshot(tmp_path / x) for x in "abc")
    assert {Path(k).parts[0] for k in a} == set(first)
    assert a == b
    assert a == c


def test_rebuild_over_an_existing_folder_drops_stale_files(tmp_path: Path) -> None:
    synth.build_case("template-separate-file", tmp_path)
    synth.build_case("clean-chatml", tmp_path)
    assert not (tmp_path / "chat_template.jinja").exists()
    assert "chat_template" in _json(tmp_path, "tokenizer_config.json")


def test_each_folder_builds_in_under_a_second_and_is_small(tmp_path: Path) -> None:
    synth.build_case("clean-llama3", tmp_path / "warm")  # the one-off BPE training is not per folder
    for name in synth.CASES:
        work = time.process_time()  # CPU seconds: a busy machine's other processes are not counted
        folder = synth.build_case(name, tmp_path / name)
        assert time.process_time() - work < 1.0, name
        assert sum(p.stat().st_size for p in folder.iterdir()) < 300_000, name


def test_bundled_examples_are_current_and_small(tmp_path: Path) -> None:
    examples = {"llama3-eot-missing": "llama3-eot-missing", "clean-chatml": "chatml-ok"}
    for case, folder in examples.items():
        bundled = ROOT / "fixtures" / "examples" / folder
        fresh = synth.build_case(case, tmp_path / folder)
        assert _snapshot(bundled) == _snapshot(fresh), f"regenerate fixtures/examples/{folder}"
        assert sum(len(v) for v in _snapshot(bundled).values()) < 300_000


# ---------------------------------------------------------------------------------------------
# Every folder loads in transformers and has the declared files


@pytest.mark.parametrize("name", sorted(synth.CASES))
def test_folder_loads_in_transformers(built: dict[str, Path], name: str) -> None:
    folder = built[name]
    files = {p.name for p in folder.iterdir()}
    assert {"config.json", "generation_config.json"} <= files
    config = _json(folder, "config.json")
    assert config["architectures"] and config["model_type"] and config["vocab_size"] > 0
    if name == "gen-config-only":
        assert not files & TOKENIZER_FILES
        from transformers import GenerationConfig

        assert GenerationConfig.from_pretrained(folder).eos_token_id
        return
    assert TOKENIZER_FILES <= files
    tokenizer, gen = _load(folder)
    raw = Tokenizer.from_file(str(folder / "tokenizer.json"))
    assert 500 <= raw.get_vocab_size() <= 2000
    assert raw.get_vocab_size() <= config["vocab_size"]
    # transformers must use our tokenizer.json as is, not rebuild it from a class of its own.
    text = "The assistant stops when the turn is over."
    assert tokenizer(text).input_ids == raw.encode(text).ids
    if name == "no-stop-id":  # transformers itself confirms the defect: nothing to stop on
        assert gen.eos_token_id is None
    else:
        assert gen.eos_token_id is not None
    if tokenizer.chat_template is not None:
        rendered = tokenizer.apply_chat_template(CONVERSATION, tokenize=False)
        assert ASSISTANT_TEXT in rendered


# ---------------------------------------------------------------------------------------------
# Clean families: the end-of-turn is one special token and a stop id; BOS is added exactly once


@pytest.mark.parametrize("family", synth.FAMILIES)
def test_clean_family_end_of_turn_is_a_single_special_stop_token(built: dict[str, Path], family: str) -> None:
    folder = built[f"clean-{family}"]
    spec = synth.family_spec(family)
    tokenizer, gen = _load(folder)
    rendered = tokenizer.apply_chat_template(CONVERSATION, tokenize=False)
    after = rendered[rendered.index(ASSISTANT_TEXT) + len(ASSISTANT_TEXT) :]
    assert after.lstrip(" ").startswith(spec.end_of_turn), (family, after)

    eot_ids = tokenizer.encode(spec.end_of_turn, add_special_tokens=False)
    assert len(eot_ids) == 1
    assert _is_special(tokenizer, eot_ids[0])
    assert eot_ids[0] in _as_list(gen.eos_token_id)
    assert _as_list(_json(folder, "config.json")["eos_token_id"]) == _as_list(gen.eos_token_id)
    assert tokenizer.pad_token != tokenizer.eos_token

    # Exactly one BOS when the rendered text is encoded with special tokens on.
    ids = tokenizer(rendered).input_ids
    if spec.tokenizer_adds_bos:
        assert ids[0] == tokenizer.bos_token_id
        assert ids[1] != tokenizer.bos_token_id
    else:
        assert tokenizer.bos_token_id not in ids


@pytest.mark.parametrize("family", synth.FAMILIES)
def test_clean_template_renders_a_generation_prompt(built: dict[str, Path], family: str) -> None:
    tokenizer, _ = _load(built[f"clean-{family}"])
    messages = CONVERSATION + [{"role": "user", "content": "And of Spain?"}]
    with_prompt = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert "And of Spain?" in with_prompt
    if family not in ("llama2", "mistral"):  # their prompt ends with [/INST] either way
        without = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=False)
        assert with_prompt != without


def test_plain_text_markers_stay_plain_text(built: dict[str, Path]) -> None:
    # Mistral's [INST] and Zephyr's <|user|> are ordinary text in those vocabularies by design.
    mistral, _ = _load(built["clean-mistral"])
    zephyr, _ = _load(built["clean-zephyr"])
    assert len(mistral.encode("[INST]", add_special_tokens=False)) > 1
    assert len(zephyr.encode("<|user|>", add_special_tokens=False)) > 1


def test_strict_alternation_raises(built: dict[str, Path]) -> None:
    from jinja2.exceptions import TemplateError

    tokenizer, _ = _load(built["clean-mistral"])
    with pytest.raises(TemplateError, match="alternate"):
        tokenizer.apply_chat_template([CONVERSATION[0], CONVERSATION[0]], tokenize=False)


# ---------------------------------------------------------------------------------------------
# Each defect case really carries its defect


def test_eot_missing_cases_do_not_stop_on_the_end_of_turn(built: dict[str, Path]) -> None:
    for name, eot in [
        ("llama3-eot-missing", "<|eot_id|>"),
        ("chatml-eos-endoftext", "<|im_end|>"),
        ("qwen-base-with-template", "<|im_end|>"),
    ]:
        tokenizer, gen = _load(built[name])
        eot_id = tokenizer.convert_tokens_to_ids(eot)
        assert eot_id not in _as_list(gen.eos_token_id), name
        assert eot_id not in _as_list(_json(built[name], "config.json")["eos_token_id"]), name
        assert tokenizer.eos_token_id != eot_id, name


def test_stop_ids_disagree_between_config_and_generation_config(built: dict[str, Path]) -> None:
    folder = built["stop-ids-disagree"]
    tokenizer, gen = _load(folder)
    config_eos = _json(folder, "config.json")["eos_token_id"]
    assert isinstance(gen.eos_token_id, int)
    assert config_eos == tokenizer.eos_token_id == tokenizer.convert_tokens_to_ids("<|im_end|>")
    assert gen.eos_token_id != config_eos


def test_invalid_eos_ids(built: dict[str, Path]) -> None:
    folder = built["eos-out-of-vocab"]
    _, gen = _load(folder)
    assert max(gen.eos_token_id) >= _json(folder, "config.json")["vocab_size"]

    tokenizer, gen = _load(built["eos-ordinary-token"])
    ordinary = [i for i in gen.eos_token_id if not _is_special(tokenizer, i)]
    assert len(ordinary) == 1
    assert tokenizer.decode(ordinary) == " the"


def test_chatml_on_llama3_vocab_has_no_chatml_tokens(built: dict[str, Path]) -> None:
    tokenizer, _ = _load(built["chatml-on-llama3-vocab"])
    assert "<|im_start|>" in tokenizer.apply_chat_template(CONVERSATION, tokenize=False)
    assert len(tokenizer.encode("<|im_end|>", add_special_tokens=False)) > 1
    assert "<|eot_id|>" in tokenizer.get_vocab()


def test_never_closes_turn_ends_right_after_the_content(built: dict[str, Path]) -> None:
    tokenizer, _ = _load(built["never-closes-turn"])
    assert tokenizer.apply_chat_template(CONVERSATION, tokenize=False).endswith(ASSISTANT_TEXT)


def test_template_presence_and_base_shapes(built: dict[str, Path]) -> None:
    for name in ("no-template-instruct", "base-no-template"):
        tokenizer, _ = _load(built[name])
        assert tokenizer.chat_template is None, name
        assert not (built[name] / "chat_template.jinja").exists()
    _, instruct_gen = _load(built["no-template-instruct"])
    assert instruct_gen.do_sample
    assert _json(built["no-template-instruct"], "config.json")["_name_or_path"].endswith("-Instruct")
    for name in ("base-no-template", "base-with-template", "qwen-base-with-template"):
        _, gen = _load(built[name])
        assert not gen.do_sample, name
        assert _json(built[name], "config.json")["_name_or_path"].endswith("-base"), name
    tokenizer, gen = _load(built["base-with-template"])
    assert tokenizer.chat_template is not None
    assert gen.eos_token_id == tokenizer.convert_tokens_to_ids("<|im_end|>")


def test_pad_is_eos(built: dict[str, Path]) -> None:
    tokenizer, gen = _load(built["pad-is-eos"])
    assert tokenizer.pad_token == tokenizer.eos_token
    assert gen.pad_token_id == tokenizer.eos_token_id


def test_double_bos_gives_two_bos_tokens(built: dict[str, Path]) -> None:
    tokenizer, _ = _load(built["double-bos"])
    rendered = tokenizer.apply_chat_template(CONVERSATION, tokenize=False)
    assert rendered.startswith(tokenizer.bos_token)
    assert tokenizer(rendered).input_ids[:2] == [tokenizer.bos_token_id] * 2


def test_template_in_separate_file_and_named_templates(built: dict[str, Path]) -> None:
    folder = built["template-separate-file"]
    assert "chat_template" not in _json(folder, "tokenizer_config.json")
    tokenizer, _ = _load(folder)
    assert tokenizer.chat_template == (folder / "chat_template.jinja").read_text(encoding="utf-8")
    assert tokenizer.apply_chat_template(CONVERSATION, tokenize=False).endswith("<|im_end|>\n")

    folder = built["named-templates"]
    declared = _json(folder, "tokenizer_config.json")["chat_template"]
    assert [t["name"] for t in declared] == ["default", "tool_use"]
    tokenizer, _ = _load(folder)
    tool = {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}
    with_tools = tokenizer.apply_chat_template(CONVERSATION, tools=[tool], tokenize=False)
    assert "get_weather" in with_tools
    assert "get_weather" not in tokenizer.apply_chat_template(CONVERSATION, tokenize=False)


def test_script_usage_error_exit_code() -> None:
    proc = subprocess.run([sys.executable, str(ROOT / "fixtures" / "synth.py")], capture_output=True, text=True)
    assert proc.returncode == 2
    assert "usage" in proc.stderr
