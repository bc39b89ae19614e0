"""The one client for OpenAI-compatible servers (`generate --server`, its `--stream`, and
`probe-server`): a request whose whole transfer is bounded, not each read.

A server is untrusted input. A socket timeout bounds one read, so a server that answers one byte
every five seconds, or accepts a request and never answers, would hold a command forever; an
endless body, one event line that never ends, or JSON nested 100,000 deep would exhaust memory or
the stack. Here every transfer has one deadline (connect, headers and body together: a watchdog
shuts the socket when it passes), a byte budget for the body, a length bound for each event line,
and a nesting bound for the JSON it returns. Each way it fails is one `InputError` line
(`ServerRejected` for an HTTP error status, with a short, bounded body).

    document = request_json(url, body, Limits(seconds=60))     # POST (GET when body is None)
    for payload in stream_events(url, body, Limits()):          # the `data:` payloads of an SSE stream
        ...

Imports: core only (and the standard library: urllib keeps proxies and redirects).
"""

from __future__ import annotations

import http.client
import json
import socket
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from stopdoctor.core.errors import InputError

READ_SIZE = 64 * 1024


@dataclass(frozen=True)
class Limits:
    """Bounds of one transfer. `seconds`: the whole transfer (connect, headers, body), however
    slowly the server drips; `max_bytes`: the body (a stream's events together); `max_line`: one
    line of a server-sent-event stream; `max_depth`: JSON nesting; `max_error_bytes`: what is read
    of an error answer's body."""

    seconds: float = 300.0
    max_bytes: int = 16 * 1024 * 1024
    max_line: int = 1024 * 1024
    max_depth: int = 64
    max_error_bytes: int = 4096


class ServerRejected(InputError):
    """The server answered with an HTTP error status; `detail` is the start of its body, one line."""

    def __init__(self, url: str, code: int, detail: str) -> None:
        super().__init__(f"{url}: the server refused the request (HTTP {code}): {detail}")
        self.code = code
        self.detail = detail


class _Watchdog:
    """Shuts every socket of one transfer when its deadline passes: a blocked read then returns
    (or fails) at once, whatever phase the transfer is in."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.deadline = time.monotonic() + seconds
        self.expired = False
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self._timer = threading.Timer(max(0.0, seconds), self._expire)
        self._timer.daemon = True

    def __enter__(self) -> _Watchdog:
        self._timer.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._timer.cancel()

    def watch(self, sock: socket.socket) -> None:
        with self._lock:
            self._sockets.append(sock)
            if self.expired:
                _shut(sock)

    def remaining(self) -> float:
        return max(0.001, self.deadline - time.monotonic())

    def check(self, url: str) -> None:
        if self.expired or time.monotonic() >= self.deadline:
            self.expired = True
            raise InputError(f"{url}: the server did not finish answering within {self.seconds:g} s",
                             hint="a server that never answers, or drips its answer; raise --server-timeout for a slow one")

    def _expire(self) -> None:
        with self._lock:
            self.expired = True
            for sock in self._sockets:
                _shut(sock)


def _shut(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass  # already closed


def _opener(watchdog: _Watchdog) -> urllib.request.OpenerDirector:
    """urllib's opener (proxies, redirects) whose connections register their socket with `watchdog`
    and never wait on one read longer than the time left."""

    def watched(base: type[http.client.HTTPConnection]) -> type[http.client.HTTPConnection]:
        class Watched(base):  # type: ignore[misc, valid-type]
            def connect(self) -> None:
                self.timeout = watchdog.remaining()
                super().connect()
                watchdog.watch(self.sock)

        return Watched

    http_connection = watched(http.client.HTTPConnection)
    https_connection = watched(http.client.HTTPSConnection)

    class Http(urllib.request.HTTPHandler):
        def http_open(self, req):  # noqa: ANN001 - urllib's signature
            return self.do_open(http_connection, req)

    class Https(urllib.request.HTTPSHandler):
        def https_open(self, req):  # noqa: ANN001
            return self.do_open(https_connection, req, context=self._context)

    return urllib.request.build_opener(Http, Https)


def _open(url: str, body: dict | None, watchdog: _Watchdog, limits: Limits, accept: str) -> Any:
    data = None if body is None else json.dumps(body).encode()
    headers = {"Accept": accept}
    if data is not None:
        headers["Content-Type"] = "application/json"
    request = urllib.request.Request(url, data=data, headers=headers)
    try:
        return _opener(watchdog).open(request, timeout=watchdog.remaining())
    except urllib.error.HTTPError as error:
        watchdog.check(url)
        detail = _error_detail(error, watchdog, limits)
        raise ServerRejected(url, error.code, detail) from None
    except (urllib.error.URLError, http.client.HTTPException, OSError, ValueError) as error:
        watchdog.check(url)
        reason = getattr(error, "reason", None) or error
        raise InputError(f"{url}: cannot reach the server: {_one_line(str(reason), 200)}",
                         hint="check --server (e.g. http://127.0.0.1:8000) and that the server is up") from None


def _error_detail(error: urllib.error.HTTPError, watchdog: _Watchdog, limits: Limits) -> str:
    """The start of an error answer's body (a 500 may send an endless one), as one short line."""
    try:
        raw = error.read(limits.max_error_bytes)
    except (OSError, http.client.HTTPException, ValueError):
        raw = b""
    finally:
        error.close()
    text = raw.decode("utf-8", "replace")
    try:  # an OpenAI-style {"error": {"message": ...}} says it best
        document = json.loads(text)
        message = document.get("error", document) if isinstance(document, dict) else document
        if isinstance(message, dict):
            message = message.get("message", message)
        if isinstance(message, str):
            text = message
    except (ValueError, RecursionError):
        pass
    return _one_line(text, 300) or (error.reason if isinstance(error.reason, str) else "") or "no detail"


