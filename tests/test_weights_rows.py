"""The numpy-free row path of `inspect --weights` (issue 28): every dtype's bytes give numpy's float32
values, and the judgement in plain Python (norms, baseline, copies, Unsloth's rounding, the
baseline ids) gives what the numpy formulas it replaced give. numpy is the oracle here only."""

from __future__ import annotations

import math
import struct

import numpy as np
import pytest

from stopdoctor.analysis import weights as judged
from stopdoctor.facts.floats import row_of

SPECIALS = [0.0, -0.0, 1.0, -1.5, 65504.0, 1e-8, -1e-40, 3.4e38, float("inf"), -float("inf"), float("nan")]
NUMPY_TYPES = {"F64": "<f8", "F32": "<f4", "F16": "<f2", "I8": "i1", "U8": "u1", "I16": "<i2", "U16": "<u2",
               "I32": "<i4", "U32": "<u4", "I64": "<i8", "U64": "<u8", "BOOL": "?"}


def _same(ours, theirs: np.ndarray) -> bool:
    ours = np.asarray(ours, dtype=np.float32)
    return ours.shape == theirs.shape and np.array_equal(np.isnan(ours), np.isnan(theirs)) \
        and np.array_equal(ours[~np.isnan(ours)], theirs[~np.isnan(theirs)]) \
        and np.array_equal(np.signbit(ours[ours == 0]), np.signbit(theirs[theirs == 0]))


@pytest.mark.parametrize("dtype", sorted(NUMPY_TYPES))
def test_every_dtype_reads_as_numpy_reads_it(dtype):
    rng = np.random.default_rng(1)
    raw = rng.integers(0, 256, 64 * 8, dtype=np.uint8).tobytes()  # every bit pattern: NaNs, infinities, subnormals
    if dtype == "BOOL":
        raw = bytes(b & 1 for b in raw)
    with np.errstate(over="ignore", invalid="ignore"):  # numpy warns of the overflow to infinity we compare
        if dtype in ("F64", "F32", "F16"):
            raw += np.array(SPECIALS, dtype=np.float64).astype(NUMPY_TYPES[dtype]).tobytes()
        theirs = np.frombuffer(raw, dtype=NUMPY_TYPES[dtype]).astype(np.float32)
    assert _same(row_of(raw, dtype), theirs)


def test_bfloat16_and_e5m2_read_as_their_wider_type():
    raw = bytes(range(256)) * 2
    bf16 = (np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16).view(np.float32)
    assert _same(row_of(raw, "BF16"), bf16)
    e5m2 = (np.frombuffer(raw, dtype=np.uint8).astype(np.uint16) << 8).view(np.float16).astype(np.float32)
    assert _same(row_of(raw, "F8_E5M2"), e5m2)


