"""probe-stop analysis: how a stop string tokenizes after real preceding text, and what to use instead."""

from __future__ import annotations

import functools
import subprocess
import sys
from pathlib import Path

import pytest
from tokenizers import Tokenizer, decoders, models, pre_tokenizers

from stopdoctor.analysis.probe import DEFAULT_CONTEXTS, SAMPLE_ANSWERS, FalsePositive, StopProbe, probe_stop

from .helpers import test_models_dir


@functools.cache
def tiny_bytelevel() -> Tokenizer:
    """A GPT-2-style byte-level BPE with just the merges the facts below need, built in memory."""
    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    merges = [("U", "s"), ("Us", "e"), ("Use", "r"), ("Ġ", "User"), ("Ċ", "Ċ"), ("ĠĊ", "Ċ"), ("Ġ", "Ċ")]
    vocab = {tok: i for i, tok in enumerate(alphabet)}
    for a, b in merges:
        vocab.setdefault(a + b, len(vocab))
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.add_special_tokens(["<|im_end|>"])
    return tokenizer


def smollm2_path() -> Path | None:
    path = test_models_dir() / "smollm2-hf" / "tokenizer.json"
    return path if path.is_file() else None


needs_smollm2 = pytest.mark.skipif(smollm2_path() is None, reason="STOPDOCTOR_TEST_MODELS/smollm2-hf absent")


@functools.cache
def smollm2() -> Tokenizer:
    return Tokenizer.from_file(str(smollm2_path()))


def by_context(probe: StopProbe) -> dict:
    return {c.context_name: c for c in probe.contexts}


def test_word_merges_with_preceding_space_and_id_match_misses():
    tokenizer = tiny_bytelevel()
    [probe] = probe_stop(tokenizer, ["User:"], corpus=())
    user = tokenizer.token_to_id("User")
    assert probe.standalone_ids == [user, tokenizer.token_to_id(":")]
    after_space = by_context(probe)["after space"]
    assert after_space.tokens == ["ĠUser", ":"]
    assert (after_space.aligned, after_space.exact, after_space.merged_prefix) == (False, False, " ")
    assert by_context(probe)["end of sentence"].exact
    assert probe.id_match_misses == 1
    assert probe.variants == [probe.standalone_ids, after_space.ids]
    assert any("decoded text" in r for r in probe.recommendations)
    assert any("'\\nUser:'" in r for r in probe.recommendations)


def test_double_newline_stop_merges_with_preceding_newline():
    tokenizer = tiny_bytelevel()
    [probe] = probe_stop(tokenizer, ["\n\nUser:"], corpus=())
    after_newline = by_context(probe)["after newline"]
    assert after_newline.tokens[0] == "ĊĊ"
    assert not after_newline.aligned and after_newline.merged_prefix == "\n"
    assert probe.id_match_misses >= 1


def test_single_newline_anchor_is_stable_everywhere():
    [probe] = probe_stop(tiny_bytelevel(), ["\nUser:"], corpus=())
    assert probe.id_match_misses == 0
    assert all(c.exact and c.aligned for c in probe.contexts)
    assert probe.variants == [probe.standalone_ids]
    assert probe.recommendations == []


@pytest.mark.parametrize("stop", ["User:", "\n\nUser:", "\nUser:", "。", "🎉", "Paris"])
def test_covering_tokens_decode_to_merged_prefix_plus_stop(stop):
    tokenizer = tiny_bytelevel()
    [probe] = probe_stop(tokenizer, [stop], corpus=())
    assert len(probe.contexts) == len(DEFAULT_CONTEXTS)
    for ctx in probe.contexts:
        assert tokenizer.decode(ctx.ids) == ctx.merged_prefix + stop, ctx.context_name
        assert ctx.context.endswith(ctx.merged_prefix)
        # A miss is counted exactly where the standalone ids are not a run of the full encoding.
    misses = 0
    for ctx in probe.contexts:
        full = tokenizer.encode(ctx.context + stop, add_special_tokens=False).ids
        n = len(probe.standalone_ids)
        misses += not any(full[i : i + n] == probe.standalone_ids for i in range(len(full) - n + 1))
    assert probe.id_match_misses == misses


