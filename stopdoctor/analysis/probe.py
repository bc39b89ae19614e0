"""The analysis behind `stopdoctor probe-stop`: how a stop string tokenizes in real contexts.

A stop string is usually configured as text, but some engines match it as the token ids of
`encode(stop)`. Byte-level BPE merges the stop's first characters with what precedes it ("Paris "
+ "User:" gives ĠUser, not User), so an id match misses. This module encodes each stop after a set
of typical preceding texts, reports the id sequences it really takes, whether an id match would
fire, whether it is one special token, and whether it also occurs inside ordinary answers (a stop
that ends good answers early).

Imports only the standard library; the tokenizer (a `tokenizers.Tokenizer`) is passed in.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

from stopdoctor.core.records import record

if TYPE_CHECKING:
    import tokenizers

# Preceding texts a stop string meets in real output: name -> text before the stop.
DEFAULT_CONTEXTS: dict[str, str] = {
    "end of word": "Paris",
    "after space": "Paris ",
    "after period": ".",
    "end of sentence": "Paris.",
    "after colon": "Answer:",
    "after digits": "2024",
    "after newline": "Paris.\n",
    "after blank line": "Paris.\n\n",
    "after list item": "- item\n",
    "after code": "f(x = 1)\n",
    "after CJK": "巴黎。",
    "after emoji": "done 🎉",
}

EXCERPT_RADIUS = 30
MAX_FALSE_POSITIVES = 10_000  # matches listed per stop string


@record
class ContextProbe:
    """How a stop string tokenizes right after `context`.

    `ids`/`tokens` are the tokens of encode(context + stop) whose span overlaps the stop string.
    `aligned`: the first of them starts exactly where the stop starts. `exact`: they are the
    standalone ids. `merged_prefix`: the context text swallowed by the first covering token.
    """

    context_name: str
    context: str
    ids: list[int]
    tokens: list[str]
    aligned: bool
    exact: bool
    merged_prefix: str


@record
class FalsePositive:
    """The stop string occurs in an ordinary answer: generation would have been cut there."""

    sample: str
    excerpt: str
    offset: int


@record
class StopProbe:
    stop: str
    standalone_ids: list[int]
    standalone_tokens: list[str]
    contexts: list[ContextProbe]
    id_match_misses: int  # contexts where matching the standalone ids would not fire
    variants: list[list[int]]  # distinct covering id sequences, standalone first
    special_token_id: int | None  # the stop is exactly one special token
    false_positives: list[FalsePositive]
    samples_checked: int
    recommendations: list[str]


def contains_run(haystack: Sequence[int], needle: Sequence[int]) -> bool:
    """Whether `needle` occurs as a contiguous run in `haystack`, in linear time (Knuth-Morris-Pratt:
    a naive scan is quadratic on a long, repetitive stop string)."""
    n = len(needle)
    if n == 0:
        return True
    if n > len(haystack):
        return False
    fallback = [0] * n  # length of the longest proper prefix of needle[:i+1] that is also its suffix
    k = 0
    for i in range(1, n):
        while k and needle[i] != needle[k]:
            k = fallback[k - 1]
        if needle[i] == needle[k]:
            k += 1
        fallback[i] = k
    k = 0
    for item in haystack:
        while k and item != needle[k]:
            k = fallback[k - 1]
        if item == needle[k]:
            k += 1
            if k == n:
                return True
    return False


def _special_token_id(tokenizer: tokenizers.Tokenizer, stop: str, standalone_ids: list[int]) -> int | None:
    if len(standalone_ids) != 1:
        return None
    added = tokenizer.get_added_tokens_decoder().get(standalone_ids[0])
    if added is not None and added.special and added.content == stop:
        return standalone_ids[0]
    return None


def _probe_context(
    tokenizer: tokenizers.Tokenizer, stop: str, name: str, context: str, standalone_ids: list[int]
) -> tuple[ContextProbe, bool]:
    """Return the probe for one context and whether a standalone-id match would miss there."""
    full = tokenizer.encode(context + stop, add_special_tokens=False)
    # Each Encoding attribute access copies the whole list out of Rust: read each once.
    full_ids, full_tokens, offsets = full.ids, full.tokens, full.offsets
    start, end = len(context), len(context) + len(stop)
    covering = [i for i, (s, e) in enumerate(offsets) if s < end and e > start]
    ids = [full_ids[i] for i in covering]
    tokens = [full_tokens[i] for i in covering]
    first_start = offsets[covering[0]][0] if covering else start
    merged_prefix = context[first_start:start] if first_start < start else ""
    if not merged_prefix and covering:
        # Offsets can be trimmed of whitespace (ByteLevel trim_offsets): trust the decoded token
        # text when it holds more than its span says, e.g. " User" reported as starting at "U".
        decoded = tokenizer.decode(ids, skip_special_tokens=False)
        if decoded.endswith(stop) and len(decoded) > len(stop):
            extra = decoded[: len(decoded) - len(stop)]
            if context.endswith(extra):
                merged_prefix = extra
    probe = ContextProbe(
        context_name=name,
        context=context,
        ids=ids,
        tokens=tokens,
        aligned=not merged_prefix,
        exact=ids == standalone_ids,
        merged_prefix=merged_prefix,
    )
    return probe, not contains_run(full_ids, standalone_ids)


def find_false_positives(stop: str, corpus: Sequence[tuple[str, str]]) -> list[FalsePositive]:
    """The matches of `stop` in the corpus, the first MAX_FALSE_POSITIVES of them (a 64 MB corpus of
    one repeated word would otherwise make millions of excerpts)."""
    found: list[FalsePositive] = []
    for name, text in corpus:
        at = text.find(stop)
        while at >= 0 and len(found) < MAX_FALSE_POSITIVES:
            lo, hi = max(0, at - EXCERPT_RADIUS), min(len(text), at + len(stop) + EXCERPT_RADIUS)
            found.append(FalsePositive(sample=name, excerpt=text[lo:hi], offset=at))
            at = text.find(stop, at + 1)
    return found


def _recommend(
    stop: str,
    misses: int,
    n_contexts: int,
    variants: list[list[int]],
    special_id: int | None,
    false_positives: list[FalsePositive],
    corpus: Sequence[tuple[str, str]],
    user_header: str | None,
    misses_of: Callable[[str], int],
) -> list[str]:
    recs: list[str] = []
    if special_id is not None:
        recs.append(
            f"{stop!r} is the special token id {special_id}: stop on the id (eos_token_id / stop_token_ids) "
            "rather than the text; decoders that skip special tokens never show the text."
        )
    if misses:
        recs.append(
            f"A token-id match on encode({stop!r}) misses in {misses} of {n_contexts} contexts "
            f"({len(variants)} id sequences seen): match on the decoded text instead, which catches every variant."
        )
    if false_positives and special_id is not None:
        recs.append(
            f"{stop!r} occurs {len(false_positives)} time(s) as text in the sample answers (quoted markup); "
            f"a stop on id {special_id} never fires there, a stop string matched on text with special tokens "
            "shown would."
        )
    elif false_positives:
        shown = "; ".join(f"{fp.sample}: {fp.excerpt!r}" for fp in false_positives[:3])
        more = f" (+{len(false_positives) - 3} more)" if len(false_positives) > 3 else ""
        recs.append(
            f"{stop!r} occurs {len(false_positives)} time(s) in ordinary answers and would cut them short: "
            f"{shown}{more}."
        )
    if special_id is None and (misses or false_positives):
        # A stop string is suggested only when it measures better than `stop` on the same
        # contexts and the same answers (no more misses, no more false hits, and fewer of one)
        # and cuts none of the sample answers: a replacement that still cuts good answers is no fix.
        def measured(candidate: str) -> tuple[int, int] | None:
            candidate_misses = misses_of(candidate)
            candidate_hits = len(find_false_positives(candidate, corpus))
            if candidate_misses <= misses and candidate_hits <= len(false_positives) and \
                    (candidate_misses, candidate_hits) != (misses, len(false_positives)):
                return candidate_misses, candidate_hits
            return None

        still_cut: list[str] = []
        # Anchoring to a line start keeps role labels quoted mid-line from matching, and a single
        # leading newline tokenizes the same after text that ends in one (two newlines merge).
        anchored = "\n" + stop.lstrip("\n")
        if anchored.strip() and anchored != stop and (better := measured(anchored)):
            if better[1]:
                still_cut.append(f"anchored to a line start, {anchored!r} still fires {better[1]} time(s)")
            else:
                recs.append(
                    f"Anchor it to a line start: {anchored!r} (id match misses in {better[0]} of "
                    f"{n_contexts} contexts; no hit in the sample answers)."
                )
        if user_header and user_header != stop and (better := measured(user_header)):
            if better[1]:
                still_cut.append(f"the template's user header {user_header!r} still fires {better[1]} time(s)")
            else:
                recs.append(
                    f"If the model is writing the next user turn, stop on the template's user header {user_header!r} "
                    f"(id match misses in {better[0]} of {n_contexts} contexts; no hit in the sample answers)."
                )
        if still_cut:
            recs.append(
                f"No stop string tried here is safe: {'; '.join(still_cut)} in the sample answers. Stop on the "
                "model's end-of-turn token id instead (`stopdoctor inspect MODEL` names it)."
            )
    return recs


def probe_stop(
    tokenizer: tokenizers.Tokenizer,
    stops: Sequence[str],
    *,
    extra_contexts: Mapping[str, str] | None = None,
    corpus: Sequence[tuple[str, str]] | None = None,
    turn_endings: Sequence[str] = (),
    user_header: str | None = None,
) -> list[StopProbe]:
    """Probe each stop string after DEFAULT_CONTEXTS, the template's turn endings and `extra_contexts`.

    `corpus` is (name, text) answers to search for false positives; None means SAMPLE_ANSWERS,
    an empty sequence checks none.
    """
    if corpus is None:
        corpus = SAMPLE_ANSWERS
    contexts: dict[str, str] = dict(DEFAULT_CONTEXTS)
    for ending in turn_endings:
        contexts[f"after turn end {ending!r}"] = ending
    contexts.update(extra_contexts or {})

    def misses_of(text: str) -> int:
        ids = list(tokenizer.encode(text, add_special_tokens=False).ids)
        return sum(_probe_context(tokenizer, text, n, c, ids)[1] for n, c in contexts.items())

    results = []
    for stop in stops:
        standalone = tokenizer.encode(stop, add_special_tokens=False)
        standalone_ids = list(standalone.ids)
        probes: list[ContextProbe] = []
        misses = 0
        variants: list[list[int]] = [standalone_ids]
        for name, context in contexts.items():
            probe, missed = _probe_context(tokenizer, stop, name, context, standalone_ids)
            probes.append(probe)
            misses += missed
            if probe.ids not in variants:
                variants.append(probe.ids)
        special_id = _special_token_id(tokenizer, stop, standalone_ids)
        false_positives = find_false_positives(stop, corpus)
        results.append(
            StopProbe(
                stop=stop,
                standalone_ids=standalone_ids,
                standalone_tokens=list(standalone.tokens),
                contexts=probes,
                id_match_misses=misses,
                variants=variants,
                special_token_id=special_id,
                false_positives=false_positives,
                samples_checked=len(corpus),
                recommendations=_recommend(
                    stop, misses, len(probes), variants, special_id, false_positives, corpus, user_header, misses_of
                ),
            )
        )
    return results


# Ordinary assistant answers, written for this project, to catch stop strings that also occur in
# good output (a transcript quoting "User:", an email "Subject:", a markdown "###").
SAMPLE_ANSWERS: list[tuple[str, str]] = [
    ("capital", "The capital of France is Paris. It has been the seat of government since the 10th century."),
    (
        "recipe",
        "Here is a simple pancake recipe:\n\n### Ingredients\n- 200 g flour\n- 2 eggs\n- 300 ml milk\n"
        "- a pinch of salt\n\n### Steps\n1. Whisk the flour and eggs.\n2. Add the milk slowly.\n"
        "3. Rest the batter for 20 minutes.\n4. Fry thin layers in a hot pan.\n\nEnjoy!",
    ),
    (
        "python-code",
        "You can reverse a list in Python with slicing:\n\n```python\nitems = [1, 2, 3]\n"
        "reversed_items = items[::-1]\nprint(reversed_items)  # [3, 2, 1]\n```\n\n"
        "Or in place with `items.reverse()`.",
    ),
    (
        "transcript-example",
        "Here is an example of a support chat you could use for training:\n\n"
        "User: My order hasn't arrived.\nAgent: I'm sorry to hear that. Can you share the order number?\n"
        "User: It's 48213.\nAgent: Thanks, it ships tomorrow.\n\nNotice how the agent asks one question at a time.",
    ),
    (
        "email",
        "Sure, here's a draft:\n\nSubject: Rescheduling Thursday's meeting\n\nHi Maria,\n\n"
        "Could we move Thursday's meeting to 3 pm? Something came up in the morning.\n\nBest,\nTom",
    ),
    (
        "screenplay",
        "INT. KITCHEN - NIGHT\n\nANNA: Did you hear that?\nBEN: Just the wind.\n"
        "ANNA: The wind doesn't knock twice.",
    ),
    (
        "interview-format",
        "A common format for interview notes is:\n\nQ: What drew you to this role?\n"
        "A: The chance to work on open-source tooling.\n\nQ: Where do you see yourself in five years?\n"
        "A: Leading a small team.",
    ),
    (
        "math",
        "To solve 2x + 3 = 11, subtract 3 from both sides: 2x = 8. Then divide by 2: x = 4.\n\n"
        "Check: 2 × 4 + 3 = 11. ✓",
    ),
    (
        "list-compare",
        "**Pros of remote work**\n- No commute\n- Flexible hours\n\n**Cons**\n- Fewer casual conversations\n"
        "- Harder to separate work and home",
    ),
    (
        "prompting-tips",
        "When writing a prompt for a chat model, label the turns clearly, for example:\n\n"
        "System: You are a helpful assistant.\nUser: Summarize this article.\nAssistant: Here is a summary...\n\n"
        "Keep the system message short.",
    ),
    (
        "json",
        'The response could look like this:\n\n```json\n{"user": "ana", "role": "admin", "active": true}\n```\n\n'
        "The `role` field controls permissions.",
    ),
    (
        "history",
        "The Treaty of Westphalia (1648) ended the Thirty Years' War. It is often cited as the origin of "
        "the modern system of sovereign states.\n\nHistorians still debate how new that idea really was.",
    ),
    (
        "chinese",
        "巴黎是法国的首都，也是最大的城市。\n\n它以埃菲尔铁塔、卢浮宫和塞纳河闻名。",
    ),
    ("emoji-cheer", "Congratulations on the new job! 🎉 You worked hard for it. Good luck on your first day 👍"),
    (
        "shell",
        "Run these commands:\n\n```bash\npython -m venv .venv\nsource .venv/bin/activate\n"
        "pip install -r requirements.txt\n```\n\nThen start the server with `make run`.",
    ),
    (
        "table",
        "| Planet | Moons |\n|---|---|\n| Earth | 1 |\n| Mars | 2 |\n| Jupiter | 95 |\n\n"
        "Jupiter's count keeps rising as telescopes improve.",
    ),
    (
        "user-story",
        "A good user story follows this template:\n\n> As a user, I want to reset my password so that I can "
        "log in again.\n\nUser: the person who benefits. Goal: what they need.",
    ),
    (
        "poem",
        "Morning fog on the river,\nboats asleep at the pier,\na gull writes one long line\nacross the grey.",
    ),
    (
        "sql",
        "To find the five newest users:\n\n```sql\nSELECT id, name FROM users\nORDER BY created_at DESC\n"
        "LIMIT 5;\n```",
    ),
    (
        "meeting-notes",
        "## Meeting notes\n\n**Attendees:** Ana, Ben, Chen\n\n**Decisions:**\n1. Ship v2 on Friday.\n"
        "2. Freeze features on Wednesday.\n\n**Action items:**\n- Ana: update docs\n- Ben: release notes",
    ),
    (
        "log-excerpt",
        "The log shows the failure clearly:\n\n```\n2024-05-01 10:32:07 INFO  user: alice logged in\n"
        "2024-05-01 10:32:09 ERROR disk full\n```\n\nFree some space and restart.",
    ),
    (
        "physics",
        "Objects fall at the same rate in a vacuum because gravitational acceleration does not depend on mass. "
        "Air resistance is what makes a feather fall slower than a hammer.",
    ),
    (
        "dialogue-story",
        'She looked up from the map. "We\'re lost," she said.\n\n"We\'re exploring," he replied, '
        "folding it the wrong way.",
    ),
    (
        "regex",
        "Use `^\\d{4}-\\d{2}-\\d{2}$` to match dates like 2024-05-01. The `^` and `$` anchor the pattern "
        "to the start and end of the string.",
    ),
    (
        "faq",
        "**Q: Can I change my username?**\nYes, once every 30 days in Settings.\n\n"
        "**Q: Is my data encrypted?**\nYes, at rest and in transit.",
    ),
    (
        "translation",
        'In Spanish, "Where is the station?" is "¿Dónde está la estación?". In German: '
        '"Wo ist der Bahnhof?"',
    ),
    (
        "chat-format-explainer",
        "ChatML wraps each turn in markers. A rendered conversation looks like:\n\n"
        "<|im_start|>user\nHi!<|im_end|>\n<|im_start|>assistant\nHello!<|im_end|>\n\n"
        "The model learns to end its turn with the closing marker.",
    ),
    (
        "human-assistant",
        "Anthropic-style transcripts label turns as follows:\n\nHuman: What's 2 + 2?\n\nAssistant: 4.\n\n"
        "The blank lines matter to the parser.",
    ),
    (
        "short-answer",
        "Yes.",
    ),
    (
        "steps-with-colons",
        "Step 1: Preheat the oven to 180 °C.\nStep 2: Grease the tin.\nStep 3: Bake for 25 minutes.\n\n"
        "Note: ovens vary, so check at 20 minutes.",
    ),
    (
        "markdown-headers",
        "# Project setup\n\n## Requirements\nPython 3.11 or newer.\n\n## Install\n`pip install stopdoctor`\n\n"
        "## Usage\nRun `stopdoctor inspect MODEL`.",
    ),
]