def _rows(count: int, width: int, seed: int) -> dict[int, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {i: (rng.standard_normal(width) * rng.uniform(0.5, 2)).astype(np.float32) for i in range(count)}


def _as_rows(rows: dict[int, np.ndarray]):
    from array import array

    return {i: array("f", row.tobytes()) for i, row in rows.items()}


def _copies_reference(rows: dict[int, np.ndarray]) -> dict[int, set[int]]:
    """Every row's copies by brute force in double precision: the rule, not its partner choice."""
    ids = [i for i, r in rows.items() if np.isfinite(r).all() and r.any()]
    found: dict[int, set[int]] = {}
    for a in ids:
        for b in ids:
            x, y = rows[a].astype(np.float64), rows[b].astype(np.float64)
            nx, ny = np.linalg.norm(x), np.linalg.norm(y)
            if a != b and x @ y / (nx * ny) >= judged.COPY_COSINE and abs(nx - ny) <= judged.COPY_NORM_RATIO * max(nx, ny):
                found.setdefault(a, set()).add(b)
    return found


def _planted(seed: int, count: int = 120, width: int = 48) -> dict[int, np.ndarray]:
    """Random rows with copies planted at cosines on both sides of the threshold, copies whose norm
    is just inside or outside 2 %, a zero row, a NaN row and exact duplicates."""
    rng = np.random.default_rng(seed)
    rows = _rows(count, width, seed)
    for k, target in enumerate(range(0, 40, 2)):
        base = rows[target].astype(np.float64)
        noise = rng.standard_normal(width)
        noise -= noise @ base / (base @ base) * base
        cosine = judged.COPY_COSINE + rng.choice([-1, 1]) * 10.0 ** -rng.uniform(3.5, 8)
        angle = math.acos(min(1.0, cosine))
        vector = math.cos(angle) * base + math.sin(angle) * np.linalg.norm(base) * noise / np.linalg.norm(noise)
        scale = 1 + rng.choice([0.0, 0.0195, 0.0205, -0.0195])
        rows[count + k] = (vector * scale).astype(np.float32)
    rows[count + 50] = np.zeros(width, dtype=np.float32)
    rows[count + 51] = np.full(width, np.nan, dtype=np.float32)
    rows[count + 52] = rows[3].copy()
    rows[count + 53] = rows[3].copy()
    return rows


@pytest.mark.parametrize("seed", range(6))
def test_copies_are_exactly_the_pairs_the_rule_names(seed, monkeypatch):
    """The sweep and the numpy product find the same copies as brute force, each pointing at one
    of its copies, and the two paths choose the same one."""
    rows = _planted(seed)
    reference = _copies_reference(rows)
    swept = judged.copies_of(_as_rows(rows))
    monkeypatch.setattr(judged, "SWEEP_ROWS", 1)
    product = judged.copies_of(_as_rows(rows))
    assert set(swept) == set(reference) and all(swept[a] in reference[a] for a in swept)
    assert swept == product
    assert 10 <= len(swept) < len(rows) // 2  # the plants made copies and not everything is one


def test_rows_statistics_are_numpys():
    rows = _planted(7)
    rows[999] = np.array([1.0, np.nan, -3.0, np.inf, 2.0], dtype=np.float32)
    for token_id, row in _as_rows(rows).items():
        ours = judged.stats(row)
        wide = rows[token_id].astype(np.float64)
        finite = wide[np.isfinite(wide)]
        if finite.size == 0:
            assert ours == judged.RowStats(0.0, 0.0, 0.0, 0.0)
            continue
        assert ours.norm == pytest.approx(np.linalg.norm(finite), rel=1e-12)
        assert (ours.max, ours.min) == (finite.max(), finite.min())
        assert ours.mean_abs == pytest.approx(np.abs(finite).mean(), rel=1e-12)
    numbers = [float(np.linalg.norm(r.astype(np.float64))) for r in _rows(301, 16, 3).values()]
    baseline = judged.baseline_of(_as_rows(_rows(301, 16, 3)), range(301))
    assert baseline is not None and baseline.median_norm == pytest.approx(np.median(numbers), rel=1e-12)
    assert baseline.mad_norm == pytest.approx(np.median(np.abs(np.array(numbers) - np.median(numbers))) * 1.4826, rel=1e-9)


def test_the_baseline_ids_are_numpys_linspace():
    for size in [1, 2, 3, 7, 511, 512, 513, 1000, 32_000, 49_152, 128_256, 151_936, 262_144, 10**9 + 7]:
        for count in (1, 2, 512):
            assert judged._even_ids(size, count) == np.linspace(0, size - 1, count, dtype=np.int64).tolist(), (size, count)


def test_unsloths_rounding_is_numpys():
    rng = np.random.default_rng(5)
    row = np.concatenate([rng.standard_normal(200).astype(np.float32) / 100,
                          np.array([0.0005, -0.0005, 0.0015, 0.0025, 1e-9, 3.4e38, np.inf, np.nan], dtype=np.float32)])
    rows = [row, row.copy(), row + np.float32(4e-4), row + np.float32(6e-4)]
    keys = [judged._rounded(_as_rows({0: r})[0]) for r in rows]
    with np.errstate(over="ignore", invalid="ignore"):
        theirs = [r.round(3).tobytes() for r in rows]
    for a in range(len(rows)):
        for b in range(len(rows)):
            assert (keys[a] == keys[b]) == (theirs[a] == theirs[b]), (a, b)


def test_a_row_holding_nan_is_broken_not_untrained():
    from array import array

    rows = {1: array("f", [0.0, math.nan, 0.0]), 2: array("f", [0.0, 0.0, 0.0]), 3: array("f", [-1.0, -2.0, 0.0])}
    assert judged._untrained_reasons(1, "embedding", rows, None, {}) == ["its embedding row holds NaN or infinite values"]
    assert "all zeros" in judged._untrained_reasons(2, "embedding", rows, None, {})[0]
    assert "never above zero" in judged._untrained_reasons(3, "embedding", rows, None, {})[0]
    assert math.isnan(judged._top(rows[1])) and judged._top(rows[3]) == 0.0
    assert struct.pack("<f", judged._top(rows[2])) == struct.pack("<f", 0.0)
