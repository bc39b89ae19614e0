"""HTTP for `probe-server`: a small `Transport` interface (GET and POST a JSON body, whole or as
server-sent events) and `BoundedHttp`, its implementation over the one bounded server client
(`facts.http_client`: the whole transfer under one deadline, byte, line and JSON-depth bounds, no
redirects followed, the API key only to the URL's host). What is probe-server's own lives here: the
URL's root, the request count, `Bounds`, and calling a server broken after 5xx on 5xx. The probes
see only `Transport`.

Imports: core, facts.http_client.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Protocol
from urllib.parse import urlsplit

from stopdoctor.core.errors import InputError
from stopdoctor.core.records import record
from stopdoctor.facts.http_client import Limits, Reply, ServerBroken, ServerRejected, request, stream_events


@record
class Bounds:
    """What one request may cost. `request_s` covers connect, headers and the whole body."""

    request_s: float = 20.0
    max_bytes: int = 4 * 1024 * 1024
    max_line: int = 256 * 1024
    max_json_depth: int = 64
    max_server_errors: int = 3  # 5xx answers in a row before the server is called broken

    @property
    def limits(self) -> Limits:
        return Limits(seconds=self.request_s, max_bytes=self.max_bytes, max_line=self.max_line,
                      max_depth=self.max_json_depth)


class Transport(Protocol):
    def get(self, path: str) -> Reply: ...

    def post(self, path: str, body: dict[str, Any]) -> Reply: ...

    def stream(self, path: str, body: dict[str, Any]) -> Iterator[str]:
        """The `data:` payloads of a server-sent-events answer, in order; raises ServerBroken on a
        bound, ServerRejected on an error status (with the start of its body)."""
        ...


class BoundedHttp:
    """`Transport` over `facts.http_client`, bounded as `Bounds` says; `requests` counts what was sent."""

    def __init__(self, url: str, bounds: Bounds = Bounds(), api_key: str | None = None) -> None:
        parts = urlsplit(url.strip())
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise InputError(f"{url!r} is not an http:// or https:// URL", hint="e.g. http://127.0.0.1:8080")
        try:
            parts.port  # noqa: B018 - raises on a port that is no number
        except ValueError as error:
            raise InputError(f"{url!r}: {error}") from None
        self.url = url
        # user:password@ is never sent (nor shown): only the host and port are kept.
        self.origin = f"{parts.scheme}://{parts.netloc.rpartition('@')[2]}"
        # A URL given as .../v1 names the OpenAI routes' root: the probes add /v1 themselves.
        path = parts.path.rstrip("/")
        self.prefix = path[:-3] if path.endswith("/v1") else path
        self.bounds = bounds
        self.api_key = api_key
        self.requests = 0
        self._errors_in_a_row = 0

    def _count_status(self, status: int, method: str, path: str) -> None:
        self._errors_in_a_row = self._errors_in_a_row + 1 if status >= 500 else 0
        if self._errors_in_a_row >= self.bounds.max_server_errors:
            raise ServerBroken(f"{method} {path}: HTTP {status} on {self._errors_in_a_row} requests in a row")

    def _whole(self, method: str, path: str, body: dict[str, Any] | None) -> Reply:
        self.requests += 1
        reply = request(self.origin + self.prefix + path, body, self.bounds.limits, self.api_key)
        self._count_status(reply.status, method, path)
        return reply

    def get(self, path: str) -> Reply:
        return self._whole("GET", path, None)

    def post(self, path: str, body: dict[str, Any]) -> Reply:
        return self._whole("POST", path, body)

    def stream(self, path: str, body: dict[str, Any]) -> Iterator[str]:
        self.requests += 1
        events = stream_events(self.origin + self.prefix + path, body, self.bounds.limits, self.api_key)
        try:
            for index, payload in enumerate(events):
                if index == 0:  # the stream is open: a 2xx
                    self._count_status(200, "POST", path)
                yield payload
            self._count_status(200, "POST", path)
        except ServerRejected as error:
            self._count_status(error.status, "POST", path)
            raise
        finally:
            events.close()  # also when the reader stops early: the server sees the client leave
