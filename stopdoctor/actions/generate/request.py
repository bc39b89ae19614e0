"""What a generation is asked: the prompt (through the chat template, or raw), the stop set (one
`RuntimeStops`, the type every runtime's set has: a runtime's own rule, or ids and strings given by
hand), the sampling and the token budget — one `GenerateRequest`, which the result carries. Also what every engine shares: the `Engine`
interface, and how a stop id that ended generation is named (`stop_cause`).

Imports: core, facts, template (the prompt is rendered in the sandbox), runtimes (stop sets),
actions.render (the guarded --messages reader, lazily),
analysis (Analysis, the generation data classes). Never torch or transformers.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

from stopdoctor.analysis.core import Analysis
from stopdoctor.analysis.diagnose import Generation, StopCause
from stopdoctor.core.errors import InputError
from stopdoctor.core.records import record
from stopdoctor.core.types import Location
from stopdoctor.facts.model_facts import ModelFacts
from stopdoctor.runtimes.engine_stops import ENGINES
from stopdoctor.runtimes.stops import RUNTIMES, RuntimeStops, StopId, dedupe, primary_runtime
from stopdoctor.template.render import render_chat

USER_STOP = Location("--stop-id")


@record
class Sampling:
    """Greedy when temperature is 0 (the default), as every runtime's temperature=0 is."""

    temperature: float = 0.0
    top_p: float = 1.0
    seed: int | None = None

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0.0


def checked_sampling(temperature: float = 0.0, top_p: float = 1.0, seed: int | None = None) -> Sampling:
    """A `Sampling`, refusing what no runtime takes: a negative or infinite temperature, a top-p
    outside (0, 1], a seed torch cannot take (64 bits)."""
    import math

    if not (math.isfinite(temperature) and temperature >= 0) or not 0 < top_p <= 1:
        raise InputError("--temperature must be a finite number >= 0 and --top-p in (0, 1]")
    if seed is not None and not 0 <= seed < 2**64:
        raise InputError(f"--seed {seed}: must be between 0 and 2^64 - 1", hint="torch takes a 64-bit seed")
    return Sampling(temperature, top_p, seed)


# A diagnosis needs a few dozen tokens; the cap also keeps a typo from allocating a huge mask.
MAX_NEW_TOKENS = 8192
FRAGMENT_MIN_TOKENS = 24


def check_budget(max_new_tokens: int, fragment: bool = False) -> None:
    """Refuse a budget no diagnosis can use: a few dozen tokens are needed (the fragment test's
    instruct model must have room to finish its answer before the verdict means anything)."""
    if not 1 <= max_new_tokens <= MAX_NEW_TOKENS:
        raise InputError(f"--max-new-tokens must be between 1 and {MAX_NEW_TOKENS}",
                         hint="a diagnosis needs a few dozen tokens; a budget is for one short generation")
    if fragment and max_new_tokens < FRAGMENT_MIN_TOKENS:
        raise InputError(f"--fragment-test needs --max-new-tokens >= {FRAGMENT_MIN_TOKENS}",
                         hint="an instruct model needs room to finish its answer before the verdict means anything")


@record
class Prompt:
    text: str
    ids: tuple[int, ...]
    templated: bool
    messages: tuple[dict, ...] = ()
    template_vars: tuple[tuple[str, object], ...] = ()  # extra template variables (a thinking switch)
    thinking: str = "default"  # the thinking mode the prompt was rendered for: "on", "off" or "default"


@record
class GenerateRequest:
    """One generation as asked: what the result of `run_generate` says it was given."""

    prompt: Prompt
    stops: RuntimeStops
    max_new_tokens: int
    sampling: Sampling = Sampling()


class Engine(Protocol):
    """What runs a request: the local transformers loop (`local.LocalEngine`) or an
    OpenAI-compatible server (`server.ServerEngine`)."""

    name: str
    device: str

    def generate(self, prompt: Prompt, stops: RuntimeStops, max_new_tokens: int,
                 sampling: Sampling = Sampling()) -> Generation: ...


def resolve_stops(analysis: Analysis, stops: str | None, stop_ids: list[int], stop_strings: list[str]) -> RuntimeStops:
    """`stops` is "model" (the model's own runtime), "runtime:NAME", "none", or None (model,
    unless --stop-id gives the ids). --stop-id ids are added to an explicit --stops set."""
    facts = analysis.facts
    if any(not s for s in stop_strings):
        raise InputError("--stop must not be empty", hint="an empty stop string would match before the first character")
    chosen: list[StopId] = []
    sources: list[str] = []
    rules: list[str] = []
    spec = stops if stops is not None else (None if stop_ids else "model")
    if spec is not None:
        name = spec.strip()
        if name == "model":
            name = primary_runtime(facts)
        elif name.startswith("runtime:"):
            name = name.split(":", 1)[1]
        elif name != "none":
            raise InputError(f"--stops {spec!r}: not understood",
                             hint=f"use model, none, or runtime:NAME with NAME one of {', '.join(RUNTIMES + ENGINES)}")
        if name != "none":
            known = [s.runtime for s in analysis.stops]  # the core runtimes and the engines this model runs in
            if name not in known:
                why = " (it does not load a GGUF)" if name in ENGINES else ""
                raise InputError(f"--stops: unknown runtime {name!r}{why}", hint=f"one of {', '.join(known)}")
            runtime = analysis.runtime(name)
            chosen.extend(runtime.stops)
            sources.append(name)
            rules.append(runtime.rule)
    size = facts.vocab.size
    for token_id in stop_ids:
        if token_id < 0 or (size is not None and facts.vocab.complete and token_id >= size):
            raise InputError(f"--stop-id {token_id}: not an id of this vocabulary (size {size})")
        chosen.append(StopId(token_id, facts.vocab.text_of(token_id), USER_STOP))
    if stop_ids:
        sources.append("--stop-id")
        rules.append("ids given with --stop-id")
    # The one stop-set type: `runtime` names whose set the ids are ("transformers", "llama.cpp",
    # "--stop-id", "vllm + --stop-id", "none"), `texts` the --stop strings.
    return RuntimeStops(" + ".join(sources) or "none", tuple(dedupe(chosen)), "; ".join(rules) or "no stop ids",
                        texts=tuple(dict.fromkeys(stop_strings)))


