"""The one bounded HTTP layer for inference servers (`generate --server`, its `--stream`, and
`probe-server`): requests whose whole transfer is bounded, not each read.

A server is untrusted input. A socket timeout bounds one read, so a server that answers one byte
every five seconds (headers included), or accepts a request and never answers, would hold a command
forever; an endless body, one event line that never ends, or JSON nested 100,000 deep would exhaust
memory or the stack. Here every transfer has one deadline (connect, headers and body together: a
watchdog shuts the socket when it passes), a byte budget for the body, a length bound for each event
line, a nesting bound for the JSON, and a short bound for an error answer's body. A redirect is
reported, never followed (it could carry the API key elsewhere), so the key only ever goes to the
host of the URL given. Each way it fails is one `InputError` line, the server's own text flattened
and its control characters escaped:
- `ServerUnreachable`: nothing answers at the URL;
- `ServerBroken`: it answered in a way no client can use (too slow, too long, a redirect, not UTF-8,
  cut off, JSON too deep);
- `ServerRejected`: an HTTP error status, with the start of its body.

    reply = request(url, body, limits, api_key)                 # any status: a `Reply` (probe-server)
    document = request_json(url, body, Limits(seconds=60))     # 2xx JSON or ServerRejected (generate)
    for payload in stream_events(url, body, Limits()):          # the `data:` payloads of an SSE stream
        ...

Imports: core only (and the standard library: urllib keeps proxies).
"""

from __future__ import annotations

import http.client
import json
import socket
import threading
import time
import unicodedata
import urllib.error
import urllib.request
from collections.abc import Generator
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from stopdoctor.core.errors import InputError
from stopdoctor.core.records import record

READ_SIZE = 64 * 1024


@record
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


class ServerUnreachable(InputError):
    """Nothing answers at the URL (refused, unknown host, nothing sent)."""


class ServerBroken(InputError):
    """The server answered in a way no client can use: past a bound, a redirect, not UTF-8, cut off."""


class ServerRejected(InputError):
    """The server answered with an HTTP error status; `detail` is the start of its body, one line."""

    def __init__(self, url: str, status: int, detail: str) -> None:
        super().__init__(f"{url}: the server refused the request (HTTP {status}): {detail}")
        self.status = self.code = status
        self.detail = detail


@record
class Reply:
    """One whole answer, whatever its status. `data` is the JSON document, None when the body is
    not JSON; an error status's body is only its first `Limits.max_error_bytes`."""

    status: int
    headers: dict[str, str]
    body: bytes
    data: Any = None

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300

    def text(self, limit: int = 300) -> str:
        return self.body[:limit].decode("utf-8", "replace")


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
        with self._lock:  # also when the reader stops early: the server sees the client leave
            for sock in self._sockets:
                _shut(sock)

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
            raise ServerBroken(f"{url}: the server did not finish answering within {self.seconds:g} s",
                               hint="a server that never answers, or drips its answer; "
                                    "raise the timeout (--server-timeout, --timeout) for a slow one")

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


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """A 3xx comes back as the HTTPError it is, never followed."""

    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


def _opener(watchdog: _Watchdog) -> urllib.request.OpenerDirector:
    """urllib's opener (proxies; redirects not followed) whose connections register their socket
    with `watchdog` and never wait on one read longer than the time left."""

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
        def http_open(self, req):  # urllib's signature
            return self.do_open(http_connection, req)

    class Https(urllib.request.HTTPSHandler):
        def https_open(self, req):
            return self.do_open(https_connection, req, context=self._context)  # type: ignore[attr-defined]  # HTTPSHandler's own, untyped

    return urllib.request.build_opener(Http, Https, _NoRedirect)


def _shown(url: str) -> str:
    """`url` as errors show it: without user:password@ (it would print a credential)."""
    parts = urlsplit(url)
    return urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2])) if "@" in parts.netloc else url


