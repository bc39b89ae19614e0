"""Reasoning rows in training data: each thought the rendered example holds (`<think>…</think>`,
from `reasoning_content` in an assistant message or written in its content), whether its close
marker is trained when its text is, and whether an earlier turn keeps its thought.

Judged in characters on the rendered text, as the collators label it: `full` and `pad-id` train
every character (the close is never the pad token: it is refused as a stop and an end of turn);
`assistant-only` trains what overlaps a `{% generation %}` block; `completion-only` what follows the
rendered prompt. Axolotl's turn masks are left unjudged (precision first).

Imports: template.reasoning (the structure, as data), labels.prepare.
"""

from __future__ import annotations


from stopdoctor.core.records import record
from stopdoctor.template.reasoning import ReasoningStructure
from stopdoctor.labels.prepare import PreparedExample


@record
class ThoughtVerdict:
    thoughts: int  # thoughts in the rendered example
    close_untrained: int  # thoughts whose text is trained but whose close marker is masked
    earlier_kept: int  # thoughts of turns a later user turn follows (the template at inference drops them)


def judge_thoughts(p: PreparedExample, reasoning: ReasoningStructure, user_header: str | None) -> ThoughtVerdict | None:
    """None when nothing is to be judged: the model shows no thought, or the example holds none."""
    if reasoning.style != "think-tags" or not reasoning.open or not reasoning.close:
        return None
    text, open_, close = p.text, reasoning.open, reasoning.close
    regions = []
    at = text.find(open_)
    while at >= 0:
        end = text.find(close, at + len(open_))
        if end < 0:
            break
        regions.append((at, end))
        at = text.find(open_, end + len(close))
    if not regions:
        return None
    untrained = 0
    for start, end in regions:
        body = _trained(p, start + len(open_), end)
        if body and _trained(p, end, end + len(close)) is False:
            untrained += 1
    later_user = text.rfind(user_header) if user_header else -1
    earlier = sum(1 for _, end in regions if later_user > end)
    return ThoughtVerdict(len(regions), untrained, earlier)


def _trained(p: PreparedExample, start: int, end: int) -> bool | None:
    """Whether the collator trains any character of [start, end); None when it is not judged here."""
    if p.collator in ("full", "pad-id"):
        return True
    if p.collator == "assistant-only":
        return any(s < end and start < e for s, e in p.generation)
    if p.collator == "completion-only":
        if p.prompt_text is None:  # a text row: all of it is the completion
            return True
        if p.text.startswith(p.prompt_text):
            return end > len(p.prompt_text)
    return None
