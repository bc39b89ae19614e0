"""Will the weights ever produce the end-of-turn token? The untrained-row verdict.

Which rows matter (`rows_to_read`): the end-of-turn ids, eos, bos, pad and the turn headers'
tokens (the watched ids), every other special/added token (the candidates: reserved rows, where
untrained rows live) and an even sample of ordinary tokens (the baseline). `judge_rows` then
calls a watched row untrained when, in the embedding or the output matrix:

- its signed maximum is <= 1e-16 (Unsloth's `fix_untrained_tokens` test A: zero, or never pushed
  above zero), or
- its norm is far below the ordinary rows' (under a quarter of their median and more than 8
  robust deviations below it): a row left near its initialisation while the rest grew, or
- it is a copy of another row (cosine >= 0.9995, norms within 2 %): trained tokens never share a
  vector, untrained ones do (SmolLM2's reserved ids 5-16 are near-identical; a row copied from
  one of them is just as untrained).

Unsloth's own combined verdict (embedding test A, and the output row either test A too or one of
at least two identical rows, rounded to 3 decimals, among those candidates: test B) is reported
beside it for each watched id.

The rows are `array('f')` (facts.floats) and judged with the standard library: norms by
`math.hypot` in double precision, copies by a sweep that computes the cosine of only the pairs
whose unit vectors lie close on a few coordinates (exact: a pair it skips cannot reach the cosine),
or, for more than `SWEEP_ROWS` rows, by numpy's matrix product (imported then). A safetensors
model's `inspect --weights` imports no numpy.
Imports: analysis.core, facts.weights, runtimes.stops; numpy for many rows.
"""

from __future__ import annotations

import math
import operator
from array import array
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence

from stopdoctor.analysis.core import Analysis
from stopdoctor.core.records import record
from stopdoctor.facts.weights import WeightRows
from stopdoctor.runtimes.stops import tokenizer_eos

ZERO_MAX = 1e-16  # Unsloth's eps for "untrained": the row's signed maximum
LOW_NORM_FRACTION = 0.25
LOW_NORM_DEVIATIONS = 8.0
COPY_COSINE = 0.9995
COPY_NORM_RATIO = 0.02
BASELINE_ROWS = 256
MAX_CANDIDATES = 2048
# Up to this many rows the copies are found by the sweep (SmolLM2's 273: ~10 ms), past it by
# numpy's matrix product (Gemma's 2,309 rows: the sweep ~1.4 s, numpy ~0.1 s with its import).
SWEEP_ROWS = 512
_SWEEP_KEYS = 8  # coordinates the sweep compares before a whole cosine
_SWEEP_SAMPLE = 32  # rows whose spread picks those coordinates
ROLES = ("end-of-turn", "eos", "bos", "pad", "stop", "header")


@record
class RowStats:
    norm: float
    max: float
    min: float
    mean_abs: float


@record
class Baseline:
    """The ordinary rows' norms: how a trained row looks in this matrix."""

    rows: int
    median_norm: float
    mad_norm: float  # median absolute deviation, scaled to a standard deviation (x 1.4826)
    min_norm: float
    max_norm: float


@record
class WatchedRow:
    """One row that matters for stopping, its statistics and the verdict on it."""

    id: int
    text: str | None
    roles: tuple[str, ...]
    embedding: RowStats | None
    output: RowStats | None  # None when tied (the same vector as `embedding`)
    untrained: bool
    reasons: tuple[str, ...]
    unsloth_untrained: bool
    copy_of: int | None = None


@record
class WeightsReport:
    rows: WeightRows
    watched: tuple[WatchedRow, ...]
    baseline: Mapping[str, Baseline]  # "embedding", and "output" when not tied
    candidates: int  # special/added rows read beside the watched ones
    untrained_candidates: tuple[int, ...]  # of those, the ones that look untrained (reserved rows)
    targets: tuple[int, ...]  # the ids the model must emit to stop (end-of-turn, else eos)

    @property
    def untrained_targets(self) -> list[WatchedRow]:
        return [w for w in self.watched if w.id in self.targets and w.untrained]


@record
class RowPlan:
    watched: dict[int, tuple[str, ...]]  # id -> roles
    candidates: tuple[int, ...]
    baseline: tuple[int, ...]
    targets: tuple[int, ...]

    @property
    def ids(self) -> list[int]:
        return sorted({*self.watched, *self.candidates, *self.baseline})

    @property
    def in_order(self) -> list[int]:
        """The ids in the order they matter (watched, baseline, candidates): a byte budget cuts
        the last."""
        return list(dict.fromkeys([*sorted(self.watched), *self.baseline, *self.candidates]))


