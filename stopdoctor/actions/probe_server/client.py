"""OpenAI-compatible requests for the probes: chat and completions, whole and streamed, always
greedy (temperature 0, seed 0), each answer kept with its request as evidence.

Imports: core, facts.http_client, actions.probe_server.http.
"""

from __future__ import annotations

from typing import Any

from stopdoctor.actions.probe_server.http import Transport
from stopdoctor.core.records import record
from stopdoctor.facts.http_client import ServerBroken, ServerRejected, parse_json

CHAT = "/v1/chat/completions"
COMPLETIONS = "/v1/completions"
# Where engines put the thought a reasoning parser split out of the answer.
REASONING_FIELDS = ("reasoning_content", "reasoning", "thinking")
EVIDENCE_CHARS = 400


def _short(value: Any, limit: int = 200) -> Any:
    """A request value as evidence: long strings cut (a context probe sends thousands of words)."""
    if isinstance(value, str) and len(value) > limit:
        return f"{value[:limit // 2]}…({len(value)} characters)…{value[-limit // 4:]}"
    if isinstance(value, list):
        return [_short(v, limit) for v in value[:8]]
    if isinstance(value, dict):
        return {k: _short(v, limit) for k, v in value.items()}
    return value


def _reasoning(holder: Any) -> tuple[str | None, str | None]:
    if isinstance(holder, dict):
        for name in REASONING_FIELDS:
            value = holder.get(name)
            if isinstance(value, str) and value:
                return name, value
    return None, None


@record
class Answer:
    """A whole (not streamed) answer: `text` is the content (chat) or text (completions)."""

    route: str
    request: dict[str, Any]
    status: int
    text: str | None = None
    finish_reason: Any = None
    usage: dict[str, Any] | None = None
    reasoning: str | None = None
    reasoning_field: str | None = None
    tool_calls: Any = None
    error: str | None = None  # the server's refusal, when status is not 2xx or there is no choice

    @property
    def completion_tokens(self) -> int | None:
        value = (self.usage or {}).get("completion_tokens")
        return value if isinstance(value, int) else None

    @property
    def prompt_tokens(self) -> int | None:
        value = (self.usage or {}).get("prompt_tokens")
        return value if isinstance(value, int) else None

    def evidence(self) -> dict[str, Any]:
        document = {"request": {"route": self.route, **_short(self.request)}, "status": self.status,
                    "answer": None if self.text is None else self.text[:EVIDENCE_CHARS],
                    "finish_reason": self.finish_reason, "usage": self.usage}
        if self.reasoning is not None:
            document["reasoning"] = {"field": self.reasoning_field, "text": self.reasoning[:EVIDENCE_CHARS]}
        if self.error is not None:
            document["error"] = self.error
        return document


@record
class Streamed:
    """A streamed answer reassembled: the content of each chunk, the thought, the chunk that carried
    the finish reason, what came after it, usage, `[DONE]`, and whether the client stopped reading."""

    route: str
    request: dict[str, Any]
    chunks: tuple[str, ...] = ()
    reasoning: str = ""
    finish_reason: Any = None
    finish_event: int | None = None  # index of the event that carried finish_reason
    events: int = 0  # `data:` events that were JSON
    after_finish: str = ""
    usage: dict[str, Any] | None = None
    done: bool = False
    closed_early: bool = False  # the probe stopped reading (its token bound), not the server
    error: str | None = None

    @property
    def text(self) -> str:
        return "".join(self.chunks)

    def evidence(self) -> dict[str, Any]:
        return {"request": {"route": self.route, "stream": True, **_short(self.request)},
                "answer": self.text[:EVIDENCE_CHARS], "chunks": len(self.chunks), "finish_reason": self.finish_reason,
                "usage": self.usage, "done": self.done, "closed_early": self.closed_early, "error": self.error}