def _open(url: str, body: dict | None, watchdog: _Watchdog, accept: str, api_key: str | None) -> Any:
    """The response of one request, whatever its status (an HTTPError is a response too); a
    redirect, a failed connection or the deadline is one line."""
    where = _shown(url)
    data = None if body is None else json.dumps(body).encode()
    headers = {"Accept": accept, "User-Agent": "stopdoctor"}
    if data is not None:
        headers["Content-Type"] = "application/json"
    request = urllib.request.Request(url, data=data, headers=headers)
    if api_key:  # unredirected: it stays with this request, the URL's own host
        request.add_unredirected_header("Authorization", f"Bearer {api_key}")
    try:
        return _opener(watchdog).open(request, timeout=watchdog.remaining())
    except urllib.error.HTTPError as error:
        watchdog.check(where)
        if 300 <= error.code < 400:
            target = error.headers.get("Location", "?") if error.headers else "?"
            error.close()
            raise ServerBroken(f"{where}: redirected (HTTP {error.code} to {_one_line(target, 120)}); "
                               "stopdoctor does not follow redirects: give the final URL") from None
        return error
    except urllib.error.URLError as error:  # connecting or sending failed
        watchdog.check(where)
        reason = getattr(error, "reason", None) or error
        raise ServerUnreachable(f"{where}: cannot reach the server: {_one_line(str(reason), 200)}",
                                hint="check the URL (e.g. http://127.0.0.1:8000) and that the server is up") from None
    except (http.client.HTTPException, OSError, ValueError) as error:  # it hung up before its headers
        watchdog.check(where)
        raise ServerBroken(f"{where}: the connection failed: {type(error).__name__}: {_one_line(str(error), 200)}") from None


def _read(response: Any, watchdog: _Watchdog, where: str, limit: int, cut_quietly: bool) -> bytes:
    """The body, at most `limit` bytes: past it, ServerBroken, or (`cut_quietly`, for an error
    answer whose start is all that is shown) just its start."""
    chunks: list[bytes] = []
    size = 0
    try:
        with response:
            while True:
                chunk = response.read(min(READ_SIZE, limit + 1 - size))
                watchdog.check(where)
                if not chunk:
                    break
                size += len(chunk)
                chunks.append(chunk)
                if size > limit:
                    if cut_quietly:
                        return b"".join(chunks)[:limit]
                    raise ServerBroken(f"{where}: the answer is longer than {_size(limit)}",
                                       hint="no answer of one short generation is that long")
    except (OSError, http.client.HTTPException, ValueError) as error:
        watchdog.check(where)
        if cut_quietly:
            return b"".join(chunks)
        raise ServerBroken(f"{where}: the answer was cut: {_one_line(str(error), 200)}") from None
    return b"".join(chunks)


def _status(response: Any) -> int:
    return int(getattr(response, "status", None) or response.code)


def request(url: str, body: dict | None = None, limits: Limits = Limits(), api_key: str | None = None) -> Reply:
    """POST `body` as JSON (GET when None) and return the answer whatever its status, within
    `limits`; a 2xx body must be UTF-8, JSON in it nested at most `limits.max_depth` deep."""
    where = _shown(url)
    with _Watchdog(limits.seconds) as watchdog:
        response = _open(url, body, watchdog, "application/json", api_key)
        status = _status(response)
        headers = {key.lower(): value for key, value in (response.headers or {}).items()}
        ok = 200 <= status < 300
        raw = _read(response, watchdog, where, limits.max_bytes if ok else limits.max_error_bytes, cut_quietly=not ok)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        if ok:
            raise ServerBroken(f"{where}: the answer is not valid UTF-8 (byte {error.start})") from None
        text = raw.decode("utf-8", "replace")  # the start of an error answer may cut a character
    return Reply(status, headers, raw, parse_json(text, limits, where) if text else None)


def request_json(url: str, body: dict | None = None, limits: Limits = Limits(), api_key: str | None = None) -> Any:
    """POST `body` as JSON (GET when None) and return the JSON answer, within `limits`; an error
    status is `ServerRejected`."""
    reply = request(url, body, limits, api_key)
    if not reply.ok:
        raise ServerRejected(_shown(url), reply.status, _error_detail(reply.body) or "no detail")
    return parse_answer(reply.body, _shown(url), limits)


def _error_detail(raw: bytes) -> str:
    """The start of an error answer's body as one short line."""
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
    return _one_line(text, 300)


