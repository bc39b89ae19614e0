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
            seen.append(("str", json.loads(text)["model"].get("merges")))
            return from_str(text, *args, **kwargs)

    monkeypatch.setattr(tokenizers, "Tokenizer", Recording)
    return seen


def test_inspect_loads_tokenizer_json_once_without_its_merges(loads) -> None:
    result = cli("inspect", "--json", str(CHATML))
    assert result.code in (0, 1), result.stderr
    assert loads == [("str", [])]


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
