"""What is serving: the engine and its version where the server says so (the `Server` header,
llama.cpp `/props`, vLLM and SGLang `/version`, Ollama `/api/version`, TGI `/info`, the `owned_by`
of `/v1/models`), the model, and what the server states about its context, budget and end of turn.
Nothing is guessed: an engine that does not name itself is unknown.

Imports: core, facts.http_client, runtimes.engines, actions.probe_server.http.
"""

from __future__ import annotations

import re
from dataclasses import field
from typing import Any

from stopdoctor.actions.probe_server.http import Transport
from stopdoctor.core.records import record
from stopdoctor.facts.http_client import Reply, ServerBroken
from stopdoctor.runtimes.engines import registered
from stopdoctor.runtimes.engines import engines

# `owned_by` values engines write in /v1/models (vLLM, SGLang, llama.cpp, llama-cpp-python's "me"),
# as each engine's module in the registry records them.
OWNERS = {owner: e.name for e in engines() for owner in e.owned_by}


@record
class ServerIdentity:
    engine: str | None = None
    version: str | None = None
    told_by: str | None = None  # which answer named the engine
    model: str | None = None  # the model the probes ask for
    models: tuple[str, ...] = ()
    context: int | None = None  # the served context in tokens, where the server says it
    default_max_tokens: int | None = None  # llama.cpp /props n_predict (-1: none)
    eos_token: str | None = None
    supports_tools: bool | None = None
    seen: dict[str, Any] = field(default_factory=dict)  # route -> status or the fields read


def _get(transport: Transport, path: str) -> Reply | None:
    try:
        reply = transport.get(path)
    except ServerBroken:
        return None  # a native route that misbehaves says nothing about the engine
    return reply if reply.ok and isinstance(reply.data, dict) else None


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def identify(transport: Transport, model: str | None) -> ServerIdentity:
    """Ask the identity routes; `/v1/models` first, so an unreachable server fails at once."""
    facts: dict[str, Any] = {}
    seen: dict[str, Any] = {}
    models_reply = transport.get("/v1/models")
    seen["/v1/models"] = models_reply.status
    entries = models_reply.data.get("data") if models_reply.ok and isinstance(models_reply.data, dict) else None
    entries = [e for e in entries if isinstance(e, dict)] if isinstance(entries, list) else []
    ids = tuple(str(e.get("id")) for e in entries if e.get("id") is not None)
    chosen = model or (ids[0] if ids else None)
    entry = next((e for e in entries if str(e.get("id")) == chosen), entries[0] if entries else {})
    owner = str(entry.get("owned_by", "")).lower()
    meta = m if isinstance(m := entry.get("meta"), dict) else {}
    facts["context"] = _int(meta.get("n_ctx")) or _int(entry.get("max_model_len"))
    server_header = models_reply.headers.get("server", "")
    if server_header:
        seen["Server"] = server_header[:80]
    # an engine that names itself in the Server header (llama.cpp) is told first, by it or by its owned_by
    headed = next((e for e in engines() if e.server_header is not None
                   and (server_header.lower().startswith(e.server_header) or owner in e.owned_by)), None)
    if headed is not None:
        facts.update(engine=headed.name, told_by="Server header" if server_header else "/v1/models owned_by")
        _llama_props(transport, facts, seen)
    elif (reply := _get(transport, "/api/version")) is not None and isinstance(reply.data.get("version"), str):
        facts.update(engine="ollama", version=reply.data["version"], told_by="/api/version")
        seen["/api/version"] = reply.data["version"]
        facts["context"] = _ollama_context(transport, chosen) or facts["context"]
    elif (reply := _get(transport, "/info")) is not None and "model_id" in reply.data:
        facts.update(engine="tgi", version=reply.data.get("version"), told_by="/info",
                     context=_int(reply.data.get("max_input_tokens")) or _int(reply.data.get("max_input_length")))
        seen["/info"] = {k: reply.data.get(k) for k in ("model_id", "version", "max_input_tokens", "max_total_tokens")}
    elif owner in OWNERS:
        facts.update(engine=OWNERS[owner], told_by="/v1/models owned_by")
        route = registered(facts["engine"]).version_route
        if route is not None and (reply := _get(transport, route)) is not None:
            facts["version"] = reply.data.get("version")
            seen[route] = reply.data.get("version")
    if isinstance(facts.get("version"), (int, float)):
        facts["version"] = str(facts["version"])
    return ServerIdentity(facts.get("engine"), facts.get("version"), facts.get("told_by"), chosen, ids,
                          facts.get("context"), facts.get("default_max_tokens"), facts.get("eos_token"),
                          facts.get("supports_tools"), seen)


def _ollama_context(transport: Transport, model: str | None) -> int | None:
    """Ollama's num_ctx as the model's parameters set it (`/api/show`); None when they do not: the
    default then depends on the machine's VRAM (`runtimes.defaults.OLLAMA_CONTEXT`)."""
    try:
        reply = transport.post("/api/show", {"model": model})
    except ServerBroken:
        return None
    parameters = reply.data.get("parameters") if reply.ok and isinstance(reply.data, dict) else None
    match = re.search(r"(?m)^\s*num_ctx\s+(\d+)", parameters) if isinstance(parameters, str) else None
    return int(match.group(1)) if match else None


def _llama_props(transport: Transport, facts: dict[str, Any], seen: dict[str, Any]) -> None:
    reply = _get(transport, "/props")
    if reply is None:
        return
    props = reply.data
    settings = props.get("default_generation_settings") if isinstance(props.get("default_generation_settings"), dict) else {}
    params = p if isinstance(p := settings.get("params"), dict) else {}
    caps = props.get("chat_template_caps") if isinstance(props.get("chat_template_caps"), dict) else {}
    n_predict = params.get("n_predict")
    facts.update(version=props.get("build_info") if isinstance(props.get("build_info"), str) else None,
                 context=_int(settings.get("n_ctx")) or facts.get("context"),
                 default_max_tokens=n_predict if isinstance(n_predict, int) else None,
                 eos_token=props.get("eos_token") if isinstance(props.get("eos_token"), str) else None,
                 supports_tools=caps.get("supports_tool_calls") if isinstance(caps.get("supports_tool_calls"), bool) else None)
    seen["/props"] = {"build_info": facts["version"], "n_ctx": facts["context"], "n_predict": n_predict,
                      "eos_token": facts["eos_token"], "reasoning_format": params.get("reasoning_format")}
