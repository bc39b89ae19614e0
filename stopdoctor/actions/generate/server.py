"""The server engine: any OpenAI-compatible endpoint (vLLM, TGI, llama.cpp server, Ollama,
`transformers serve`, SGLang) asked through urllib, keeping what the server returned. A server
gives no token ids: the cause of a stop is what it reports (`finish_reason`, `stop_reason`,
`matched_stop`), and the token count is its `usage`.

Imports: core, facts, runtimes (the stop set), analysis (the generation data classes), actions.generate.request. No torch.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stopdoctor.analysis.diagnose import FINISH_LENGTH, FINISH_REPETITION, FINISH_STOP, Generation, StopCause
from stopdoctor.core.errors import InputError
from stopdoctor.facts.http_client import Limits, ServerRejected, request_json
from stopdoctor.facts.model_facts import ModelFacts
from stopdoctor.runtimes.stops import RuntimeStops
from stopdoctor.actions.generate.request import Prompt, Sampling, stop_cause


def _first_choice(reply: Any) -> dict:
    """choices[0] of an OpenAI-style reply, or a one-line error naming what is missing."""
    choices = reply.get("choices") if isinstance(reply, dict) else None
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise InputError("the server's reply has no choices[0] object (not an OpenAI-compatible answer)")
    return choices[0]


@dataclass
class ServerEngine:
    url: str
    route: str | None = None  # chat | completions; None: chat for templated prompts
    model_name: str | None = None
    timeout: float = 300.0
    facts: ModelFacts | None = None
    name: str = "server"
    device: str = "server"
    stream: bool = False  # also stream the request and compare (`actions.generate.stream`)

    def _base(self) -> str:
        base = self.url.rstrip("/")
        return base if base.endswith("/v1") else base + "/v1"

    def _request(self, path: str, body: dict | None = None) -> dict:
        return request_json(self._base() + path, body, Limits(seconds=self.timeout))

    def pick_model(self, spec: str, root: Path | None) -> str:
        """The model name to send: --server-model, else the served model matching MODEL, else the only one."""
        if self.model_name:
            return self.model_name
        try:
            listed = self._request("/models")
        except ServerRejected:  # no /models route: send MODEL as given
            listed = {}
        data = listed.get("data") if isinstance(listed, dict) else None
        served = [m["id"] for m in data if isinstance(m, dict) and isinstance(m.get("id"), str)] if isinstance(data, list) else []
        wanted = {spec, str(root) if root else spec, Path(spec).name}
        match = next((m for m in served if m in wanted), None)
        self.model_name = match or (served[0] if len(served) == 1 else spec)
        return self.model_name

    def generate(self, prompt: Prompt, stops: RuntimeStops, max_new_tokens: int, sampling: Sampling = Sampling()) -> Generation:
        route = self.route or ("chat" if prompt.templated else "completions")
        body: dict[str, Any] = {"model": self.model_name, "max_tokens": max_new_tokens,
                                "temperature": sampling.temperature}
        if sampling.top_p < 1.0:
            body["top_p"] = sampling.top_p
        if sampling.seed is not None:
            body["seed"] = sampling.seed
        if stops.texts:
            body["stop"] = list(stops.texts)
        if stops.stops:
            body["stop_token_ids"] = stops.ids  # a vLLM extension; others may reject it
        if route == "chat":
            body["messages"] = list(prompt.messages) or [{"role": "user", "content": prompt.text}]
            if prompt.template_vars:  # a thinking switch: vLLM, SGLang and llama.cpp read chat_template_kwargs
                body["chat_template_kwargs"] = dict(prompt.template_vars)
            path = "/chat/completions"
        elif route == "completions":
            body["prompt"] = prompt.text  # already templated when it came from messages
            path = "/completions"
        else:
            raise InputError(f"--route {route!r}: use chat or completions")
        rejected: list[str] = []
        try:
            reply = self._request(path, body)
        except ServerRejected as error:
            if "stop_token_ids" not in body or "stop_token_ids" not in error.detail:
                raise
            # Servers other than vLLM reject unknown fields; say so rather than fail. Once: a
            # server that refuses again is refused (never a loop of retries).
            del body["stop_token_ids"]
            rejected.append("stop_token_ids")
            reply = self._request(path, body)
        choice = _first_choice(reply)
        reasoning: tuple[str, str] | None = None
        if route == "chat":
            message = choice.get("message")
            text = message.get("content") if isinstance(message, dict) else None
            reasoning = _reasoning_field(message)
        else:
            text = choice.get("text")
        if text is not None and not isinstance(text, str):
            raise InputError(f"{self.url}{path}: the server's reply has no text in choices[0]")
        text = text or ""
        finish = _reason(choice.get("finish_reason"))
        stop_reason = _reason(choice.get("stop_reason", choice.get("matched_stop")))
        usage = _usage(reply.get("usage"))
        cause = _server_cause(finish, stop_reason, stops, self.facts)
        server = {
            "url": self.url, "route": route, "model": self.model_name,
            "finish_reason": finish, "stop_reason": stop_reason, "usage": usage,
            "sent": {k: body[k] for k in ("stop", "stop_token_ids") if k in body},
            "rejected_fields": rejected,
        }
        if reasoning is not None:  # the server's reasoning parser split the thought out of content
            server["reasoning_field"], server["reasoning"] = reasoning
        if self.stream:
            from stopdoctor.actions.generate.stream import read_stream, stream_document, stream_issues

            capture = read_stream(self._base() + path, body, route == "chat", self.timeout)
            specials = tuple(sorted(self.facts.vocab.special_tokens)) if self.facts is not None else ()
            server["stream"] = stream_document(capture, stream_issues(capture, text, tuple(body.get("stop", ())), specials))
        prompt_tokens = (usage or {}).get("prompt_tokens")
        return Generation(finish if finish in (FINISH_STOP, FINISH_LENGTH) else cause.finish_reason, cause, text, (),
                          prompt.text, prompt_tokens if isinstance(prompt_tokens, int) else None, server)


# A finish or stop reason is a short word or a token id; a server's is untrusted: anything else is
# dropped, and a string is cut (reporters neutralise what it holds where they write it).
MAX_REASON_CHARS = 200


def _reason(value: Any) -> str | int | None:
    if isinstance(value, str):
        return value[:MAX_REASON_CHARS]
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _usage(value: Any) -> dict[str, Any] | None:
    """The server's `usage` with only its token counts (numbers, and objects of numbers such as
    `prompt_tokens_details`); None when it is not an object."""
    if not isinstance(value, dict):
        return None

    def number(item: Any) -> bool:
        return (isinstance(item, int) and not isinstance(item, bool)) or (isinstance(item, float) and item == item and abs(item) != float("inf"))

    kept: dict[str, Any] = {}
    for key, item in list(value.items())[:32]:
        if number(item):
            kept[key[:64]] = item
        elif isinstance(item, dict):
            kept[key[:64]] = {k[:64]: v for k, v in list(item.items())[:32] if number(v)}
    return kept


def _reasoning_field(message: Any) -> tuple[str, str] | None:
    """(field name, thought) from a chat message's `reasoning_content` / `reasoning`, or None."""
    if not isinstance(message, dict):
        return None
    for name in ("reasoning_content", "reasoning"):
        value = message.get(name)
        if isinstance(value, str) and value:
            return name, value
    return None


