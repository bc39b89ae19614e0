"""Incremental detokenization and stop-string matching, checked against decoding the whole output.

The reference decodes ids[:k+1] at every step and looks for the earliest stop: the streaming code
must agree on the step, the offset and the emitted text, and must never emit a stop string.
"""

from __future__ import annotations

import functools
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from stopdoctor.actions.generate.stopmatch import IncrementalDetokenizer, StopHit, StopStringMatcher

from .helpers import test_models_dir

CORPUS_LINES = [
    "The capital of France is Paris.",
    "User: what is the capital of France?\nAssistant: Paris.",
    "Paris.\n\nUser: thanks!\n\nAssistant: you're welcome.",
    "- item one\n- item two\n- item three",
    "def f(x):\n    return x + 1\n\nprint(f(2024))",
    "巴黎是法国的首都。东京是日本的首都。北京是中国的首都。",
    "我们今天去公园吧！好的，没问题。",
    "done 🎉 great job 👍 see you 😀 ✨ 🚀",
    "Café, naïve, façade — résumé; ÄÖÜ ß.",
    "Subject: meeting at 10:30\n\nHi team, see the notes below.",
    "### Step 1\n**bold** and _italic_ text, `code` too.",
    "Ответ: Москва. Привет, мир!",
]


@functools.cache
def trained_tokenizer() -> Tokenizer:
    """A small byte-level BPE like GPT-2/SmolLM2's, trained here so the test needs no files."""
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=700,
        special_tokens=["<|endoftext|>", "<|im_end|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(CORPUS_LINES * 20, trainer)
    return tokenizer


def smollm2_path() -> Path | None:
    path = test_models_dir() / "smollm2-hf" / "tokenizer.json"
    return path if path.is_file() else None


@functools.cache
def smollm2_tokenizer() -> Tokenizer:
    path = smollm2_path()
    assert path is not None
    return Tokenizer.from_file(str(path))


TOKENIZERS = [
    pytest.param(trained_tokenizer, id="trained-bpe"),
    pytest.param(
        smollm2_tokenizer,
        id="smollm2",
        marks=pytest.mark.skipif(smollm2_path() is None, reason="STOPDOCTOR_TEST_MODELS/smollm2-hf absent"),
    ),
]

ALPHABET = list("ab xyU:s.\n-!") + list("巴黎。首都") + ["🎉", "😀", "é", "ß"]


def reference(tokenizer: Tokenizer, ids: list[int], stops: list[str], skip_special: bool = False):
    """The slow, obviously right way: decode everything at every step, search the whole text."""
    for k in range(len(ids)):
        text = tokenizer.decode(ids[: k + 1], skip_special_tokens=skip_special)
        found = [(text.find(s), len(s), s) for s in stops if s in text]
        if found:
            offset, _, stop = min(found)
            return StopHit(stop=stop, step=k, text_offset=offset), text[:offset]
    return None, tokenizer.decode(ids, skip_special_tokens=skip_special)


def stream(tokenizer: Tokenizer, ids: list[int], stops: list[str], skip_special: bool = False):
    """What `generate` does: push each id, feed the new text, stop at the first hit."""
    detok = IncrementalDetokenizer(tokenizer, skip_special_tokens=skip_special)
    matcher = StopStringMatcher(stops)
    pieces: list[str] = []
    for step, token_id in enumerate(ids):
        emitted, hit = matcher.feed(detok.push(token_id), step)
        pieces.append(emitted)
        if hit is not None:
            return hit, pieces
    emitted, hit = matcher.feed(detok.flush(), max(len(ids) - 1, 0))
    pieces.append(emitted)
    if hit is None:
        pieces.append(matcher.flush())
    return hit, pieces


@st.composite
def text_and_stops(draw):
    text = draw(st.text(alphabet=st.sampled_from(ALPHABET), max_size=40))
    n_stops = draw(st.integers(1, 3))
    stops = []
    for _ in range(n_stops):
        if text and draw(st.booleans()):
            start = draw(st.integers(0, len(text) - 1))
            end = draw(st.integers(start + 1, min(len(text), start + 6)))
            stops.append(text[start:end])
        else:
            stops.append(draw(st.text(alphabet=st.sampled_from(ALPHABET), min_size=1, max_size=4)))
    return text, stops


PROPERTY_SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@pytest.mark.parametrize("get_tokenizer", TOKENIZERS)
@PROPERTY_SETTINGS
@given(case=text_and_stops())
def test_streaming_agrees_with_whole_text_reference(get_tokenizer, case):
    tokenizer = get_tokenizer()
    text, stops = case
    ids = tokenizer.encode(text, add_special_tokens=False).ids
    expected_hit, expected_text = reference(tokenizer, ids, stops)
    hit, pieces = stream(tokenizer, ids, stops)
    assert hit == expected_hit
    assert "".join(pieces) == expected_text
    for stop in stops:
        assert stop not in "".join(pieces), "stop text leaked to the output"


@pytest.mark.parametrize("get_tokenizer", TOKENIZERS)
@PROPERTY_SETTINGS
@given(data=st.data())
def test_random_ids_including_broken_utf8_agree_with_reference(get_tokenizer, data):
    # Arbitrary id sequences produce byte-level pieces of characters, lone continuation bytes
    # and special tokens: the text must still come out exactly as a whole decode.
    tokenizer = get_tokenizer()
    vocab = tokenizer.get_vocab_size()
    ids = data.draw(st.lists(st.integers(0, vocab - 1), max_size=30))
    skip_special = data.draw(st.booleans())
    full = tokenizer.decode(ids, skip_special_tokens=skip_special)
    stops = [s for s in data.draw(st.lists(st.sampled_from(ALPHABET), min_size=1, max_size=2))]
    if full and data.draw(st.booleans()):
        start = data.draw(st.integers(0, len(full) - 1))
        candidate = full[start : start + data.draw(st.integers(1, 4))]
        if "\ufffd" not in candidate:  # U+FFFD means "incomplete": not a stop we promise to match
            stops.append(candidate)
    expected_hit, expected_text = reference(tokenizer, ids, stops, skip_special)
    hit, pieces = stream(tokenizer, ids, stops, skip_special)
    assert hit == expected_hit
    assert "".join(pieces) == expected_text


@pytest.mark.parametrize("get_tokenizer", TOKENIZERS)
@PROPERTY_SETTINGS
@given(data=st.data())
def test_detokenizer_emits_every_final_character_at_its_step(get_tokenizer, data):
    tokenizer = get_tokenizer()
    vocab = tokenizer.get_vocab_size()
    ids = data.draw(st.lists(st.integers(0, vocab - 1), max_size=30))
    detok = IncrementalDetokenizer(tokenizer)
    so_far = ""
    for k, token_id in enumerate(ids):
        so_far += detok.push(token_id)
        assert so_far == tokenizer.decode(ids[: k + 1], skip_special_tokens=False).rstrip("\ufffd")
    assert so_far + detok.flush() == tokenizer.decode(ids, skip_special_tokens=False)


def test_stop_split_across_tokens_is_found_and_not_leaked():
    tokenizer = trained_tokenizer()
    text = "The capital is Paris.\nUser: and Spain?"
    ids = tokenizer.encode(text).ids
    pieces_by_token = [tokenizer.decode([i]) for i in ids]
    # The premise: no single token holds the whole stop.
    assert not any("User:" in piece for piece in pieces_by_token)
    hit, pieces = stream(tokenizer, ids, ["User:"])
    assert hit is not None and hit.stop == "User:" and hit.text_offset == text.index("User:")
    assert "".join(pieces) == "The capital is Paris.\n"
    # The hit comes at the token that completes ":" and not before.
    assert tokenizer.decode(ids[: hit.step + 1]).endswith("User:")


def test_partial_stop_is_held_back_then_released_when_it_diverges():
    matcher = StopStringMatcher(["User:"])
    assert matcher.feed("Paris.\nUs", 0) == ("Paris.\n", None)
    assert matcher.feed("e", 1) == ("", None)
    assert matcher.feed("ful", 2) == ("Useful", None)
    assert matcher.feed("\nUser", 3) == ("\n", None)
    assert matcher.flush() == "User"


def test_stop_at_very_start():
    tokenizer = trained_tokenizer()
    ids = tokenizer.encode("User: hello").ids
    hit, pieces = stream(tokenizer, ids, ["User:"])
    assert hit is not None and hit.text_offset == 0
    assert "".join(pieces) == ""


def test_overlapping_stops_earliest_start_wins():
    matcher = StopStringMatcher(["b", "ab"])
    assert matcher.feed("xa", 0) == ("x", None)
    emitted, hit = matcher.feed("b", 1)
    # "ab" starts before "b": stopping at "b" would leak the "a" of "ab".
    assert (emitted, hit) == ("", StopHit(stop="ab", step=1, text_offset=1))


def test_overlapping_stops_shorter_one_completing_first_wins():
    matcher = StopStringMatcher(["abc", "b"])
    assert matcher.feed("a", 0) == ("", None)
    assert matcher.feed("b", 1) == ("a", StopHit(stop="b", step=1, text_offset=1))


def test_multiple_stops_list_order_does_not_matter():
    for stops in (["END", "\n\n"], ["\n\n", "END"]):
        matcher = StopStringMatcher(stops)
        emitted, hit = matcher.feed("one\n\ntwo END", 0)
        assert emitted == "one" and hit == StopHit(stop="\n\n", step=0, text_offset=3)


def test_no_output_after_hit():
    matcher = StopStringMatcher(["."])
    assert matcher.feed("Hi. there", 0) == ("Hi", StopHit(".", 0, 2))
    assert matcher.feed("more", 1) == ("", None)
    assert matcher.flush() == ""


def test_unicode_stops_through_partial_utf8_tokens():
    tokenizer = trained_tokenizer()
    text = "巴黎是法国的首都。done 🎉 next"
    ids = tokenizer.encode(text).ids
    for stop in ("。", "🎉", "首都"):
        hit, pieces = stream(tokenizer, ids, [stop])
        assert hit is not None and hit.text_offset == text.index(stop)
        assert "".join(pieces) == text[: text.index(stop)]
        assert all("\ufffd" not in p for p in pieces)


def test_special_tokens_kept_or_skipped():
    tokenizer = trained_tokenizer()
    ids = tokenizer.encode("Paris.").ids + [tokenizer.token_to_id("<|im_end|>")]
    hit, pieces = stream(tokenizer, ids, ["<|im_end|>"])
    assert hit is not None and "".join(pieces) == "Paris."
    hit, pieces = stream(tokenizer, ids, ["<|im_end|>"], skip_special=True)
    assert hit is None and "".join(pieces) == "Paris."


def test_empty_stop_rejected():
    with pytest.raises(ValueError):
        StopStringMatcher(["User:", ""])


class CountingTokenizer:
    """Counts how many ids each decode call touches: the per-token work of the detokenizer."""

    def __init__(self, inner: Tokenizer) -> None:
        self.inner = inner
        self.ids_decoded = 0

    def decode(self, ids, skip_special_tokens=False):
        self.ids_decoded += len(ids)
        return self.inner.decode(ids, skip_special_tokens=skip_special_tokens)


def test_detokenizer_work_per_token_does_not_grow_with_output_length():
    tokenizer = trained_tokenizer()
    ids = tokenizer.encode("\n".join(CORPUS_LINES * 20)).ids
    assert len(ids) > 2000
    counting = CountingTokenizer(tokenizer)
    detok = IncrementalDetokenizer(counting)  # type: ignore[arg-type]
    out = "".join(detok.push(i) for i in ids) + detok.flush()
    assert out == tokenizer.decode(ids)
    # Decoding the whole output each step would touch ~len(ids)**2 / 2 ids.
    assert counting.ids_decoded < 20 * len(ids)


@PROPERTY_SETTINGS
@given(data=st.data())
def test_held_back_text_is_the_longest_stop_prefix_at_the_end(data):
    """The matcher releases everything but the longest suffix that could still become a stop:
    checked against the brute-force definition, chunk by chunk (periodic stops included)."""
    stops = data.draw(st.lists(st.text(alphabet="ab", min_size=1, max_size=7), min_size=1, max_size=3))
    chunks = data.draw(st.lists(st.text(alphabet="ab", max_size=4), max_size=12))
    matcher = StopStringMatcher(stops)
    seen = ""
    for step, chunk in enumerate(chunks):
        seen += chunk
        if any(stop in seen for stop in stops):
            break
        emitted, hit = matcher.feed(chunk, step)
        assert hit is None
        held = max((k for stop in stops for k in range(len(stop)) if seen.endswith(stop[:k])), default=0)
        assert matcher._consumed - matcher._emitted == held


def test_a_very_long_stop_string_is_matched_across_many_chunks():
    stop = "ab" * 50_000 + "c"
    matcher = StopStringMatcher([stop, "zz"])
    text = "x" + "ab" * 60_000 + "c"
    pieces, hit = [], None
    for step in range(0, len(text), 3):
        emitted, hit = matcher.feed(text[step:step + 3], step)
        pieces.append(emitted)
        if hit:
            break
    assert hit is not None and hit.stop == stop and hit.text_offset == 1 + 20_000
    assert "".join(pieces) == text[:hit.text_offset]
