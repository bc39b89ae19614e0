"""One difference between two models' analyses, and the differences of their sampling keys: the
data `stopdoctor diff` reports (actions/diff.py finds the rest) and the provenance rules read.

Imports: analysis.core.
"""

from __future__ import annotations

import math

from stopdoctor.analysis.core import Analysis
from stopdoctor.core.records import record


@record
class Difference:
    aspect: str  # template | end_of_turn | stop_ids | declared | special_tokens | sampling | tokenization
    what: str  # the runtime, role, key or probe it is about
    before: object
    after: object
    where_a: str | None  # file and key in A
    where_b: str | None
    stop_relevant: bool
    detail: str = ""  # a rendered diff, for the template
    # worse: B stops where it should no more (a runtime lost the end of turn, the end of turn is no
    # longer one token); better: the reverse; "" otherwise. `why` says it in words.
    effect: str = ""
    why: str = ""


def sampling_differences(a: Analysis, b: Analysis) -> list[Difference]:
    """Each sampling key whose value differs (`after` None: B does not declare it). A GGUF keeps its
    keys as float32: 0.95 there is the same value as 0.95 in generation_config.json."""
    out = []
    for key in sorted(set(a.facts.sampling) | set(b.facts.sampling)):
        sa, sb = a.facts.sampling.get(key), b.facts.sampling.get(key)
        va, vb = (sa.value if sa else None), (sb.value if sb else None)
        if not same_number(va, vb):
            out.append(Difference("sampling", key, va, vb, str(sa.location) if sa else None,
                                  str(sb.location) if sb else None, False))
    return out


def same_number(a: object, b: object) -> bool:
    numbers = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (a, b))
    return math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-9) if numbers else a == b  # type: ignore[arg-type]
