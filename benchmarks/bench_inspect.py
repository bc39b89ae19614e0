"""Cold `stopdoctor inspect --json` against the obvious alternatives, in one run (benchmarks/coldrun.py:
fresh processes, interleaved rounds, wall and CPU time).

    python benchmarks/bench_inspect.py [--runs N] [--models DIR] [--baseline TREE]
                                       [--ggufdoctor-path DIR] [--weights]

Contenders:
  * `stopdoctor --help`                                   (start-up floor)
  * `stopdoctor inspect --json` on the Gemma 3 270M GGUF  (goal <= 0.35 s, >= 4x faster than ggufdoctor)
  * ggufdoctor 0.3.0 on the same file: found on PATH, or installed outside the repo with
    `pip install --target DIR ggufdoctor==0.3.0` and given as --ggufdoctor-path DIR
  * `stopdoctor inspect --json` on the SmolLM2 HF folder  (goal >= 15x the transformers path)
  * a transformers script doing the same reading (AutoTokenizer, GenerationConfig, apply_chat_template)
  * with --baseline TREE: the two stopdoctor inspects again from that checkout (before/after)
  * with --weights: `stopdoctor inspect --weights --json` on the SmolLM2 HF folder (and from the
    baseline), beside bench_weights.py's transformers load of the same rows  (goal >= 20x)
Models come from fixtures/realmodels.py (STOPDOCTOR_TEST_MODELS or ~/.cache/stopdoctor/test-models).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from coldrun import Contender, compile_tree, load_average, ratio, run_rounds, stopdoctor  # noqa: E402

TRANSFORMERS_SCRIPT = """
import sys
from transformers import AutoTokenizer, GenerationConfig
folder = sys.argv[1]
tok = AutoTokenizer.from_pretrained(folder)
gen = GenerationConfig.from_pretrained(folder)
text = tok.apply_chat_template([{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}], tokenize=False)
print(gen.eos_token_id, tok.eos_token_id, tok.pad_token_id, tok.convert_tokens_to_ids("<|im_end|>"), len(text))
"""


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--models", type=Path, default=Path(os.environ.get("STOPDOCTOR_TEST_MODELS", Path.home() / ".cache/stopdoctor/test-models")))
    parser.add_argument("--baseline", type=Path, help="another checkout whose stopdoctor runs in the same rounds")
    parser.add_argument("--ggufdoctor-path", type=Path, help="a pip --target folder holding ggufdoctor 0.3.0")
    parser.add_argument("--skip-hf", action="store_true", help="GGUF contenders only")
    parser.add_argument("--weights", action="store_true", help="also inspect --weights against a transformers load")
    args = parser.parse_args()
    hf = args.models / "smollm2-hf"
    gguf = args.models / "gemma-3-270m-q4_k_m.gguf"
    trees = [("", None)] + ([(" [baseline]", args.baseline)] if args.baseline else [])
    for _, tree in trees:
        compile_tree(tree)
    contenders = {"help": Contender("stopdoctor --help", *stopdoctor(None, "--help"))}
    if gguf.is_file():
        for label, tree in trees:
            contenders["gguf" + label] = Contender("stopdoctor inspect --json gemma GGUF" + label,
                                                   *stopdoctor(tree, "inspect", "--json", str(gguf)))
        if args.ggufdoctor_path:
            contenders["ggufdoctor"] = Contender("ggufdoctor 0.3.0, same file",
                                                 [sys.executable, str(args.ggufdoctor_path / "bin" / "ggufdoctor"), "--fail-on", "never", str(gguf)],
                                                 {"PYTHONPATH": str(args.ggufdoctor_path)})
        elif shutil.which("ggufdoctor"):
            contenders["ggufdoctor"] = Contender("ggufdoctor 0.3.0, same file", [shutil.which("ggufdoctor"), "--fail-on", "never", str(gguf)])
    if hf.is_dir() and not args.skip_hf:
        for label, tree in trees:
            contenders["hf" + label] = Contender("stopdoctor inspect --json smollm2-hf" + label,
                                                 *stopdoctor(tree, "inspect", "--json", str(hf)))
        contenders["transformers"] = Contender("transformers script, same folder", [sys.executable, "-c", TRANSFORMERS_SCRIPT, str(hf)])
    if hf.is_dir() and args.weights:
        from bench_weights import TRANSFORMERS_SCRIPT as LOAD_ROWS

        for label, tree in trees:
            contenders["weights" + label] = Contender("stopdoctor inspect --weights --json smollm2-hf" + label,
                                                      *stopdoctor(tree, "inspect", "--weights", "--json", str(hf)))
        contenders["load rows"] = Contender("transformers load of the same rows", [sys.executable, "-c", LOAD_ROWS, str(hf)])
    print(f"# load average before: {load_average()} ({os.cpu_count()} CPUs); {args.runs} rounds after a warm-up")
    run_rounds(list(contenders.values()), args.runs)
    print(f"# load average after: {load_average()}")
    if "ggufdoctor" in contenders:
        ratio("Gemma GGUF, ggufdoctor / stopdoctor", contenders["ggufdoctor"], contenders["gguf"], 4)
    if "gguf [baseline]" in contenders:
        ratio("Gemma GGUF, baseline / this checkout", contenders["gguf [baseline]"], contenders["gguf"])
    if "transformers" in contenders:
        ratio("SmolLM2 HF folder, transformers / stopdoctor", contenders["transformers"], contenders["hf"], 15)
    if "hf [baseline]" in contenders:
        ratio("SmolLM2 HF folder, baseline / this checkout", contenders["hf [baseline]"], contenders["hf"])
    if "load rows" in contenders:
        ratio("inspect --weights, transformers load / stopdoctor", contenders["load rows"], contenders["weights"], 20)
    if "weights [baseline]" in contenders:
        ratio("inspect --weights, baseline / this checkout", contenders["weights [baseline]"], contenders["weights"])


if __name__ == "__main__":
    main()
