"""Wall time of `probe_stop` in-process: 10 stop strings x all default contexts + one turn ending,
with the false-positive scan of the built-in sample answers, on the SmolLM2 tokenizer.

Run: python benchmarks/bench_probe.py [path/to/tokenizer.json]
Defaults to $STOPDOCTOR_TEST_MODELS/smollm2-hf/tokenizer.json. CLI start-up is not included.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from tokenizers import Tokenizer

from stopdoctor.analysis.probe import DEFAULT_CONTEXTS, probe_stop

STOPS = ["User:", "\nUser:", "\n\nUser:", "<|im_end|>", "Human:", "\n\nHuman:", "###", "</s>", "Subject:", "Q:"]


def main() -> None:
    default = Path(os.environ.get("STOPDOCTOR_TEST_MODELS", Path.home() / ".cache" / "stopdoctor" / "test-models")) / "smollm2-hf" / "tokenizer.json"
    path = Path(sys.argv[1]) if len(sys.argv) > 1 else default
    start = time.perf_counter()
    tokenizer = Tokenizer.from_file(str(path))
    load_s = time.perf_counter() - start

    timings = []
    for _ in range(5):
        start = time.perf_counter()
        probes = probe_stop(tokenizer, STOPS, turn_endings=["<|im_end|>\n"], user_header="<|im_start|>user\n")
        timings.append(time.perf_counter() - start)
    contexts = len(probes[0].contexts)
    print(f"tokenizer: {path}")
    print(f"tokenizer load: {load_s * 1000:.1f} ms")
    print(
        f"probe_stop: {len(STOPS)} stops x {contexts} contexts ({len(DEFAULT_CONTEXTS)} default + 1 turn ending), "
        f"{probes[0].samples_checked} sample answers: best {min(timings) * 1000:.1f} ms, "
        f"first {timings[0] * 1000:.1f} ms"
    )
    print(f"id-match misses per stop: {', '.join(f'{p.stop!r}={p.id_match_misses}' for p in probes)}")


if __name__ == "__main__":
    main()