def _server_cause(finish: Any, stop_reason: Any, stops: RuntimeStops, facts: ModelFacts | None) -> StopCause:
    if finish == FINISH_LENGTH:
        return StopCause("length")
    if finish == FINISH_REPETITION:
        return StopCause("repetition", text="the server stopped a loop")
    if isinstance(stop_reason, str):
        return StopCause("stop_string", text=stop_reason, stop_string=stop_reason)
    if isinstance(stop_reason, int):
        stop = next((s for s in stops.stops if s.id == stop_reason), None)
        if stop is not None and facts is not None:
            return stop_cause(stop, facts, step=-1)
        return StopCause("stop_id", id=stop_reason, text=facts.vocab.text_of(stop_reason) if facts else None)
    # No reason given (vLLM for the eos; TGI, llama.cpp and transformers serve always): name the
    # cause only when one candidate could have ended it. A stop string is never called "eos".
    if not stops.texts and len(stops.stops) == 1 and facts is not None:
        return stop_cause(stops.stops[0], facts, step=-1)
    if not stops.texts and not stops.stops:
        return StopCause("eos")  # only the server's own eos could have ended it
    candidates = [f"{s.text or s.id} (id {s.id})" for s in stops.stops] + [json.dumps(t, ensure_ascii=False) for t in stops.texts]
    return StopCause("unreported", text=", ".join(candidates))
