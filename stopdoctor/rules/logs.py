"""SD7xx: response logs — how often served answers stopped for the wrong reason.

These rules check a `LogsInput` (a `LogsSummary` inside). Thresholds come
from the report's `LogsSettings` (`stopdoctor logs --max-length-share/--max-turn-share`).
Imports: report, model, and the logs data classes (no DuckDB).
"""

from __future__ import annotations


from stopdoctor.core.types import Location
from stopdoctor.core.findings import Severity
from stopdoctor.rules.inputs import LogsInput
from stopdoctor.rules.registry import Rule, rule


def _where(example) -> Location:
    return Location(example.file, None, example.line)  # prints as file:line


def _percent(share: float) -> str:
    return f"{share * 100:.1f}%" if share >= 0.001 or share == 0 else f"{share * 100:.3f}%"


@rule("SD701", "budget-truncation-rate", Severity.WARNING, input=LogsInput)
def budget_truncation_rate(subject: LogsInput, self: Rule):
    """More logged answers than the threshold ended because they ran out of token budget.

    What it checks:
    The share of responses whose finish_reason is `length` (Ollama `done_reason`, TGI
    `details.finish_reason`, llama.cpp `stop_type` "limit"), against a threshold (default 5%,
    `stopdoctor logs --max-length-share`), and how many of those end mid-sentence.

    Why it matters:
    Each one is an answer cut off silently: clients rarely look at finish_reason. A high share
    means max_tokens is too small for the traffic, or the model does not stop (see SD702).

    Example:
    `12.5% of 8,000 responses ended at the token budget (finish_reason length), 940 mid-sentence`

    Fix:
    Raise max_tokens (per model: see the per-max_tokens table), or fix the stop configuration
    when the cut answers also ran on into a next turn.
    """
    logs = subject.logs
    if not logs.responses:
        return
    cut = logs.problems["budget-truncated"]
    threshold = logs.settings.max_length_share
    if cut.count == 0 or cut.share <= threshold:
        return
    mid = logs.problems["mid-sentence"].count
    yield self.finding(
        f"{_percent(cut.share)} of {logs.responses:,} responses ended at the token budget (finish_reason length), "
        f"{mid:,} mid-sentence; threshold {_percent(threshold)}",
        "raise max_tokens for the models and budgets listed, or fix their stops if they also run on (SD702)",
        _where(cut.examples[0]) if cut.examples else None,
        count=cut.count, share=cut.share, threshold=threshold, mid_sentence=mid, by_model=cut.by_model)


@rule("SD702", "hallucinated-turns-in-logs", Severity.ERROR, input=LogsInput)
def hallucinated_turns_in_logs(subject: LogsInput, self: Rule):
    """Logged answers go on to write the next user or system turn themselves.

    What it checks:
    Every answer's text for a turn header the template writes (`<|im_start|>user`), the header
    left once a server strips special tokens (`user` alone on a line), or, when the template has
    no header, a transcript label (`User:`); text inside code is ignored. With `--model`, the
    model's own template says what its headers are; otherwise the common families are used.

    Why it matters:
    The model did not stop at the end of its turn and the user is shown a made-up next
    question (and often its answer). The cause is nearly always the stop configuration: the
    end-of-turn token is not a stop id.

    Example:
    `line 6: "Paris.\\nsystem\\n\\nuser\\nI'm planning to launch…" (finish_reason length)`

    Fix:
    Run `stopdoctor check MODEL --serving CONFIG` for the model named in the examples and add
    the template's end-of-turn token to the stop ids (`stopdoctor fix`).
    """
    logs = subject.logs
    if not logs.responses:
        return
    turns = logs.problems["hallucinated-turn"]
    if turns.count == 0 or turns.share <= logs.settings.max_turn_share:
        return
    models = ", ".join(f"{m} ({n:,})" for m, n in list(turns.by_model.items())[:5])
    yield self.finding(
        f"{turns.count:,} of {logs.responses:,} responses ({_percent(turns.share)}) wrote a next turn themselves"
        + (f": {models}" if models else ""),
        "stop on the template's end-of-turn token: stopdoctor check MODEL --serving CONFIG, then stopdoctor fix",
        _where(turns.examples[0]) if turns.examples else None,
        count=turns.count, share=turns.share, by_model=turns.by_model,
        lines=[e.line for e in turns.examples])


