"""`generate` on a reasoning model: did the thought close, after how many tokens, is the answer
empty, with thinking on, off or both (`--thinking`); a server's `reasoning_content`. The local runs
use fixtures/tiny_reasoning.py: a tiny random-weight Qwen2 whose greedy output is a fixed chain."""

from __future__ import annotations

import http.server
import json
import threading

import pytest
from typer.testing import CliRunner

from fixtures.reasoning import build_reasoning
from fixtures.synth import build_family
from stopdoctor.analysis.diagnose import Generation, StopCause
from stopdoctor.analysis.reasoning_run import reasoning_outcome, thinking_calls
from stopdoctor.cli.app import app
from stopdoctor.core.errors import InputError
from stopdoctor.template.reasoning import analyze_reasoning
from fixtures.reasoning import HYBRID, PREFILLED


def _cli(*args):
    return CliRunner().invoke(app, ["generate", *args])


def _json(result):
    assert result.exit_code in (0, 1), (result.exit_code, result.output, result.exception)
    return json.loads(result.stdout)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from fixtures.tiny_reasoning import build_tiny_reasoning

    root = tmp_path_factory.mktemp("tiny")
    return {kind: build_tiny_reasoning(root / kind, kind) for kind in ("closes", "never-closes", "empty-answer")}


@pytest.mark.needs_torch
def test_thought_closes_then_answers_and_both_modes_run(tiny):
    document = _json(_cli(str(tiny["closes"]), "-m", "user", "hi", "--thinking", "both", "--json", "--device", "cpu"))
    on, off = document["runs"]
    assert document["thinking"] == "both"
    assert {k: on["reasoning"][k] for k in ("thinking", "closed", "thought_tokens", "answer_tokens", "answer_empty")} == {
        "thinking": "on", "closed": True, "thought_tokens": 7, "answer_tokens": 3, "answer_empty": False}
    assert on["reasoning"]["answer"] == "Paris." and on["finish_reason"] == "stop"
    assert {k: off["reasoning"][k] for k in ("thinking", "thought", "closed", "answer_empty", "thought_in_prompt")} == {
        "thinking": "off", "thought": False, "closed": None, "answer_empty": False, "thought_in_prompt": "closed"}
    assert off["prompt"]["text"].endswith("<think>\n\n</think>") and off["text"] == "Paris."


@pytest.mark.needs_torch
def test_default_is_the_templates_own_and_the_human_line(tiny):
    result = _cli(str(tiny["closes"]), "-m", "user", "hi", "--device", "cpu")
    assert result.exit_code == 0, result.output
    assert "thought   <think>…</think> closed after 7 tokens; then 3 answer tokens" in result.stdout
    assert "thinking on" not in result.stdout


@pytest.mark.needs_torch
def test_a_thought_that_never_closes_spends_the_budget(tiny):
    result = _cli(str(tiny["never-closes"]), "-m", "user", "hi", "--max-new-tokens", "16", "--device", "cpu")
    assert "never closed: the budget ran out inside the thought after 16 tokens" in result.stdout
    assert "budget    " not in result.stdout  # said as a thought, not measured as the weights
    document = _json(_cli(str(tiny["never-closes"]), "-m", "user", "hi", "--max-new-tokens", "16", "--json", "--device", "cpu"))
    assert {k: document["reasoning"][k] for k in ("closed", "thought_tokens", "answer_empty", "ran_out_thinking",
                                                  "runaway_thought")} == {
        "closed": False, "thought_tokens": 16, "answer_empty": True, "ran_out_thinking": True, "runaway_thought": False}
    assert "stop_evidence" not in document
    assert result.exit_code == 0  # a budget spent thinking, too short to call a loop: a plain length


@pytest.mark.needs_torch
def test_a_thought_that_loops_until_the_budget_is_a_runaway(tiny):
    # the chain cycles "Okay, the answer" for ever: 300 tokens are ~150 words, nearly every 4-gram repeated
    args = (str(tiny["never-closes"]), "-m", "user", "hi", "--max-new-tokens", "300", "--device", "cpu")
    result = _cli(*args)
    assert result.exit_code == 1, result.output
    assert "never closed: the thought LOOPS (" in result.stdout and "until the budget ran out after 300 tokens" in result.stdout
    document = _json(_cli(*args, "--json"))
    assert document["reasoning"]["runaway_thought"] is True and document["reasoning"]["thought_repetition"] >= 0.9
    assert "stop_evidence" not in document  # said as a looping thought, not measured as the weights
    closes = _cli(str(tiny["closes"]), "-m", "user", "hi", "--max-new-tokens", "300", "--json", "--device", "cpu")
    assert closes.exit_code == 0 and _json(closes)["reasoning"]["runaway_thought"] is False