def test_special_token_stop_reports_its_id():
    tokenizer = tiny_bytelevel()
    [probe] = probe_stop(tokenizer, ["<|im_end|>"], corpus=())
    expected = tokenizer.token_to_id("<|im_end|>")
    assert probe.special_token_id == expected
    assert probe.standalone_ids == [expected]
    assert any(f"special token id {expected}" in r for r in probe.recommendations)
    [plain] = probe_stop(tokenizer, ["im_end"], corpus=())
    assert plain.special_token_id is None


def test_false_positives_found_with_offset_and_excerpt():
    corpus = [("chat", "Example:\nUser: hi\nBot: hello"), ("clean", "Nothing to see.")]
    [probe] = probe_stop(tiny_bytelevel(), ["User:"], corpus=corpus)
    assert probe.samples_checked == 2
    assert probe.false_positives == [FalsePositive(sample="chat", excerpt=corpus[0][1], offset=9)]
    assert any("ordinary answers" in r and "chat" in r for r in probe.recommendations)


def test_builtin_sample_answers_are_checked_by_default():
    assert len(SAMPLE_ANSWERS) >= 30
    assert len({name for name, _ in SAMPLE_ANSWERS}) == len(SAMPLE_ANSWERS)
    user_probe, rare_probe = probe_stop(tiny_bytelevel(), ["User:", "<<END-OF-REPLY>>"])
    assert user_probe.samples_checked == len(SAMPLE_ANSWERS)
    # The sample quotes transcripts, so a bare role label cuts normal answers short.
    assert {fp.sample for fp in user_probe.false_positives} >= {"transcript-example"}
    for fp in user_probe.false_positives:
        text = dict(SAMPLE_ANSWERS)[fp.sample]
        assert text[fp.offset : fp.offset + len("User:")] == "User:"
        assert "User:" in fp.excerpt
    assert rare_probe.false_positives == []


def test_turn_endings_extra_contexts_and_user_header():
    [probe] = probe_stop(
        tiny_bytelevel(),
        ["User:"],
        extra_contexts={"after quote": 'he said "'},
        turn_endings=["<|im_end|>\n"],
        user_header="<|im_start|>user\n",
        corpus=(),
    )
    names = by_context(probe)
    assert names["after quote"].context == 'he said "'
    turn = [c for c in probe.contexts if c.context == "<|im_end|>\n"]
    assert len(turn) == 1 and turn[0].exact
    assert any("'<|im_start|>user\\n'" in r for r in probe.recommendations)


def test_probe_module_imports_no_torch_or_transformers():
    code = "import sys, stopdoctor.analysis.probe, stopdoctor.actions.generate.stopmatch; print(sorted(m for m in ('torch', 'transformers') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


@needs_smollm2
def test_smollm2_user_colon_facts():
    [probe] = probe_stop(smollm2(), ["User:"], corpus=())
    assert probe.standalone_ids == [11126, 42]
    after_space = by_context(probe)["after space"]
    assert after_space.context == "Paris "
    assert after_space.ids == [11122, 42] and after_space.tokens[0] == "ĠUser"
    assert probe.id_match_misses >= 1


@needs_smollm2
def test_smollm2_double_newline_merges_and_single_newline_stays():
    double, single = probe_stop(smollm2(), ["\n\nUser:", "\nUser:"], turn_endings=["<|im_end|>\n"], corpus=())
    assert double.standalone_ids == [198, 198, 11126, 42]
    after_newline = by_context(double)["after newline"]
    assert after_newline.context == "Paris.\n"
    assert after_newline.ids[0] == 1116 and not after_newline.aligned
    assert after_newline.merged_prefix == "\n"
    assert single.standalone_ids == [198, 11126, 42]
    for name in ("after space", "after newline"):
        assert by_context(single)[name].ids == [198, 11126, 42]
    assert single.id_match_misses == 0


@needs_smollm2
def test_smollm2_im_end_is_one_special_token():
    [probe] = probe_stop(smollm2(), ["<|im_end|>"], corpus=())
    assert probe.special_token_id == 2
    assert all(c.ids == [2] for c in probe.contexts)