def _one_line(text: str, limit: int) -> str:
    """`text` on one line (newlines shown as spaces), cut to `limit` characters."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[:limit] + "…"


def request_json(url: str, body: dict | None = None, limits: Limits = Limits()) -> Any:
    """POST `body` as JSON (GET when None) and return the JSON answer, within `limits`."""
    with _Watchdog(limits.seconds) as watchdog:
        response = _open(url, body, watchdog, limits, "application/json")
        chunks: list[bytes] = []
        size = 0
        try:
            with response:
                while True:
                    chunk = response.read(READ_SIZE)
                    watchdog.check(url)
                    if not chunk:
                        break
                    size += len(chunk)
                    if size > limits.max_bytes:
                        raise InputError(f"{url}: the answer is longer than {_size(limits.max_bytes)}",
                                         hint="no answer of one short generation is that long")
                    chunks.append(chunk)
        except (OSError, http.client.HTTPException, ValueError) as error:
            watchdog.check(url)
            raise InputError(f"{url}: the answer was cut: {_one_line(str(error), 200)}") from None
    return parse_answer(b"".join(chunks), url, limits)


def parse_answer(raw: bytes, where: str, limits: Limits = Limits()) -> Any:
    """A JSON answer from a server: UTF-8, JSON, nested at most `limits.max_depth` deep."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        raise InputError(f"{where}: the answer is not UTF-8 (byte {error.start})") from None
    try:
        document = json.loads(text)
    except RecursionError:
        raise InputError(f"{where}: the answer's JSON is nested more than {limits.max_depth} deep") from None
    except ValueError as error:  # JSONDecodeError, an integer of too many digits
        raise InputError(f"{where}: the server did not answer with JSON ({_one_line(str(error), 120)})") from None
    if _depth_exceeds(document, limits.max_depth):
        raise InputError(f"{where}: the answer's JSON is nested more than {limits.max_depth} deep")
    try:  # a `\\ud800` escape alone is no character: no report or document could write it
        json.dumps(document, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        raise InputError(f"{where}: the answer holds a lone surrogate (a \\ud800-\\udfff escape that is not a pair), "
                         "which is not Unicode text") from None
    return document


def _depth_exceeds(document: Any, limit: int) -> bool:
    """Whether arrays/objects in `document` nest more than `limit` deep (walked without recursion)."""
    stack = [(document, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, (dict, list)):
            if depth > limit:
                return True
            children = value.values() if isinstance(value, dict) else value
            stack.extend((child, depth + 1) for child in children if isinstance(child, (dict, list)))
    return False


def stream_events(url: str, body: dict, limits: Limits = Limits()) -> Iterator[str]:
    """POST `body` and yield the payload of each `data:` line of the server-sent-event answer
    (comments, `event:` and `id:` lines skipped), within `limits`: the whole stream within
    `seconds`, its lines together within `max_bytes`, each line within `max_line`."""
    with _Watchdog(limits.seconds) as watchdog:
        response = _open(url, body, watchdog, limits, "text/event-stream")
        total = 0
        with response:
            while True:
                try:
                    raw = response.readline(limits.max_line + 1)
                except (OSError, http.client.HTTPException, ValueError) as error:
                    watchdog.check(url)
                    raise InputError(f"{url}: the stream was cut: {_one_line(str(error), 200)}") from None
                watchdog.check(url)
                if not raw:
                    return
                total += len(raw)
                if len(raw) > limits.max_line:
                    raise InputError(f"{url}: one line of the stream is longer than {_size(limits.max_line)}",
                                     hint="a server-sent event is a short JSON line")
                if total > limits.max_bytes:
                    raise InputError(f"{url}: the stream is longer than {_size(limits.max_bytes)}",
                                     hint="lower --max-new-tokens")
                line = raw.decode("utf-8", "replace").strip()
                if line.startswith("data:"):
                    yield line[5:].strip()


def _size(count: int) -> str:
    return f"{count // 2**20} MiB" if count >= 2**20 else f"{count // 1024} KiB"
