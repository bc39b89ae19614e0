"""Wall time of `stopdoctor labels` in-process against the obvious alternative, in the same run:
10,000 two-turn conversations on the SmolLM2 tokenizer, assistant-only loss with a ChatML
training template (generation markers around content + <|im_end|>).

- stopdoctor: `check_labels` (load, analyse, render every example in the sandbox with generation
  spans recorded, `encode_batch` with offsets, masks, checks).
- baseline: a loop calling transformers' `apply_chat_template(..., tokenize=True,
  return_dict=True, return_assistant_tokens_mask=True)` per example — masks only, no analysis.

Also times the default (`auto` = full-sequence) run on the model's own template, and the
assistant-only run once as a command in a fresh process (imports and report included). The
baseline needs transformers; stopdoctor does not.

Run: python benchmarks/bench_labels.py [MODEL_DIR] [N] [REPEATS]
Defaults to $STOPDOCTOR_TEST_MODELS/smollm2-hf, N = 10000, REPEATS = 3 (alternated, best of each).
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from stopdoctor.api import check_labels
from stopdoctor.labels.result import LabelSettings
from stopdoctor.core.types import ChatTemplate, Location

ROOT = Path(__file__).resolve().parents[1]
TEMPLATE = ROOT / "fixtures" / "labels" / "chatml-generation.jinja"
_PHRASE = ("the model stops when it writes the end of turn token and a runtime is told to stop on it "
           "otherwise it keeps going and writes another user turn by itself which is the bug")
WORDS = tuple(_PHRASE.split(" "))


def _sentence(rng: random.Random, low: int, high: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(low, high))).capitalize() + "."


def conversations(n: int, seed: int = 0) -> list[dict]:
    rng = random.Random(seed)
    return [{"messages": [
        {"role": "user", "content": _sentence(rng, 5, 20)},
        {"role": "assistant", "content": _sentence(rng, 10, 60)},
        {"role": "user", "content": _sentence(rng, 5, 20)},
        {"role": "assistant", "content": _sentence(rng, 10, 60)},
    ]} for _ in range(n)]


def main() -> None:
    default = Path(os.environ.get("STOPDOCTOR_TEST_MODELS", Path.home() / ".cache" / "stopdoctor" / "test-models")) / "smollm2-hf"
    model = Path(sys.argv[1]) if len(sys.argv) > 1 else default
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 10_000
    repeats = int(sys.argv[3]) if len(sys.argv) > 3 else 3
    rows = conversations(n)
    source = TEMPLATE.read_text()
    template = ChatTemplate(TEMPLATE.name, source, Location(TEMPLATE.name))
    from transformers import AutoTokenizer

    def baseline_run():
        tokenizer = AutoTokenizer.from_pretrained(str(model))
        return tokenizer, [tokenizer.apply_chat_template(r["messages"], chat_template=source, tokenize=True,
                                                         return_dict=True, return_assistant_tokens_mask=True)
                           for r in rows]

    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "data.jsonl"
        data.write_text("".join(json.dumps(r) + "\n" for r in rows))
        # as the command runs it: ids built only where the verdict needs them (tokenize_first=0)
        settings = LabelSettings(collator="assistant-only", template=template, tokenize_first=0)
        ours_times, baseline_times = [], []
        for _ in range(repeats):  # alternated, so both see the same load on a shared machine
            start = time.perf_counter()
            report = check_labels(str(model), str(data), settings)
            ours_times.append(time.perf_counter() - start)
            start = time.perf_counter()
            tokenizer, outs = baseline_run()
            baseline_times.append(time.perf_counter() - start)
        result = report.labels

        start = time.perf_counter()
        default_report = check_labels(str(model), str(data), LabelSettings(max_length=2048, tokenize_first=0))
        ours_default = time.perf_counter() - start

        # the command as a user runs it: a fresh process, imports, model load, report
        start = time.perf_counter()
        command = subprocess.run([sys.executable, "-m", "stopdoctor", "labels", str(model), "--data", str(data),
                                  "--collator", "assistant-only", "--template", str(TEMPLATE)],
                                 capture_output=True, text=True, check=False)
        ours_cli = time.perf_counter() - start

        # untimed: the same labels with every example tokenized, to compare masks with the baseline
        sample = Path(tmp) / "sample.jsonl"
        sample.write_text("".join(json.dumps(r) + "\n" for r in rows[:500]))
        tokenized = check_labels(str(model), str(sample), LabelSettings(collator="assistant-only", template=template))

    masks = [o["assistant_masks"] for o in outs]
    ids_list = [o["input_ids"] for o in outs]
    agree = all([int(t) for t in e.trained] == m for e, m in zip(tokenized.labels.examples, masks))
    # every example's verdict: as many trained end-of-turns as the baseline mask has <|im_end|> at 1
    eot = tokenizer.convert_tokens_to_ids("<|im_end|>")
    verdicts = all(
        sum(s.trained for s in e.spans) == sum(1 for i, m in zip(ids, mask) if i == eot and m)
        for e, ids, mask in zip(result.examples, ids_list, masks)
    )
    ours, baseline = min(ours_times), min(baseline_times)
    ratios = sorted(b / o for o, b in zip(ours_times, baseline_times))

    print(f"model: {model}  examples: {n} two-turn conversations  runs: {repeats} (alternated; best shown)")
    print(f"stopdoctor labels --collator assistant-only --template {TEMPLATE.name}: {ours:.2f} s "
          f"(all: {', '.join(f'{t:.2f}' for t in ours_times)}; {result.spans_ok}/{len(result.spans)} "
          f"end-of-turns trained, findings: {[f.code for f in report.findings]})")
    print(f"stopdoctor labels --max-length 2048 (auto = full sequence, model template): {ours_default:.2f} s "
          f"(findings: {[f.code for f in default_report.findings]})")
    print(f"the same assistant-only run as a command (fresh process): {ours_cli:.2f} s (exit {command.returncode})")
    print(f"baseline apply_chat_template(return_assistant_tokens_mask=True) loop: {baseline:.2f} s "
          f"(all: {', '.join(f'{t:.2f}' for t in baseline_times)})")
    print(f"speed-up: {baseline / ours:.1f}x best vs best, {ratios[len(ratios) // 2]:.1f}x median of paired runs  "
          f"masks identical (first 500, tokenized): {agree}  "
          f"verdicts agree with the baseline masks (all {n}): {verdicts}")


if __name__ == "__main__":
    main()
