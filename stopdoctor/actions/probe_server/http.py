"""HTTP for `probe-server`: a small `Transport` interface (GET and POST a JSON body, whole or as
server-sent events) and `BoundedHttp`, its one implementation, bounded over the whole transfer.

Every request has a deadline for the whole answer (not per socket read: a server that trickles one
byte a second never finishes), a byte limit, a line limit for events, a JSON nesting limit, and no
redirects (a redirect is reported, never followed: it could send the API key elsewhere). Invalid
UTF-8 is a broken server, not a reason to guess. The probes see only `Transport`, so another bounded
client can replace this one without touching them.

Imports: core only.
"""

from __future__ import annotations

import http.client
import json
import socket
import ssl
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import urlsplit

from stopdoctor.core.errors import InputError


@dataclass(frozen=True)
class Bounds:
    """What one request may cost. `request_s` covers connect, headers and the whole body."""

    request_s: float = 20.0
    max_bytes: int = 4 * 1024 * 1024
    max_line: int = 256 * 1024
    max_json_depth: int = 64
    max_server_errors: int = 3  # 5xx answers in a row before the server is called broken


class ServerBroken(Exception):
    """The server answered in a way no client can use (a redirect, invalid UTF-8, an answer past a
    bound, 5xx after 5xx). One line; the probe that met it fails with it."""


class ServerUnreachable(InputError):
    """Nothing answers at the URL: exit 2."""


@dataclass(frozen=True)
class Reply:
    status: int
    headers: dict[str, str]
    body: bytes
    data: Any = None  # the JSON document, None when the body is not JSON

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300

    def text(self, limit: int = 300) -> str:
        return self.body[:limit].decode("utf-8", "replace")


class Transport(Protocol):
    def get(self, path: str) -> Reply: ...

    def post(self, path: str, body: dict[str, Any]) -> Reply: ...

    def stream(self, path: str, body: dict[str, Any]) -> Iterator[str]:
        """The `data:` payloads of a server-sent-events answer, in order; raises ServerBroken on a
        bound, or on an answer that is not a stream (with its status and first bytes)."""
        ...


def _depth(text: str, limit: int) -> bool:
    """True when the JSON text nests deeper than `limit` (checked before parsing: a 100,000-deep
    array makes json.loads recurse past Python's stack)."""
    depth = deepest = 0
    in_string = escaped = False
    for char in text:
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
            deepest = max(deepest, depth)
            if deepest > limit:
                return True
        elif char in "]}":
            depth -= 1
    return False


def parse_json(text: str, bounds: Bounds, where: str) -> Any:
    """`text` as JSON, or None when it is not JSON; ServerBroken when it nests past the bound."""
    if _depth(text, bounds.max_json_depth):
        raise ServerBroken(f"{where}: the answer nests JSON deeper than {bounds.max_json_depth} levels")
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return None