class ServerClient:
    """Greedy requests to one model on one server, through a `Transport`."""

    def __init__(self, transport: Transport, model: str | None) -> None:
        self.transport = transport
        self.model = model

    def _body(self, params: dict[str, Any]) -> dict[str, Any]:
        body: dict[str, Any] = {"temperature": 0, "seed": 0}
        if self.model is not None:
            body["model"] = self.model
        body.update(params)
        return body

    def chat(self, messages: list[dict[str, Any]], **params: Any) -> Answer:
        return self._whole(CHAT, {"messages": messages, **params}, "chat")

    def complete(self, prompt: str, **params: Any) -> Answer:
        return self._whole(COMPLETIONS, {"prompt": prompt, **params}, "completions")

    def _whole(self, path: str, params: dict[str, Any], route: str) -> Answer:
        body = self._body(params)
        reply = self.transport.post(path, body)
        shown = {k: v for k, v in params.items()}
        if not reply.ok:
            return Answer(route, shown, reply.status, error=reply.text())
        choices = reply.data.get("choices") if isinstance(reply.data, dict) else None
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            return Answer(route, shown, reply.status, error=f"no choices[0] in the answer: {reply.text(200)!r}")
        choice = choices[0]
        usage = reply.data.get("usage") if isinstance(reply.data.get("usage"), dict) else None
        if route == "chat":
            message = m if isinstance(m := choice.get("message"), dict) else {}
            text = message.get("content")
            field, thought = _reasoning(message)
            tool_calls = message.get("tool_calls")
        else:
            text, (field, thought), tool_calls = choice.get("text"), _reasoning(choice), None
        return Answer(route, shown, reply.status, text if isinstance(text, str) else ("" if text is None else str(text)),
                      choice.get("finish_reason"), usage, thought, field, tool_calls)

    def chat_stream(self, messages: list[dict[str, Any]], max_chunks: int | None = None, **params: Any) -> Streamed:
        return self._stream(CHAT, {"messages": messages, **params}, "chat", max_chunks)

    def complete_stream(self, prompt: str, max_chunks: int | None = None, **params: Any) -> Streamed:
        return self._stream(COMPLETIONS, {"prompt": prompt, **params}, "completions", max_chunks)

    def _stream(self, path: str, params: dict[str, Any], route: str, max_chunks: int | None) -> Streamed:
        body = self._body({**params, "stream": True})
        chunks: list[str] = []
        thought: list[str] = []
        state: dict[str, Any] = {"finish": None, "finish_event": None, "after": "", "usage": None, "done": False,
                                 "events": 0, "closed": False}
        bounds = getattr(self.transport, "bounds", None)
        payloads = self.transport.stream(path, body)
        try:
            for payload in payloads:
                if payload == "[DONE]":
                    state["done"] = True
                    continue
                event = parse_json(payload, bounds.limits, f"POST {path}") if bounds is not None else None
                if not isinstance(event, dict):
                    raise ServerBroken(f"POST {path}: a streamed event is not a JSON object: {payload[:80]!r}")
                _take(event, route, chunks, thought, state)
                if max_chunks is not None and len(chunks) >= max_chunks and state["finish"] is None:
                    state["closed"] = True  # enough seen: hang up, the server stops generating
                    break
        except ServerRejected as error:
            return Streamed(route, params, error=f"HTTP {error.status}: {error.detail}")
        finally:
            close = getattr(payloads, "close", None)
            if close is not None:
                close()
        return Streamed(route, params, tuple(chunks), "".join(thought), state["finish"], state["finish_event"],
                        state["events"], state["after"], state["usage"], state["done"], state["closed"])


def _take(event: dict[str, Any], route: str, chunks: list[str], thought: list[str], state: dict[str, Any]) -> None:
    """One streamed event into the running state (content, thought, finish, usage)."""
    state["events"] += 1
    if isinstance(event.get("usage"), dict):
        state["usage"] = event["usage"]
    choices = event.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        return  # the usage-only chunk of stream_options.include_usage
    choice = choices[0]
    holder = choice.get("delta") if route == "chat" else choice
    holder = holder if isinstance(holder, dict) else {}
    text = holder.get("content") if route == "chat" else holder.get("text")
    _, piece = _reasoning(holder)
    if piece:
        thought.append(piece)
    if isinstance(text, str) and text:
        if state["finish"] is not None:
            state["after"] += text
        chunks.append(text)
    if choice.get("finish_reason") is not None and state["finish"] is None:
        state["finish"] = choice["finish_reason"]
        state["finish_event"] = state["events"] - 1
