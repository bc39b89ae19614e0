"""Byte ranges of a file on the Hugging Face hub, read with HTTP Range requests (never the file).

`RangeReader(url, name)` is a `ByteSource` (`stopdoctor.facts.safetensors`): `size` comes from the
first answer's `Content-Range`, `read(offset, length)` asks for exactly that span, `read_many`
asks for many spans at once (neighbours merged, a few requests in parallel), and `bytes_read`
counts what came over the wire. A server that ignores `Range` (a 200 with the whole file) is
refused before its body is read; a 404, a short body or a wrong `Content-Range` is one
`InputError` line. The URL comes from `stopdoctor.facts.resolve` (the only module that knows hub
ids); the hub's token goes with the request but not across a redirect to another host.

Imports: stdlib (urllib), core.errors.
"""

from __future__ import annotations

import re
import threading
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
_CONTENT_RANGE = re.compile(r"^bytes (\d+)-(\d+)/(\d+|\*)$")


class RangeReader:
    """A remote file read by ranges; `headers` go with every request (`authorization` only to the
    URL's own host)."""

    def __init__(self, url: str, name: str, headers: dict[str, str] | None = None) -> None:
        self.url = url
        self.name = name
        self.headers = dict(headers or {})
        self._token_host = urlsplit(url).netloc  # the token goes to this host only, never to a redirect's target
        self.bytes_read = 0
        self.requests = 0
        self._lock = threading.Lock()
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
    def _get(self, first_byte: int, last_byte: int, first: bool = False) -> tuple[bytes, int]:
        """The bytes first_byte..last_byte (inclusive; the first request may get fewer, at the end
        of a small file) and the file's total size."""
        host = urlsplit(self.url).netloc
        request = urllib.request.Request(self.url, headers={"Range": f"bytes={first_byte}-{last_byte}"})
        for key, value in self.headers.items():
            if key.lower() == "authorization":
                # Never to a CDN's host: not on the redirect (unredirected), nor on the later ranges
                # that go straight to the redirect's target (a presigned URL also refuses it).
                if host == self._token_host:
                    request.add_unredirected_header(key, value)
            else:
                request.add_header(key, value)
        try:
            with urllib.request.urlopen(request, timeout=TIMEOUT_S) as response:
                if first:
                    final = response.geturl()
                    if final != self.url:
                        self.url = final  # the redirect's target (a CDN): later ranges go straight there
                if response.status != 206:
                    raise InputError(
                        f"{self.name}: {host} answered HTTP {response.status} to a range request: it does not serve byte "
                        "ranges, and stopdoctor will not download the whole weight file",
                        hint="point HF_ENDPOINT at a server that supports HTTP Range requests, or download the model and pass its folder")
                match = _CONTENT_RANGE.match(response.headers.get("Content-Range", "").strip())
                if match is None or match.group(3) == "*":
                    raise InputError(f"{self.name}: {host} answered a range request without a usable Content-Range "
                                     f"({response.headers.get('Content-Range')!r})")
                start, end, total = int(match.group(1)), int(match.group(2)), int(match.group(3))
                wanted_end = min(last_byte, total - 1) if first else last_byte
                if start != first_byte or end != wanted_end:
                    raise InputError(f"{self.name}: {host} answered bytes {start}-{end} to a request for bytes "
                                     f"{first_byte}-{wanted_end}")
                data = response.read(end - start + 1)
        except InputError:
            raise
        except urllib.error.HTTPError as error:
            raise _http_error(self.name, host, error, first_byte, last_byte, signed=host != self._token_host) from None
        except urllib.error.URLError as error:
            raise InputError(f"{self.name}: cannot reach {host}: {error.reason}",
                             hint="check the network, or HF_ENDPOINT; HF_HUB_OFFLINE=1 reads only the local HF cache") from None
        except (OSError, ValueError) as error:  # a reset connection, a timeout, a malformed answer
            raise InputError(f"{self.name}: reading bytes {first_byte}-{last_byte} from {host} failed: {error}") from None
        with self._lock:
            self.requests += 1
            self.bytes_read += len(data)
        if len(data) != end - start + 1:
            raise InputError(f"{self.name}: {host} sent {len(data)} of the {end - start + 1} bytes {start}-{end}: "
                             "the answer was truncated")
        return data, total


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
    return InputError(f"{name}: {host} answered HTTP {error.code} ({error.reason}) to a range request")
