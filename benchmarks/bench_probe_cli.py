"""Wall time of the `stopdoctor probe-stop` and `stopdoctor render` commands, start-up included:
each run is a fresh `python -m stopdoctor ...` subprocess; the figure is the median of 5.
probe-stop runs 10 stop strings x all contexts (the defaults plus the template's turn endings)
with the false-positive scan; the goal is <= 0.5 s.

Run: python benchmarks/bench_probe_cli.py [MODEL]
MODEL defaults to $STOPDOCTOR_TEST_MODELS/smollm2-hf (the SmolLM2-135M-Instruct HF folder).
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

STOPS = ["User:", "\\nUser:", "\\n\\nUser:", "<|im_end|>", "Human:", "\\n\\nHuman:", "###", "</s>", "Subject:", "Q:"]
RUNS = 5
GOAL_S = 0.5


def time_command(args: list[str]) -> list[float]:
    timings = []
    for _ in range(RUNS):
        start = time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "stopdoctor", *args], capture_output=True, text=True)
        timings.append(time.perf_counter() - start)
        if proc.returncode != 0:
            raise SystemExit(f"stopdoctor {' '.join(args)} exited {proc.returncode}: {proc.stderr.strip()}")
    return timings


def report(label: str, timings: list[float], goal: float | None = None) -> None:
    median = statistics.median(timings)
    verdict = "" if goal is None else ("  (goal <= %.1f s: %s)" % (goal, "met" if median <= goal else "MISSED"))
    print(f"{label}: median {median * 1000:.0f} ms, min {min(timings) * 1000:.0f} ms, "
          f"max {max(timings) * 1000:.0f} ms over {len(timings)} runs{verdict}")


def main() -> None:
    default = Path(os.environ.get("STOPDOCTOR_TEST_MODELS", Path.home() / ".cache" / "stopdoctor" / "test-models")) / "smollm2-hf"
    model = sys.argv[1] if len(sys.argv) > 1 else str(default)
    print(f"model: {model}")
    baseline = time_command(["--help"])
    report("python -m stopdoctor --help (start-up floor)", baseline)
    report(f"probe-stop, {len(STOPS)} stops x all contexts", time_command(["probe-stop", *STOPS, "--model", model]), GOAL_S)
    report("probe-stop --json", time_command(["probe-stop", *STOPS, "--model", model, "--json"]), GOAL_S)
    report("render -m user ... --ids", time_command(["render", model, "-m", "user", "What is the capital of France?", "--ids"]))
    report("render --json", time_command(["render", model, "-m", "user", "What is the capital of France?", "--json"]))


if __name__ == "__main__":
    main()
