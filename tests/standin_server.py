"""A STAND-IN OpenAI-compatible server, for the answer shapes no real server on this machine produces:
vLLM's, SGLang's and Ollama's identity routes, a reasoning parser's split (or its absence), and
servers that lie or break (finish 'stop' for text cut at max_tokens, a stop string kept in the
content, a prompt cut silently to the context, a multi-byte character split between chunks,
redirects, 500 loops, invalid UTF-8, endless streams, a chunk that never ends).

Its "model" is a fixed text per question, one word a token; stop strings are matched on the text and
held back while they may still match, then flushed, as a correct server does. Every request is
counted (`requests`), so a test bounds what the probes sent, never how long they took.

May import the standard library only.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

ANSWERS = {
    "What is 2+2?": "The answer is 4.",
    "Tell me a story about a dragon.": ("Once upon a time, a lonely dragon named Ember guarded the mountain pass above "
                                        "the sleeping village. Every winter the villagers brought bread and songs, and "
                                        "Ember kept the avalanches away in return."),
    "Write three emoji for happy, sad and love, nothing else.": "😀 😢 ❤️",
}
COMPLETIONS = {"The sky is blue because": " sunlight scatters off the molecules of the air, and blue light scatters most.",
               "1, 2, 3, 4, 5,": "".join(f" {n}," for n in range(6, 400))}
COUNTING = ", ".join(str(n) for n in range(1, 1001))
THOUGHT = "Two plus two: add them carefully, the total is four."


@dataclass
class Behaviour:
    engine: str = "vllm"  # vllm | sglang | ollama | none
    lie_finish: bool = False  # cut at max_tokens and say 'stop'
    keep_stop: bool = False  # the stop string stays in the content
    context: int | None = 4096
    cut_prompt: bool = False  # a prompt past the context is cut silently, not refused
    think: str | None = None  # "split" (reasoning_content) | "in-content" (<think> in content)
    long_thought: bool = False  # the thought runs past 64 tokens (unless thinking is switched off)
    split_utf8: bool = False  # a streamed multi-byte character is cut between two chunks
    hostile: str | None = None  # redirect | 500 | bad-utf8 | endless-stream | endless-chunk
    default_budget: int | None = None  # max_tokens when the request names none
    requests: list[str] = field(default_factory=list)
    authorizations: list[str] = field(default_factory=list)  # the Authorization header of each request


def _tokens(text: str) -> list[str]:
    return re.findall(r"\s*\S+", text)


def _prompt_tokens(body: dict[str, Any]) -> int:
    if "messages" in body:
        return 5 + sum(len(str(m.get("content", "")).split()) for m in body["messages"])
    return len(str(body.get("prompt", "")).split())


def _answer_of(body: dict[str, Any], behaviour: Behaviour) -> str:
    if "messages" in body:
        question = str(body["messages"][-1].get("content", ""))
        answer = COUNTING if question.startswith("Count from 1") else ANSWERS.get(question, "I do not know.")
        thinking = (body.get("chat_template_kwargs") or {}).get("enable_thinking", True)
        # No reasoning parser: the thought is part of the text the server returns.
        thought = " ".join([THOUGHT] * (20 if behaviour.long_thought else 1))
        return f"<think>{thought}</think>{answer}" if behaviour.think == "in-content" and thinking else answer
    return COMPLETIONS.get(str(body.get("prompt", "")), " and so on.")


def generate(body: dict[str, Any], behaviour: Behaviour) -> tuple[list[str], str, int]:
    """The chunks a correct streaming server sends (stop strings held back while they may still
    match), the finish reason, and the tokens generated."""
    budget = body.get("max_tokens") or behaviour.default_budget or 100_000
    stops = [s for s in body.get("stop") or [] if s]
    tokens = _tokens(_answer_of(body, behaviour))
    sent, chunks, pending = "", [], ""
    for count, token in enumerate(tokens[:budget], 1):
        pending += token
        text = sent + pending
        hits = sorted((text.find(s), s) for s in stops if s in text)
        if hits:
            hit, stop = hits[0]
            end = hit + (len(stop) if behaviour.keep_stop or body.get("include_stop_str_in_output") else 0)
            if end > len(sent):
                chunks.append(text[len(sent):end])
            return chunks, "stop", count
        # Hold back the longest suffix that is a proper prefix of a stop string.
        held = max((n for s in stops for n in range(1, len(s)) if text.endswith(s[:n])), default=0)
        ready = text[:len(text) - held]
        if len(ready) > len(sent):
            chunks.append(ready[len(sent):])
            sent = ready
        pending = text[len(sent):]
    if pending:
        chunks.append(pending)  # the budget ended: the held text is flushed
    cut = len(tokens) > budget
    return chunks, "stop" if behaviour.lie_finish or not cut else "length", min(len(tokens), budget)


class _Handler(BaseHTTPRequestHandler):
    behaviour: Behaviour
    protocol_version = "HTTP/1.1"

    def log_message(self, *args: Any) -> None:
        pass

    def _send(self, status: int, document: Any, raw: bytes | None = None) -> None:
        data = raw if raw is not None else json.dumps(document).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Server", "uvicorn")
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:  # noqa: N802
        b = self.behaviour
        b.requests.append(f"GET {self.path}")
        b.authorizations.append(self.headers.get("Authorization", ""))
        if b.hostile == "redirect":
            self.send_response(302)
            self.send_header("Location", "http://example.invalid/elsewhere")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        if self.path == "/v1/models":
            owner = {"vllm": "vllm", "sglang": "sglang", "ollama": "library"}.get(b.engine, "someone")
            entry = {"id": "standin-model", "object": "model", "owned_by": owner}
            if b.engine == "vllm" and b.context:
                entry["max_model_len"] = b.context
            self._send(200, {"object": "list", "data": [entry]})
        elif self.path == "/version" and b.engine in ("vllm", "sglang"):
            self._send(200, {"version": "0.33.0" if b.engine == "vllm" else "0.5.23"})
        elif self.path == "/api/version" and b.engine == "ollama":
            self._send(200, {"version": "0.33.1"})
        else:
            self._send(404, {"error": "not found"})

    def do_POST(self) -> None:  # noqa: N802
        b = self.behaviour
        length = int(self.headers.get("Content-Length", "0"))
        body = json.loads(self.rfile.read(length) or b"{}")
        b.requests.append(f"POST {self.path}")
        b.authorizations.append(self.headers.get("Authorization", ""))
        if self.path == "/api/show":
            self._send(200, {"parameters": f"num_ctx {b.context}" if b.context else ""})
            return
        if self.path not in ("/v1/chat/completions", "/v1/completions"):
            self._send(404, {"error": "not found"})
            return
        if b.hostile is not None and self._hostile(b.hostile, body):
            return
        prompt = _prompt_tokens(body)
        if b.context and prompt > b.context and not b.cut_prompt:
            self._send(400, {"error": {"message": f"the prompt ({prompt} tokens) exceeds the context ({b.context})"}})
            return
        prompt = min(prompt, b.context) if b.context else prompt
        chunks, finish, count = generate(body, b)
        usage = {"prompt_tokens": prompt, "completion_tokens": count, "total_tokens": prompt + count}
        chat = self.path == "/v1/chat/completions"
        thinking = b.think is not None and chat and (body.get("chat_template_kwargs") or {}).get("enable_thinking", True)
        if body.get("stream"):
            self._stream(chunks, finish, usage, chat, body)
            return
        text = "".join(chunks)
        if chat:
            message: dict[str, Any] = {"role": "assistant", "content": text}
            if thinking and b.think == "split":
                message["reasoning_content"] = THOUGHT
            choice: dict[str, Any] = {"index": 0, "message": message, "finish_reason": finish}
        else:
            choice = {"index": 0, "text": text, "finish_reason": finish}
        self._send(200, {"object": "chat.completion", "choices": [choice], "usage": usage})

    def _events(self, events: Iterator[str]) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        try:
            for event in events:
                data = f"data: {event}\n\n".encode()
                self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
                self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")
        except OSError:
            pass  # the client hung up

    def _stream(self, chunks: list[str], finish: str, usage: dict, chat: bool, body: dict) -> None:
        b = self.behaviour
        if b.split_utf8:
            # Cut each multi-byte character between two chunks and decode each side on its own.
            split = []
            for chunk in chunks:
                raw = chunk.encode()
                half = len(raw) // 2 if len(raw) != len(chunk) else 0
                split += [raw[:half].decode("utf-8", "replace"), raw[half:].decode("utf-8", "replace")] if half else [chunk]
            chunks = split

        def piece(text: str | None, reason: str | None) -> str:
            delta = {"content": text} if text is not None else {}
            choice = {"index": 0, "delta": delta, "finish_reason": reason} if chat else \
                {"index": 0, "text": text or "", "finish_reason": reason}
            return json.dumps({"choices": [choice]})

        def events() -> Iterator[str]:
            for chunk in chunks:
                yield piece(chunk, None)
            yield piece(None, finish)
            if (body.get("stream_options") or {}).get("include_usage"):
                yield json.dumps({"choices": [], "usage": usage})
            yield "[DONE]"

        self._events(events())

    def _hostile(self, kind: str, body: dict) -> bool:
        if kind == "500":
            self._send(500, {"error": "internal error"})
        elif kind == "bad-utf8":
            self._send(200, None, raw=b'{"choices":[{"message":{"content":"\xff\xfe broken"},"finish_reason":"stop"}]}')
        elif kind == "endless-stream":
            def forever() -> Iterator[str]:
                while True:
                    yield json.dumps({"choices": [{"index": 0, "delta": {"content": " more"}, "finish_reason": None}]})
                    time.sleep(0.001)
            if body.get("stream"):
                self._events(forever())
            else:
                self._endless_chunk()
        elif kind == "endless-chunk":
            self._endless_chunk()
        else:
            return False
        return True

    def _endless_chunk(self) -> None:
        """A chunk that announces 256 MiB and never delivers it: a trickle, then silence."""
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        try:
            self.wfile.write(b"10000000\r\n{\"choices\": [")
            self.wfile.flush()
            for _ in range(600):
                time.sleep(0.05)
                self.wfile.write(b" ")
                self.wfile.flush()
        except OSError:
            pass


@contextmanager
def standin_server(behaviour: Behaviour) -> Iterator[str]:
    """Serve `behaviour` on 127.0.0.1 (a free port); yield the base URL."""
    handler = type("Handler", (_Handler,), {"behaviour": behaviour})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.handle_error = lambda request, address: None  # a client that hangs up is no error here
    server.daemon_threads = True
    server.block_on_close = False  # an endless handler must not hold the test up once the client left
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