@rule("SD703", "end-of-turn-text-in-logs", Severity.WARNING, input=LogsInput)
def end_of_turn_text_in_logs(subject: LogsInput, self: Rule):
    """Logged answers contain an end-of-turn token's text with more text after it.

    What it checks:
    Every answer's text for an end-of-turn token (`<|im_end|>`, `<|eot_id|>`, `<end_of_turn>`…,
    or the model's own with `--model`) that is followed by more text; one at the very end is
    only a server that does not skip special tokens.

    Why it matters:
    Generation went on past the point where the turn ended: the token was not a stop id, or the
    server ignored it. The rest of the answer is the model talking to itself.

    Example:
    `line 3: "Paris.<|im_end|>\\n<|im_start|>user\\n…"`

    Fix:
    Add the token to the server's stop ids (vLLM `stop_token_ids`, generation_config.json
    `eos_token_id`, Ollama `PARAMETER stop`); `stopdoctor check` shows which.
    """
    logs = subject.logs
    if not logs.responses:
        return
    ran = logs.problems["ran-past-end-of-turn"]
    if ran.count == 0:
        return
    yield self.finding(
        f"{ran.count:,} of {logs.responses:,} responses ({_percent(ran.share)}) go on after an end-of-turn token",
        "make the end-of-turn token a stop id of the server",
        _where(ran.examples[0]) if ran.examples else None,
        count=ran.count, share=ran.share, by_model=ran.by_model, lines=[e.line for e in ran.examples])


def _lie(subject: LogsInput, self: Rule, key: str, message: str, fix: str):
    logs = subject.logs
    problem = logs.problems.get(key)
    if not logs.responses or problem is None or problem.count == 0:
        return
    models = ", ".join(f"{m} ({n:,})" for m, n in list(problem.by_model.items())[:5])
    yield self.finding(
        f"{problem.count:,} of {logs.responses:,} responses ({_percent(problem.share)}) {message}"
        + (f": {models}" if models else ""),
        fix, _where(problem.examples[0]) if problem.examples else None,
        count=problem.count, share=problem.share, by_model=problem.by_model, lines=[e.line for e in problem.examples])


@rule("SD704", "truncated-but-reported-finished", Severity.WARNING, input=LogsInput)
def truncated_but_reported_finished(subject: LogsInput, self: Rule):
    """Answers reported as finished (`stop`, `tool_calls`) used exactly their token budget.

    What it checks:
    Each answer whose normalised finish reason is `stop` or `tool_calls` and whose output tokens
    (`usage.completion_tokens`, Anthropic/Responses `output_tokens`, Bedrock `outputTokens`,
    Gemini candidates + thoughts, `gen_ai.usage.output_tokens`) equal the request's `max_tokens`.
    Only single-choice responses: with n > 1 the usage is the sum of the choices.

    Why it matters:
    The budget cut the answer but the server said it finished, so clients that check
    finish_reason trust a truncated answer — a tool call cut mid-JSON is reported `tool_calls`
    (vLLM PR #47963: 3 of 998 tool calls).

    Example:
    `fixtures/logs/lies.jsonl:1 tool_calls with 64 output tokens = max_tokens 64`

    Fix:
    Raise max_tokens for those requests, and report such answers as `length` in the server (or
    validate tool-call JSON before acting on it).
    """
    yield from _lie(subject, self, "truncated-but-reported-finished", "reported finished at exactly max_tokens",
                    "raise max_tokens; treat an answer at the budget as cut (validate tool-call JSON)")