class BoundedHttp:
    """`Transport` over http.client, bounded as `Bounds` says; `requests` counts what was sent."""

    def __init__(self, url: str, bounds: Bounds = Bounds(), api_key: str | None = None) -> None:
        parts = urlsplit(url.strip())
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise InputError(f"{url!r} is not an http:// or https:// URL", hint="e.g. http://127.0.0.1:8080")
        try:
            parts.port  # noqa: B018 - raises on a port that is no number
        except ValueError as error:
            raise InputError(f"{url!r}: {error}") from None
        self.url = url
        self.scheme, self.host, self.port = parts.scheme, parts.hostname, parts.port
        # A URL given as .../v1 names the OpenAI routes' root: the probes add /v1 themselves.
        path = parts.path.rstrip("/")
        self.prefix = path[:-3] if path.endswith("/v1") else path
        self.bounds = bounds
        self.api_key = api_key
        self.requests = 0
        self._errors_in_a_row = 0

    # -- connection ------------------------------------------------------------------------

    def _connection(self, timeout: float) -> http.client.HTTPConnection:
        if self.scheme == "https":
            return http.client.HTTPSConnection(self.host, self.port, timeout=timeout, context=ssl.create_default_context())
        return http.client.HTTPConnection(self.host, self.port, timeout=timeout)

    def _open(self, method: str, path: str, body: dict[str, Any] | None, accept: str):
        self.requests += 1
        deadline = time.monotonic() + self.bounds.request_s
        headers = {"Accept": accept, "User-Agent": "stopdoctor-probe-server"}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        connection = self._connection(self.bounds.request_s)
        try:
            connection.request(method, self.prefix + path, body=data, headers=headers)
            response = connection.getresponse()
        except (ConnectionRefusedError, socket.gaierror) as error:
            connection.close()
            raise ServerUnreachable(f"{self.url}: cannot reach the server: {error.strerror or error}",
                                    hint="check the URL (e.g. http://127.0.0.1:8080) and that the server is up") from None
        except (TimeoutError, socket.timeout):
            connection.close()
            raise ServerBroken(f"{method} {path}: no answer within {self.bounds.request_s:g} s") from None
        except (OSError, http.client.HTTPException) as error:
            connection.close()
            raise ServerBroken(f"{method} {path}: the connection failed: {type(error).__name__}: {error}") from None
        if 300 <= response.status < 400:
            where = response.getheader("Location", "?")
            connection.close()
            raise ServerBroken(f"{method} {path}: redirected (HTTP {response.status} to {where[:120]}); "
                               "stopdoctor does not follow redirects: give the final URL")
        try:
            self._count_status(response.status, method, path)
        except ServerBroken:
            connection.close()
            raise
        return connection, response, deadline

    def _count_status(self, status: int, method: str, path: str) -> None:
        self._errors_in_a_row = self._errors_in_a_row + 1 if status >= 500 else 0
        if self._errors_in_a_row >= self.bounds.max_server_errors:
            raise ServerBroken(f"{method} {path}: HTTP {status} on {self._errors_in_a_row} requests in a row")

    def _read_some(self, connection, response, deadline: float, size: int) -> bytes:
        left = deadline - time.monotonic()
        if left <= 0:
            raise ServerBroken(f"the answer did not end within {self.bounds.request_s:g} s")
        if connection.sock is not None:
            connection.sock.settimeout(left)  # one read may wait only as long as the request has left
        try:
            return response.read1(size)
        except (TimeoutError, socket.timeout):
            raise ServerBroken(f"the answer did not end within {self.bounds.request_s:g} s") from None
        except (OSError, http.client.HTTPException, ValueError) as error:
            raise ServerBroken(f"the answer was cut: {type(error).__name__}: {error}") from None

    # -- Transport ---------------------------------------------------------------------------

    def _whole(self, method: str, path: str, body: dict[str, Any] | None) -> Reply:
        connection, response, deadline = self._open(method, path, body, "application/json")
        try:
            chunks: list[bytes] = []
            total = 0
            while True:
                chunk = self._read_some(connection, response, deadline, 65536)
                if not chunk:
                    break
                total += len(chunk)
                if total > self.bounds.max_bytes:
                    raise ServerBroken(f"{method} {path}: the answer is longer than {self.bounds.max_bytes} bytes")
                chunks.append(chunk)
            raw = b"".join(chunks)
            headers = {k.lower(): v for k, v in response.getheaders()}
        finally:
            connection.close()
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as error:
            raise ServerBroken(f"{method} {path}: the answer is not valid UTF-8 (byte {error.start})") from None
        return Reply(response.status, headers, raw, parse_json(text, self.bounds, f"{method} {path}") if text else None)

    def get(self, path: str) -> Reply:
        return self._whole("GET", path, None)

    def post(self, path: str, body: dict[str, Any]) -> Reply:
        return self._whole("POST", path, body)

    def stream(self, path: str, body: dict[str, Any]) -> Iterator[str]:
        connection, response, deadline = self._open("POST", path, body, "text/event-stream")
        try:
            if response.status != 200:
                head = self._read_some(connection, response, deadline, 600)
                raise ServerRejected(response.status, head.decode("utf-8", "replace")[:300])
            total = 0
            pending = b""
            while True:
                # read1, not readline: a line that trickles in a byte at a time must still meet the deadline.
                data = self._read_some(connection, response, deadline, 65536)
                total += len(data)
                if total > self.bounds.max_bytes:
                    raise ServerBroken(f"POST {path}: the stream is longer than {self.bounds.max_bytes} bytes")
                pending += data
                *lines, pending = pending.split(b"\n") if data else (*pending.split(b"\n"), b"")
                if len(pending) > self.bounds.max_line:
                    raise ServerBroken(f"POST {path}: a streamed line is longer than {self.bounds.max_line} bytes")
                for raw in lines:
                    try:
                        line = raw.decode("utf-8").strip()
                    except UnicodeDecodeError as error:
                        raise ServerBroken(f"POST {path}: the stream is not valid UTF-8 (byte {error.start} of a line)") from None
                    if line.startswith("data:"):
                        yield line[5:].strip()
                if not data:
                    return
        finally:
            connection.close()  # also when the reader stops early: the server sees the client leave


class ServerRejected(Exception):
    """A non-200 answer to a streamed request (the whole answers are returned with their status)."""

    def __init__(self, status: int, detail: str) -> None:
        super().__init__(f"HTTP {status}: {detail}")
        self.status = status
        self.detail = detail