def stop_targets(analysis: Analysis) -> tuple[int, ...]:
    """The ids the model must emit to end a turn: the template's end-of-turn tokens, or for a
    model without one (a base model) the eos it ends text with."""
    ids = analysis.required_stop_ids()
    if ids:
        return tuple(ids)
    eos = tokenizer_eos(analysis.facts) or analysis.facts.declared_for("eos")
    return tuple(dict.fromkeys(d.id for d in eos if d.id is not None))


def rows_to_read(analysis: Analysis) -> RowPlan:
    facts = analysis.facts
    vocab = facts.vocab
    size = vocab.size or 0
    roles: dict[int, list[str]] = {}

    def add(token_id: int | None, role: str) -> None:
        if token_id is not None and 0 <= token_id < max(size, token_id + 1):
            found = roles.setdefault(token_id, [])
            if role not in found:
                found.append(role)

    targets = stop_targets(analysis)
    for token_id in analysis.required_stop_ids():
        add(token_id, "end-of-turn")
    for declared in facts.declared:
        if declared.role in ("eos", "bos", "pad"):
            add(declared.id, declared.role)
    for token_id in targets:
        add(token_id, "eos" if "end-of-turn" not in roles.get(token_id, ()) else "end-of-turn")
    for runtime in analysis.stops:  # what any runtime stops on (llama.cpp's <end_of_turn> for a base Gemma)
        for stop in runtime.stops:
            if analysis.stop_hazard(stop.id) is None:
                add(stop.id, "stop")
    specials = vocab.special_tokens
    for header in analysis.turn_headers.values():
        for text, token_id in specials.items():
            if text in header:
                add(token_id, "header")
    special_ids = sorted((vocab.special_ids | vocab.added_ids) - roles.keys())
    candidates = tuple(special_ids[:MAX_CANDIDATES])
    excluded = vocab.special_ids | vocab.added_ids | roles.keys()
    baseline: list[int] = []
    if size:
        for token_id in _even_ids(size, BASELINE_ROWS * 2):
            if token_id not in excluded and token_id not in baseline:
                baseline.append(token_id)
        baseline = baseline[:: max(1, len(baseline) // BASELINE_ROWS)][:BASELINE_ROWS]
    return RowPlan({i: tuple(r) for i, r in roles.items()}, candidates, tuple(baseline), targets)


def _even_ids(size: int, count: int) -> list[int]:
    """`numpy.linspace(0, size - 1, count, dtype=int64)`: the same ids, computed as it does (i x
    step in double precision, truncated; the last exactly size - 1)."""
    if count == 1:
        return [0]
    step = (size - 1) / (count - 1)
    return [int(i * step) for i in range(count - 1)] + [size - 1]


def _finite_norm(row: Sequence[float]) -> float:
    """The row's Euclidean norm in double precision: NaN or infinite when the row holds a NaN or
    an infinity (float32 values cannot overflow it)."""
    return math.hypot(*row)


def _top(row: Sequence[float]) -> float:
    """numpy's `row.max()`: NaN when the row holds one."""
    if not math.isfinite(_finite_norm(row)) and any(value != value for value in row):
        return math.nan
    return max(row)


def stats(row: Sequence[float]) -> RowStats:
    """A row's statistics over its finite values: a row holding NaN or infinities is judged broken
    by `_untrained_reasons`, and its numbers stay numbers a JSON document can hold."""
    norm = _finite_norm(row)
    finite = row
    if not math.isfinite(norm):
        finite = [value for value in row if math.isfinite(value)]
        norm = _finite_norm(finite)
    if not finite:
        return RowStats(0.0, 0.0, 0.0, 0.0)
    return RowStats(norm, max(finite), min(finite), math.fsum(map(abs, finite)) / len(finite))


def _median(values: Sequence[float]) -> float:
    """The mean of the middle two for an even count (numpy's median)."""
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


def norms_of(rows: Mapping[int, Sequence[float]]) -> dict[int, float]:
    """Each row's norm (`_finite_norm`), computed once for the judgement's three uses of it."""
    return {token_id: _finite_norm(row) for token_id, row in rows.items()}


def baseline_of(rows: Mapping[int, Sequence[float]], ids: Iterable[int],
                norms: Mapping[int, float] | None = None) -> Baseline | None:
    known = norms_of(rows) if norms is None else norms
    found = [norm for i in ids if i in rows and math.isfinite(norm := known[i])]
    if len(found) < 8:
        return None
    median = _median(found)
    mad = _median([abs(norm - median) for norm in found]) * 1.4826
    return Baseline(len(found), median, mad, min(found), max(found))


def _untrained_reasons(token_id: int, matrix: str, rows: Mapping[int, Sequence[float]], baseline: Baseline | None,
                       copies: Mapping[int, int], norm: float | None = None) -> list[str]:
    row = rows[token_id]
    norm = _finite_norm(row) if norm is None else norm
    if not math.isfinite(norm):
        return [f"its {matrix} row holds NaN or infinite values"]
    top = max(row)
    if top <= ZERO_MAX:
        return [f"its {matrix} row is {'all zeros' if not any(row) else 'never above zero'} "
                f"(max {top:.3g} <= 1e-16: Unsloth's untrained test)"]
    reasons: list[str] = []
    if baseline is not None and norm < LOW_NORM_FRACTION * baseline.median_norm \
            and norm < baseline.median_norm - LOW_NORM_DEVIATIONS * baseline.mad_norm:
        reasons.append(f"its {matrix} row's norm {norm:.3g} is far below the ordinary rows' "
                       f"(median {baseline.median_norm:.3g}, lowest {baseline.min_norm:.3g})")
    if token_id in copies:
        reasons.append(f"its {matrix} row is a copy of id {copies[token_id]}'s (cosine >= {COPY_COSINE}, same norm): "
                       "trained tokens never share a vector")
    return reasons


def copies_of(rows: Mapping[int, Sequence[float]], known: Mapping[int, float] | None = None) -> dict[int, int]:
    """id -> the id whose row it copies, for every row that copies one: a finite, non-zero row
    whose cosine with it is >= COPY_COSINE and whose norm is within COPY_NORM_RATIO of its. Of
    several, the most similar (cosines compared to 12 decimals, then the lowest id)."""
    ids, vectors, norms = [], [], []
    for token_id, row in rows.items():
        norm = _finite_norm(row) if known is None else known[token_id]
        if math.isfinite(norm) and norm > 0:
            ids.append(token_id)
            vectors.append(row)
            norms.append(norm)
    if len(ids) < 2:
        return {}
    pairs = _close_pairs(vectors, norms) if len(ids) <= SWEEP_ROWS else _close_pairs_numpy(vectors, norms)
    best: dict[int, tuple[float, int]] = {}  # row -> (cosine, -id of its copy): the highest, then the lowest id
    for a, b, cosine in pairs:
        for one, other in ((a, b), (b, a)):
            if abs(norms[one] - norms[other]) > COPY_NORM_RATIO * max(norms[one], norms[other]):
                continue
            key = (round(cosine, 12), -ids[other])
            if one not in best or key > best[one]:
                best[one] = key
    return {ids[one]: -negated for one, (_, negated) in best.items()}


def _close_pairs(vectors: list[Sequence[float]], norms: list[float]) -> list[tuple[int, int, float]]:
    """(a, b, cosine) for every pair a < b with cosine >= COPY_COSINE. Two unit vectors that
    close lie within sqrt(2 (1 - COPY_COSINE)) of each other, so within it on every coordinate:
    sorted on the coordinate that varies most, a row is compared only with the rows after it
    within that distance, first on a few more such coordinates (squared differences summed, the
    same bound), then by its whole cosine."""
    step = max(1, len(vectors) // _SWEEP_SAMPLE)
    sample = [[value / norms[r] for value in vectors[r]] for r in range(0, len(vectors), step)]
    spread = []
    for j, column in enumerate(zip(*sample)):  # each coordinate's sum of squared deviations
        total = sum(column)
        spread.append((sum(map(operator.mul, column, column)) - total * total / len(column), -j))
    keys = [-j for _, j in sorted(spread, reverse=True)[:_SWEEP_KEYS]]
    units = [[vector[j] / norm for j in keys] for vector, norm in zip(vectors, norms)]
    order = sorted(range(len(vectors)), key=lambda r: units[r][0])
    reach = math.sqrt(2 * (1 - COPY_COSINE)) * (1 + 1e-9) + 1e-12
    bound = reach * reach
    pairs = []
    for place, a in enumerate(order):
        near = units[a]
        first, second = near[0], near[1] if len(near) > 1 else 0.0
        for b in order[place + 1:]:
            other = units[b]
            if other[0] - first > reach:
                break
            if len(other) > 1 and abs(other[1] - second) > reach:
                continue
            if sum((x - y) * (x - y) for x, y in zip(near, other)) > bound:
                continue
            cosine = math.fsum(map(operator.mul, vectors[a], vectors[b])) / (norms[a] * norms[b])
            if cosine >= COPY_COSINE:
                pairs.append((min(a, b), max(a, b), cosine))
    return pairs


def _close_pairs_numpy(vectors: list[Sequence[float]], norms: list[float]) -> list[tuple[int, int, float]]:
    """`_close_pairs` by one matrix product, in double precision."""
    import numpy as np

    matrix = np.frombuffer(b"".join(array("f", vector).tobytes() for vector in vectors),
                           dtype=np.float32).reshape(len(vectors), -1).astype(np.float64)
    unit = matrix / np.array(norms)[:, None]
    cosines = unit @ unit.T
    return [(a, b, float(cosines[a, b])) for a, b in np.argwhere(cosines >= COPY_COSINE).tolist() if a < b]


def _rounded(row: Sequence[float]) -> tuple[object, ...]:
    """numpy's `row.round(3)` of a float32 row, as a key: x 1000 in float32, rounded half to even
    (a NaN or an infinity stays as it is)."""
    return tuple(round(value) if math.isfinite(value) else repr(value) for value in array("f", [v * 1000.0 for v in row]))


def _unsloth(token_id: int, weights: WeightRows, bad_outputs: Counter) -> bool:
    """Unsloth's combined verdict: embedding max <= eps, and the output row max <= eps or one of
    >= 2 identical rows (rounded to 3 decimals) among the rows whose embedding is <= eps
    (`bad_outputs`: those rows' rounded output rows, counted)."""
    embedding = weights.embedding_rows
    if token_id not in embedding or _top(embedding[token_id]) > ZERO_MAX:
        return False
    if weights.tied:
        return True
    output = weights.output_rows
    if token_id not in output:
        return True
    if _top(output[token_id]) <= ZERO_MAX:
        return True
    return bad_outputs[_rounded(output[token_id])] >= 2


def _bad_outputs(weights: WeightRows, candidates: Iterable[int]) -> Counter:
    embedding, output = weights.embedding_rows, weights.output_rows
    if weights.tied:
        return Counter()
    return Counter(_rounded(output[i]) for i in candidates
                   if i in embedding and i in output and _top(embedding[i]) <= ZERO_MAX)


def judge_rows(plan: RowPlan, weights: WeightRows, texts: Mapping[int, str | None]) -> WeightsReport:
    matrices = {"embedding": weights.embedding_rows}
    if not weights.tied:
        matrices["output"] = weights.output_rows
    norms = {name: norms_of(rows) for name, rows in matrices.items()}
    baselines = {name: b for name, rows in matrices.items()
                 if (b := baseline_of(rows, plan.baseline, norms[name])) is not None}
    copies = {name: copies_of(rows, norms[name]) for name, rows in matrices.items()}
    bad_outputs = _bad_outputs(weights, sorted({*plan.watched, *plan.candidates}))
    watched = []
    for token_id in sorted(plan.watched):
        if token_id not in weights.embedding_rows:
            continue
        reasons: list[str] = []
        for name, rows in matrices.items():
            if token_id in rows:
                reasons += _untrained_reasons(token_id, name, rows, baselines.get(name), copies[name], norms[name][token_id])
        copy = next((copies[name][token_id] for name in matrices if token_id in copies[name]), None)
        watched.append(WatchedRow(
            token_id, texts.get(token_id), plan.watched[token_id],
            stats(weights.embedding_rows[token_id]),
            stats(weights.output_rows[token_id]) if token_id in weights.output_rows else None,
            bool(reasons), tuple(reasons), _unsloth(token_id, weights, bad_outputs), copy))
    untrained_candidates = []
    for token_id in plan.candidates:
        for name, rows in matrices.items():
            if token_id in rows and _untrained_reasons(token_id, name, rows, baselines.get(name), copies[name],
                                                       norms[name][token_id]):
                untrained_candidates.append(token_id)
                break
    return WeightsReport(weights, tuple(watched), baselines, len([i for i in plan.candidates if i in weights.embedding_rows]),
                         tuple(untrained_candidates), plan.targets)


def analyze_weights(analysis: Analysis) -> WeightsReport:
    """Read the rows that matter from the model's weight files and judge them."""
    from stopdoctor.facts.weights import read_weight_rows

    plan = rows_to_read(analysis)
    weights = read_weight_rows(analysis.facts.source, plan.in_order, analysis.facts.gguf)
    vocab = analysis.facts.vocab
    return judge_rows(plan, weights, {i: vocab.text_of(i) for i in plan.watched})