def build_prompt(facts: ModelFacts, *, messages: list[dict] | None = None, prompt: str | None = None,
                 raw: bool = False, thinking: Any = None) -> Prompt:
    """Templated (the default): messages through the model's chat template with the generation
    prompt, encoded without adding special tokens (the template writes them), as
    apply_chat_template does. Raw: the text as a completion endpoint takes it, with BOS added when
    the model's files ask for it. `thinking`: a `stopdoctor.analysis.reasoning_run.ThinkingCall`
    (the template's thinking switch: extra variables, or a flag in the system message)."""
    if raw:
        if prompt is None:
            raise InputError("--raw needs --prompt TEXT", hint="messages always go through the chat template")
        ids = list(facts.vocab.tokenizer().encode(prompt, add_special_tokens=True).ids)
        bos = next((d.id for d in facts.declared_for("bos") if d.id is not None), None)
        if facts.add_bos is not None and facts.add_bos.value and bos is not None and (not ids or ids[0] != bos):
            ids.insert(0, bos)
        return Prompt(prompt, tuple(ids), False)
    if messages is None:
        if prompt is None:
            raise InputError("nothing to generate from", hint='give -m user "text", --messages FILE, or --prompt TEXT')
        messages = [{"role": "user", "content": prompt}]
    template = facts.template
    if template is None:
        raise InputError("this model has no chat template, so messages cannot be rendered",
                         hint="use --prompt TEXT --raw for a plain completion")
    extra: tuple[tuple[str, object], ...] = ()
    mode = "default"
    if thinking is not None:
        mode, extra = thinking.mode, thinking.variant.extra
        messages = thinking.messages(messages)
    text = render_chat(template.source, messages, add_generation_prompt=True, special_tokens=facts.special_token_texts(),
                       extra=dict(extra) or None)
    # the tokenizer only now: a GGUF's takes seconds to convert, and the refusals above need none
    ids = facts.vocab.tokenizer().encode(text, add_special_tokens=False).ids
    return Prompt(text, tuple(ids), True, tuple(messages), extra, mode)


def read_messages(path: Path) -> list[dict]:
    """A JSON list of {role, content} messages (or {"messages": [...]}), read as `render --messages`
    reads it: a regular file of at most 16 MB, UTF-8, bounded nesting and integers (one guarded
    reader for every user file); generate takes one conversation."""
    from stopdoctor.actions.render import load_conversations

    conversations = load_conversations(path)
    if len(conversations) != 1:
        raise InputError(f"{Path(path).name}: holds {len(conversations)} conversations; generate runs one",
                         hint="give one JSON list of messages")
    data = conversations[0]
    if not all(isinstance(m.get("role"), str) for m in data):
        raise InputError(f"{path}: expected a JSON list of messages with a role", hint='[{"role": "user", "content": "Hi"}]')
    return data


def check_context(facts: ModelFacts, prompt: Prompt, max_new_tokens: int) -> None:
    """Refuse a prompt that, with the token budget, does not fit in the model's context
    (`max_position_embeddings`, a GGUF's `<arch>.context_length`): past it the model's output
    means nothing, and a prompt of a million tokens would take hours on a CPU."""
    context, where = model_context_length(facts)
    if context is not None and len(prompt.ids) + max_new_tokens > context:
        raise InputError(f"the prompt is {len(prompt.ids)} tokens; with --max-new-tokens {max_new_tokens} that is more than "
                         f"the model's context of {context} tokens ({where})",
                         hint="shorten the prompt or lower --max-new-tokens")


def model_context_length(facts: ModelFacts) -> tuple[int | None, str]:
    """The longest sequence the model takes, and where that is written; (None, "") when unknown."""
    if facts.gguf is not None:
        key = f"{facts.gguf.architecture}.context_length"
        value = facts.gguf.get(key)
        return (value, key) if _positive(value) else (None, "")
    config = facts.documents.get("config.json", {})
    for nested in ("", "text_config", "language_config", "llm_config"):
        document = config.get(nested) if nested else config
        value = document.get("max_position_embeddings") if isinstance(document, dict) else None
        if _positive(value):
            return value, f"config.json {nested + '.' if nested else ''}max_position_embeddings"
    return None, ""


def _positive(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def stop_cause(stop: StopId, facts: ModelFacts, step: int) -> StopCause:
    """Why generation ended when it stopped on `stop` at `step`: "eos" when the model's files
    declare it the eos (not an id given with --stop-id), else "stop_id"."""
    eos_ids = {d.id for d in facts.declared_for("eos")}
    kind = "eos" if stop.location != USER_STOP and stop.id in eos_ids else "stop_id"
    return StopCause(kind, stop.id, stop.text if stop.text is not None else facts.vocab.text_of(stop.id),
                     stop.location, step=step)
