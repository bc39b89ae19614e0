"""Byte ranges of a file on the Hugging Face hub, read with HTTP Range requests (never the file).

`RangeReader(url, name)` is a `ByteSource` (`stopdoctor.facts.safetensors`): `size` comes from the
first answer's `Content-Range`, `read(offset, length)` asks for exactly that span, `read_many`
asks for many spans at once (neighbours merged, a few requests in parallel), and `bytes_read`
counts what came over the wire. A server that ignores `Range` (a 200 with the whole file) is
refused before its body is read; a 404, a short body or a wrong `Content-Range` is one
`InputError` line. The URL comes from `stopdoctor.facts.resolve` (the only module that knows hub
ids); the hub's token goes with the request but not across a redirect to another host.

A hostile server is bounded in all, not read by read: the whole transfer of one file gets
TRANSFER_S seconds (a watchdog shuts the connection of a request that drips past it, headers or
body) and MAX_TRANSFER_BYTES bytes; at most MAX_REDIRECTS redirects; headers that never end or a
body shorter than its length are one line. What the server says (a reason phrase, a header) is
shown through `server_text` (one line, controls escaped), and a host is shown without the
credentials an HF_ENDPOINT URL may carry (`shown_host`).

Imports: stdlib (urllib, http.client), core.errors.
"""

from __future__ import annotations

import http.client
import re
import socket
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import urlsplit

from stopdoctor.core.errors import InputError

# The first request asks for this much: the 8-byte length and, for any ordinary model, its whole
# header, so a header costs one round trip.
FIRST_READ = 64 * 1024
# Spans closer than this are fetched as one request: a few KB more beat a round trip.
MERGE_GAP = 16 * 1024
PARALLEL = 8
TIMEOUT_S = 30.0
# The whole transfer of one file (every request of it): an embedding's rows of the largest model
# are a few MB, so this is minutes of a slow link, and a server that drips a byte at a time ends.
TRANSFER_S = 300.0
MAX_TRANSFER_BYTES = 512 * 1024 * 1024
MAX_REDIRECTS = 5
_CONTENT_RANGE = re.compile(r"^bytes (\d{1,20})-(\d{1,20})/(\d{1,20}|\*)$")


def server_text(text: object, limit: int = 200) -> str:
    """Text a server chose (a reason phrase, a header, an error body) as one line for a person:
    controls, escapes, bidi overrides and line breaks written as `\\xNN`/`\\uNNNN`, cut to `limit`."""
    text = str(text)
    shown = "".join(c if c.isprintable() else (f"\\x{ord(c):02x}" if ord(c) < 256 else f"\\u{ord(c):04x}")
                    for c in text[:limit])
    return shown + ("…" if len(text) > limit else "")


def without_credentials(text: str) -> str:
    """`text` with the `user:password@` of any URL in it removed (an HF_ENDPOINT may carry them)."""
    return re.sub(r"(?i)\b([a-z][a-z0-9+.-]{0,20}://)[^/@\s]{1,500}@", r"\1", text)


def shown_host(url: str) -> str:
    """host[:port] of a URL, without the `user:password@` an HF_ENDPOINT may hold."""
    parts = urlsplit(url)
    try:
        port = parts.port
    except ValueError:
        port = None
    host = parts.hostname or "?"
    if ":" in host:
        host = f"[{host}]"
    return server_text(f"{host}:{port}" if port is not None else host, 100)


def _origin(url: str) -> tuple[str, str | None, int | None]:
    parts = urlsplit(url)
    try:
        port = parts.port
    except ValueError:
        port = None
    return parts.scheme, parts.hostname, port


