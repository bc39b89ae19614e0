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

Imports: core, facts.http_client (the bounded server client; the engine passes the request and the model's special-token texts).
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from typing import Any

from stopdoctor.core.errors import InputError
from stopdoctor.core.records import record
from stopdoctor.facts.http_client import Limits, parse_answer, stream_events

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


@record
class StreamIssue:
    kind: str
    detail: str


def read_stream(url: str, body: dict, chat: bool, timeout: float) -> StreamCapture:
    """POST `body` with `"stream": true` and read the server-sent events into a `StreamCapture`,
    within the client's bounds (the whole stream within `timeout` seconds, 16 MiB, 1 MiB a line)."""
    capture = StreamCapture()
    limits = Limits(seconds=timeout, max_bytes=MAX_STREAM_BYTES)
    for payload in stream_events(url, {**body, "stream": True}, limits):
        if len(capture.chunks) > MAX_CHUNKS:
            raise InputError(f"{url}: the stream holds more than {MAX_CHUNKS} chunks", hint="lower --max-new-tokens")
        _event(payload, capture, chat, url, limits)
    return capture


def _event(payload: str, capture: StreamCapture, chat: bool, url: str, limits: Limits) -> None:
    if payload == "[DONE]":
        capture.done = True
        return
    event = parse_answer(payload.encode("utf-8", "surrogatepass"), f"{url}: a streamed event", limits)
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
    finish = choice.get("finish_reason")
    if finish is not None and capture.finish_chunk is None:
        # a reason is a short word: anything else from the server is cut, not kept whole
        capture.finish_reason = finish[:200] if isinstance(finish, str) else finish if isinstance(finish, int) else f"({type(finish).__name__})"
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
    inserted = _inserted(answer, streamed)
    tails = sorted({(piece, token) for piece in inserted for token in specials
                    if len(token) >= 3 and any(len(tail) >= 2 and tail in piece for tail in _tails(token))})
    for piece, token in tails[:3]:
        issues.append(StreamIssue("special-token-tail", f"{piece[:40]!r} in the stream is the tail of {token!r}; "
                                                        "the answer does not have it"))
    if not capture.done:
        issues.append(StreamIssue("no-done", "the stream ended without data: [DONE]"))
    return issues


# difflib's matcher is quadratic: on a stream that differs from the answer all through (47 KB took
# 157 s) only the part between the common start and end is compared, and only when it is this short.
MAX_DIFF_CHARS = 2000
# A special token's tail is a few characters: a long piece is searched in its first and last this many.
MAX_PIECE_CHARS = 4096


def _inserted(answer: str, streamed: str) -> list[str]:
    """The pieces of `streamed` that `answer` does not have (inserted or replaced), in bounded work:
    the common prefix and suffix set aside, difflib on what is left when it is short, else the
    whole middle as one piece."""
    start = _common_prefix(answer, streamed)
    end = _common_prefix(answer[start:][::-1], streamed[start:][::-1])
    a_mid = answer[start:len(answer) - end]
    s_mid = streamed[start:len(streamed) - end]
    if not s_mid:
        return []
    if len(a_mid) > MAX_DIFF_CHARS or len(s_mid) > MAX_DIFF_CHARS:
        return [s_mid[:MAX_PIECE_CHARS], s_mid[-MAX_PIECE_CHARS:]] if len(s_mid) > MAX_PIECE_CHARS else [s_mid]
    return [s_mid[j1:j2][:MAX_PIECE_CHARS] for op, _, _, j1, j2 in
            difflib.SequenceMatcher(None, a_mid, s_mid, autojunk=False).get_opcodes() if op in ("insert", "replace")]


def _common_prefix(a: str, b: str) -> int:
    """The length of the common start of `a` and `b`: blocks compared in C, the first differing
    block halved down to the character (linear, never a loop over every character)."""
    n = min(len(a), len(b))
    lo = 0
    while lo < n:
        hi = min(n, lo + 4096)
        if a[lo:hi] == b[lo:hi]:
            lo = hi
            continue
        while hi - lo > 1:  # a[lo:hi] != b[lo:hi]: the first difference is in [lo, hi)
            mid = (lo + hi) // 2
            if a[lo:mid] == b[lo:mid]:
                lo = mid
            else:
                hi = mid
        return lo
    return lo


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
