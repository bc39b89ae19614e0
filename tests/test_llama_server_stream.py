"""`generate --server URL --stream` against the real llama-server (tests/llamaserver_fixture.py) on
SmolLM2, greedy: a stop string met mid-answer is held back and never reaches the client, an answer
whose characters are split across byte tokens streams whole characters, and a partial stop match
held back when the token budget runs out is lost (llama.cpp b10434, on the chat and completions routes;
/completion too, measured by hand), which stopdoctor names `not-flushed`.

Each test derives what it needs (a multi-token word, the answer's tail) from a greedy run of the
same request, so they hold for whatever this quantized model answers."""

from __future__ import annotations

import re

import pytest

from tests.helpers import cli

pytestmark = pytest.mark.slow

QUESTION = "What is the capital of France?"
EMOJI_PROMPT = "Emoji for happy: 😀, for sad: 😢, for love:"


def _generate(server, *args: str):
    return cli("generate", str(server.model), "--server", server.url, "--max-new-tokens", "24", "--json", *args)


def _chat(server, *args: str):
    return _generate(server, "-m", "user", QUESTION, *args)


def _kinds(doc) -> set[str]:
    return {issue["kind"] for issue in doc["server"]["stream"]["issues"]}


def test_a_stop_string_met_mid_answer_is_held_back_and_never_leaks(llama_server):
    answer = _chat(llama_server).json()["text"]
    # A word the tokenizer splits in two or more tokens, met after the start: its first tokens are a
    # partial match the server must hold back until the stop string is complete.
    words = [w for w in dict.fromkeys(re.findall(r"[A-Za-z]{5,}", answer)) if answer.index(w) > 0]
    split = [w for w in words if len(llama_server.tokenize(" " + w)) >= 2 and len(llama_server.tokenize(w)) >= 2]
    assert split, f"no multi-token word in the greedy answer {answer!r}"
    stop = max(split, key=len)
    run = _chat(llama_server, "--stop", stop, "--stream")
    doc = run.json()
    stream = doc["server"]["stream"]
    assert doc["finish_reason"] == "stop" and stream["finish_reason"] == "stop"
    assert doc["text"] == answer[:answer.index(stop)]
    assert stream["text"] == doc["text"] and stream["chunks"] > 1 and stream["done"]
    assert _kinds(doc) == set() and run.code == 0


def test_characters_split_across_byte_tokens_stream_whole(llama_server):
    run = _generate(llama_server, "--prompt", EMOJI_PROMPT, "--max-new-tokens", "16", "--stream")
    doc = run.json()
    stream = doc["server"]["stream"]
    # The precondition: some character of the answer is two or more byte tokens in this vocabulary.
    pieces = llama_server.post("/tokenize", {"content": doc["text"], "with_pieces": True})["tokens"]
    assert any(isinstance(token["piece"], list) for token in pieces), pieces
    assert "\ufffd" not in stream["text"] and stream["text"] == doc["text"]
    assert _kinds(doc) == set() and run.code == 0


@pytest.mark.parametrize("route", ["chat", "completions"])
def test_a_partial_stop_held_back_at_the_token_budget_is_lost(llama_server, route):
    request = ("-m", "user", QUESTION) if route == "chat" else ("--prompt", "The capital of France is", "--raw")
    answer_doc = _generate(llama_server, *request).json()
    answer = answer_doc["text"]
    assert answer_doc["finish_reason"] == "length" and answer_doc["server"]["route"] == route
    # The answer's last two characters are the start of this stop string, which never completes:
    # the server holds them back, the budget runs out, and they must be sent then.
    tail = answer[-2:]
    stop = tail + "\x1f\x1f"
    plain = _generate(llama_server, *request, "--stop", stop).json()
    assert plain["text"] == answer  # not streamed: the whole answer
    doc = _generate(llama_server, *request, "--stop", stop, "--stream").json()
    stream = doc["server"]["stream"]
    assert stream["finish_reason"] == "length" and stream["done"]
    assert answer.startswith(stream["text"]) and answer[len(stream["text"]):].endswith(tail)
    (issue,) = doc["server"]["stream"]["issues"]
    assert issue["kind"] == "not-flushed" and repr(answer[len(stream["text"]):]) in issue["detail"]
    # Without the stop string the same stream is whole: the hold-back is what loses the tail.
    whole = _generate(llama_server, *request, "--stream").json()
    assert whole["server"]["stream"]["text"] == answer and _kinds(whole) == set()