@rule("SD705", "degenerate-repetition", Severity.WARNING, input=LogsInput)
def degenerate_repetition(subject: LogsInput, self: Rule):
    """Answers reported `stop` end in a loop: the same words over and over.

    What it checks:
    For each `stop` answer of at least 50 words, the last 400 words are split on whitespace and
    the share of repeated word 4-grams is measured (1 - distinct / all). At 0.5 or more the
    answer is a loop; ordinary prose and lists score under 0.1. A loop without whitespace
    (`?!?!?!…`, CJK text) is one long last run: when it has 200+ characters (and is not a rule
    like `-----`), its last 1,000 characters are scored on character 8-grams, a loop at 0.9 or
    more (real loops score 0.99). An answer whose finish reason is `repetition` (vLLM's runtime
    loop stop) is a loop the engine cut, counted too: it is not a finished answer.

    Why it matters:
    The model looped and the server still said it stopped normally (hermes-agent #30408: "I'll"
    7,568 times, finish_reason `stop`): nothing downstream notices.

    Example:
    `fixtures/logs/lies.jsonl:5 100% of its last word 4-grams repeat`

    Fix:
    Set a repetition or frequency penalty, lower max_tokens, and check the stop configuration
    (`stopdoctor check MODEL --serving CONFIG`).
    """
    yield from _lie(subject, self, "degenerate-repetition", "end in a loop (reported stop, or stopped by the engine's loop check)",
                    "add a repetition/frequency penalty and check the stop configuration")


@rule("SD706", "reasoning-consumed-budget", Severity.WARNING, input=LogsInput)
def reasoning_consumed_budget(subject: LogsInput, self: Rule):
    """The token budget was spent reasoning: cut by `length` with no answer or almost all reasoning.

    What it checks:
    Each `length` answer whose visible answer is empty after its reasoning (`reasoning_content`,
    thinking blocks, thought parts, `<think>…</think>` in the text), or whose reasoning tokens
    (`completion_tokens_details.reasoning_tokens`, Responses `output_tokens_details`, Gemini
    `thoughtsTokenCount`) are at least 90% of its output tokens, or whose text closes `</think>`
    more than once. A finished answer after a long reasoning is never counted.

    Why it matters:
    The user got nothing (or a fragment) although the model worked: the budget is too small for
    a reasoning model, or it loops in its reasoning.

    Example:
    `fixtures/logs/lies.jsonl:10 reasoning 95% of 1,000 output tokens`

    Fix:
    Raise max_tokens / max_output_tokens for reasoning models, or bound the reasoning (reasoning
    effort, thinking budget).
    """
    yield from _lie(subject, self, "reasoning-consumed-budget", "ran out of budget while reasoning",
                    "raise max_tokens for reasoning models or bound the reasoning (effort, thinking budget)")


@rule("SD707", "empty-answer", Severity.WARNING, input=LogsInput)
def empty_answer(subject: LogsInput, self: Rule):
    """Answers reported finished (`stop`) with no answer text at all.

    What it checks:
    Each answer whose normalised finish reason is `stop` and whose answer text is empty or only
    whitespace (an OpenAI chat answer whose `content` is missing too). An answer with a tool call
    is a tool call (`stop` with `tool_calls` is normalised to `tool_calls`), never empty; a log
    that does not record texts (spans without output messages) is never counted.

    Why it matters:
    The server said the model finished, so clients show the user nothing and nobody notices: the
    model ended its turn at once (an end-of-turn token as the first token, a stop string that
    matches at the start, a reasoning parser that took the whole answer as thought).

    Example:
    `fixtures/logs/lies.jsonl:17 finish_reason stop, no answer text`

    Fix:
    Check the stop strings (one that matches the answer's first characters), the reasoning parser
    (`stopdoctor check MODEL --serving CONFIG`), and reproduce one request with `stopdoctor generate`.
    """
    yield from _lie(subject, self, "empty-answer", "reported stop with no answer text",
                    "check stop strings and the reasoning parser (stopdoctor check MODEL --serving CONFIG); "
                    "reproduce with stopdoctor generate")
