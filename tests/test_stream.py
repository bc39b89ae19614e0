"""`generate --server URL --stream` against an in-process fake OpenAI-compatible server that
streams correctly, or misbehaves one way at a time (vllm #3574 held-back stop prefix, lost tail,
text after finish, a UTF-8 character split across chunks, a special token's tail)."""

from __future__ import annotations

import http.server
import json
import threading

import pytest

from stopdoctor.actions.generate.stream import StreamCapture, stream_issues
from tests.helpers import cli

ANSWER = "Paris is the capital. Café"


def _serve(chunks: list[str], answer: str = ANSWER, after: str = "", done: bool = True):
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - http.server's naming
            self._json({"data": [{"id": "m"}]})

        def do_POST(self):  # noqa: N802
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            if not body.get("stream"):
                self._json({"choices": [{"message": {"content": answer}, "finish_reason": "stop"}],
                            "usage": {"prompt_tokens": 5, "completion_tokens": 7}})
                return
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            events = [{"choices": [{"delta": {"content": c}, "finish_reason": None}]} for c in chunks]
            events.append({"choices": [{"delta": {}, "finish_reason": "stop"}]})
            if after:
                events.append({"choices": [{"delta": {"content": after}, "finish_reason": None}]})
            for event in events:
                self.wfile.write(f"data: {json.dumps(event)}\n\n".encode())
            if done:
                self.wfile.write(b"data: [DONE]\n\n")

        def _json(self, data):
            raw = json.dumps(data).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def _run(real_models, chunks, **kw):
    server = _serve(chunks, **kw)
    try:
        return cli("generate", str(real_models.smollm2_hf), "-m", "user", "Capital of France?", "--stop", "<|im_end|>",
                   "--server", f"http://127.0.0.1:{server.server_address[1]}", "--stream", "--json")
    finally:
        server.shutdown()
        server.server_close()


def _kinds(run) -> set[str]:
    return {i["kind"] for i in run.json()["stream"]["issues"]}


def test_a_correct_stream_is_clean(real_models):
    run = _run(real_models, ["Paris is ", "the capital.", " Café"])
    assert _kinds(run) == set() and run.json()["stream"]["chunks"] == 3 and run.code == 0


def test_a_held_back_stop_prefix_that_leaks_is_named(real_models):
    run = _run(real_models, ["Paris is the capital.", " Café", "<|im"])
    assert _kinds(run) == {"partial-stop-leaked"} and run.code == 1


def test_a_stream_that_loses_its_tail_is_not_flushed(real_models):
    assert _kinds(_run(real_models, ["Paris is the capital."])) == {"not-flushed"}


def test_text_after_the_finish_chunk_and_a_missing_done(real_models):
    kinds = _kinds(_run(real_models, ["Paris is the capital.", " Café"], after="User:", done=False))
    assert kinds == {"text-after-finish", "no-done"}


def test_a_utf8_character_split_across_chunks(real_models):
    run = _run(real_models, ["Paris is the capital. Caf", "\ufffd", "\ufffd"])
    issues = run.json()["stream"]["issues"]
    assert {i["kind"] for i in issues} >= {"split-utf8"}
    assert "chunks 0 and 1" in next(i["detail"] for i in issues if i["kind"] == "split-utf8")


def test_a_special_token_tail_in_the_stream(real_models):
    assert _kinds(_run(real_models, ["Paris is the capital. Café", "im_end|>"])) == {"special-token-tail"}


def test_stream_needs_a_server(real_models):
    run = cli("generate", str(real_models.smollm2_hf), "-m", "user", "hi", "--stream")
    assert run.code == 2 and "--stream needs --server" in run.stderr


@pytest.mark.parametrize("stops, streamed, answer, expected", [
    (("\n\n",), "A\n", "A\n", set()),  # ends with the start of a stop string, as the answer does: fine
    (("###",), "x ###", "x ", {"stop-string-in-text"}),
    ((), "abc", "abc", set()),
])
def test_issues_are_judged_against_the_answer(stops, streamed, answer, expected):
    capture = StreamCapture(chunks=[streamed], finish_reason="stop", finish_chunk=0, done=True)
    assert {i.kind for i in stream_issues(capture, answer, stops, ("<|im_end|>",))} == expected
