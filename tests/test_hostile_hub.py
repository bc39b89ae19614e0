"""Hostile hubs for range reads (issue #32 "Hub range reads", #26 §3): a raw socket server on
127.0.0.1 answers each request with what a test scripts (bytes dripped, headers that never end, a
body shorter than its length, redirect loops, reason phrases with escapes). `RangeReader` must
end each in one `InputError` line, within its whole-transfer bound (made small here: the bound
is what is tested, not the machine's speed), never print the server's controls or the
credentials of HF_ENDPOINT, and never send the token to another host."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable

import pytest

from stopdoctor.core.errors import InputError

Script = Callable[[socket.socket, str, dict], None]


class RawServer:
    """Accepts connections on 127.0.0.1 and runs `script(conn, path, headers)` for each request."""

    def __init__(self, script: Script) -> None:
        self.script = script
        self.seen: list[tuple[str, dict]] = []
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.stopped = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self.stopped.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        try:
            data = b""
            while b"\r\n\r\n" not in data:
                chunk = conn.recv(65536)
                if not chunk:
                    return
                data += chunk
            lines = data.split(b"\r\n\r\n")[0].decode("latin-1").split("\r\n")
            path = lines[0].split(" ")[1]
            headers = {k.strip().lower(): v.strip() for k, v in (line.split(":", 1) for line in lines[1:] if ":" in line)}
            self.seen.append((path, headers))
            self.script(conn, path, headers)
        except OSError:
            pass
        finally:
            conn.close()

    def close(self) -> None:
        self.stopped.set()
        self.sock.close()


@pytest.fixture
def serve():
    servers: list[RawServer] = []

    def start(script: Script) -> RawServer:
        servers.append(RawServer(script))
        return servers[-1]

    yield start
    for server in servers:
        server.close()


@pytest.fixture
def short_bound(monkeypatch):
    import stopdoctor.facts.remote as remote

    monkeypatch.setattr(remote, "TRANSFER_S", 2.0)
    monkeypatch.setattr(remote, "TIMEOUT_S", 30.0)  # each read stays under this: only the bound in all ends it


def _range(headers: dict) -> tuple[int, int]:
    first, last = headers["range"].removeprefix("bytes=").split("-")
    return int(first), int(last)


SIZE = 1000


def _ok_head(headers: dict, extra: str = "") -> bytes:
    first, last = _range(headers)
    last = min(last, SIZE - 1)
    return (f"HTTP/1.1 206 Partial Content\r\nContent-Range: bytes {first}-{last}/{SIZE}\r\n"
            f"Content-Length: {last - first + 1}\r\n{extra}\r\n").encode()


def _drip(conn: socket.socket, data: bytes, every: float = 0.3) -> None:
    for byte in data:
        conn.sendall(bytes([byte]))
        time.sleep(every)


def _read(url: str, **kwargs) -> InputError:
    from stopdoctor.facts.remote import RangeReader

    started = time.monotonic()
    with pytest.raises(InputError) as caught:
        RangeReader(url + "/org/name/resolve/main/model.safetensors", "org/name/model.safetensors", **kwargs)
    assert time.monotonic() - started < 60  # the bound is 2 s; generous for a busy machine
    error = caught.value
    text = error.message + (error.hint or "")
    assert "\n" not in text and "\r" not in text and "\x1b" not in text and "\u202e" not in text, text
    return error


def test_a_body_dripped_a_byte_at_a_time_ends_at_the_bound(serve, short_bound):
    server = serve(lambda conn, path, headers: (conn.sendall(_ok_head(headers)), _drip(conn, b"x" * SIZE)))
    error = _read(server.url)
    assert "took more than 2 s in all" in error.message


def test_headers_dripped_a_byte_at_a_time_end_at_the_bound(serve, short_bound):
    server = serve(lambda conn, path, headers: _drip(conn, _ok_head(headers) + b"x" * SIZE))
    assert "took more than 2 s in all" in _read(server.url).message


def test_a_server_that_never_answers_ends_at_the_bound(serve, short_bound):
    server = serve(lambda conn, path, headers: time.sleep(20))
    assert "took more than 2 s in all" in _read(server.url).message


def test_headers_that_never_end(serve):
    def script(conn, path, headers):
        conn.sendall(_ok_head(headers)[:-2])
        for i in range(100_000):
            conn.sendall(f"X-Header-{i}: x\r\n".encode())

    assert "failed" in _read(serve(script).url).message


def test_one_header_line_that_never_ends(serve):
    def script(conn, path, headers):
        conn.sendall(b"HTTP/1.1 206 Partial Content\r\nX-Long: ")
        for _ in range(10_000):
            conn.sendall(b"a" * 1024)

    assert "failed" in _read(serve(script).url).message


def test_a_body_shorter_than_its_length(serve):
    def script(conn, path, headers):
        conn.sendall(_ok_head(headers) + b"x" * 10)

    assert "truncated" in _read(serve(script).url).message


@pytest.mark.parametrize("content_range", ["bytes 0-999/*", "bytes 5-999/1000", "bytes 0-2000/1000", "bytes=0-999/1000",
                                           "bytes 0-999/1000\x1b[31m"])
def test_a_wrong_content_range(serve, content_range):
    def script(conn, path, headers):
        conn.sendall(f"HTTP/1.1 206 Partial Content\r\nContent-Range: {content_range}\r\nContent-Length: 1000\r\n\r\n".encode()
                     + b"x" * 1000)

    _read(serve(script).url)


def test_a_gzip_encoded_range_is_refused(serve):
    server = serve(lambda conn, path, headers: conn.sendall(_ok_head(headers, "Content-Encoding: gzip\r\n") + b"x" * SIZE))
    assert "Content-Encoding" in _read(server.url).message


def test_a_redirect_loop_is_one_line(serve):
    server = serve(lambda conn, path, headers: conn.sendall(
        f"HTTP/1.1 302 Found\r\nLocation: {path}\r\nContent-Length: 0\r\n\r\n".encode()))
    assert "redirected more than 5 times or in a loop" in _read(server.url).message


def test_fifteen_redirects_are_one_line(serve):
    def script(conn, path, headers):
        hop = int(path.rsplit("hop", 1)[1]) if "hop" in path else 0
        conn.sendall(f"HTTP/1.1 302 Found\r\nLocation: /hop{hop + 1}\r\nContent-Length: 0\r\n\r\n".encode())

    server = serve(script)
    assert "redirected more than 5 times" in _read(server.url).message
    assert len(server.seen) <= 7


@pytest.mark.parametrize("status", [401, 500])
def test_a_reason_phrase_with_escapes_and_a_workflow_command(serve, status):
    reason = "Nope\x1b[2J\x1b]0;owned\x07 \u202e::error::forged"
    server = serve(lambda conn, path, headers: conn.sendall(
        f"HTTP/1.1 {status} {reason}\r\nContent-Length: 0\r\n\r\n".encode("utf-8")))
    error = _read(server.url)
    assert "::error::forged" not in error.message or "\\x1b" in error.message


def test_credentials_of_hf_endpoint_are_never_printed(serve):
    server = serve(lambda conn, path, headers: conn.sendall(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n"))
    url = server.url.replace("http://", "http://alice:s3cret-pass@")
    error = _read(url)
    assert "s3cret" not in error.message and "alice" not in error.message
    assert f"127.0.0.1:{server.port}" in error.message


def test_the_token_never_goes_to_the_redirect_host(serve):
    data = bytes(range(256)) * 4

    def target(conn, path, headers):
        first, last = _range(headers)
        last = min(last, SIZE - 1)
        conn.sendall(_ok_head(headers) + data[first:last + 1])

    cdn = serve(target)
    hub = serve(lambda conn, path, headers: conn.sendall(
        f"HTTP/1.1 302 Found\r\nLocation: {cdn.url.replace('127.0.0.1', 'localhost')}/cdn\r\nContent-Length: 0\r\n\r\n".encode()))
    from stopdoctor.facts.remote import RangeReader

    reader = RangeReader(hub.url + "/org/name/resolve/main/model.safetensors", "x", {"authorization": "Bearer hf_secret"})
    assert reader.read(10, 5) == data[10:15]
    assert reader.read_many([(100, 3), (900, 50)]) == [data[100:103], data[900:950]]
    assert hub.seen and all(h.get("authorization") == "Bearer hf_secret" for _, h in hub.seen)
    assert cdn.seen and all("authorization" not in h for _, h in cdn.seen)


def test_the_bytes_read_in_all_are_bounded(serve, monkeypatch):
    import stopdoctor.facts.remote as remote
    from stopdoctor.facts.remote import RangeReader

    monkeypatch.setattr(remote, "MAX_TRANSFER_BYTES", 70_000)
    total = 1_000_000

    def script(conn, path, headers):
        first, last = _range(headers)
        conn.sendall(f"HTTP/1.1 206 Partial Content\r\nContent-Range: bytes {first}-{last}/{total}\r\n"
                     f"Content-Length: {last - first + 1}\r\n\r\n".encode() + bytes(last - first + 1))

    reader = RangeReader(serve(script).url + "/f", "f")  # the first 64 KB
    assert reader.read(200_000, 4000) == bytes(4000)
    with pytest.raises(InputError, match="would pass 70,000 bytes"):
        reader.read(300_000, 10_000)


# --- the config files (huggingface_hub through stopdoctor's bounded client) ---------------------

_RUN = """
import sys
import stopdoctor.facts.resolve as resolve
resolve.HUB_FILES_S = 3.0
resolve.MAX_HUB_FILE_BYTES = 200_000
from stopdoctor.cli import main
sys.argv = ["stopdoctor", "inspect", "org/name"]
main()
"""
COMMIT = "c0ffee00" * 5


def _inspect_hub(endpoint: str, tmp_path) -> "subprocess.CompletedProcess":
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    env = dict(os.environ, HF_ENDPOINT=endpoint, HF_HUB_OFFLINE="0", HF_HOME=str(tmp_path / "hf"),
               HF_HUB_CACHE=str(tmp_path / "hf" / "hub"), HF_HUB_DISABLE_PROGRESS_BARS="1", PYTHONPATH=str(root),
               NO_COLOR="1", HF_HUB_ETAG_TIMEOUT="30", HF_HUB_DOWNLOAD_TIMEOUT="30")
    started = time.monotonic()
    run = subprocess.run([sys.executable, "-c", _RUN], env=env, capture_output=True, text=True, timeout=120)
    assert time.monotonic() - started < 90
    assert run.returncode == 2, (run.returncode, run.stdout[-500:], run.stderr[-2000:])
    assert "Traceback" not in run.stderr and "\x1b" not in run.stderr
    errors = [line for line in run.stderr.splitlines() if line.startswith("stopdoctor: error:")]
    assert len(errors) == 1, run.stderr[-2000:]
    return run


def _hub_script(file_answer: Callable[[socket.socket, str], None]) -> Script:
    import json

    def script(conn, path, headers):
        if path.startswith("/api/models/") and "/tree/" in path:
            body = json.dumps([{"type": "file", "oid": "abc", "size": 1000, "path": "tokenizer.json"}]).encode()
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
        elif path.startswith("/api/models/"):
            body = json.dumps({"id": "org/name", "sha": COMMIT, "siblings": [{"rfilename": "tokenizer.json"}]}).encode()
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
        elif "/resolve/" in path:
            file_answer(conn, headers.get("_method", ""))
        else:
            conn.sendall(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")

    return script


def _file_headers(extra: str) -> bytes:
    return (f"HTTP/1.1 200 OK\r\nX-Repo-Commit: {COMMIT}\r\nETag: \"abc\"\r\n{extra}Connection: close\r\n\r\n").encode()


def test_a_revision_api_that_never_answers_ends_at_the_bound(serve, tmp_path):
    server = serve(lambda conn, path, headers: time.sleep(60))
    run = _inspect_hub(server.url, tmp_path)
    assert "did not answer within 3 s in all" in run.stderr


def test_a_gzip_encoded_tokenizer_is_never_expanded_into_the_cache(serve, tmp_path):
    import gzip

    bomb = gzip.compress(b" " * 20_000_000)
    server = serve(_hub_script(lambda conn, method: conn.sendall(
        _file_headers(f"Content-Encoding: gzip\r\nContent-Length: {len(bomb)}\r\n") + bomb)))
    run = _inspect_hub(server.url, tmp_path)
    assert "Content-Encoding 'gzip'" in run.stderr
    cached = [p.stat().st_size for p in (tmp_path / "hf").rglob("*") if p.is_file()]
    assert max(cached, default=0) < 1_000_000


def test_an_endless_tokenizer_is_cut_at_the_cap(serve, tmp_path):
    def endless(conn, method):
        conn.sendall(_file_headers(""))
        for _ in range(2_000):  # 2 GB, were it read to the end
            conn.sendall(b"x" * 1_000_000)

    server = serve(_hub_script(endless))
    run = _inspect_hub(server.url, tmp_path)
    assert "over 200,000 bytes" in run.stderr or "did not answer within" in run.stderr
    cached = [p.stat().st_size for p in (tmp_path / "hf").rglob("*") if p.is_file()]
    assert max(cached, default=0) < 1_000_000


def test_a_tree_listing_of_strings_is_one_line(serve, tmp_path):
    import json

    def script(conn, path, headers):
        body = json.dumps(["x"] if "/tree/" in path else {"id": "org/name", "sha": COMMIT, "siblings": []}).encode()
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body) + body)

    _inspect_hub(serve(script).url, tmp_path)


def test_hub_errors_never_print_the_endpoints_credentials(serve, tmp_path):
    server = serve(lambda conn, path, headers: conn.sendall(
        b"HTTP/1.1 500 Oops\x1b[2J\r\nContent-Type: application/json\r\nContent-Length: 29\r\n\r\n"
        b'{"error": "\\u001b[31m::error"}'))
    run = _inspect_hub(server.url.replace("http://", "http://alice:s3cret-pass@"), tmp_path)
    assert "s3cret" not in run.stderr and "alice" not in run.stderr
