"""stopdoctor's GGUF tokenizer against llama.cpp's own: `POST /tokenize` of a real llama-server
(tests/llamaserver_fixture.py) on SmolLM2 (BPE, pre-tokenizer `smollm`) and Gemma 3 270M
(SentencePiece), over the strings probe-stop encodes (each stop after each of its contexts), chat
markers, unicode, whitespace runs and digits; then every pre-tokenizer family stopdoctor models,
on SmolLM2's vocabulary with `tokenizer.ggml.pre` rewritten (tests/gguf_rewrite.py).

Before stopdoctor split text by llama.cpp's pre-tokenizer table and made special the tokens
llama.cpp makes control by their text, SmolLM2 differed on 17 of these 573 strings (whitespace
before digits: "    0", "\\n\\n\\n1"), 4 more with parse_special off, Gemma on 13 with parse_special
off (`</s>`), and the `default`, `falcon` and `chatglm` families on over a third of them."""

from __future__ import annotations

import random

import pytest

from stopdoctor.analysis.probe import DEFAULT_CONTEXTS
from stopdoctor.facts.gguf_pretokenizer import BY_NAME
from stopdoctor.facts.model_facts import load_model
from tests.gguf_rewrite import pack_string, with_value
from tests.llamaserver_fixture import running_llama_server

pytestmark = pytest.mark.slow

STOPS = ["<|im_end|>", "<|im_start|>", "<|im_start|>user\n", "<|endoftext|>", "<end_of_turn>", "<start_of_turn>",
         "<start_of_turn>user\n", "<eos>", "<bos>", "</s>", "User:", "\nUser:", "\n\nUser:", "Human:", "###",
         "\n\n", "</think>", "Observation:", "<|eot_id|>"]
OTHER = ["What is the capital of France?", "  two  spaces\nand 日本語 🙂", " Hello", "   ", "\t\ttab", "\n\n\n",
         "    0", "\n\n\n1", " the\n\n\n1", "x   1234567", "don't I'm WE'LL", "1234567890 2024", "Café naïve e\u0301",
         "👩\u200d👩\u200d👧 family", "\u00a0nbsp\u3000ideographic", "<|im_end", "im_end|>", "x<|im_end|>y",
         "<|im_start|>assistant\nParis<|im_end|>\n", "<start_of_turn>model\nParis<end_of_turn>\n",
         " <|im_end|> ", "<end_of_turn><eos>", "a\r\nb", "Ｆｕｌｌ width", "İstanbul", "$x^2+y^2$ <= 10 || a->b",
         "def f(x):\n    return x  # comment\n", "ﬁ ligature", "\ufeffbom", "zero\u200bwidth"]
PROBES = list(dict.fromkeys(STOPS + OTHER + [context + stop for context in DEFAULT_CONTEXTS.values() for stop in STOPS]))

# Random strings of the pieces that tokenizers disagree on, fixed by the seed.
_POOL = list("abcXYZ  \n\n\t019.,:;'\"!?-_/\\()[]{}<>|=+*&^%$#@~`") + [
    "é", "ü", "日", "本", "🙂", "\u0301", "\u200d", "\u00a0", "\u3000", "ا", "ह", "ก", "\r", "'s", "'RE", "'Ll",
    "  ", "   ", "\n\n\n", "1234", "12345", "<|im_end|>", "<end_of_turn>", "</s>", "Hello", " the", "\r\n"]
_RANDOM = random.Random(20)
RANDOM = ["".join(_RANDOM.choice(_POOL) for _ in range(_RANDOM.randint(1, 30))) for _ in range(300)]


def _differences(tokenizer, server, texts, **options) -> list[tuple[str, list[int], list[int]]]:
    add = bool(options.get("add_special"))
    out = []
    for text in texts:
        ours = tokenizer.encode(text, add_special_tokens=add).ids
        theirs = server.tokenize(text, **options)
        if ours != theirs:
            out.append((text, ours, theirs))
    return out


@pytest.mark.parametrize("model", ["smollm2", "gemma"])
def test_gguf_tokenizer_matches_llama_server(model, request):
    server = request.getfixturevalue("llama_server" if model == "smollm2" else "llama_server_gemma")
    tokenizer = load_model(str(server.model)).vocab.tokenizer()
    texts = PROBES + RANDOM
    assert len(texts) > 500
    # parse_special (the server's default): how a prompt, a template's output and a stop string are
    # tokenized; add_special: with the BOS the vocabulary asks for (Gemma's <bos>).
    assert _differences(tokenizer, server, texts) == []
    assert _differences(tokenizer, server, texts, add_special=True) == []


