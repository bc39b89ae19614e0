"""tokenizer.json for lookups (#28): `inspect` asks tokenizer.json for ids, texts, the size and the
post-processor, none of which depend on a BPE model's merges, so the library loads the file with an
empty merges array; the whole file is loaded on the first encode. Work, never seconds: which loads
ran, and what each answers."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import tokenizers

from stopdoctor.facts.vocab import Vocabulary, for_lookups, read_tokenizer_file
from tests.helpers import cli

ROOT = Path(__file__).resolve().parent.parent
CHATML = ROOT / "fixtures" / "examples" / "chatml-ok"


@pytest.fixture
def loads(monkeypatch):
    """Each load of the library's: ("file", path) or ("str", the document's merges)."""
    seen: list[tuple[str, object]] = []
    from_file, from_str = tokenizers.Tokenizer.from_file, tokenizers.Tokenizer.from_str

    class Recording:
        @staticmethod
        def from_file(path, *args, **kwargs):
            seen.append(("file", Path(path).name))
            return from_file(path, *args, **kwargs)

        @staticmethod
        def from_str(text, *args, **kwargs):
            model = json.loads(text)["model"]
            seen.append(("str", model.get("merges"), len(model.get("vocab", ()))))
            return from_str(text, *args, **kwargs)

    monkeypatch.setattr(tokenizers, "Tokenizer", Recording)
    return seen


def test_inspect_reads_tokenizer_json_without_its_merges(loads) -> None:
    """The json module reads the file without its merges; the library loads only its small parts
    (no vocabulary, no merges), to refuse what it refuses there."""
    result = cli("inspect", "--json", str(CHATML))
    assert result.code in (0, 1), result.stderr
    assert loads == [("str", [], 0)]


def test_an_encode_loads_the_whole_file_once(loads) -> None:
    vocab = Vocabulary()
    with for_lookups():
        read_tokenizer_file(vocab, CHATML / "tokenizer.json")
    whole = tokenizers.Tokenizer.from_str((CHATML / "tokenizer.json").read_text())
    loads.clear()
    text = "hello world, the merges matter here"
    assert vocab.tokenizer().encode(text).ids == whole.encode(text).ids
    assert vocab.tokenizer() is vocab.tokenizer()
    assert loads == [("file", "tokenizer.json")]


def test_lookups_without_merges_answer_as_the_whole_file() -> None:
    vocab = Vocabulary()
    with for_lookups():
        read_tokenizer_file(vocab, CHATML / "tokenizer.json")
    whole = tokenizers.Tokenizer.from_file(str(CHATML / "tokenizer.json"))
    size = whole.get_vocab_size(with_added_tokens=True)
    assert vocab.size == size
    assert [vocab.text_of(i) for i in range(size + 2)] == [whole.id_to_token(i) for i in range(size + 2)]
    assert all(vocab.id_of(text) == token_id for text, token_id in whole.get_vocab(with_added_tokens=True).items())
    assert vocab._tokenizer is None  # nothing encoded: the whole file never loaded


def test_a_command_that_encodes_loads_the_file_whole_once(loads) -> None:
    """probe-stop encodes: one whole load, never a load without merges first (which would be
    paid twice)."""
    assert cli("probe-stop", "\\nUser:", "--model", str(CHATML)).code in (0, 1)
    assert loads == [("file", "tokenizer.json")]


def _with_tokenizer(tmp_path: Path, change) -> Path:
    model = tmp_path / "m"
    shutil.copytree(CHATML, model)
    document = json.loads((model / "tokenizer.json").read_text())
    change(document)
    (model / "tokenizer.json").write_text(json.dumps(document, indent=2, ensure_ascii=False))
    return model


def test_a_file_not_laid_out_as_the_library_writes_it_is_loaded_whole(tmp_path, loads) -> None:
    def merges_first(document):
        model = document["model"]
        document["model"] = {"merges": model.pop("merges"), **model}

    model = _with_tokenizer(tmp_path, merges_first)
    assert cli("inspect", "--json", str(model)).code in (0, 1)
    assert loads == [("file", "tokenizer.json")]


def test_an_error_outside_the_merges_is_the_librarys_own(tmp_path) -> None:
    def bad_pre_tokenizer(document):
        document["pre_tokenizer"] = {"type": "Split", "pattern": {"Regex": "(("}, "behavior": "Isolated", "invert": False}

    result = cli("inspect", str(_with_tokenizer(tmp_path, bad_pre_tokenizer)))
    assert result.code == 2
    assert "tokenizer.json: valid JSON, but not a tokenizer the tokenizers library reads: Oniguruma error" in result.stderr


def test_a_merge_of_unknown_tokens_is_refused_by_the_commands_that_encode(tmp_path) -> None:
    """What loading without the merges gives up: `inspect`, which encodes nothing here, reads the
    file; a command that encodes (probe-stop) loads it whole and says what the library says."""
    def unknown_merge(document):
        document["model"]["merges"].append(["zzzq", "qqqz"])

    model = _with_tokenizer(tmp_path, unknown_merge)
    assert cli("inspect", "--json", str(model)).code in (0, 1)
    probe = cli("probe-stop", "\\nUser:", "--model", str(model))
    assert probe.code == 2
    assert "Token `zzzq` out of vocabulary" in probe.stderr
    gate = cli("check", str(model))  # the CI gate loads it whole: a tokenizer the runtime cannot load fails it
    assert gate.code == 2, gate.stdout + gate.stderr
    assert "zzzq" in gate.stdout + gate.stderr


def _tokenizer_json(vocab, added, model_type="BPE") -> str:
    model = {"type": model_type, "vocab": vocab, "merges": []} if model_type == "BPE" else {"type": model_type, "unk_id": None, "vocab": vocab}
    tokens = [{"id": i, "content": c, "single_word": False, "lstrip": False, "rstrip": False, "normalized": False, "special": True}
              for i, c in added]
    return json.dumps({"version": "1.0", "truncation": None, "padding": None, "added_tokens": tokens, "normalizer": None,
                       "pre_tokenizer": None, "post_processor": None, "decoder": None, "model": model})


@pytest.mark.parametrize("vocab,added,model_type", [
    ({"a": 0, "b": 1, "<s>": 2}, [(2, "<s>"), (3, "<x>")], "BPE"),  # in the vocabulary, and past it
    ({"a": 0, "b": 1, "<s>": 2}, [(7, "<x>"), (9, "<y>")], "BPE"),  # ids the library renumbers 3, 4
    ({"a": 0, "b": 1, "<s>": 2}, [(1, "<x>")], "BPE"),  # an id of another token: the library gives 3
    ({"a": 0, "b": 0, "c": 5}, [], "BPE"),  # ids not 0..n-1
    ({"a": 0, "b": 1}, [(2, "<x>"), (3, "<x>")], "BPE"),  # one content twice
    ([["a", 0.0], ["b", -1.0], ["a", -2.0]], [(3, "<x>")], "Unigram"),  # one piece twice
    ([["a", 0.0], ["b", -1.0]], [(2, "<x>")], "Unigram"),
])
def test_the_json_read_gives_the_librarys_ids_or_leaves_the_file_to_it(vocab, added, model_type) -> None:
    """tokenizers renumbers added tokens (AddedVocabulary.add_tokens); a file whose ids are not
    the library's, or whose vocabulary repeats, is left to the library (None)."""
    from stopdoctor.facts.tokenizer_json import read_plain

    text = _tokenizer_json(vocab, added, model_type)
    library = tokenizers.Tokenizer.from_str(text)
    plain = read_plain(text)
    if plain is None:
        return  # the library answers; nothing to compare
    assert {i: c for i, c, _ in plain.added} == {i: t.content for i, t in library.get_added_tokens_decoder().items()}
    assert plain.size == library.get_vocab_size(with_added_tokens=True)
    texts = vocab if isinstance(vocab, dict) else [piece for piece, _ in vocab]
    assert all(plain.token_to_id(t) == library.token_to_id(t) for t in texts)
    assert all(plain.id_to_token(i) == library.id_to_token(i) for i in range(len(texts)))


def test_repeated_or_renumbered_tokens_are_left_to_the_library() -> None:
    from stopdoctor.facts.tokenizer_json import read_plain

    assert read_plain(_tokenizer_json({"a": 0, "b": 1, "<s>": 2}, [(7, "<x>")])) is None
    assert read_plain(_tokenizer_json({"a": 0, "b": 0, "c": 5}, [])) is None
    assert read_plain(_tokenizer_json({"a": 0, "b": 1}, [(2, "<x>"), (3, "<x>")])) is None
    assert read_plain(_tokenizer_json({"a": 0, "b": 1}, [(2, "<x>"), (3, "<y>")])) is not None
