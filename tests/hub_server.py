"""A local stand-in for the Hugging Face hub on 127.0.0.1 (stdlib http.server), for hub ids.

It serves model folders as repositories at one commit, through the few endpoints
`huggingface_hub` and `stopdoctor.facts.remote` use: the revision info and tree listing
(`/api/models/ORG/NAME/revision/REV`, `/api/models/ORG/NAME/tree/REV`) and the files
(`HEAD`/`GET /ORG/NAME/resolve/REV/FILE`, with single `Range: bytes=a-b` requests answered 206).
It counts the body bytes it sends of each file, so a test can assert what travelled.
`mode` changes how weight files (`.safetensors`) are served: "redirect" sends them, as the hub
does, with a 302 to another path (`/cdn/…`, a CDN's signed URL on the real hub); on purpose
misbehaving, "no-range" answers 200 with the whole file, "404" says not found, "truncated" sends
half of each range and closes.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlsplit

COMMIT = "feedc0de" * 5
_RANGE = re.compile(r"^bytes=(\d+)-(\d+)$")


class FakeHub:
    def __init__(self, repos: dict[str, Path]) -> None:
        self.repos = repos
        self.mode = "ok"
        self.sent: Counter[str] = Counter()  # body bytes sent, by file name
        self.requests: Counter[str] = Counter()
        self.cdn_authorization: list[str] = []  # Authorization headers the stand-in CDN was sent (must stay empty)
        self._lock = threading.Lock()
        hub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:
                pass

            def do_HEAD(self) -> None:
                hub.answer(self, head=True)

            def do_GET(self) -> None:
                hub.answer(self, head=False)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    # --- answers ---------------------------------------------------------------------------

    def answer(self, handler: BaseHTTPRequestHandler, head: bool) -> None:
        path = unquote(urlsplit(handler.path).path)
        parts = path.strip("/").split("/")
        if parts[:2] == ["api", "models"] and len(parts) >= 6 and parts[4] in ("revision", "tree"):
            repo = "/".join(parts[2:4])
            if repo not in self.repos:
                return self.send(handler, 404, b"{}", {"X-Error-Code": "RepoNotFound"})
            if parts[4] == "revision":
                siblings = [{"rfilename": name} for name in self.files(repo)]
                body = {"id": repo, "modelId": repo, "sha": COMMIT, "siblings": siblings, "private": False}
            else:
                body = [{"type": "file", "oid": self.oid(repo, name), "size": (self.repos[repo] / name).stat().st_size,
                         "path": name} for name in self.files(repo)]
            return self.send(handler, 200, json.dumps(body).encode(), {"Content-Type": "application/json"})
        if parts[0] == "cdn" and len(parts) >= 4:
            repo, name = "/".join(parts[1:3]), "/".join(parts[3:])
            if repo in self.repos and (self.repos[repo] / name).is_file():
                with self._lock:
                    self.requests["cdn/" + name] += 1
                    if handler.headers.get("Authorization"):
                        self.cdn_authorization.append(handler.headers["Authorization"])
                return self.send_file(handler, repo, name, self.repos[repo] / name, head)
            return self.send(handler, 404, b"not found")
        if len(parts) >= 5 and parts[2] == "resolve":
            repo, name = "/".join(parts[:2]), "/".join(parts[4:])
            file = self.repos.get(repo, Path("/nonexistent")) / name
            if repo not in self.repos or not file.is_file() or (self.mode == "404" and name.endswith(".safetensors")):
                return self.send(handler, 404, b"Entry not found", {"X-Error-Code": "EntryNotFound"})
            if self.mode == "redirect" and name.endswith(".safetensors"):
                with self._lock:
                    self.requests["redirect/" + name] += 1
                # another host name for the same server, as a CDN is another host than the hub
                cdn = self.url.replace("127.0.0.1", "localhost")
                return self.send(handler, 302, b"", {"Location": f"{cdn}/cdn/{repo}/{name}"})
            return self.send_file(handler, repo, name, file, head)
        return self.send(handler, 404, b"not found")

    def files(self, repo: str) -> list[str]:
        return sorted(p.name for p in self.repos[repo].iterdir() if p.is_file())

    def oid(self, repo: str, name: str) -> str:
        file = self.repos[repo] / name
        if file.suffix == ".safetensors":
            return hashlib.sha1(f"{repo}/{name}/{file.stat().st_size}".encode()).hexdigest()
        data = file.read_bytes()
        return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()

    def send(self, handler, status: int, body: bytes, headers: dict[str, str] | None = None) -> None:
        handler.send_response(status)
        for key, value in (headers or {}).items():
            handler.send_header(key, value)
        handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        if handler.command != "HEAD":
            handler.wfile.write(body)

    def send_file(self, handler, repo: str, name: str, file: Path, head: bool) -> None:
        size = file.stat().st_size
        headers = {"X-Repo-Commit": COMMIT, "ETag": f'"{self.oid(repo, name)}"', "Accept-Ranges": "bytes"}
        match = _RANGE.match(handler.headers.get("Range", ""))
        weight = name.endswith(".safetensors")
        with self._lock:
            self.requests[name] += 1
        if head or match is None or (self.mode == "no-range" and weight):
            handler.send_response(200)
            for key, value in headers.items():
                handler.send_header(key, value)
            handler.send_header("Content-Length", str(size))
            handler.end_headers()
            if not head:
                self.stream(handler, name, file, 0, size)
            return
        first, last = int(match.group(1)), min(int(match.group(2)), size - 1)
        if first >= size:
            return self.send(handler, 416, b"", {"Content-Range": f"bytes */{size}"})
        length = last - first + 1
        handler.send_response(206)
        for key, value in headers.items():
            handler.send_header(key, value)
        handler.send_header("Content-Range", f"bytes {first}-{last}/{size}")
        handler.send_header("Content-Length", str(length))
        if self.mode == "truncated" and weight:
            handler.send_header("Connection", "close")
            handler.end_headers()
            self.stream(handler, name, file, first, length // 2)
            handler.close_connection = True
            return
        handler.end_headers()
        self.stream(handler, name, file, first, length)

    def stream(self, handler, name: str, file: Path, offset: int, length: int) -> None:
        with file.open("rb") as source:
            source.seek(offset)
            while length > 0:
                chunk = source.read(min(length, 1 << 20))
                if not chunk:
                    break
                try:
                    handler.wfile.write(chunk)
                except OSError:  # the client hung up (it refused a whole-file answer)
                    return
                with self._lock:
                    self.sent[name] += len(chunk)
                length -= len(chunk)