@pytest.mark.needs_torch
def test_a_closed_thought_with_an_empty_answer(tiny):
    result = _cli(str(tiny["empty-answer"]), "-m", "user", "hi", "--thinking", "on", "--device", "cpu")
    assert "closed after 7 tokens; the answer is EMPTY" in result.stdout
    document = _json(_cli(str(tiny["empty-answer"]), "-m", "user", "hi", "--json", "--device", "cpu"))
    assert (document["reasoning"]["closed"], document["reasoning"]["answer_empty"]) == (True, True)


def test_thinking_on_a_chat_model_is_refused_before_loading(tmp_path):
    folder = build_family("chatml", tmp_path / "m")
    result = _cli(str(folder), "-m", "user", "hi", "--thinking", "on")
    assert result.exit_code == 2 and "shows no thought" in result.stderr


def test_thinking_calls():
    hybrid, prefilled = analyze_reasoning(HYBRID, {}), analyze_reasoning(PREFILLED, {})
    assert [(c.mode, c.variant.extra) for c in thinking_calls(hybrid, "both")] == [("on", ()), ("off", (("enable_thinking", False),))]
    assert [c.mode for c in thinking_calls(prefilled, None)] == ["default"]
    with pytest.raises(InputError, match="always thinks"):
        thinking_calls(prefilled, "off")
    with pytest.raises(InputError, match="on, off or both"):
        thinking_calls(hybrid, "maybe")


def test_no_reasoning_outcome_on_a_chat_template():
    generation = Generation("stop", StopCause("eos"), "Paris.", prompt="<|im_start|>assistant\n")
    assert reasoning_outcome(analyze_reasoning(build_family.__globals__["_template_chatml"](), {}), generation) is None


def test_stopping_on_the_close_is_an_empty_answer():
    prefilled = analyze_reasoning(PREFILLED, {})
    generation = Generation("stop", StopCause("stop_id", id=5, text="</think>"), "Okay, let me think.",
                            prompt="<|im_start|>assistant\n<think>\n")
    outcome = reasoning_outcome(prefilled, generation)
    assert (outcome.closed, outcome.answer_empty, outcome.thought_in_prompt) == (True, True, "open")


def _serve(reply: dict, seen: list):
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802 - http.server's naming
            seen.append(json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0)))))
            body = json.dumps(reply).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@pytest.mark.parametrize("field", ["reasoning_content", "reasoning"])
def test_server_reasoning_field_is_the_thought(tmp_path, field):
    folder = build_reasoning("hybrid", tmp_path / "m")
    reply = {"choices": [{"message": {"role": "assistant", "content": "", field: "Okay, let me think."},
                          "finish_reason": "length"}],
             "usage": {"completion_tokens": 32, "completion_tokens_details": {"reasoning_tokens": 32}}}
    seen: list = []
    server = _serve(reply, seen)
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        document = _json(_cli(str(folder), "-m", "user", "hi", "--server", url, "--server-model", "m", "--json",
                              "--max-new-tokens", "32"))
        off = _json(_cli(str(folder), "-m", "user", "hi", "--server", url, "--server-model", "m", "--json",
                         "--thinking", "off"))
    finally:
        server.shutdown()
        server.server_close()
    assert {k: document["reasoning"][k] for k in ("source", "closed", "thought_tokens", "answer_empty", "ran_out_thinking")} == {
        "source": "server", "closed": False, "thought_tokens": 32, "answer_empty": True, "ran_out_thinking": True}
    assert document["server"]["reasoning_field"] == field
    assert "chat_template_kwargs" not in seen[0] and seen[1]["chat_template_kwargs"] == {"enable_thinking": False}
    assert off["reasoning"]["thinking"] == "off"