class RangeReader:
    """A remote file read by ranges; `headers` go with every request (`authorization` only to the
    URL's own host)."""

    def __init__(self, url: str, name: str, headers: dict[str, str] | None = None) -> None:
        self.url = url
        self.name = name
        self.headers = dict(headers or {})
        self._token_origin = _origin(url)  # the token goes to this host only, never to a redirect's target
        self.bytes_read = 0
        self.requests = 0
        self._lock = threading.Lock()
        self._deadline = time.monotonic() + TRANSFER_S
        self._opener = _opener(self)
        self._cache_start = 0
        self._cache = b""
        self.size = 0
        first, total = self._get(0, FIRST_READ - 1, first=True)
        self.size = total
        self._cache = first

    # ByteSource
    def read(self, offset: int, length: int) -> bytes:
        if length <= 0:
            return b""
        end = offset + length
        if end > self.size:
            raise InputError(f"{self.name}: truncated: needed {length} bytes at byte {offset}, the file ends at {self.size}")
        cached_end = self._cache_start + len(self._cache)
        if self._cache_start <= offset and end <= cached_end:
            return self._cache[offset - self._cache_start:end - self._cache_start]
        data, _ = self._get(offset, end - 1)
        return data

    def read_many(self, spans: Sequence[tuple[int, int]]) -> list[bytes]:
        """The bytes of each (offset, length), in order: nearby spans merged into one request, the
        requests run a few at a time."""
        for offset, length in spans:
            if offset + length > self.size:
                raise InputError(f"{self.name}: truncated: needed {length} bytes at byte {offset}, the file ends at {self.size}")
        order = sorted(range(len(spans)), key=lambda i: spans[i][0])
        groups: list[list[int]] = []
        for i in order:
            offset, length = spans[i]
            if groups:
                last = spans[groups[-1][-1]]
                start = spans[groups[-1][0]][0]
                if offset - (last[0] + last[1]) <= MERGE_GAP and offset + length - start <= 4 * 1024 * 1024:
                    groups[-1].append(i)
                    continue
            groups.append([i])

        def fetch(group: list[int]) -> tuple[list[int], int, bytes]:
            start = spans[group[0]][0]
            end = max(spans[i][0] + spans[i][1] for i in group)
            return group, start, self.read(start, end - start)

        results: list[bytes] = [b""] * len(spans)
        with ThreadPoolExecutor(max_workers=min(PARALLEL, max(1, len(groups)))) as pool:
            for group, start, data in pool.map(fetch, groups):
                for i in group:
                    offset, length = spans[i]
                    results[i] = data[offset - start:offset - start + length]
        return results

    def close(self) -> None:
        pass

    def __enter__(self) -> RangeReader:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    # HTTP
    def _watch(self, sock: socket.socket) -> threading.Timer:
        """Shut `sock` when the transfer's time is up: a server that drips bytes never ends a read
        on its own (each recv is quick)."""

        def shut() -> None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

        timer = threading.Timer(max(0.0, self._deadline - time.monotonic()), shut)
        timer.daemon = True
        timer.start()
        return timer

    def _get(self, first_byte: int, last_byte: int, first: bool = False) -> tuple[bytes, int]:
        """The bytes first_byte..last_byte (inclusive; the first request may get fewer, at the end
        of a small file) and the file's total size."""
        host = shown_host(self.url)
        if time.monotonic() >= self._deadline:
            raise self._too_slow(host)
        if self.bytes_read + (last_byte - first_byte + 1) > MAX_TRANSFER_BYTES:
            raise InputError(f"{self.name}: reading bytes {first_byte}-{last_byte} would pass {MAX_TRANSFER_BYTES:,} bytes "
                             f"read from {host} for one file: refused")
        request = urllib.request.Request(self.url, headers={"Range": f"bytes={first_byte}-{last_byte}",
                                                            "Accept-Encoding": "identity"})
        for key, value in self.headers.items():
            if key.lower() == "authorization":
                # Never to a CDN's host: not on the redirect (unredirected), nor on the later ranges
                # that go straight to the redirect's target (a presigned URL also refuses it).
                if _origin(self.url) == self._token_origin:
                    request.add_unredirected_header(key, value)
            elif key.lower() != "accept-encoding":
                request.add_header(key, value)
        timers: list[threading.Timer] = []
        request.timers = timers  # type: ignore[attr-defined]  # the connection's watchdog, started when it connects (`_opener`)
        try:
            with self._opener.open(request, timeout=min(TIMEOUT_S, max(0.1, self._deadline - time.monotonic()))) as response:
                if first:
                    final = response.geturl()
                    if final != self.url:
                        self.url = final  # the redirect's target (a CDN): later ranges go straight there
                        host = shown_host(final)
                if response.status != 206:
                    raise InputError(
                        f"{self.name}: {host} answered HTTP {response.status} to a range request: it does not serve byte "
                        "ranges, and stopdoctor will not download the whole weight file",
                        hint="point HF_ENDPOINT at a server that supports HTTP Range requests, or download the model and pass its folder")
                if response.headers.get("Content-Encoding", "identity").strip().lower() not in ("identity", ""):
                    raise InputError(f"{self.name}: {host} answered a range request with Content-Encoding "
                                     f"{server_text(response.headers.get('Content-Encoding'), 40)!r}: the bytes are not the file's")
                match = _CONTENT_RANGE.match(response.headers.get("Content-Range", "").strip())
                if match is None or match.group(3) == "*":
                    raise InputError(f"{self.name}: {host} answered a range request without a usable Content-Range "
                                     f"({server_text(response.headers.get('Content-Range'), 80)!r})")
                start, end, total = int(match.group(1)), int(match.group(2)), int(match.group(3))
                wanted_end = min(last_byte, total - 1) if first else last_byte
                if start != first_byte or end != wanted_end or end >= total:
                    raise InputError(f"{self.name}: {host} answered bytes {start}-{end}/{total} to a request for bytes "
                                     f"{first_byte}-{wanted_end}")
                data = response.read(end - start + 1)
        except InputError:
            raise
        except urllib.error.HTTPError as error:
            error.close()  # its body is never read: the status says it all
            if time.monotonic() >= self._deadline:
                raise self._too_slow(host) from None
            raise _http_error(self.name, shown_host(error.url or self.url), error, first_byte, last_byte,
                              signed=_origin(self.url) != self._token_origin) from None
        except urllib.error.URLError as error:
            if time.monotonic() >= self._deadline:
                raise self._too_slow(host) from None
            raise InputError(f"{self.name}: cannot reach {host}: {server_text(error.reason)}",
                             hint="check the network, or HF_ENDPOINT; HF_HUB_OFFLINE=1 reads only the local HF cache") from None
        except (OSError, ValueError, http.client.HTTPException) as error:
            # a reset connection, a timeout, headers that never end, a body shorter than its length
            if time.monotonic() >= self._deadline:
                raise self._too_slow(host) from None
            raise InputError(f"{self.name}: reading bytes {first_byte}-{last_byte} from {host} failed: "
                             f"{server_text(type(error).__name__ + ': ' + str(error) if isinstance(error, http.client.HTTPException) else error)}") from None
        finally:
            for timer in timers:
                timer.cancel()
        with self._lock:
            self.requests += 1
            self.bytes_read += len(data)
        if len(data) != end - start + 1:
            if time.monotonic() >= self._deadline:
                raise self._too_slow(host)
            raise InputError(f"{self.name}: {host} sent {len(data)} of the {end - start + 1} bytes {start}-{end}: "
                             "the answer was truncated")
        return data, total

    def _too_slow(self, host: str) -> InputError:
        return InputError(f"{self.name}: reading from {host} took more than {TRANSFER_S:g} s in all: the server is too slow "
                          "or never ends its answer", hint="try again later, or download the model and pass its folder")


