"""Per-token cost of streaming stop matching: incremental (detokenizer window + tail matcher) vs
the whole-text reference (decode all ids and search the whole text at every step).

Run: python benchmarks/bench_stopmatch.py [path/to/tokenizer.json]
Defaults to $STOPDOCTOR_TEST_MODELS/smollm2-hf/tokenizer.json. Goal: flat incremental cost.
Then the per-chunk cost with one long stop string (`generate --stop` takes any length) against
the obvious held-back computation that tries every prefix length, once per chunk.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from tokenizers import Tokenizer

from stopdoctor.analysis.probe import SAMPLE_ANSWERS
from stopdoctor.actions.generate.stopmatch import IncrementalDetokenizer, StopStringMatcher

STOPS = ["\nUser:", "<|im_end|>", "###END###"]  # none occur: every run goes to the last token


def token_stream(tokenizer: Tokenizer, n: int) -> list[int]:
    answers = [a for _, a in SAMPLE_ANSWERS if not any(s in "\n" + a for s in STOPS)]
    text = "\n\n".join(answers)
    ids = tokenizer.encode(text, add_special_tokens=False).ids
    return (ids * (n // len(ids) + 1))[:n]


def incremental(tokenizer: Tokenizer, ids: list[int]) -> str:
    detok, matcher = IncrementalDetokenizer(tokenizer), StopStringMatcher(STOPS)
    out = []
    for step, token_id in enumerate(ids):
        emitted, hit = matcher.feed(detok.push(token_id), step)
        out.append(emitted)
        assert hit is None
    out.append(matcher.feed(detok.flush(), len(ids) - 1)[0])
    out.append(matcher.flush())
    return "".join(out)


def reference(tokenizer: Tokenizer, ids: list[int]) -> str:
    text = ""
    for k in range(len(ids)):
        text = tokenizer.decode(ids[: k + 1], skip_special_tokens=False)
        assert not any(s in text for s in STOPS)
    return text


def per_token_us(fn, tokenizer: Tokenizer, ids: list[int], repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        fn(tokenizer, ids)
        best = min(best, time.perf_counter() - start)
    return best / len(ids) * 1e6


def main() -> None:
    default = Path(os.environ.get("STOPDOCTOR_TEST_MODELS", Path.home() / ".cache" / "stopdoctor" / "test-models")) / "smollm2-hf" / "tokenizer.json"
    path = Path(sys.argv[1]) if len(sys.argv) > 1 else default
    tokenizer = Tokenizer.from_file(str(path))
    print(f"tokenizer: {path}")
    print(f"{'tokens':>7} {'incremental us/token':>21} {'reference us/token':>19} {'speed-up':>9}")
    for n in (1000, 2000, 4000):
        ids = token_stream(tokenizer, n)
        assert incremental(tokenizer, ids) == tokenizer.decode(ids, skip_special_tokens=False)
        inc = per_token_us(incremental, tokenizer, ids, repeat=5)
        ref = per_token_us(reference, tokenizer, ids, repeat=1)
        print(f"{n:>7} {inc:>21.1f} {ref:>19.1f} {ref / inc:>8.0f}x")


def long_stop(length: int, n: int) -> float:
    """us per fed chunk with one stop string of `length` characters that never completes."""
    stop = "ab" * (length // 2) + "c"
    matcher = StopStringMatcher([stop, "\nUser:"])
    start = time.perf_counter()
    for step in range(n):
        matcher.feed("abx", step)
    return (time.perf_counter() - start) / n * 1e6


def quadratic_held_back(window: str, stop: str) -> int:
    """The obvious held-back computation (the matcher's before): try every prefix length."""
    for k in range(min(len(stop) - 1, len(window)), 0, -1):
        if window.endswith(stop[:k]):
            return k
    return 0


def main_long() -> None:
    print(f"{'stop chars':>10} {'matcher us/chunk':>17} {'obvious held-back us/chunk':>27}")
    for length in (100, 2_000, 20_000):
        ours = long_stop(length, 2000)
        stop = "ab" * (length // 2) + "c"
        window = ("abx" * length)[-(len(stop) - 1):]  # the same stream's tail: no prefix of the stop ends it
        start = time.perf_counter()
        quadratic_held_back(window, stop)
        obvious = (time.perf_counter() - start) * 1e6
        print(f"{length:>10} {ours:>17.1f} {obvious:>27.1f}")


if __name__ == "__main__":
    main()
    main_long()