def test_special_token_text_without_parse_special(llama_server, llama_server_gemma):
    """parse_special=false: control tokens are plain text to llama.cpp, as special added tokens are to
    `encode_special_tokens`. Gemma's `</s>` (id 212) is user-defined in the file; llama.cpp makes it
    control because its text is on its end-of-generation list (and logs so), and so does stopdoctor
    (before, it split 13 of these strings differently)."""
    assert "control-looking token:    212 '</s>' was not control-type" in llama_server_gemma.log.read_text()
    for server in (llama_server, llama_server_gemma):
        tokenizer = load_model(str(server.model)).vocab.tokenizer()
        tokenizer.encode_special_tokens = True
        assert _differences(tokenizer, server, PROBES, parse_special=False) == []


REPRESENTATIVES = sorted({pre.type_name + ("+ignore_merges" if pre.ignore_merges else ""): name
                          for name, pre in reversed(BY_NAME.items())}.items())


@pytest.mark.parametrize("family, name", REPRESENTATIVES, ids=[f for f, _ in REPRESENTATIVES])
def test_each_pre_tokenizer_family_splits_as_llama_cpp(family, name, real_gguf_models, tmp_path, monkeypatch):
    """SmolLM2's vocabulary under another `tokenizer.ggml.pre`: llama-server applies that family's
    expressions, and so must stopdoctor (default, falcon and chatglm differed on over a third of
    these strings before, smollm on one in ten)."""
    monkeypatch.setenv("STOPDOCTOR_CACHE", str(tmp_path / "cache"))
    path = with_value(real_gguf_models.smollm2_gguf, tmp_path / f"{name}.gguf", "tokenizer.ggml.pre", pack_string(name))
    tokenizer = load_model(str(path)).vocab.tokenizer()
    with running_llama_server(path, tmp_path / "server.log") as server:
        assert _differences(tokenizer, server, PROBES + RANDOM) == []


def _retyped(source, target, token_id: int, token_type: int):
    from stopdoctor.facts.gguf import read_header
    from tests.gguf_rewrite import pack_int32_array

    types = [int(t) for t in read_header(source).token_types]
    types[token_id] = token_type
    return with_value(source, target, "tokenizer.ggml.token_type", pack_int32_array(types))


def test_a_turn_marker_typed_ordinary_is_split_by_llama_cpp_and_flagged(real_gguf_models, tmp_path):
    """llama.cpp #7062: SmolLM2's <|im_start|> (id 1) typed normal. llama-server splits it into
    pieces, and SD273 says so; typed control (the real file) it is one id and SD273 is silent."""
    from stopdoctor.api import inspect_model

    path = _retyped(real_gguf_models.smollm2_gguf, tmp_path / "start-normal.gguf", 1, 1)
    with running_llama_server(path, tmp_path / "server.log") as server:
        split = server.tokenize("<|im_start|>user\n")
    (finding,) = [f for f in inspect_model(str(path)).findings if f.code == "SD273"]
    assert finding.name == "special-token-not-single" and finding.evidence["token_id"] == 1
    assert 1 not in split and len(split) > finding.evidence["pieces"] >= 2
    assert load_model(str(path)).vocab.tokenizer().encode("<|im_start|>user\n", add_special_tokens=False).ids == split
    assert "SD273" not in {f.code for f in inspect_model(str(real_gguf_models.smollm2_gguf)).findings}


def test_an_end_marker_typed_ordinary_is_retyped_by_llama_cpp_so_no_eos_error(real_gguf_models, tmp_path):
    """<|im_end|> (id 2, the eos) typed normal: llama.cpp retypes it to control by its text (it logs
    "control-looking token") and still encodes it as one id, as stopdoctor's tokenizer does; neither
    SD103 (an ordinary eos) nor SD273 may fire."""
    from stopdoctor.api import inspect_model

    path = _retyped(real_gguf_models.smollm2_gguf, tmp_path / "end-normal.gguf", 2, 1)
    tokenizer = load_model(str(path)).vocab.tokenizer()
    with running_llama_server(path, tmp_path / "server.log") as server:
        assert "control-looking token:      2 '<|im_end|>'" in server.log.read_text()
        assert 2 in server.tokenize("Paris<|im_end|>\n")
        assert _differences(tokenizer, server, PROBES) == []
    assert not {"SD103", "SD273"} & {f.code for f in inspect_model(str(path)).findings}
