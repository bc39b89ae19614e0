"""`stop-odds`: teacher-force reference conversations through the model and measure, where the
template closes the assistant turn, the probability the model gives its end-of-turn token.

Each example is rendered through the chat template (the whole conversation, its last assistant
message included) and cut right after that message's content: the context the model sees when it
should end its turn. The contexts run in batches (left-padded, explicit positions, only the last
position's logits kept), on the GPU when there is one. Per example: P(end-of-turn) (summed over
the ids that end a turn), its rank, and the top competing tokens. The verdict separates "the
weights stop, the configuration does not" from "the weights never learned to stop".

Rows come from the built-in conversations or a JSONL file (`messages`, `prompt`/`completion` as
message lists or as plain strings, `text`); plain text (no template, or a base model) is measured
at its end against the eos.
torch and transformers are imported only inside functions (through the generate engine).
Imports: core, facts, analysis, runtimes, template, actions.generate, labels (row reading).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Iterable
from typing import Any

from stopdoctor.analysis.core import Analysis
from stopdoctor.analysis.weights import stop_targets
from stopdoctor.core.errors import InputError
from stopdoctor.core.records import record
from stopdoctor.facts.model_facts import ModelFacts
from stopdoctor.template.render import render_chat
from stopdoctor.template.limits import render_deadline

# Short questions with a one-sentence answer: where an instruct model ends its turn at once.
REFERENCE = (
    ("What is the capital of France?", "The capital of France is Paris."),
    ("What is 2 + 2?", "2 + 2 equals 4."),
    ("How many days are in a week?", "There are seven days in a week."),
    ("Name a primary colour.", "Red is a primary colour."),
    ("Translate 'thank you' into Spanish.", "'Thank you' in Spanish is 'gracias'."),
    ("What is the boiling point of water at sea level in Celsius?", "Water boils at 100 degrees Celsius at sea level."),
    ("Give me a synonym for happy.", "A synonym for happy is joyful."),
    ("Who wrote Romeo and Juliet?", "William Shakespeare wrote Romeo and Juliet."),
)
LEARNED = 0.1  # median P(end-of-turn) at or above: the weights end turns
NEVER = 0.01  # below: the weights never learned to stop
TOP = 5
MAX_CONTEXT_TOKENS = 4096  # a longer example is cut from the left: only its end matters here
# The work of one forward pass and of a run is bounded by tokens, not rows: a batch holds at most
# BATCH_TOKENS padded tokens (whatever --batch-size says; attention grows with rows x width^2),
# and a run measures at most RUN_TOKENS tokens; the rows past it are listed as not measured.
BATCH_TOKENS = {"cuda": 65_536, "cpu": 8_192}
RUN_TOKENS = {"cuda": 1_048_576, "cpu": 16_384}
BROKEN = "the model's output here holds NaN or infinite values: its weights are broken"


@record
class Context:
    """One example as the model sees it just before it should end its turn."""

    index: int
    source: str  # "built-in" or "FILE:LINE"
    ids: tuple[int, ...]
    targets: tuple[int, ...]  # the ids that end it here
    kind: str  # "chat" | "text"
    preview: str  # the end of the answer, for people


@record
class Competitor:
    id: int
    text: str | None  # the token as the vocabulary writes it ("ĠParis")
    p: float
    decoded: str = ""  # as text (" Paris")


@record
class ExampleOdds:
    context: Context
    p_end_of_turn: float  # summed over the context's target ids
    best_target: int  # the target id with the highest probability
    rank: int  # 1 = the model's first choice
    top: tuple[Competitor, ...]  # the most likely tokens that do not end the turn


@record
class StopOdds:
    model: str
    device: str
    examples: tuple[ExampleOdds, ...]
    skipped: tuple[tuple[str, str], ...]  # (source, why) of examples that could not be measured
    tokens: int
    seconds: float
    verdict: str  # "stops" | "configuration" | "weak" | "weights" | "broken" | "unknown"
    reason: str
    data: str | None = None
    # The rows the verdict is over: "chat" (the end of an assistant turn, against the end-of-turn)
    # whenever there is one, else "text" (the end of plain text, against the eos). The two ask
    # different questions, so they are never pooled into one median.
    verdict_kind: str = "chat"

    @property
    def judged(self) -> list[ExampleOdds]:
        return [e for e in self.examples if e.context.kind == self.verdict_kind]

    @property
    def apart(self) -> list[ExampleOdds]:
        """Rows measured but outside the verdict (plain text beside chat rows)."""
        return [e for e in self.examples if e.context.kind != self.verdict_kind]

    @property
    def median_p_end_of_turn(self) -> float:
        return statistics.median(e.p_end_of_turn for e in self.judged) if self.judged else 0.0

    @property
    def median_apart(self) -> float | None:
        return statistics.median(e.p_end_of_turn for e in self.apart) if self.apart else None

    @property
    def tokens_per_second(self) -> float:
        return self.tokens / self.seconds if self.seconds > 0 else 0.0


# --- contexts -----------------------------------------------------------------------------------


def reference_rows() -> list[tuple[str, dict]]:
    return [("built-in", {"messages": [{"role": "user", "content": q}, {"role": "assistant", "content": a}]})
            for q, a in REFERENCE]


def data_rows(path: str, limit: int | None, bad: list[tuple[str, str]] | None = None) -> list[tuple[str, dict]]:
    """(FILE:LINE, row) of each example; given `bad`, a malformed line is skipped and listed there
    as (FILE:LINE, why), as `labels` and `logs` skip it, instead of ending the command."""
    import re

    from stopdoctor.facts.datasets import iter_examples

    name = str(path)
    reasons: list[str] | None = [] if bad is not None else None
    rows = [(f"{name}:{example.line}", example.row) for example in iter_examples(path, limit, reasons)]
    for why in reasons or ():
        line = re.match(r"line (\d+)", why)
        bad.append((f"{name}:{line.group(1)}" if line else name, why))  # type: ignore[union-attr]
    return rows


def build_contexts(facts: ModelFacts, analysis: Analysis, rows: Iterable[tuple[str, dict]]) -> tuple[list[Context], list[tuple[str, str]]]:
    """Every row as a context cut where the turn should end, or the reason it cannot be."""
    contexts: list[Context] = []
    skipped: list[tuple[str, str]] = []
    turn_ids = tuple(analysis.required_stop_ids())
    eos_ids = tuple(i for i in stop_targets(analysis) if i not in turn_ids) or stop_targets(analysis)
    for index, (source, row) in enumerate(rows):
        messages = _messages(row)
        try:
            with render_deadline(own=True):  # a row's renders have their own time: a dataset can be long
                contexts.append(_context(facts, index, source, row, messages, turn_ids, eos_ids))
        except InputError as error:
            skipped.append((source, error.message))
    return contexts, skipped


def _context(facts: ModelFacts, index: int, source: str, row: dict, messages: list[dict] | None,
             turn_ids: tuple[int, ...], eos_ids: tuple[int, ...]) -> Context:
    if messages is not None and facts.template is not None and turn_ids:
        ids, preview = _chat_context(facts, messages)
        return Context(index, source, ids, turn_ids, "chat", preview)
    text = _plain_text(row)
    if text is None:
        raise InputError("a chat row, but the model has no chat template that ends assistant turns")
    if not eos_ids:
        raise InputError("plain text, but the model declares no eos to end it with")
    from stopdoctor.actions.generate.request import build_prompt

    prompt = build_prompt(facts, prompt=text, raw=True)
    return Context(index, source, prompt.ids[-MAX_CONTEXT_TOKENS:], eos_ids, "text", text[-60:])


def _messages(row: dict) -> list[dict] | None:
    if isinstance(row.get("messages"), list):
        return row["messages"]
    if isinstance(row.get("prompt"), list) and isinstance(row.get("completion"), list):
        return row["prompt"] + row["completion"]
    return None


def _plain_text(row: dict) -> str | None:
    if isinstance(row.get("prompt"), str) and isinstance(row.get("completion"), str):
        return row["prompt"] + row["completion"]
    if isinstance(row.get("text"), str):
        return row["text"]
    return None


def _chat_context(facts: ModelFacts, messages: list[dict]) -> tuple[tuple[int, ...], str]:
    last = max((k for k, m in enumerate(messages) if isinstance(m, dict) and m.get("role") == "assistant"), default=None)
    if last is None:
        raise InputError("no assistant message to end")
    content = messages[last].get("content")
    if not isinstance(content, str) or not content.strip():
        raise InputError("the last assistant message has no text content")
    messages = messages[: last + 1]
    assert facts.template is not None  # `_context` asks for a template before it renders a chat row
    text = render_chat(facts.template.source, messages, special_tokens=facts.special_token_texts())
    end = text.rfind(content.rstrip())
    if end < 0:
        raise InputError("the template rewrites the answer (its text is not in the rendered conversation)")
    cut = text[: end + len(content.rstrip())]
    ids = facts.vocab.tokenizer().encode(cut, add_special_tokens=False).ids
    return tuple(ids[-MAX_CONTEXT_TOKENS:]), content.rstrip()[-60:]


# --- measuring ----------------------------------------------------------------------------------


def load_model(load: Callable[[], object], spec: str):
    """`load()` (the engine), with transformers' refusal of weights whose shapes the config does
    not give (F32 data labelled F16) as one InputError line."""
    try:
        return load()
    except RuntimeError as error:
        if not any(words in str(error) for words in ("mismatched_sizes", "mismatched sizes", "size mismatch")):
            raise
        raise InputError(f"{spec}: the weights' shapes do not match config.json (transformers refuses to load them)",
                         hint="a tensor's dtype or shape in the weight file's header is wrong, or the config is another "
                              "model's; `inspect --weights` shows the matrices' shapes") from None


def within_budget(contexts: list[Context], device: str) -> tuple[list[Context], list[tuple[str, str]]]:
    """The contexts a run measures, in order, until their tokens pass RUN_TOKENS for the device;
    (source, why) of the rest."""
    budget = RUN_TOKENS.get(device, RUN_TOKENS["cpu"])
    kept: list[Context] = []
    cut: list[tuple[str, str]] = []
    spent = 0
    for context in contexts:
        if spent + len(context.ids) > budget:
            cut.append((context.source, f"not measured: the run's {budget:,} tokens on {device} were spent "
                                        "(use --limit, shorter rows, or a GPU)"))
            continue
        spent += len(context.ids)
        kept.append(context)
    return kept, cut


def _batches(contexts: list[Context], order: list[int], batch_size: int, batch_tokens: int) -> list[list[Context]]:
    """Consecutive contexts (shortest first) in batches of at most `batch_size` rows and
    `batch_tokens` padded tokens (rows x the longest row)."""
    batches: list[list[Context]] = []
    for k in order:
        context = contexts[k]
        last = batches[-1] if batches else None
        if last is not None and len(last) < batch_size and (len(last) + 1) * len(context.ids) <= batch_tokens:
            last.append(context)
        else:
            batches.append([context])
    return batches


def measure(engine, contexts: list[Context], batch_size: int | None = None,
            progress: Callable[[int, int], None] | None = None) -> tuple[list[ExampleOdds | None], int, float]:
    """Teacher-force the contexts through `engine.model`; (odds, tokens, seconds of forward passes).
    An example whose output holds NaN or infinities has None: no odds are computed from it."""
    torch = engine._torch if getattr(engine, "_torch", None) is not None else __import__("torch")
    model, device, vocab = engine.model, engine.device, engine.facts.vocab
    batch_size = batch_size or (32 if device == "cuda" else 8)
    order = sorted(range(len(contexts)), key=lambda k: len(contexts[k].ids))
    results: dict[int, ExampleOdds | None] = {}
    tokens = 0
    seconds = 0.0
    done = 0
    with torch.inference_mode():
        for chunk in _batches(contexts, order, batch_size, BATCH_TOKENS.get(device, BATCH_TOKENS["cpu"])):
            width = max(len(c.ids) for c in chunk)
            ids = torch.zeros((len(chunk), width), dtype=torch.long)
            mask = torch.zeros((len(chunk), width), dtype=torch.long)
            for row, context in enumerate(chunk):  # left padding: every last position is real
                ids[row, width - len(context.ids):] = torch.tensor(context.ids)
                mask[row, width - len(context.ids):] = 1
            positions = (mask.cumsum(dim=1) - 1).clamp(min=0)
            began = time.perf_counter()
            output = model(input_ids=ids.to(device), attention_mask=mask.to(device), position_ids=positions.to(device),
                           use_cache=False, logits_to_keep=1)
            logits = output.logits[:, -1, :].float()
            finite = torch.isfinite(logits).all(dim=-1).cpu()
            probs = torch.softmax(logits, dim=-1).cpu()
            seconds += time.perf_counter() - began
            tokens += int(mask.sum())
            for row, context in enumerate(chunk):
                results[context.index] = _odds(context, probs[row], vocab, torch) if bool(finite[row]) else None
            done += len(chunk)
            if progress is not None:
                progress(done, len(order))
    return [results[c.index] for c in contexts], tokens, seconds


def measure_run(engine, contexts: list[Context], batch_size: int | None = None,
                progress: Callable[[int, int], None] | None = None) -> tuple[list[ExampleOdds], list[tuple[str, str]], int, float]:
    """A run's contexts measured within its token budget: (odds, (source, why) of the contexts
    cut by the budget or whose output was broken, tokens, seconds)."""
    contexts, cut = within_budget(contexts, engine.device)
    measured, tokens, seconds = measure(engine, contexts, batch_size, progress)
    broken = [(c.source, BROKEN) for c, e in zip(contexts, measured) if e is None]
    return [e for e in measured if e is not None], [*broken, *cut], tokens, seconds


def _odds(context: Context, probs, vocab, torch) -> ExampleOdds:
    targets = [i for i in context.targets if 0 <= i < probs.shape[0]]
    target_probs = probs[targets] if targets else torch.zeros(1)
    p_end = float(target_probs.sum())
    best = targets[int(target_probs.argmax())] if targets else -1
    rank = int((probs > probs[best]).sum()) + 1 if targets else probs.shape[0]
    others = probs.clone()
    if targets:
        others[targets] = -1.0
    values, indices = others.topk(TOP)
    tokenizer = vocab.tokenizer()
    top = tuple(Competitor(int(i), vocab.text_of(int(i)), float(v), tokenizer.decode([int(i)], skip_special_tokens=False))
                for v, i in zip(values.tolist(), indices.tolist()))
    return ExampleOdds(context, p_end, best, rank, top)


def verdict(examples: list[ExampleOdds], static_errors: list[str], target_text: str, broken: int = 0) -> tuple[str, str]:
    """(verdict, reason): the weights against the configuration. `broken`: examples whose output
    held NaN or infinities, a verdict of its own (no odds are computed from such weights)."""
    if broken:
        return "broken", (f"the weights are broken: the model's output holds NaN or infinite values on {broken} of "
                          f"{broken + len(examples)} examples (see `inspect --weights`)")
    if not examples:
        return "unknown", "no example could be measured"
    median = statistics.median(e.p_end_of_turn for e in examples)
    share = f"median P({target_text}) {median:.4f} over {len(examples)} examples"
    if median >= LEARNED:
        if static_errors:
            return "configuration", (f"the weights end turns ({share}); the configuration does not: "
                                     f"{'; '.join(static_errors[:3])}")
        return "stops", f"the weights end turns ({share})"
    if median < NEVER:
        best = max(e.p_end_of_turn for e in examples)
        return "weights", (f"the weights never learned to stop: {share}, at most {best:.2g} — "
                           f"no stop configuration can fix that (see `inspect --weights`)")
    return "weak", f"the weights end turns only sometimes ({share}): answers may run on"


# --- evidence for generate and check --live ------------------------------------------------------


@record
class StopEvidence:
    """Whether the weights can end a turn, from the two cheap witnesses a loaded model allows:
    the end-of-turn rows (`inspect --weights`) and P(end-of-turn) on the built-in reference
    answers (one batch). A low P during a generation proves nothing alone: mid-essay, a healthy
    model gives its end-of-turn 1e-7 too."""

    reference_median: float | None
    reference_examples: int
    weights: Any = None  # WeightsReport, None when the rows could not be read
    target: str = "the end-of-turn token"
    broken: bool = False  # the model's output held NaN or infinities: no odds were computed from it

    @property
    def untrained_rows(self) -> list:
        return list(self.weights.untrained_targets) if self.weights is not None else []

    @property
    def never_stops(self) -> bool:
        return self.broken or bool(self.untrained_rows) or (self.reference_median is not None and self.reference_median < NEVER)

    def explain(self) -> str:
        parts = [BROKEN] if self.broken else []
        if self.reference_median is not None:
            parts.append(f"on {self.reference_examples} reference answers it gives {self.target} a median P of "
                         f"{self.reference_median:.4f} (a model that ends its turns: > {LEARNED})")
        if self.untrained_rows:
            row = self.untrained_rows[0]
            parts.append(f"{row.text} (id {row.id}) has an untrained row: {row.reasons[0]}")
        return "; ".join(parts)


def reference_contexts(facts: ModelFacts, analysis: Analysis) -> list[Context]:
    """The built-in conversations as contexts: rendered before a model loads, so that the
    command's template-render deadline is never spent waiting for the weights."""
    return build_contexts(facts, analysis, reference_rows())[0]


