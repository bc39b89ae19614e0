"""`stopdoctor inspect --weights` against the obvious alternatives, in one run.

    python benchmarks/bench_weights.py [--runs N]

Each command runs in its own process (start-up included); wall time is the median of N runs,
peak RSS the child's `ru_maxrss`:
  * `stopdoctor inspect --weights --json` on the SmolLM2 HF folder
  * a transformers script reading the same rows: AutoModelForCausalLM.from_pretrained, then the
    embedding rows of the end-of-turn, eos, bos, pad ids and 256 ordinary ids
    (goal: inspect --weights >= 20x faster, peak RSS < 200 MB)
  * `stopdoctor inspect --weights --json` on the Gemma 3 270M GGUF (262k vocabulary; goal < 1 s)
  * gguf-py reading that GGUF (GGUFReader) and de-quantising the whole token_embd to get the rows
Models come from fixtures/realmodels.py (STOPDOCTOR_TEST_MODELS or ~/.cache/stopdoctor/test-models).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

TRANSFORMERS_SCRIPT = """
import sys, time
import torch
from transformers import AutoModelForCausalLM
start = time.perf_counter()
model = AutoModelForCausalLM.from_pretrained(sys.argv[1], dtype=torch.float32)
ids = [0, 1, 2] + list(range(17, 49152, 192))
rows = model.get_input_embeddings().weight[ids].detach()
norm = model.get_output_embeddings().weight[2].norm().item()
print(time.perf_counter() - start)
"""

GGUF_SCRIPT = """
import sys
import gguf
from gguf.quants import dequantize
reader = gguf.GGUFReader(sys.argv[1])
embd = next(t for t in reader.tensors if t.name == "token_embd.weight")
rows = dequantize(embd.data, embd.tensor_type)[[0, 1, 2, 106]]
print(rows.shape)
"""


def run(command: list[str], runs: int) -> tuple[float, float]:
    """(median wall seconds, max peak RSS in MB) over `runs` separate processes."""
    times, peaks = [], []
    for _ in range(runs):
        start = time.perf_counter()
        process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        _, status, usage = os.wait4(process.pid, 0)
        times.append(time.perf_counter() - start)
        if os.waitstatus_to_exitcode(status) not in (0, 1):
            raise SystemExit(f"failed: {' '.join(command)}")
        peaks.append(usage.ru_maxrss / 1024)
    return statistics.median(times), max(peaks)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from fixtures.realmodels import default_cache_dir

    models = default_cache_dir()
    folder, gemma = models / "smollm2-hf", models / "gemma-3-270m-q4_k_m.gguf"
    python = sys.executable
    stopdoctor = [python, "-m", "stopdoctor", "inspect", "--weights", "--json"]
    print(f"{'what':<60} {'median s':>9} {'peak MB':>8}")
    ours, our_rss = run(stopdoctor + [str(folder)], args.runs)
    print(f"{'stopdoctor inspect --weights (SmolLM2 HF folder)':<60} {ours:9.2f} {our_rss:8.0f}")
    theirs, their_rss = run([python, "-c", TRANSFORMERS_SCRIPT, str(folder)], args.runs)
    print(f"{'transformers from_pretrained + the same rows':<60} {theirs:9.2f} {their_rss:8.0f}")
    print(f"{'  -> stopdoctor is':<60} {theirs / ours:8.1f}x faster, {their_rss / our_rss:.1f}x less memory")
    ours_g, rss_g = run(stopdoctor + [str(gemma)], args.runs)
    print(f"{'stopdoctor inspect --weights (Gemma 3 270M GGUF, 262k vocab)':<60} {ours_g:9.2f} {rss_g:8.0f}")
    theirs_g, their_rss_g = run([python, "-c", GGUF_SCRIPT, str(gemma)], args.runs)
    print(f"{'gguf-py GGUFReader + de-quantised token_embd':<60} {theirs_g:9.2f} {their_rss_g:8.0f}")
    print(f"{'  -> stopdoctor is':<60} {theirs_g / ours_g:8.1f}x faster")
    # the row reading alone, in process (no interpreter start-up, no imports, no template analysis)
    from stopdoctor import api

    inner = statistics.median(float(subprocess.run([python, "-c", TRANSFORMERS_SCRIPT, str(folder)], capture_output=True,
                                                   text=True, check=True).stdout.split()[-1]) for _ in range(args.runs))
    print(f"{'in process, imports done: from_pretrained + the rows':<60} {inner:9.3f}")
    for spec in (folder, gemma):
        result = api.inspect_model(str(spec), weights=True)
        seconds = statistics.median(api.with_weights(result).weights.rows.seconds for _ in range(args.runs))
        print(f"{'in process: stopdoctor reads the rows of ' + spec.name:<60} {seconds:9.3f}")
        if spec == folder:
            print(f"{'  -> stopdoctor is':<60} {inner / seconds:8.0f}x faster")


if __name__ == "__main__":
    main()
