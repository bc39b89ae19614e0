"""Per-token overhead of `stopdoctor generate`'s decoding loop (stop ids + stop strings + trace)
against plain `model.generate` with the same stop ids, same model, same run. Goal: <= 2 %.

Uses the SmolLM2 folder whose eos is broken (generation_config eos 0), so greedy decoding runs the
whole budget without forcing. Runs the two alternately and keeps each one's best time, then also
times the stop handling alone (replaying the generated ids through the detokenizer and the stop
matcher), which is the overhead without the machine's noise.

    STOPDOCTOR_TEST_MODELS=/work/cache/test-models python benchmarks/bench_generate.py [--tokens 256] [--repeats 3]
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default=str(Path(os.environ.get("STOPDOCTOR_TEST_MODELS", "~/.cache/stopdoctor/test-models"))
                                               .expanduser() / "smollm2-hf-broken-eos"))
    parser.add_argument("--tokens", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()

    import torch

    from stopdoctor.analysis.diagnose import Step
    from stopdoctor.actions.generate.local import LocalEngine
    from stopdoctor.actions.generate.request import build_prompt, resolve_stops
    from stopdoctor.actions.generate.run import load_context, run_generate
    from stopdoctor.actions.generate.stopmatch import IncrementalDetokenizer, StopStringMatcher

    torch.set_num_threads(max(1, torch.get_num_threads()))
    context = load_context(args.model)
    engine = LocalEngine.load(context.facts, device=args.device)
    prompt = build_prompt(context.facts, messages=[{"role": "user", "content": "What is the capital of France?"}])
    # The model's own stop ids plus a stop string that never matches: both paths of the loop run.
    stops = resolve_stops(context.analysis, None, [], ["\u2063never"])
    stop_ids = stops.ids
    input_ids = torch.tensor([prompt.ids], device=engine.device)

    def plain() -> list[int]:
        with torch.inference_mode():
            out = engine.model.generate(input_ids, max_new_tokens=args.tokens, do_sample=False,
                                        eos_token_id=stop_ids, pad_token_id=stop_ids[0])
        return out[0, len(prompt.ids):].tolist()

    def ours() -> list[int]:
        return run_generate(context, engine, prompt, stops, args.tokens).generation.tokens

    plain(), ours()  # warm up both (allocator, kernels)
    best = {"model.generate": float("inf"), "stopdoctor": float("inf")}
    tokens: dict[str, list[int]] = {}
    for _ in range(args.repeats):
        for name, run in (("model.generate", plain), ("stopdoctor", ours)):
            started = time.perf_counter()
            tokens[name] = run()
            best[name] = min(best[name], time.perf_counter() - started)
    n = len(tokens["stopdoctor"])
    assert tokens["stopdoctor"] == tokens["model.generate"], "greedy tokens differ from model.generate"

    # The stop handling alone: what the loop adds per token besides the forward pass.
    vocab = context.facts.vocab
    replay_runs = 20
    started = time.perf_counter()
    for _ in range(replay_runs):
        detok = IncrementalDetokenizer(vocab.tokenizer())
        matcher = StopStringMatcher(stops.texts)
        by_id = {s.id: s for s in stops.stops}
        steps = []
        for step, token_id in enumerate(tokens["stopdoctor"]):
            piece = detok.push(token_id)
            steps.append(Step(step, token_id, piece, token_id in vocab.special_ids))
            by_id.get(token_id)
            matcher.feed(piece, step)
    handling = (time.perf_counter() - started) / replay_runs / n

    per_token_plain = best["model.generate"] / n
    print(f"model: {args.model}  device: {engine.device}  new tokens: {n}  threads: {torch.get_num_threads()}")
    for name, seconds in best.items():
        print(f"  {name:<15} {n / seconds:8.1f} tokens/s   ({seconds * 1000 / n:.2f} ms/token, best of {args.repeats})")
    overall = best["stopdoctor"] / best["model.generate"] - 1
    print(f"  end-to-end overhead vs model.generate: {overall * 100:+.1f} %  (negative: stopdoctor's loop is faster)")
    print(f"  stop handling + trace alone: {handling * 1e6:.0f} us/token = {handling / per_token_plain * 100:.2f} % of a token")
    print("  greedy tokens identical to model.generate: yes")


if __name__ == "__main__":
    main()