def stop_evidence(facts: ModelFacts, analysis: Analysis, engine, contexts: list[Context] | None = None) -> StopEvidence:
    """`contexts`: `reference_contexts(...)`, prepared before the model was loaded."""
    from stopdoctor.analysis.weights import analyze_weights
    from stopdoctor.core.errors import StopdoctorError

    try:
        weights = analyze_weights(analysis)
    except StopdoctorError:
        weights = None  # weights in a form the row reader does not know: the odds speak alone
    if contexts is None:
        contexts = reference_contexts(facts, analysis)
    median, broken = None, False
    if contexts:
        odds, _, _ = measure(engine, contexts)
        measured = [e.p_end_of_turn for e in odds if e is not None]
        broken = len(measured) != len(odds)  # NaN output: no median is computed from it
        median = statistics.median(measured) if not broken else None
    names = [facts.vocab.text_of(i) or str(i) for i in stop_targets(analysis)]
    return StopEvidence(median, len(contexts), weights, " / ".join(names) or "the end-of-turn token", broken)


def measure_stop_odds(spec: str, result, data: str | None = None, limit: int | None = None, device: str = "auto",
                      batch_size: int | None = None, allow_pickle: bool = False,
                      progress: Callable[[str], None] | None = None) -> StopOdds:
    """`stopdoctor stop-odds` on an inspected model (`rules.results.InspectResult`): P(end-of-turn)
    where the template closes the assistant turn, over the reference conversations or the rows of
    `data`, and the verdict. Loads the model with torch (imported here, lazily)."""
    from stopdoctor.actions.generate.local import LocalEngine
    from stopdoctor.core.findings import Severity

    bad: list[tuple[str, str]] = []
    rows = data_rows(data, limit, bad) if data is not None else reference_rows()[:limit]
    contexts, skipped = build_contexts(result.facts, result.analysis, rows)
    if not contexts:
        why = skipped[0][1] if skipped else "no example"
        lines = f"; {len(bad)} bad line(s) skipped, the first: {bad[0][1]}" if bad else ""
        raise InputError(f"{data or 'the reference conversations'}: no example can be measured ({why}){lines}")
    skipped = bad + skipped if not skipped else sorted(bad + skipped, key=_line_of)  # in file order
    say = progress or (lambda message: None)
    engine = load_model(lambda: LocalEngine.load(result.facts, device=device, allow_pickle=allow_pickle, progress=say), spec)
    odds, unmeasured, tokens, seconds = measure_run(engine, contexts, batch_size, lambda n, of: say(f"measured {n}/{of} examples…"))
    errors = [f"{f.code} {f.name}" for f in result.findings if f.severity >= Severity.ERROR]
    # chat rows ask "does it end its turn?", plain text "does it end the text?": one verdict, over chat rows when any
    judged_kind = "chat" if any(c.kind == "chat" for c in contexts) else "text"
    judged = [o for o in odds if o.context.kind == judged_kind]
    targets = {i for o in judged for i in o.context.targets}
    names = ", ".join(dict.fromkeys(result.facts.vocab.text_of(i) or str(i) for i in sorted(targets)))
    kind, reason = verdict(judged, errors, names, sum(why == BROKEN for _, why in unmeasured))
    return StopOdds(spec, engine.device, tuple(odds), (*skipped, *unmeasured), tokens, seconds, kind, reason, data, judged_kind)


def _line_of(skipped: tuple[str, str]) -> int:
    """The line of a skipped row's "FILE:LINE" source."""
    line = skipped[0].rpartition(":")[2]
    return int(line) if line.isdigit() else 0
