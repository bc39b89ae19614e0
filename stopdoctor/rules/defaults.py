"""SD43x: a hidden default that truncates, left in place by the serving configuration
(`runtimes.defaults` holds the table, per runtime and version, with its source)."""

from __future__ import annotations

from stopdoctor.core.findings import Severity
from stopdoctor.rules.inputs import ServingInput
from stopdoctor.rules.registry import Rule, rule
from stopdoctor.facts.card import card_output_tokens
from stopdoctor.facts.serving import is_ollama_native
from stopdoctor.runtimes.defaults import COMPLETIONS_DEFAULT, OLLAMA_CONTEXT
from stopdoctor.runtimes.engines import serving_engine


@rule("SD430", "default-budget-truncates", Severity.WARNING, input=ServingInput)
def default_budget_truncates(subject: ServingInput, self: Rule):
    """A completions request names no max_tokens: vLLM, SGLang and llama-cpp-python stop it at 16.

    What it checks:
    A request body with `prompt` (a completions request, no `messages`) and neither `max_tokens`
    nor `max_completion_tokens`. An Ollama `/api/generate` body (its `options`, `keep_alive`…) is
    no such request: its budget is `options.num_predict`.

    Why it matters:
    The runtime's default budget applies silently: 16 new tokens, so every answer is cut after a
    few words with `finish_reason` "length", which reads like a model that stops too early.

    Example:
    `{"model": "m", "prompt": "Write a poem"}` sent to `vllm serve`.

    Fix:
    Set `"max_tokens"` in the request (the budget the answer needs; keep it as a runaway guard).

    How the runtimes decide (source):
    vLLM 0.33.0 `vllm/entrypoints/openai/completion/protocol.py` `CompletionRequest.max_tokens = 16`;
    SGLang 0.5.23 `srt/entrypoints/openai/protocol.py` `CompletionRequest.max_tokens = 16`;
    llama-cpp-python 0.3.36 `llama_cpp/server/types.py` `CreateCompletionRequest.max_tokens = 16`.
    """
    serving = subject.serving
    if serving.kind != "request" or serving.max_tokens is not None:
        return
    options = serving.options
    if "prompt" not in options or "messages" in options:
        return
    if is_ollama_native({name: setting.value for name, setting in options.items()}):
        return  # Ollama /api/generate: its budget is options.num_predict, unlimited (-1) by default
    runtimes = ", ".join(f"{d.runtime} {d.version}" for d in COMPLETIONS_DEFAULT)
    yield self.finding(
        f"this completions request names no max_tokens: {runtimes} give it {COMPLETIONS_DEFAULT[0].value} new tokens",
        'set "max_tokens" to the budget an answer needs', serving.location("prompt"),
        default=COMPLETIONS_DEFAULT[0].value, runtimes=[d.runtime for d in COMPLETIONS_DEFAULT])


@rule("SD431", "ollama-context-truncates", Severity.WARNING, input=ServingInput)
def ollama_context_truncates(subject: ServingInput, self: Rule):
    """An Ollama Modelfile names no num_ctx while the output it asks for cannot fit Ollama's default context.

    What it checks:
    A Modelfile without `PARAMETER num_ctx` whose `PARAMETER num_predict`, or (for a model that
    thinks by default) the output length its card recommends, is over 4,096 tokens: the context
    Ollama 0.33 gives a model on a machine under 23 GiB of VRAM.

    Why it matters:
    The budget does not fit: once the context is full Ollama shifts it, dropping the earliest tokens
    (the system prompt and the question) to go on generating, a long prompt is cut from the middle
    without a word (context shift, ollama #11172), and a thinking model loses its question mid-thought. Only `OLLAMA_CONTEXT_LENGTH` on the server, a request's `options.num_ctx` or
    more VRAM (32,768 at 23 GiB, 262,144 at 47 GiB) changes it.

    Example:
    `FROM qwen3:8b` with `PARAMETER num_predict 32768` and no num_ctx, served on a 16 GB GPU.

    Fix:
    `PARAMETER num_ctx N`, with N the output budget plus the longest prompt.

    How the runtimes decide (source):
    ollama 0.33 `server/routes.go` (default context by VRAM tier: 4096, 32768, 262144; used when
    `usesAutomaticNumCtx`: no num_ctx in the request or the Modelfile and no OLLAMA_CONTEXT_LENGTH);
    `llm/llama_server.go` (a prompt over the context is shifted or refused).
    """
    serving = subject.serving
    served = serving_engine(serving.kind)
    # the engine whose context, when its file names none, is its own hidden default (Ollama's by VRAM)
    if served is None or served.context_option is None or served.context_option in serving.options:
        return
    small = OLLAMA_CONTEXT[0]
    needs: list[tuple[int, str, str | None]] = []
    budget = serving.max_tokens.value if serving.max_tokens is not None else None
    if isinstance(budget, int) and budget > small.value:
        needs.append((budget, f"num_predict {budget:,}", serving.max_tokens.key if serving.max_tokens else None))
    reasoning = subject.analysis.reasoning
    card = card_output_tokens(subject.analysis.facts) if reasoning.is_reasoning and reasoning.default_on is not False else None
    if card is not None and card.value > small.value and budget is None:
        needs.append((card.value, f"the {card.value:,} output tokens its card recommends for a thinking model", serving.model.key if serving.model else None))
    if not needs:
        return
    need, what, key = max(needs)
    tiers = ", ".join(f"{d.value:,} ({d.applies_to})" for d in OLLAMA_CONTEXT)
    size = 1 << (need + 2048 - 1).bit_length()
    yield self.finding(
        f"this Modelfile sets no num_ctx, so Ollama {small.version} picks the context by VRAM: {tiers}; {what} cannot fit "
        f"in {small.value:,}: once the context is full Ollama drops the earliest tokens (the prompt's start) to go on, "
        f"and a long prompt is cut from the middle",
        f"add `PARAMETER num_ctx {size}` (the output budget plus the longest prompt)", serving.location(key),
        need=need, default_context=small.value)
