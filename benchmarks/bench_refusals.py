"""Cold `probe-stop "\\nUser:" --model` on the SmolLM2 folder, and the refusals that should be
instant, each against the same command from a baseline checkout in the same rounds
(benchmarks/coldrun.py: fresh processes, interleaved, wall and CPU time).

    python benchmarks/bench_refusals.py --baseline TREE [--runs N] [--models DIR]

  * probe-stop "\\nUser:" --model smollm2-hf                       (0.28-0.46 s a release before #28)
  * probe-stop --from-template on the Gemma 3 base GGUF (no chat template: exit 2)
  * generate -m user hi on the same GGUF (no chat template: exit 2)
  * generate --device cuda on the SmolLM2 folder, on a machine with no GPU (exit 2)
The GGUF refusals were 24-31 s and the CUDA one 25 s before #28 (a tokenizer converted, torch imported).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from coldrun import Contender, compile_tree, load_average, ratio, run_rounds, stopdoctor  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--models", type=Path, default=Path(os.environ.get("STOPDOCTOR_TEST_MODELS", Path.home() / ".cache/stopdoctor/test-models")))
    parser.add_argument("--baseline", type=Path, help="another checkout whose stopdoctor runs in the same rounds")
    args = parser.parse_args()
    hf = str(args.models / "smollm2-hf")
    gguf = str(args.models / "gemma-3-270m-q4_k_m.gguf")
    commands = {
        "probe-stop \\nUser: --model smollm2-hf": (["probe-stop", "\\nUser:", "--model", hf], (0, 1)),
        "probe-stop --from-template, GGUF without a template": (["probe-stop", "--model", gguf, "--from-template"], (2,)),
        "generate -m user hi, GGUF without a template": (["generate", gguf, "-m", "user", "hi"], (2,)),
        "generate --device cuda, no GPU": (["generate", hf, "-m", "user", "hi", "--device", "cuda"], (2,)),
    }
    trees = [("", None)] + ([(" [baseline]", args.baseline)] if args.baseline else [])
    for _, tree in trees:
        compile_tree(tree)
    contenders = {name + label: Contender(name + label, *stopdoctor(tree, *argv), ok=ok)
                  for name, (argv, ok) in commands.items() for label, tree in trees}
    print(f"# load average before: {load_average()} ({os.cpu_count()} CPUs); {args.runs} rounds after a warm-up")
    run_rounds(list(contenders.values()), args.runs)
    print(f"# load average after: {load_average()}")
    if args.baseline:
        for name in commands:
            ratio(f"{name}: baseline / this checkout", contenders[name + " [baseline]"], contenders[name])


if __name__ == "__main__":
    main()
