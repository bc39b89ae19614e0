"""SD43x: a hidden default that truncates, left in place by the serving configuration
(`runtimes.defaults` holds the table, per runtime and version, with its source)."""

from __future__ import annotations

from stopdoctor.core.findings import Severity
from stopdoctor.rules.inputs import ServingInput
from stopdoctor.rules.registry import Check, check
from stopdoctor.runtimes.defaults import COMPLETIONS_DEFAULT


@check("SD430", "default-budget-truncates", Severity.WARNING, input=ServingInput)
def default_budget_truncates(subject: ServingInput, self: Check):
    """A completions request names no max_tokens: vLLM, SGLang and llama-cpp-python stop it at 16.

    What it checks:
    A request body with `prompt` (a completions request, no `messages`) and neither `max_tokens`
    nor `max_completion_tokens`.

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
    runtimes = ", ".join(f"{d.runtime} {d.version}" for d in COMPLETIONS_DEFAULT)
    yield self.finding(
        f"this completions request names no max_tokens: {runtimes} give it {COMPLETIONS_DEFAULT[0].value} new tokens",
        'set "max_tokens" to the budget an answer needs', serving.location("prompt"),
        default=COMPLETIONS_DEFAULT[0].value, runtimes=[d.runtime for d in COMPLETIONS_DEFAULT])