def _one_line(text: str, limit: int) -> str:
    """`text` on one line (whitespace runs shown as one space), control and format characters
    escaped (a server's text must not drive a terminal), cut to `limit` characters."""
    flat = "".join(_escaped(c) for c in " ".join(text.split()))
    return flat if len(flat) <= limit else flat[:limit] + "…"


def _escaped(char: str) -> str:
    if unicodedata.category(char)[0] != "C":
        return char
    return f"\\x{ord(char):02x}" if ord(char) < 256 else f"\\u{ord(char):04x}"


def parse_json(text: str, limits: Limits, where: str) -> Any:
    """`text` as JSON, or None when it is not JSON; ServerBroken when it nests past `limits.max_depth`."""
    try:
        return _loads(text, limits, where)
    except _NotJson:
        return None


class _NotJson(ServerBroken):
    pass


def _loads(text: str, limits: Limits, where: str) -> Any:
    try:
        document = json.loads(text)
    except RecursionError:
        raise ServerBroken(f"{where}: the answer's JSON is nested more than {limits.max_depth} deep") from None
    except ValueError as error:  # JSONDecodeError, an integer of too many digits
        raise _NotJson(f"{where}: the server did not answer with JSON ({_one_line(str(error), 120)})") from None
    if _depth_exceeds(document, limits.max_depth):
        raise ServerBroken(f"{where}: the answer's JSON is nested more than {limits.max_depth} deep")
    return document


def parse_answer(raw: bytes, where: str, limits: Limits = Limits()) -> Any:
    """A JSON answer from a server: UTF-8, JSON, nested at most `limits.max_depth` deep, Unicode text."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        raise ServerBroken(f"{where}: the answer is not valid UTF-8 (byte {error.start})") from None
    document = _loads(text, limits, where)
    try:  # a `\\ud800` escape alone is no character: no report or document could write it
        json.dumps(document, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        raise ServerBroken(f"{where}: the answer holds a lone surrogate (a \\ud800-\\udfff escape that is not a pair), "
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


def stream_events(url: str, body: dict, limits: Limits = Limits(), api_key: str | None = None) -> Generator[str, None, None]:
    """POST `body` and yield the payload of each `data:` line of the server-sent-event answer
    (comments, `event:` and `id:` lines skipped), within `limits`: the whole stream within
    `seconds`, its lines together within `max_bytes`, each line within `max_line`, each line
    UTF-8. An error status is `ServerRejected`. Closing the iterator early hangs up."""
    where = _shown(url)
    with _Watchdog(limits.seconds) as watchdog:
        response = _open(url, body, watchdog, "text/event-stream", api_key)
        status = _status(response)
        if not 200 <= status < 300:
            raw = _read(response, watchdog, where, limits.max_error_bytes, cut_quietly=True)
            raise ServerRejected(where, status, _error_detail(raw) or "no detail")
        total = 0
        with response:
            while True:
                try:
                    raw = response.readline(limits.max_line + 1)
                except (OSError, http.client.HTTPException, ValueError) as error:
                    watchdog.check(where)
                    raise ServerBroken(f"{where}: the stream was cut: {_one_line(str(error), 200)}") from None
                watchdog.check(where)
                if not raw:
                    return
                total += len(raw)
                if len(raw) > limits.max_line:
                    raise ServerBroken(f"{where}: one line of the stream is longer than {_size(limits.max_line)}",
                                       hint="a server-sent event is a short JSON line")
                if total > limits.max_bytes:
                    raise ServerBroken(f"{where}: the stream is longer than {_size(limits.max_bytes)}",
                                       hint="lower --max-new-tokens")
                try:
                    line = raw.decode("utf-8").strip()
                except UnicodeDecodeError as error:
                    raise ServerBroken(f"{where}: the stream is not valid UTF-8 (byte {error.start} of a line)") from None
                if line.startswith("data:"):
                    yield line[5:].strip()


def _size(count: int) -> str:
    if count >= 2**20:
        return f"{count // 2**20} MiB"
    return f"{count // 1024} KiB" if count >= 1024 else f"{count} bytes"
