"""Wall time of `stopdoctor inspect --json` against the obvious alternatives, in one run.

    python benchmarks/bench_inspect.py [--runs N] [--models DIR]

Prints medians of N cold runs (separate processes, start-up included) for:
  * `stopdoctor --help`                                   (goal <= 0.3 s)
  * `stopdoctor inspect --json` on the SmolLM2 HF folder   (goal <= 1.0 s, >= 3x faster than ...)
  * a transformers script doing the same reading (AutoTokenizer, GenerationConfig, apply_chat_template)
  * `stopdoctor inspect --json` on the Gemma 3 270M GGUF   (goal <= 0.5 s, faster than ggufdoctor)
  * `ggufdoctor` 0.3.0 on the same file, when installed (`pip install ggufdoctor==0.3.0`)
Models come from fixtures/realmodels.py (STOPDOCTOR_TEST_MODELS or ~/.cache/stopdoctor/test-models).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

TRANSFORMERS_SCRIPT = """
import sys
from transformers import AutoTokenizer, GenerationConfig
folder = sys.argv[1]
tok = AutoTokenizer.from_pretrained(folder)
gen = GenerationConfig.from_pretrained(folder)
text = tok.apply_chat_template([{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}], tokenize=False)
print(gen.eos_token_id, tok.eos_token_id, tok.pad_token_id, tok.convert_tokens_to_ids("<|im_end|>"), len(text))
"""


def median_seconds(command: list[str], runs: int) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        done = subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        times.append(time.perf_counter() - start)
        if done.returncode not in (0, 1):
            raise SystemExit(f"{' '.join(command)} exited {done.returncode}")
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--models", type=Path, default=Path(os.environ.get("STOPDOCTOR_TEST_MODELS", Path.home() / ".cache/stopdoctor/test-models")))
    args = parser.parse_args()
    stopdoctor = [sys.executable, "-m", "stopdoctor"]
    hf = args.models / "smollm2-hf"
    gguf = args.models / "gemma-3-270m-q4_k_m.gguf"
    rows = [("stopdoctor --help", median_seconds([*stopdoctor, "--help"], args.runs))]
    if hf.is_dir():
        ours = median_seconds([*stopdoctor, "inspect", "--json", str(hf)], args.runs)
        theirs = median_seconds([sys.executable, "-c", TRANSFORMERS_SCRIPT, str(hf)], args.runs)
        rows += [("stopdoctor inspect --json smollm2-hf", ours), ("transformers script, same folder", theirs)]
        print(f"# SmolLM2 HF folder: stopdoctor is {theirs / ours:.1f}x faster than the transformers script")
    if gguf.is_file():
        ours = median_seconds([*stopdoctor, "inspect", "--json", str(gguf)], args.runs)
        rows.append(("stopdoctor inspect --json gemma GGUF", ours))
        ggufdoctor = shutil.which("ggufdoctor") or shutil.which("ggufdoctor", path=str(Path(sys.executable).parent))
        if ggufdoctor:
            theirs = median_seconds([ggufdoctor, "--fail-on", "never", str(gguf)], args.runs)
            rows.append(("ggufdoctor 0.3.0, same file", theirs))
            print(f"# Gemma GGUF: stopdoctor is {theirs / ours:.1f}x faster than ggufdoctor")
    for name, seconds in rows:
        print(f"{name:<40} {seconds * 1000:8.0f} ms (median of {args.runs})")


if __name__ == "__main__":
    main()
