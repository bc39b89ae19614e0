"""A stand-in OpenAI-compatible server on 127.0.0.1 that misbehaves one way, for the hostile-server
tests (issue #32 "Servers", #26 §3) and tests/fuzz_hostile.py. Every loop is bounded (a byte or
step cap) and stops when the client hangs up or the server is stopped; the server stops with
`stop()` (or leaving the `with`).

Modes: ok, silent (never answers), drip-headers, drip-body (1 byte every `drip` s), endless-body,
endless-500, endless-line (one stream line that never ends), endless-stream (an event every 50 ms),
flood-stream (events as fast as they go), nested (JSON 100,000
deep, whole or streamed), usage-list, usage-string, bad-utf8, hostile-text (escapes, workflow
commands and bidi overrides in the answer, finish reason and model ids), loop-500 (every answer a
500 that names stop_token_ids), hostile-500 (a 500 whose message is `HOSTILE`), redirect (every
answer a 302 to this server's own /v1/models: a client that follows it loops).

Imports: the standard library.
"""

from __future__ import annotations

import json
import socket
import socketserver
import threading

HOSTILE = "\x1b[2J\x1b]8;;http://x\x07\n::error file=a,line=1::forged\r\n%0A::warning::w\u202edcba\u2066\x9b31m\x00<script>alert(1)</script>"
CAP = 64 * 1024 * 1024  # no endless answer writes more than this


class HostileServer:
    def __init__(self, mode: str, drip: float = 0.5) -> None:
        self.mode = mode
        self.drip = drip
        self.requests: list[tuple[str, dict | None]] = []
        self.dripped = 0  # bytes sent by _drip: how long a client listened, counted in work
        self.stopping = threading.Event()
        owner = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                try:
                    owner.handle(self.request)
                except OSError:
                    pass  # the client hung up: what every hostile mode expects

        socketserver.ThreadingTCPServer.allow_reuse_address = True
        self.server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self) -> HostileServer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def stop(self) -> None:
        self.stopping.set()
        self.server.shutdown()
        self.server.server_close()

    # --- one connection ------------------------------------------------------------------

    def handle(self, sock: socket.socket) -> None:
        sock.settimeout(30)
        path, body = _read_request(sock)
        self.requests.append((path, body))
        streamed = bool(body and body.get("stream"))
        mode = self.mode
        if mode == "silent":
            self.stopping.wait(30)
        elif mode == "drip-headers":
            self._drip(sock, b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nX-Slow: " + b"a" * 200)
        elif mode == "drip-body":
            sock.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 400\r\n\r\n")
            self._drip(sock, b" " * 400)
        elif mode in ("endless-body", "endless-500"):
            status = b"200 OK" if mode == "endless-body" else b"500 Internal Server Error"
            sock.sendall(b"HTTP/1.1 " + status + b"\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n"
                         b'{"choices": [{"message": {"content": "')
            self._endless(sock, b"x" * 65536)
        elif mode == "endless-line" and streamed:
            _headers(sock, "text/event-stream")
            sock.sendall(b'data: {"choices": [{"delta": {"content": "')
            self._endless(sock, b"y" * 65536)
        elif mode == "endless-stream" and streamed:  # a short event every 50 ms, forever
            _headers(sock, "text/event-stream")
            event = b'data: {"choices": [{"delta": {"content": "z"}, "finish_reason": null}]}\n\n'
            for _ in range(CAP // len(event)):
                if self.stopping.wait(0.05):
                    break
                sock.sendall(event)
        elif mode == "flood-stream" and streamed:  # short events as fast as the socket takes them
            _headers(sock, "text/event-stream")
            event = b'data: {"choices": [{"delta": {"content": "z"}, "finish_reason": null}]}\n\n'
            self._endless(sock, event * 64)
        elif mode == "nested":
            deep = b"[" * 100_000 + b"]" * 100_000
            if streamed:
                _headers(sock, "text/event-stream")
                sock.sendall(b"data: " + deep + b"\n\ndata: [DONE]\n\n")
            else:
                _send(sock, 200, b'{"choices": [{"message": {"content": "hi"}, "finish_reason": "stop"}], "usage": '
                      + deep + b"}")
        elif mode == "hostile-500":
            _send(sock, 500, json.dumps({"error": {"message": HOSTILE}}).encode())
        elif mode == "redirect":
            sock.sendall(f"HTTP/1.1 302 Found\r\nLocation: {self.url}/v1/models\r\nContent-Length: 0\r\n"
                         "Connection: close\r\n\r\n".encode())
        elif mode == "loop-500":
            _send(sock, 500, json.dumps({"error": {"message": "unknown field stop_token_ids\n::error::loop"}}).encode())
        elif path.endswith("/models"):
            ids = [HOSTILE, "m"] if mode == "hostile-text" else ["m"]
            _send(sock, 200, json.dumps({"data": [{"id": i} for i in ids]}).encode())
        elif streamed:
            _headers(sock, "text/event-stream")
            finish = HOSTILE if mode == "hostile-text" else "stop"
            for event in ({"choices": [{"delta": {"content": self._text()}, "finish_reason": None}]},
                          {"choices": [{"delta": {}, "finish_reason": finish}]}):
                sock.sendall(f"data: {json.dumps(event)}\n\n".encode())
            sock.sendall(b"data: [DONE]\n\n")
        else:
            _send(sock, 200, self._answer())

    def _text(self) -> str:
        return f"Hello {HOSTILE}" if self.mode == "hostile-text" else "Hello."

    def _answer(self) -> bytes:
        usage: object = {"prompt_tokens": 5, "completion_tokens": 2}
        if self.mode == "usage-list":
            usage = [1, 2, {"prompt_tokens": 3}]
        elif self.mode == "usage-string":
            usage = "many"
        finish = HOSTILE if self.mode == "hostile-text" else "stop"
        raw = json.dumps({"choices": [{"message": {"content": self._text()}, "finish_reason": finish,
                                       "stop_reason": HOSTILE if self.mode == "hostile-text" else None}],
                          "usage": usage}).encode()
        if self.mode == "bad-utf8":
            raw = raw.replace(b"Hello.", b"Hel\xff\xfelo.")
        return raw

    def _drip(self, sock: socket.socket, data: bytes) -> None:
        for i in range(len(data)):
            if self.stopping.wait(self.drip):
                return
            sock.sendall(data[i:i + 1])
            self.dripped += 1

    def _endless(self, sock: socket.socket, block: bytes) -> None:
        sent = 0
        while sent < CAP and not self.stopping.is_set():
            sock.sendall(block)
            sent += len(block)


def _read_request(sock: socket.socket) -> tuple[str, dict | None]:
    data = b""
    while b"\r\n\r\n" not in data and len(data) < 1_000_000:
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    path = lines[0].split(" ")[1] if lines and " " in lines[0] else "/"
    length = next((int(line.split(":", 1)[1]) for line in lines[1:] if line.lower().startswith("content-length:")), 0)
    while len(rest) < length:
        chunk = sock.recv(65536)
        if not chunk:
            break
        rest += chunk
    try:
        return path, json.loads(rest) if rest else None
    except ValueError:
        return path, None


def _headers(sock: socket.socket, content_type: str) -> None:
    sock.sendall(f"HTTP/1.1 200 OK\r\nContent-Type: {content_type}\r\nConnection: close\r\n\r\n".encode())


def _send(sock: socket.socket, status: int, raw: bytes) -> None:
    reason = "OK" if status == 200 else "Internal Server Error"
    sock.sendall(f"HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\nContent-Length: {len(raw)}\r\n"
                 f"Connection: close\r\n\r\n".encode() + raw)
