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
Imports: numpy, analysis.core, facts.weights.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import numpy as np

from stopdoctor.analysis.core import Analysis
from stopdoctor.facts.weights import WeightRows
from stopdoctor.runtimes.stops import tokenizer_eos

ZERO_MAX = 1e-16  # Unsloth's eps for "untrained": the row's signed maximum
LOW_NORM_FRACTION = 0.25
LOW_NORM_DEVIATIONS = 8.0
COPY_COSINE = 0.9995
COPY_NORM_RATIO = 0.02
BASELINE_ROWS = 256
MAX_CANDIDATES = 2048
ROLES = ("end-of-turn", "eos", "bos", "pad", "stop", "header")


@dataclass(frozen=True)
class RowStats:
    norm: float
    max: float
    min: float
    mean_abs: float


@dataclass(frozen=True)
class Baseline:
    """The ordinary rows' norms: how a trained row looks in this matrix."""

    rows: int
    median_norm: float
    mad_norm: float  # median absolute deviation, scaled to a standard deviation (x 1.4826)
    min_norm: float
    max_norm: float


@dataclass(frozen=True)
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


@dataclass(frozen=True)
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


@dataclass(frozen=True)
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
        for token_id in np.linspace(0, size - 1, BASELINE_ROWS * 2, dtype=np.int64).tolist():
            if token_id not in excluded and token_id not in baseline:
                baseline.append(token_id)
        baseline = baseline[:: max(1, len(baseline) // BASELINE_ROWS)][:BASELINE_ROWS]
    return RowPlan({i: tuple(r) for i, r in roles.items()}, candidates, tuple(baseline), targets)


def stats(row: np.ndarray) -> RowStats:
    """A row's statistics over its finite values: a row holding NaN or infinities is judged broken
    by `_untrained_reasons`, and its numbers stay numbers a JSON document can hold."""
    with np.errstate(invalid="ignore", over="ignore"):  # a NaN row is judged, not warned about
        row = row.astype(np.float64)
    finite = row[np.isfinite(row)]
    if finite.size == 0:
        return RowStats(0.0, 0.0, 0.0, 0.0)
    return RowStats(float(np.linalg.norm(finite)), float(finite.max()), float(finite.min()), float(np.abs(finite).mean()))


def _median(values: np.ndarray) -> float:
    """np.median's value (the mean of the middle two for an even count) without its import of
    numpy.ma (~20 ms of a cold `inspect --weights`)."""
    ordered = np.sort(values)
    middle = ordered.size // 2
    return float(ordered[middle] if ordered.size % 2 else (ordered[middle - 1] + ordered[middle]) / 2)


def baseline_of(rows: Mapping[int, np.ndarray], ids: Iterable[int]) -> Baseline | None:
    norms = np.array([np.linalg.norm(rows[i].astype(np.float64)) for i in ids if i in rows])
    norms = norms[np.isfinite(norms)]
    if norms.size < 8:
        return None
    median = _median(norms)
    mad = _median(np.abs(norms - median)) * 1.4826
    return Baseline(int(norms.size), median, mad, float(norms.min()), float(norms.max()))


def _untrained_reasons(token_id: int, matrix: str, rows: Mapping[int, np.ndarray], baseline: Baseline | None,
                       copies: Mapping[int, int]) -> list[str]:
    row = rows[token_id]
    if not np.isfinite(row).all():
        return [f"its {matrix} row holds NaN or infinite values"]
    top = float(row.max())
    if top <= ZERO_MAX:
        return [f"its {matrix} row is {'all zeros' if not row.any() else 'never above zero'} "
                f"(max {top:.3g} <= 1e-16: Unsloth's untrained test)"]
    reasons: list[str] = []
    norm = float(np.linalg.norm(row.astype(np.float64)))
    if baseline is not None and norm < LOW_NORM_FRACTION * baseline.median_norm \
            and norm < baseline.median_norm - LOW_NORM_DEVIATIONS * baseline.mad_norm:
        reasons.append(f"its {matrix} row's norm {norm:.3g} is far below the ordinary rows' "
                       f"(median {baseline.median_norm:.3g}, lowest {baseline.min_norm:.3g})")
    if token_id in copies:
        reasons.append(f"its {matrix} row is a copy of id {copies[token_id]}'s (cosine >= {COPY_COSINE}, same norm): "
                       "trained tokens never share a vector")
    return reasons


def copies_of(rows: Mapping[int, np.ndarray]) -> dict[int, int]:
    """id -> the id whose row it copies (the most similar such row), for every row that copies one."""
    ids = [i for i, row in rows.items() if np.isfinite(row).all() and row.any()]
    if len(ids) < 2:
        return {}
    matrix = np.stack([rows[i] for i in ids]).astype(np.float32)
    norms = np.linalg.norm(matrix, axis=1)
    unit = matrix / norms[:, None]
    cosines = unit @ unit.T
    found: dict[int, tuple[float, int]] = {}
    for a, b in np.argwhere(cosines >= COPY_COSINE).tolist():  # few pairs: only near-identical rows
        if a != b and abs(norms[a] - norms[b]) <= COPY_NORM_RATIO * max(norms[a], norms[b]):
            if a not in found or cosines[a, b] > found[a][0]:
                found[a] = (float(cosines[a, b]), b)
    return {ids[a]: ids[b] for a, (_, b) in found.items()}


def _unsloth(token_id: int, weights: WeightRows, candidates: Iterable[int]) -> bool:
    """Unsloth's combined verdict: embedding max <= eps, and the output row max <= eps or one of
    >= 2 identical rows (rounded to 3 decimals) among the rows whose embedding is <= eps."""
    embedding = weights.embedding_rows
    if token_id not in embedding or float(embedding[token_id].max()) > ZERO_MAX:
        return False
    if weights.tied:
        return True
    output = weights.output_rows
    if token_id not in output:
        return True
    if float(output[token_id].max()) <= ZERO_MAX:
        return True
    bad = [i for i in candidates if i in embedding and i in output and float(embedding[i].max()) <= ZERO_MAX]
    counts = Counter(output[i].round(3).tobytes() for i in bad)
    return counts[output[token_id].round(3).tobytes()] >= 2


def judge_rows(plan: RowPlan, weights: WeightRows, texts: Mapping[int, str | None]) -> WeightsReport:
    matrices = {"embedding": weights.embedding_rows}
    if not weights.tied:
        matrices["output"] = weights.output_rows
    baselines = {name: b for name, rows in matrices.items() if (b := baseline_of(rows, plan.baseline)) is not None}
    copies = {name: copies_of(rows) for name, rows in matrices.items()}
    everything = sorted({*plan.watched, *plan.candidates})
    watched = []
    for token_id in sorted(plan.watched):
        if token_id not in weights.embedding_rows:
            continue
        reasons: list[str] = []
        for name, rows in matrices.items():
            if token_id in rows:
                reasons += _untrained_reasons(token_id, name, rows, baselines.get(name), copies[name])
        copy = next((copies[name][token_id] for name in matrices if token_id in copies[name]), None)
        watched.append(WatchedRow(
            token_id, texts.get(token_id), plan.watched[token_id],
            stats(weights.embedding_rows[token_id]),
            stats(weights.output_rows[token_id]) if token_id in weights.output_rows else None,
            bool(reasons), tuple(reasons), _unsloth(token_id, weights, everything), copy))
    untrained_candidates = []
    for token_id in plan.candidates:
        for name, rows in matrices.items():
            if token_id in rows and _untrained_reasons(token_id, name, rows, baselines.get(name), copies[name]):
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
    with np.errstate(invalid="ignore", over="ignore"):  # NaN/Inf rows are judged (broken), not warned about
        return judge_rows(plan, weights, {i: vocab.text_of(i) for i in plan.watched})