def _opener(reader: RangeReader) -> urllib.request.OpenerDirector:
    """An opener whose connections are watched by the reader's deadline, and whose redirects
    stop at MAX_REDIRECTS (urllib's own limit is 10, and its refusal is several lines)."""

    def watched(base: type[http.client.HTTPConnection]) -> type[http.client.HTTPConnection]:
        class Watched(base):  # type: ignore[misc, valid-type]
            timers: list[threading.Timer] | None = None

            def connect(self) -> None:
                super().connect()
                if self.timers is not None:
                    self.timers.append(reader._watch(self.sock))

        return Watched

    plain, secure = watched(http.client.HTTPConnection), watched(http.client.HTTPSConnection)

    class HTTP(urllib.request.HTTPHandler):
        def http_open(self, req):
            return self.do_open(lambda *a, **k: _with_timers(plain(*a, **k), req), req)

    class HTTPS(urllib.request.HTTPSHandler):
        def https_open(self, req):
            return self.do_open(lambda *a, **k: _with_timers(secure(*a, **k), req), req,
                                context=self._context)  # type: ignore[attr-defined]  # HTTPSHandler's own, untyped

    class Redirects(urllib.request.HTTPRedirectHandler):
        max_redirections = MAX_REDIRECTS
        max_repeats = 1

        def redirect_request(self, req, fp, code, msg, headers, newurl):
            new = super().redirect_request(req, fp, code, msg, headers, newurl)
            if new is not None:
                new.timers = getattr(req, "timers", None)  # type: ignore[attr-defined]  # ours, carried along
            return new

        def http_error_302(self, req, fp, code, msg, headers):
            try:
                return super().http_error_302(req, fp, code, msg, headers)
            except urllib.error.HTTPError as error:
                fp.close()
                if "redirect" in str(error.msg).lower() and ("loop" in str(error.msg) or "infinite" in str(error.msg)):
                    raise InputError(f"{reader.name}: {shown_host(req.full_url)} redirected more than {MAX_REDIRECTS} times "
                                     "or in a loop") from None
                raise

        http_error_301 = http_error_303 = http_error_307 = http_error_308 = http_error_302

    return urllib.request.build_opener(HTTP, HTTPS, Redirects)


def _with_timers(connection: http.client.HTTPConnection, request) -> http.client.HTTPConnection:
    connection.timers = getattr(request, "timers", None)  # type: ignore[attr-defined]  # ours, carried along
    return connection


def _http_error(name: str, host: str, error: urllib.error.HTTPError, first: int, last: int, signed: bool = False) -> InputError:
    if error.code == 416:
        return InputError(f"{name}: {host} says bytes {first}-{last} are past the end of the file (HTTP 416)")
    if error.code == 404:
        return InputError(f"{name}: not found on {host} (HTTP 404)",
                          hint="a repository with only .bin or .gguf weights: download it and pass the folder or .gguf file")
    if error.code in (401, 403) and signed:  # the redirect's signed link, not the hub, refused
        return InputError(f"{name}: {host} refused the signed download link the hub redirected to (HTTP {error.code}): "
                          "it may have expired during the read", hint="run the command again")
    if error.code in (401, 403):
        return InputError(f"{name}: {host} refused access (HTTP {error.code}): a gated or private repository",
                          hint="log in with `hf auth login` and accept the model's terms on its hub page")
    return InputError(f"{name}: {host} answered HTTP {error.code} ({server_text(error.reason, 80)}) to a range request")
