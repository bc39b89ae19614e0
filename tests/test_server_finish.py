"""What a server's finish reason hides in `generate --server` (issue #27 §2, §5): a loop the
engine stopped (vLLM's finish_reason `repetition`) is a problem, not a success; a stop string left
in the answer is flagged; a base model asked `Q: …\\nA:` that writes the next `Q:` wrote a turn.

The server is a few lines of http.server replying with what each test sets: what a real
OpenAI-compatible server returns in those cases.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from typer.testing import CliRunner

from stopdoctor.cli.app import app


@pytest.fixture()
def server():
    replies: list[dict] = []
    sent: list[dict] = []

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args) -> None:
            pass

        def _reply(self, document: dict) -> None:
            data = json.dumps(document).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:  # noqa: N802 - http.server's naming
            self._reply({"data": [{"id": "served"}]})

        def do_POST(self) -> None:  # noqa: N802
            sent.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
            text, finish = replies[0]["text"], replies[0]["finish"]
            choice = {"finish_reason": finish, "index": 0}
            if self.path.endswith("/chat/completions"):
                choice["message"] = {"role": "assistant", "content": text}
            else:
                choice["text"] = text
            self._reply({"choices": [choice], "usage": {"prompt_tokens": 9, "completion_tokens": 20}})

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}", replies, sent
    finally:
        httpd.shutdown()
        httpd.server_close()


@pytest.fixture(scope="module")
def chatml(tmp_path_factory):
    from fixtures.synth import build_family

    return build_family("chatml", tmp_path_factory.mktemp("synth") / "chatml")


def _generate(model, url: str, *args: str):
    result = CliRunner().invoke(app, ["generate", str(model), "--server", url, "--server-model", "served", *args,
                                      "--json"])
    return result.exit_code, (json.loads(result.stdout) if result.stdout.strip().startswith("{") else result.output)


def test_a_loop_the_server_stopped_is_a_problem_not_a_success(server, chatml):
    url, replies, _ = server
    replies.append({"text": "I'll check. I'll check. I'll check. I'll check.", "finish": "repetition"})
    code, doc = _generate(chatml, url, "-m", "user", "hi")
    assert doc["finish_reason"] == "repetition" and doc["cause"]["kind"] == "repetition"
    assert code == 1
    replies[0] = {"text": "Paris.", "finish": "stop"}
    assert _generate(chatml, url, "-m", "user", "hi")[0] == 0


def test_a_stop_string_left_in_the_answer_is_flagged(server, chatml):
    url, replies, sent = server
    replies.append({"text": "Paris.\n\nQuestion: and Spain?", "finish": "stop"})
    code, doc = _generate(chatml, url, "-m", "user", "hi", "--stop", "\n\nQuestion:")
    assert sent[-1]["stop"] == ["\n\nQuestion:"]
    assert doc["stop_string_left"] == {"text": "\n\nQuestion:", "offset": 6} and code == 1
    replies[0] = {"text": "Paris.", "finish": "stop"}  # cut where asked: nothing left
    code, doc = _generate(chatml, url, "-m", "user", "hi", "--stop", "\n\nQuestion:")
    assert doc["stop_string_left"] is None and code == 0


def test_a_base_model_continuing_its_prompts_labels_wrote_a_turn(server, chatml):
    url, replies, _ = server
    replies.append({"text": " Paris.\nQ: What is the capital of Germany?\nA: Berlin.", "finish": "length"})
    code, doc = _generate(chatml, url, "--raw", "--prompt", "Q: What is the capital of France?\nA:", "--route", "completions")
    assert doc["hallucinated_turn"]["source"] == "the prompt's own role label" and doc["hallucinated_turn"]["offset"] == 7
    assert code == 1
