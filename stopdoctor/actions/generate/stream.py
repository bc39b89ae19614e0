"""`generate --server URL --stream`: the same request streamed (server-sent events), reassembled,
and compared with the non-streamed answer. What a streaming server gets wrong:

- `partial-stop-leaked`: the prefix of a stop string the server held back was sent anyway when the
  stop matched (vllm #3574): the streamed text ends with the start of a stop string.
- `stop-string-in-text`: the stop string itself reached the client.
- `text-after-finish`: content arrived after the chunk that carried `finish_reason`.
- `not-flushed`: the stream lost the end of the answer (held-back text never sent at end of stream).
- `split-utf8`: U+FFFD in the stream where the answer has a real character (a multi-byte
  character cut between two chunks and decoded on each side).
- `special-token-tail`: the tail of a special token (`im_end|>`) in the streamed text that the
  answer does not have (smg PR #2203).
- `no-done`: the stream ended without `data: [DONE]`.

Imports: core only (the engine passes the request and the model's special-token texts).
"""

from __future__ import annotations

import difflib
import json
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from typing import Any

from stopdoctor.core.errors import InputError

MAX_STREAM_BYTES = 16 * 1024 * 1024
MAX_CHUNKS = 100_000


@dataclass
class StreamCapture:
    chunks: list[str] = field(default_factory=list)  # the text of each content chunk, in order
    finish_reason: Any = None
    finish_chunk: int | None = None  # index in `chunks` of the chunk that carried finish_reason
    after_finish: str = ""  # content that arrived after it
    done: bool = False  # `data: [DONE]` seen

    @property
    def text(self) -> str:
        return "".join(self.chunks)


@dataclass(frozen=True)
class StreamIssue:
    kind: str
    detail: str


def read_stream(url: str, body: dict, chat: bool, timeout: float) -> StreamCapture:
    """POST `body` with `"stream": true` and read the server-sent events into a `StreamCapture`."""
    data = json.dumps({**body, "stream": True}).encode()
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json",
                                                              "Accept": "text/event-stream"})
    capture = StreamCapture()
    total = 0
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            for raw in response:
                total += len(raw)
                if total > MAX_STREAM_BYTES or len(capture.chunks) > MAX_CHUNKS:
                    raise InputError(f"{url}: the stream is longer than {MAX_STREAM_BYTES // 2**20} MiB or "
                                     f"{MAX_CHUNKS} chunks", hint="lower --max-new-tokens")
                _event(raw.decode("utf-8", "replace").strip(), capture, chat, url)
    except urllib.error.HTTPError as error:
        detail = error.read().decode("utf-8", "replace")[:300]
        raise InputError(f"the server refused the streamed request (HTTP {error.code}): {detail}") from None
    except (urllib.error.URLError, TimeoutError, ConnectionError) as error:
        raise InputError(f"{url}: the stream failed: {getattr(error, 'reason', error)}") from None
    return capture


def _event(line: str, capture: StreamCapture, chat: bool, url: str) -> None:
    if not line.startswith("data:"):
        return  # comments, event:, id:, blank lines between events
    payload = line[5:].strip()
    if payload == "[DONE]":
        capture.done = True
        return
    try:
        event = json.loads(payload)
    except json.JSONDecodeError:
        raise InputError(f"{url}: a streamed event is not JSON: {payload[:80]!r}") from None
    choices = event.get("choices") if isinstance(event, dict) else None
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        return  # the usage-only chunk of stream_options.include_usage
    choice = choices[0]
    delta = choice.get("delta") if chat else None
    text = (delta.get("content") if isinstance(delta, dict) else None) if chat else choice.get("text")
    if isinstance(text, str) and text:
        if capture.finish_chunk is not None:
            capture.after_finish += text
        capture.chunks.append(text)
    if choice.get("finish_reason") is not None and capture.finish_chunk is None:
        capture.finish_reason = choice["finish_reason"]
        capture.finish_chunk = len(capture.chunks) - 1


def stream_issues(capture: StreamCapture, answer: str, stops: tuple[str, ...], specials: tuple[str, ...]) -> list[StreamIssue]:
    """What the stream got wrong, judged against `answer` (the same request, not streamed)."""
    streamed = capture.text
    issues = []
    if capture.after_finish:
        issues.append(StreamIssue("text-after-finish", f"{capture.after_finish[:80]!r} arrived after finish_reason "
                                                       f"{capture.finish_reason!r}"))
    extra = streamed[len(answer):] if streamed.startswith(answer) else None
    leaked = [s for s in stops if extra and len(extra) < len(s) and s.startswith(extra)]
    if leaked:
        issues.append(StreamIssue("partial-stop-leaked", f"the stream ends with {extra!r}, the start of the stop "
                                                         f"string {leaked[0]!r}, which the answer does not have"))
    for stop in stops:
        if stop in streamed and stop not in answer:
            issues.append(StreamIssue("stop-string-in-text", f"the stop string {stop!r} reached the client"))
    if len(streamed) < len(answer) and answer.startswith(streamed):
        issues.append(StreamIssue("not-flushed", f"the stream lost the end of the answer: {answer[len(streamed):][:80]!r}"))
    if streamed.count("\ufffd") > answer.count("\ufffd"):
        boundary = _split_boundary(capture.chunks)
        issues.append(StreamIssue("split-utf8", f"{streamed.count(chr(0xFFFD)) - answer.count(chr(0xFFFD))} replacement "
                                                f"character(s) in the stream{boundary}"))
    inserted = [streamed[j1:j2] for op, _, _, j1, j2 in
                difflib.SequenceMatcher(None, answer, streamed, autojunk=False).get_opcodes() if op in ("insert", "replace")]
    tails = sorted({(piece, token) for piece in inserted for token in specials
                    if len(token) >= 3 and any(len(tail) >= 2 and tail in piece for tail in _tails(token))})
    for piece, token in tails[:3]:
        issues.append(StreamIssue("special-token-tail", f"{piece[:40]!r} in the stream is the tail of {token!r}; "
                                                        "the answer does not have it"))
    if not capture.done:
        issues.append(StreamIssue("no-done", "the stream ended without data: [DONE]"))
    return issues


def _tails(token: str) -> list[str]:
    """The proper suffixes of a special token's text, longest first, that still end it (">", "|>")."""
    return [token[i:] for i in range(1, len(token) - 1)]


def _split_boundary(chunks: list[str]) -> str:
    for i in range(len(chunks) - 1):
        if chunks[i].endswith("\ufffd") or chunks[i + 1].startswith("\ufffd"):
            return f", at the boundary of chunks {i} and {i + 1}"
    return ""


def stream_document(capture: StreamCapture, issues: list[StreamIssue]) -> dict[str, Any]:
    return {"chunks": len(capture.chunks), "text": capture.text, "finish_reason": capture.finish_reason,
            "done": capture.done, "issues": [{"kind": i.kind, "detail": i.detail} for i in issues]}
