"""`stopdoctor inspect --weights` against the obvious alternatives, in one run.

    python benchmarks/bench_weights.py [--runs N] [--no-bytecode-cache] [--quick]

Each command runs in its own process (start-up included), after one untimed warm-up run; wall
time is the median (and the fastest) of N runs, peak RSS the child's `ru_maxrss`. The children
keep compiled bytecode, as any installed package does: PYTHONDONTWRITEBYTECODE is dropped and
the .pyc files go to a temporary PYTHONPYCACHEPREFIX (nothing is written into the checkout);
`--no-bytecode-cache` keeps the caller's environment instead (with PYTHONDONTWRITEBYTECODE=1,
every run compiles stopdoctor's ~300 modules again: ~0.3 s). `--quick`: only the SmolLM2 rows and
the Gemma command (no gguf-py, no in-process timings).
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
import tempfile
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


def run(command: list[str], runs: int, env: dict[str, str]) -> tuple[float, float, float]:
    """(median wall seconds, fastest, max peak RSS in MB) over `runs` separate processes, after
    one untimed warm-up run (it writes the bytecode caches)."""
    times, peaks = [], []
    for attempt in range(runs + 1):
        start = time.perf_counter()
        process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
        _, status, usage = os.wait4(process.pid, 0)
        elapsed = time.perf_counter() - start
        if os.waitstatus_to_exitcode(status) not in (0, 1):
            raise SystemExit(f"failed: {' '.join(command)}")
        if attempt:
            times.append(elapsed)
            peaks.append(usage.ru_maxrss / 1024)
    return statistics.median(times), min(times), max(peaks)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--no-bytecode-cache", action="store_true",
                        help="run the children in the caller's environment, PYTHONDONTWRITEBYTECODE included")
    parser.add_argument("--quick", action="store_true", help="skip gguf-py (~30 s a run) and the in-process timings")
    args = parser.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from fixtures.realmodels import default_cache_dir

    env = dict(os.environ)
    if not args.no_bytecode_cache:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = tempfile.mkdtemp(prefix="stopdoctor-bench-pyc-")
    models = default_cache_dir()
    folder, gemma = models / "smollm2-hf", models / "gemma-3-270m-q4_k_m.gguf"
    python = sys.executable
    stopdoctor = [python, "-m", "stopdoctor", "inspect", "--json"]
    print(f"bytecode cache: {'as the caller has it' if args.no_bytecode_cache else 'on (' + env['PYTHONPYCACHEPREFIX'] + ')'}; "
          f"{args.runs} runs each; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    print(f"{'what':<60} {'median s':>9} {'fastest':>8} {'peak MB':>8}")

    def row(what: str, command: list[str]) -> tuple[float, float, float]:
        median, fastest, rss = run(command, args.runs, env)
        print(f"{what:<60} {median:9.2f} {fastest:8.2f} {rss:8.0f}")
        return median, fastest, rss

    row("stopdoctor inspect, no --weights (SmolLM2 HF folder)", stopdoctor + [str(folder)])
    ours, ours_fast, our_rss = row("stopdoctor inspect --weights (SmolLM2 HF folder)", stopdoctor + ["--weights", str(folder)])
    theirs, theirs_fast, their_rss = row("transformers from_pretrained + the same rows",
                                         [python, "-c", TRANSFORMERS_SCRIPT, str(folder)])
    print(f"{'  -> stopdoctor is':<60} {theirs / ours:8.1f}x faster (fastest runs: {theirs_fast / ours_fast:.1f}x), "
          f"{their_rss / our_rss:.1f}x less memory")
    ours_g, _, _ = row("stopdoctor inspect --weights (Gemma 3 270M GGUF, 262k vocab)", stopdoctor + ["--weights", str(gemma)])
    if args.quick:
        return
    theirs_g, _, _ = row("gguf-py GGUFReader + de-quantised token_embd", [python, "-c", GGUF_SCRIPT, str(gemma)])
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
