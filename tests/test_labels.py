"""`stopdoctor labels`: training labels built as the SFT stacks build them, and the end-of-turn
checks (SD6xx) on the synthetic fixtures, the bundled JSONL examples and SmolLM2; oracles against
transformers and TRL where they are importable."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from stopdoctor.analysis.core import analyze
from stopdoctor.api import check_labels, load
from stopdoctor.core.errors import StopdoctorError
from stopdoctor.labels.result import ABSENT, NO_GENERATION_MARKERS, NOT_AN_EOT_TOKEN, OUTSIDE_GENERATION, PAD_MASKED, SPLIT, TRUNCATED, LabelSettings
from stopdoctor.facts.datasets import count_examples, iter_examples, load_examples
from stopdoctor.labels.build import label_dataset
from stopdoctor.core.types import ChatTemplate, Location
from stopdoctor.template.render import render_chat

from .helpers import cli

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "fixtures" / "labels"
CHAT = DATA / "chat.jsonl"
TEXT = DATA / "text.jsonl"
GENERATION = DATA / "chatml-generation.jinja"
GENERATION_EOT_OUTSIDE = DATA / "chatml-generation-eot-outside.jinja"
# conversations every synthetic family's template accepts (user first, strictly alternating)
ALTERNATING = [json.loads(line) for line in CHAT.read_text().splitlines()
               if json.loads(line)["messages"][0]["role"] == "user"]


def _template(path: Path) -> ChatTemplate:
    return ChatTemplate(path.name, path.read_text(), Location(path.name))


def _run(model: Path | str, data: Path = CHAT, **settings):
    return check_labels(str(model), str(data), LabelSettings(**settings))


def _names(report) -> set[str]:
    return {f.name for f in report.findings}


def _labels(example) -> list[int]:
    return [i if t else -100 for i, t in zip(example.ids, example.trained)]


def _rows_file(tmp_path: Path, rows: list[dict]) -> Path:
    path = tmp_path / "rows.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


# --------------------------------------------------------------------------------------------
# The must-holds on SmolLM2 (ChatML, <|im_end|> = eos = pad = id 2)


def test_smollm2_pad_id_collator_flags_every_example(real_models):
    report = _run(real_models.smollm2_hf, collator="pad-id")
    result = report.labels
    assert result.pad_id == result.eos_id == 2
    assert len(result.checked) == len(result.examples) == 6
    assert result.failing(PAD_MASKED) == list(range(6))
    assert all(s.cause == PAD_MASKED and s.end_id == 2 for s in result.spans)
    assert _names(report) == {"pad-masks-eos"}
    (finding,) = report.findings
    assert finding.code == "SD602" and finding.evidence["examples"] == list(range(6))
    assert "pad token" in finding.fix


def test_smollm2_attention_mask_padding_trains_every_end_of_turn(real_models):
    report = _run(real_models.smollm2_hf, collator="full")
    result = report.labels
    assert result.spans and result.spans_ok == len(result.spans) == 7
    assert all(s.trained and s.end_id == 2 for s in result.spans)
    assert all(e.ids[s.end_token] == 2 for e in result.examples for s in e.spans)
    assert report.findings == []


def test_smollm2_distinct_pad_token_fixes_pad_masking(real_models):
    report = _run(real_models.smollm2_hf, collator="pad-id", pad_token="<|endoftext|>")
    assert report.labels.spans_ok == len(report.labels.spans) and report.findings == []


# --------------------------------------------------------------------------------------------
# Each cause, on the synthetic ChatML fixture


def test_template_without_generation_markers_under_assistant_only_loss(synth_root):
    report = _run(synth_root / "clean-chatml", collator="assistant-only")
    result = report.labels
    assert not result.has_generation_markers
    assert {s.cause for s in result.spans} == {NO_GENERATION_MARKERS}
    assert not any(any(e.trained) for e in result.examples)  # transformers: an all-zero mask
    (finding,) = report.findings
    assert finding.name == "end-of-turn-not-trained" and finding.code == "SD601"
    assert "{% generation %}" in finding.fix and "<|im_end|>" in finding.fix
    assert finding.location.file == "tokenizer_config.json"


def test_generation_markers_around_the_end_of_turn_train_it(synth_root):
    report = _run(synth_root / "clean-chatml", collator="assistant-only", template=_template(GENERATION))
    result = report.labels
    assert result.has_generation_markers and report.findings == []
    assert result.spans_ok == len(result.spans) == 7
    first = result.examples[0]
    trained_text = "".join(first.text[s:e] for (s, e), t in zip(first.offsets, first.trained) if t)
    assert trained_text == "The capital of France is Paris.<|im_end|>"


def test_generation_block_closing_before_the_end_of_turn(synth_root):
    report = _run(synth_root / "clean-chatml", collator="assistant-only", template=_template(GENERATION_EOT_OUTSIDE))
    assert {s.cause for s in report.labels.spans} == {OUTSIDE_GENERATION}
    (finding,) = report.findings
    assert finding.name == "end-of-turn-not-trained" and "ends before" in finding.message


def test_max_length_flags_exactly_the_examples_it_cuts(synth_root):
    full = _run(synth_root / "clean-chatml", collator="full").labels
    lengths = sorted({e.full_length for e in full.examples})
    limit = lengths[len(lengths) // 2]  # some examples longer, some not
    expected = [e.index for e in full.examples if any(s.end_token >= limit for s in e.spans)]
    assert expected and len(expected) < len(full.examples)
    report = _run(synth_root / "clean-chatml", collator="full", max_length=limit)
    result = report.labels
    assert result.failing(TRUNCATED) == expected
    assert all(len(e.ids) <= limit for e in result.examples)
    (finding,) = report.findings
    assert finding.name == "truncation-drops-end-of-turn" and finding.evidence["examples"] == expected
    assert str(max(lengths)) in finding.fix
    assert _run(synth_root / "clean-chatml", collator="full", max_length=max(lengths)).findings == []


def test_examples_the_trainer_drops_are_not_flagged(synth_root):
    """TRL drops an example left with no trained token by truncation; it teaches nothing, so its
    cut end-of-turn is no SD603. One whose content is trained but whose end-of-turn is cut is."""
    report = _run(synth_root / "clean-chatml", collator="assistant-only", template=_template(GENERATION),
                  max_length=20)
    result = report.labels
    full = _run(synth_root / "clean-chatml", collator="assistant-only", template=_template(GENERATION)).labels
    first_trained = {e.index: e.trained.index(True) for e in full.examples}
    assert result.dropped == [i for i, first in first_trained.items() if first >= 20] == [1, 2, 3, 4]
    assert result.failing(TRUNCATED) == [0, 5]
    assert [e.index for e in result.checked] == [0, 5]
    (finding,) = report.findings
    assert finding.code == "SD603" and finding.evidence["examples"] == [0, 5]
    run = cli("labels", str(synth_root / "clean-chatml"), "--data", str(CHAT), "--collator", "assistant-only",
              "--template", str(GENERATION), "--max-length", "20")
    assert "dropped      4 example(s), nothing trained is left after truncation: TRL drops them" in run.stdout
    document = json.loads(cli("labels", str(synth_root / "clean-chatml"), "--data", str(CHAT), "--collator",
                              "assistant-only", "--template", str(GENERATION), "--max-length", "20", "--json").stdout)
    assert document["examples"]["dropped"] == 4 and document["dropped_examples"] == [1, 2, 3, 4]
    assert [f["index"] for f in document["failures"]] == [0, 5]


def test_packing_that_splits_long_examples_cuts_no_end_of_turn(synth_root):
    """TRL packing_strategy bfd_split / wrapped spreads a long example over packed rows (no token is
    cut): no SD603 and nothing dropped; bfd truncates the overflow like plain truncation."""
    folder, template = synth_root / "clean-chatml", _template(GENERATION)
    plain = _run(folder, collator="assistant-only", template=template, max_length=20)
    for strategy in ("bfd_split", "wrapped"):
        packed = _run(folder, collator="assistant-only", template=template, max_length=20, packing=strategy)
        assert packed.findings == [] and packed.labels.dropped == []
        assert packed.labels.spans_ok == len(packed.labels.spans) > 0
    bfd = _run(folder, collator="assistant-only", template=template, max_length=20, packing="bfd")
    assert [(f.code, f.evidence["examples"]) for f in bfd.findings] == \
        [(f.code, f.evidence["examples"]) for f in plain.findings] == [("SD603", [0, 5])]
    assert bfd.labels.dropped == plain.labels.dropped == [1, 2, 3, 4]
    run = cli("labels", str(folder), "--data", str(CHAT), "--collator", "assistant-only", "--template",
              str(GENERATION), "--max-length", "20", "--packing", "bfd")
    assert "nothing trained is left after truncation: they teach nothing" in run.stdout
    for args, message in ((["--collator", "axolotl", "--packing", "bfd"], "--packing is TRL's"),
                          (["--packing", "greedy"], "--packing 'greedy' is not none, bfd, bfd_split or wrapped")):
        run = cli("labels", str(folder), "--data", str(CHAT), *args)
        assert run.code == 2 and message in run.stderr


def test_axolotl_drops_long_examples_unless_told_to_truncate(synth_root):
    folder = synth_root / "clean-chatml"
    lengths = {e.index: e.full_length for e in _run(folder, collator="axolotl").labels.examples}
    dropped = _run(folder, collator="axolotl", max_length=40)
    assert dropped.labels.dropped == [i for i, n in lengths.items() if n > 40]
    assert not any(f.code == "SD603" for f in dropped.findings)
    truncated = _run(folder, collator="axolotl", max_length=40, excess_length="truncate")
    assert truncated.labels.dropped == [] and "SD603" in {f.code for f in truncated.findings}
    run = cli("labels", str(folder), "--data", str(CHAT), "--excess-length", "truncate")
    assert run.code == 2 and "--excess-length applies to --collator axolotl only" in run.stderr


def test_text_rows_without_eos(synth_root):
    report = _run(synth_root / "clean-chatml", TEXT, collator="full", append_eos=False)
    result = report.labels
    # the third text ends with <|im_end|>, the eos of this fixture
    assert result.failing(ABSENT) == [0, 1]
    (finding,) = report.findings
    assert finding.name == "eos-not-appended" and "<|im_end|>" in finding.fix
    fixed = _run(synth_root / "clean-chatml", TEXT, collator="full", append_eos=True)
    assert fixed.findings == [] and fixed.labels.spans_ok == 3
    # the default models the trainer the collator names: TRL's "full" appends eos itself
    assert _run(synth_root / "clean-chatml", TEXT, collator="full").findings == []


def test_end_of_turn_split_into_ordinary_tokens(synth_root):
    report = _run(synth_root / "chatml-on-llama3-vocab", collator="full")
    assert {s.cause for s in report.labels.spans} == {SPLIT}
    assert _names(report) == {"end-of-turn-split"}


def test_completion_only_trains_the_last_assistant_turn(synth_root):
    result = _run(synth_root / "clean-chatml", collator="completion-only").labels
    # one completion per conversation: the trailing assistant message
    assert [len(e.spans) for e in result.examples] == [1] * 6
    assert all(s.trained for s in result.spans)
    two_turns = result.examples[2]
    assert two_turns.spans[0].message == 3
    assert not two_turns.trained[two_turns.spans[0].content[0] - 1]


def test_auto_uses_trl_defaults(synth_root, tmp_path):
    rows = [{"prompt": [{"role": "user", "content": "Hi"}], "completion": [{"role": "assistant", "content": "Hello."}]},
            {"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello."}]}]
    result = _run(synth_root / "clean-chatml", _rows_file(tmp_path, rows)).labels
    assert [e.collator for e in result.examples] == ["completion-only", "full"]


def test_sd6_checks_stay_silent_in_inspect(synth_root):
    from stopdoctor.api import inspect_model

    assert not [f for f in inspect_model(str(synth_root / "pad-is-eos")).findings if f.code.startswith("SD6")]


# --------------------------------------------------------------------------------------------
# The sandbox's generation recorder


def test_generation_recorder_keeps_output_byte_identical(synth_root):
    facts = load(str(synth_root / "clean-chatml"))
    source = GENERATION.read_text()
    messages = ALTERNATING[1]["messages"]
    spans: list[tuple[int, int]] = []
    recorded = render_chat(source, messages, special_tokens=facts.special_token_texts(), generation_spans=spans)
    assert recorded == render_chat(source, messages, special_tokens=facts.special_token_texts())
    assert [recorded[s:e] for s, e in spans] == ["4.<|im_end|>", "6.<|im_end|>"]


# --------------------------------------------------------------------------------------------
# Oracles: the same labels as transformers and TRL build


def _transformers_tokenizer(folder: Path):
    transformers = pytest.importorskip("transformers")
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(folder))
    if tokenizer.pad_token is None:  # the recipe stopdoctor assumes (and TRL applies)
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


@pytest.mark.parametrize("family", ["llama2", "llama3", "chatml", "gemma", "mistral", "phi3", "zephyr"])
@pytest.mark.needs_torch
def test_oracle_transformers_ids_and_pad_id_labels(synth_root, tmp_path, family):
    folder = synth_root / f"clean-{family}"
    tokenizer = _transformers_tokenizer(folder)
    data = _rows_file(tmp_path, ALTERNATING)
    result = _run(folder, data, collator="pad-id").labels
    import torch
    from transformers import DataCollatorForLanguageModeling

    collate = DataCollatorForLanguageModeling(tokenizer=tokenizer, mlm=False)
    for row, example in zip(ALTERNATING, result.examples):
        ids = tokenizer.apply_chat_template(row["messages"], tokenize=True, return_dict=True)["input_ids"]
        assert list(example.ids) == list(ids), family
        labels = collate([{"input_ids": ids}])["labels"][0]
        assert _labels(example) == labels.tolist(), family
    assert torch is not None


def test_oracle_transformers_assistant_masks(synth_root, tmp_path):
    folder = synth_root / "clean-chatml"
    tokenizer = _transformers_tokenizer(folder)
    source = GENERATION.read_text()
    for template_file in (GENERATION, GENERATION_EOT_OUTSIDE):
        source = template_file.read_text()
        result = _run(folder, collator="assistant-only", template=_template(template_file)).labels
        rows = [json.loads(line) for line in CHAT.read_text().splitlines()]
        for row, example in zip(rows, result.examples):
            out = tokenizer.apply_chat_template(row["messages"], chat_template=source, tokenize=True,
                                                return_dict=True, return_assistant_tokens_mask=True)
            assert list(example.ids) == list(out["input_ids"])
            assert [int(t) for t in example.trained] == list(out["assistant_masks"])


def test_oracle_transformers_assistant_masks_smollm2(real_models):
    tokenizer = _transformers_tokenizer(real_models.smollm2_hf)
    result = _run(real_models.smollm2_hf, collator="assistant-only", template=_template(GENERATION),
                  max_length=20).labels
    rows = [json.loads(line) for line in CHAT.read_text().splitlines()]
    for row, example in zip(rows, result.examples):
        out = tokenizer.apply_chat_template(row["messages"], chat_template=GENERATION.read_text(), tokenize=True,
                                            return_dict=True, return_assistant_tokens_mask=True,
                                            truncation=True, max_length=20)
        assert list(example.ids) == list(out["input_ids"])
        assert [int(t) for t in example.trained] == list(out["assistant_masks"])


def _trl_dataset(folder: Path, rows: list[dict], template: str | None = None, **config):
    pytest.importorskip("trl")
    pytest.importorskip("datasets")
    import torch  # noqa: F401 - trl needs it
    from datasets import Dataset
    from transformers import LlamaConfig, LlamaForCausalLM
    from trl import SFTConfig, SFTTrainer

    tokenizer = _transformers_tokenizer(folder)
    if template is not None:
        tokenizer.chat_template = template
    model = LlamaForCausalLM(LlamaConfig(vocab_size=len(tokenizer), hidden_size=16, intermediate_size=32,
                                         num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=2))
    args = SFTConfig(output_dir=str(folder.parent / "trl-out"), report_to=[], use_cpu=True, bf16=False,
                     **{"max_length": None, **config})
    trainer = SFTTrainer(model=model, args=args, train_dataset=Dataset.from_list(rows), processing_class=tokenizer)
    return trainer.train_dataset


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore")
@pytest.mark.needs_torch
def test_oracle_trl_sft_trainer(synth_root, tmp_path):
    folder = synth_root / "clean-chatml"
    chat = [json.loads(line) for line in CHAT.read_text().splitlines()]

    # assistant_only_loss with a template whose generation block includes <|im_end|>
    ours = _run(folder, collator="assistant-only", template=_template(GENERATION)).labels
    theirs = _trl_dataset(folder, chat, GENERATION.read_text(), assistant_only_loss=True)
    assert [_labels(e) for e in ours.examples] == theirs["labels"]

    # truncated to 20 tokens: examples left with no trained token are dropped, as TRL does
    ours = _run(folder, collator="assistant-only", template=_template(GENERATION), max_length=20).labels
    theirs = _trl_dataset(folder, chat, GENERATION.read_text(), assistant_only_loss=True, max_length=20)
    assert ours.dropped and len(theirs) == len(chat) - len(ours.dropped)
    assert [_labels(e) for e in ours.examples if not e.dropped] == theirs["labels"]

    # full-sequence loss, truncated to 24 tokens (keep_start)
    ours = _run(folder, collator="full", max_length=24).labels
    theirs = _trl_dataset(folder, chat, max_length=24)
    assert [list(e.ids) for e in ours.examples] == theirs["input_ids"]
    assert [_labels(e) for e in ours.examples] == theirs["labels"]

    # conversational prompt/completion: completion-only loss is TRL's default (our auto)
    pc = [{"prompt": r["messages"][:-1], "completion": r["messages"][-1:]} for r in chat]
    ours = _run(folder, _rows_file(tmp_path, pc)).labels
    theirs = _trl_dataset(folder, pc)
    assert [_labels(e) for e in ours.examples] == theirs["labels"]

    # plain text: TRL appends eos (our --append-eos)
    texts = [{"text": "The quick brown fox."}, {"text": "Already closed<|im_end|>"}]
    ours = _run(folder, _rows_file(tmp_path, texts), append_eos=True).labels
    theirs = _trl_dataset(folder, texts)
    assert [_labels(e) for e in ours.examples] == theirs["labels"]
    assert ours.spans_ok == 2

    # every family: full-sequence and completion-only labels of the alternating conversations
    pc = [{"prompt": r["messages"][:-1], "completion": r["messages"][-1:]} for r in ALTERNATING]
    for family in ("llama2", "llama3", "gemma", "mistral", "phi3", "zephyr"):
        folder = synth_root / f"clean-{family}"
        ours = _run(folder, _rows_file(tmp_path, ALTERNATING), collator="full", max_length=24).labels
        theirs = _trl_dataset(folder, ALTERNATING, max_length=24)
        assert [_labels(e) for e in ours.examples] == theirs["labels"], family
        ours = _run(folder, _rows_file(tmp_path, pc)).labels
        theirs = _trl_dataset(folder, pc)
        assert [_labels(e) for e in ours.examples] == theirs["labels"], family


AXOLOTL_CASES = [
    ("clean-chatml", "chat", ()),
    ("clean-chatml", "chat", ("<|im_end|>",)),
    ("qwen-base-with-template", "chat", ()),  # eos <|endoftext|>: <|im_end|> is never trained
    ("clean-llama3", "alternating", ()),
    ("clean-llama2", "alternating", ()),
    ("clean-gemma", "alternating", ()),
    ("clean-gemma", "alternating", ("<end_of_turn>",)),
    ("clean-mistral", "alternating", ()),
    ("clean-phi3", "alternating", ()),
    ("clean-zephyr", "alternating", ()),
]


@pytest.mark.slow
@pytest.mark.needs_torch
def test_oracle_axolotl_chat_template_strategy(synth_root, tmp_path):
    """--collator axolotl against Axolotl's own chat_template strategy, ids and labels, on every
    family (fixtures/oracles.py fetches axolotl 0.19.0 from PyPI; it runs in one subprocess)."""
    import subprocess
    import sys

    from fixtures.oracles import axolotl_dir

    folder = axolotl_dir()
    if folder is None:
        pytest.skip("the Axolotl oracle is not fetched: python fixtures/oracles.py (fixtures/realmodels.py does it)")
    pytest.importorskip("transformers")
    alternating = _rows_file(tmp_path, ALTERNATING)
    jobs = [{"model": str(synth_root / family), "data": str(CHAT if rows == "chat" else alternating),
             "eot_tokens": list(eot)} for family, rows, eot in AXOLOTL_CASES]
    run = subprocess.run([sys.executable, str(ROOT / "tests" / "axolotl_oracle.py"), str(folder)],
                         input=json.dumps(jobs), capture_output=True, text=True, check=False)
    assert run.returncode == 0, run.stderr[-2000:]
    verdicts = {}
    for (family, _, eot), job, theirs in zip(AXOLOTL_CASES, jobs, json.loads(run.stdout), strict=True):
        ours = _run(job["model"], Path(job["data"]), collator="axolotl", eot_tokens=eot or None).labels
        assert [list(e.ids) for e in ours.examples] == [t["input_ids"] for t in theirs], (family, eot)
        assert [_labels(e) for e in ours.examples] == [t["labels"] for t in theirs], (family, eot)
        verdicts[family, eot] = {s.cause for s in ours.spans}
    # both outcomes are covered: <|im_end|> trained on ChatML; never on a base model whose eos is <|endoftext|>
    assert verdicts["clean-chatml", ()] == {None}
    assert verdicts["qwen-base-with-template", ()] == {NOT_AN_EOT_TOKEN}


# --------------------------------------------------------------------------------------------
# Command line


def test_cli_human_show_and_exit_code(synth_root):
    run = cli("labels", str(synth_root / "pad-is-eos"), "--data", str(CHAT), "--collator", "pad-id", "--show", "1")
    assert run.code == 1
    assert "SD602 pad-masks-eos" in run.stdout
    assert "example 0" in run.stdout and "example 1 " not in run.stdout
    assert "  masked   <|im_end|>" in run.stdout and "  TRAINED  " in run.stdout
    assert "masked: it is the pad id" in run.stdout
    assert "0 of 6 end every assistant turn" in run.stdout
    assert "\x1b[" not in run.stdout


def test_cli_json_document(synth_root):
    run = cli("labels", str(synth_root / "clean-chatml"), "--data", str(CHAT), "--collator", "assistant-only",
              "--json", "--show", "2")
    assert run.code == 1
    doc = run.json()
    assert doc["schema"] == "stopdoctor.labels/1" and doc["schema_version"] == 1
    assert doc["causes"]["no-generation-markers"] == {"spans": 7, "examples": list(range(6))}
    assert doc["causes"]["pad-masked"] == {"spans": 0, "examples": []}
    assert doc["failing_examples"] == list(range(6))
    assert doc["failures"][0] == {"index": 0, "line": 1, "causes": ["no-generation-markers"]}
    assert doc["examples"] == {"read": 6, "checked": 6, "ok": 0, "share_ok": 0.0, "dropped": 0, "bad_lines": 0}
    assert doc["dropped_examples"] == []
    assert doc["template"]["generation_markers"] is False
    assert [f["code"] for f in doc["findings"]] == ["SD601"]
    assert len(doc["shown"]) == 2 and doc["shown"][0]["tokens"][0]["trained"] is False


def test_cli_clean_run_exits_zero(synth_root):
    run = cli("labels", str(synth_root / "clean-chatml"), "--data", str(CHAT), "--limit", "3")
    assert run.code == 0, run.stdout + run.stderr
    assert "3 of 3 end every assistant turn" in run.stdout


@pytest.mark.parametrize("args, message", [
    (["--collator", "nope"], "--collator 'nope'"),
    (["--limit", "0"], "--limit"),
    (["--max-length", "0"], "--max-length"),
])
def test_cli_bad_options_exit_2(synth_root, args, message):
    run = cli("labels", str(synth_root / "clean-chatml"), "--data", str(CHAT), *args)
    assert run.code == 2 and message in run.stderr
    assert "Traceback" not in run.stderr


def test_bad_data_is_one_line_exit_2(synth_root, tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"messages": [{"role": "user", "content": "x"}]}\nnot json\n')
    run = cli("labels", str(synth_root / "clean-chatml"), "--data", str(bad))  # a bad row is counted, the rest checked
    assert run.code == 0 and "1 bad lines skipped: line 2 is not JSON" in run.stdout
    bad.write_text('{"conversations": []}\n')
    run = cli("labels", str(synth_root / "clean-chatml"), "--data", str(bad))
    assert run.code == 2 and "no \"messages\"" in run.stderr and "no valid example" in run.stderr
    run = cli("labels", str(synth_root / "clean-chatml"), "--data", str(TEXT), "--collator", "assistant-only")
    assert run.code == 2 and "assistant-only loss needs chat rows" in run.stderr


_GOOD_ROW = b'{"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": "y"}]}\n'


@pytest.mark.parametrize("line, message", [
    (b'{"text": "caf\xe9"}', "line 2 is not UTF-8 text (byte 13)"),
    (b'{"text": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", "line 2 holds JSON nested too deeply"),
    (b'{"text": "a", "n": 1' + b"0" * 5000 + b"}", "line 2 holds an integer of more than"),
    (b'{"messages": [{"role": "user", "content": ' + b"[" * 950 + b"]" * 950 + b'}, {"role": "assistant", "content": "y"}]}',
     "nested too deeply"),  # by the JSON parser or by the template-data copy, as the stack allows
])
def test_hostile_data_rows_are_one_line_exit_2(synth_root, tmp_path, line, message):
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(_GOOD_ROW + line + b"\n")
    run = cli("labels", str(synth_root / "clean-chatml"), "--data", str(bad), "--json")
    if run.code == 0:  # a row the reader refuses is counted and skipped, the good row still checked
        assert message in run.json()["bad_lines"][0] and run.json()["bad_lines"][0].startswith("line 2")
    else:  # one the template-data copy refuses stops the run, in one line
        assert run.code == 2 and message in run.stderr and "line 2" in run.stderr and len(run.stderr.splitlines()) <= 2
    alone = tmp_path / "alone.jsonl"
    alone.write_bytes(line + b"\n")
    run = cli("labels", str(synth_root / "clean-chatml"), "--data", str(alone))
    assert run.code == 2 and message.replace("line 2", "line 1") in run.stderr and len(run.stderr.splitlines()) <= 2


def test_a_byte_order_mark_before_the_first_row_is_read(synth_root, tmp_path):
    data = tmp_path / "bom.jsonl"
    data.write_bytes(b"\xef\xbb\xbf" + _GOOD_ROW)
    assert _run(synth_root / "clean-chatml", data).labels.spans_ok == 1


def test_chat_rows_need_a_template(synth_root):
    run = cli("labels", str(synth_root / "base-no-template"), "--data", str(CHAT))
    assert run.code == 2 and "no chat template" in run.stderr


def test_load_examples_limit_and_kinds():
    examples = load_examples(TEXT, limit=2)
    assert [e.kind for e in examples] == ["text", "prompt-completion"]
    assert [e.line for e in examples] == [1, 2]


def test_label_dataset_reports_progress(synth_root):
    facts = load(str(synth_root / "clean-chatml"))
    calls = []
    label_dataset(facts, analyze(facts), load_examples(CHAT), "chat", progress=lambda d, t: calls.append((d, t)))
    assert calls == [(6, 6)]


def test_a_dataset_is_read_as_it_goes(synth_root, tmp_path):
    """Rows are read a chunk at a time, so a dataset need not fit in memory."""
    facts = load(str(synth_root / "clean-chatml"))
    data = _rows_file(tmp_path, ALTERNATING * 300 + [{"text": "hello"}])
    total = count_examples(data)
    read = []

    def rows():
        for example in iter_examples(data):
            read.append(example.index)
            yield example

    progress = []
    result = label_dataset(facts, analyze(facts), rows(), "rows", progress=lambda d, t: progress.append((d, t, len(read))),
                           total=total)
    assert total == len(ALTERNATING) * 300 + 1 == len(result.examples)
    assert progress[0] == (512, total, 512) and progress[-1] == (total, total, total)
    with pytest.raises(StopdoctorError, match=rf"example {total - 1} \(line {total}\) is not a conversation"):
        label_dataset(facts, analyze(facts), iter_examples(data), "rows", LabelSettings(collator="assistant-only"),
                      total=total)


@pytest.mark.parametrize("case, rows, settings", [
    ("clean-chatml", "chat", {"collator": "full"}),
    ("clean-chatml", "chat", {"collator": "full", "max_length": 40}),
    ("clean-chatml", "chat", {"collator": "pad-id", "max_length": 400}),
    ("pad-is-eos", "chat", {"collator": "pad-id"}),
    ("clean-chatml", "chat", {"collator": "assistant-only"}),
    ("clean-chatml", "chat", {"collator": "assistant-only", "template": _template(GENERATION), "max_length": 30}),
    ("clean-chatml", "chat", {"collator": "assistant-only", "template": _template(GENERATION_EOT_OUTSIDE)}),
    ("clean-llama2", "alternating", {"collator": "pad-id"}),
    ("clean-llama2", "alternating", {"collator": "full", "max_length": 40}),
    ("chatml-on-llama3-vocab", "chat", {"collator": "full"}),
    ("never-closes-turn", "chat", {"collator": "full"}),
    ("clean-chatml", "chat", {"collator": "axolotl"}),
    ("qwen-base-with-template", "chat", {"collator": "axolotl"}),
    ("clean-llama2", "alternating", {"collator": "axolotl"}),
    ("clean-gemma", "alternating", {"collator": "axolotl", "eot_tokens": ("<end_of_turn>",)}),
])
def test_verdicts_without_ids_match_the_tokenized_ones(synth_root, tmp_path, case, rows, settings):
    """The command tokenizes only where the verdict needs it; the verdicts must not change."""
    data = CHAT if rows == "chat" else _rows_file(tmp_path, ALTERNATING)
    tokenized = _run(synth_root / case, data, **settings)
    lazy = _run(synth_root / case, data, **settings, tokenize_first=0)
    assert [(s.message, s.end_id, s.trained, s.cause) for s in lazy.labels.spans] == \
        [(s.message, s.end_id, s.trained, s.cause) for s in tokenized.labels.spans]
    assert [(f.code, f.message) for f in lazy.findings] == [(f.code, f.message) for f in tokenized.findings]
    if case == "clean-chatml" and "max_length" not in settings:
        assert not any(e.tokenized for e in lazy.labels.examples)
    # beyond the shown examples only verdicts are kept: memory does not grow with the tokens
    assert not any(e.ids or e.offsets or e.text for e in lazy.labels.examples)
    assert all(len(e.ids) == len(e.trained) > 0 for e in tokenized.labels.examples if e.spans)


def test_a_dataset_is_not_held_to_the_commands_render_deadline(synth_root, tmp_path):
    """The command's shared render deadline is for its fixed analysis renders; rendering a big
    dataset takes longer than that and must still finish (it failed after ~27k examples)."""
    from stopdoctor.template.limits import RenderLimits, render_deadline

    facts = load(str(synth_root / "clean-chatml"))
    analysis = analyze(facts)
    examples = load_examples(_rows_file(tmp_path, ALTERNATING * 400))
    with render_deadline(RenderLimits(max_total_seconds=0.01)):
        result = label_dataset(facts, analysis, examples, "rows")
        # the examples' renders were charged to allowances of their own, not the command's
        assert render_chat(facts.template.source, ALTERNATING[0]["messages"])
    assert len(result.examples) == len(examples) and all(s.trained for s in result.spans)


def test_each_example_keeps_the_sandbox_limits(synth_root, tmp_path):
    """A template that blows up on one example is still stopped, and the example named."""
    hostile = tmp_path / "doubling.jinja"
    hostile.write_text("{% set ns = namespace(s='x') %}{% for m in messages %}{% if m.content == 'x' %}"
                       "{% for i in range(64) %}{% set ns.s = ns.s + ns.s %}{% endfor %}{% endif %}"
                       "{{ m.content }}<|im_end|>{% endfor %}")
    rows = [{"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]},
            {"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": "b"}]}]
    settings = LabelSettings(template=_template(hostile), collator="full")
    with pytest.raises(StopdoctorError, match=r"example 1 \(line 2\): chat template stopped"):
        check_labels(str(synth_root / "clean-chatml"), str(_rows_file(tmp_path, rows)), settings)


@pytest.mark.parametrize("family", ["clean-llama2", "clean-llama3", "clean-chatml", "clean-gemma", "clean-mistral"])
def test_token_range_by_bisection_matches_the_token_walk(synth_root, family):
    import random

    from stopdoctor.labels.collators import _token_range, _tokens_overlapping

    facts = load(str(synth_root / family))
    tokenizer = facts.vocab.tokenizer()
    rng = random.Random(family)
    for row in ALTERNATING:
        text = render_chat(facts.template.source, row["messages"], special_tokens=facts.special_token_texts())
        offsets = tokenizer.encode(text + " héllo 😀 wörld", add_special_tokens=True).offsets
        for _ in range(200):
            start = rng.randint(0, len(text) + 10)
            end = start + rng.randint(0, 40)
            walked = _tokens_overlapping(offsets, start, end)
            assert _token_range(offsets, start, end) == ((walked[0], walked[-1] + 1) if walked else None)


def test_progress_appears_only_after_a_second(capsys):
    from stopdoctor.cli.labels import _Progress

    quick = _Progress("labelling")
    quick(512, 10_000)
    assert capsys.readouterr().err == ""
    slow = _Progress("labelling")
    slow.started -= 2
    slow(512, 10_000)
    slow(1024, 10_000)
    slow.close()
    assert capsys.readouterr().err == "stopdoctor: labelling (10000 examples)…\n"


def test_assistant_content_that_also_occurs_in_the_scaffolding(synth_root, tmp_path):
    rows = [{"messages": [{"role": "user", "content": "Say the word."}, {"role": "assistant", "content": "assistant"}]}]
    for collator in ("full", "pad-id"):
        result = _run(synth_root / "clean-chatml", _rows_file(tmp_path, rows), collator=collator).labels
        (span,) = result.spans
        assert span.end_id == result.facts.vocab.id_of("<|im_end|>") and span.cause != ABSENT


def test_template_rejecting_an_example_names_it(synth_root, tmp_path):
    rows = [{"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]},
            {"messages": [{"role": "assistant", "content": "b"}, {"role": "user", "content": "a"}]}]
    run = cli("labels", str(synth_root / "clean-llama3"), "--data", str(_rows_file(tmp_path, rows)))
    assert run.code == 0  # llama3's template does not check the order
    run = cli("labels", str(synth_root / "clean-gemma"), "--data", str(_rows_file(tmp_path, rows)))
    assert run.code == 2 and "example 1 (line 2): chat template raised" in run.stderr


@pytest.mark.parametrize("row, message", [
    ({"messages": [{"role": "user", "content": "\ud800"}, {"role": "assistant", "content": "b"}]},
     "example 1 (line 2): a message holds a lone surrogate"),
    ({"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}], "tools": "[{"},
     'example 1 (line 2): "tools" is not JSON'),
])
def test_an_example_the_renderer_refuses_is_named(synth_root, tmp_path, row, message):
    good = {"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]}
    run = cli("labels", str(synth_root / "clean-chatml"), "--data", str(_rows_file(tmp_path, [good, row])))
    assert run.code == 2 and message in run.stderr and len(run.stderr.splitlines()) <= 2


def test_gguf_pad_masking_points_at_the_gguf_key(real_gguf_models):
    report = _run(real_gguf_models.smollm2_gguf, collator="pad-id")
    (finding,) = report.findings
    assert finding.code == "SD602"
    assert finding.location.key == "tokenizer.ggml.padding_token_id"
    assert report.labels.failing(PAD_MASKED) == list(range(6))


def test_axolotl_trains_only_its_eot_tokens(synth_root):
    """Axolotl's defaults: eot_tokens = [eos_token]. A Qwen2.5 base model's eos is <|endoftext|>,
    its ChatML template ends turns with <|im_end|>: never trained, until eot_tokens names it."""
    report = _run(synth_root / "qwen-base-with-template", collator="axolotl")
    assert {s.cause for s in report.labels.spans} == {NOT_AN_EOT_TOKEN}
    (finding,) = report.findings
    assert finding.code == "SD601" and 'eot_tokens: ["<|im_end|>"]' in finding.fix and finding.location is None
    fixed = _run(synth_root / "qwen-base-with-template", collator="axolotl", eot_tokens=("<|im_end|>",))
    assert fixed.findings == [] and fixed.labels.spans_ok == 7
    first = fixed.labels.examples[0]
    trained_text = "".join(first.text[s:e] for (s, e), t in zip(first.offsets, first.trained) if t)
    assert trained_text == "The capital of France is Paris.<|im_end|>"
    clean = _run(synth_root / "clean-chatml", collator="axolotl")
    assert clean.findings == [] and clean.labels.spans_ok == 7


def test_eot_token_needs_the_axolotl_collator(synth_root):
    run = cli("labels", str(synth_root / "clean-chatml"), "--data", str(CHAT), "--eot-token", "<|im_end|>")
    assert run.code == 2 and "--collator axolotl" in run.stderr


@pytest.mark.parametrize("collator", ["full", "pad-id", "axolotl"])
def test_realworld_verdicts_without_ids_match_the_tokenized_ones(realworld, tmp_path, collator):
    data = _rows_file(tmp_path, ALTERNATING)
    checked = 0
    for folder in sorted(p for p in realworld.iterdir() if (p / "tokenizer.json").is_file()):
        try:
            tokenized = _run(folder, data, collator=collator, max_length=40)
        except StopdoctorError:
            continue  # no template, a template that rejects the rows, a broken file
        lazy = _run(folder, data, collator=collator, max_length=40, tokenize_first=0)
        assert [(s.message, s.end_id, s.trained, s.cause) for s in lazy.labels.spans] == \
            [(s.message, s.end_id, s.trained, s.cause) for s in tokenized.labels.spans], folder.name
        checked += 1
    assert checked >= 2


SNAPSHOTS = {
    "labels-chatml-ok-assistant-only.txt": ["labels", "fixtures/examples/chatml-ok", "--data", "fixtures/labels/chat.jsonl",
                                            "--collator", "assistant-only", "--show", "1"],
    "labels-chatml-ok-max-length.json": ["labels", "--json", "fixtures/examples/chatml-ok", "--data",
                                         "fixtures/labels/chat.jsonl", "--max-length", "60", "--show", "1"],
}


@pytest.mark.parametrize("name", sorted(SNAPSHOTS))
def test_snapshot(name, monkeypatch):
    """Fixed width, colour off, version redacted; STOPDOCTOR_UPDATE_SNAPSHOTS=1 regenerates."""
    import os

    from stopdoctor import __version__

    monkeypatch.chdir(ROOT)
    run = cli(*SNAPSHOTS[name], env={"NO_COLOR": "1", "COLUMNS": "100"})
    assert run.code in (0, 1), run.stderr
    text = run.stdout.replace(__version__, "<version>")
    path = ROOT / "tests" / "snapshots" / name
    if os.environ.get("STOPDOCTOR_UPDATE_SNAPSHOTS"):
        path.write_text(text)
    assert text == path.read_text()


def test_limit_below_one_is_refused_by_the_api_as_by_the_cli():
    """A limit of 0 must not reach the labels stage, where no example would be judged clean."""
    from stopdoctor.core.errors import InputError

    model = ROOT / "fixtures" / "examples" / "chatml-ok"
    with pytest.raises(InputError, match="--limit must be at least 1"):
        check_labels(str(model), str(CHAT), limit=0)
    run = cli("labels", str(model), "--data", str(CHAT), "--limit", "0")
    assert run.code == 2 and "--limit must be at least 1" in run.stderr
