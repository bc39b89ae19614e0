"""Axolotl's own labels for JSONL files of chat rows, printed as JSON: run in a separate process
(with the folder of fixtures/oracles.py first on sys.path) so that nothing Axolotl imports
touches the test process.

    python tests/axolotl_oracle.py AXOLOTL_DIR < jobs.json

jobs.json: [{"model": MODEL_DIR, "data": DATA.jsonl, "eot_tokens": [...]}, ...]. Each job uses
Axolotl's `chat_template` strategy as its config defaults load it (`StrategyLoader`:
roles_to_train [assistant], train_on_eos turn, train_on_inputs false, the tokenizer's own
template, eot_tokens from the config). Prints, per job, [{"input_ids": [...], "labels": [...]}, ...].
"""

from __future__ import annotations

import json
import logging
import sys


def main() -> None:
    sys.path.insert(0, sys.argv[1])
    logging.disable(logging.CRITICAL)
    from axolotl.prompt_strategies.chat_template import StrategyLoader
    from axolotl.utils.dict import DictDefault
    from transformers import AutoTokenizer

    results = []
    for job in json.load(sys.stdin):
        tokenizer = AutoTokenizer.from_pretrained(job["model"])
        eot_tokens = job.get("eot_tokens") or []
        cfg = DictDefault({"chat_template": "tokenizer_default", "sequence_len": 1 << 20, "train_on_inputs": False,
                           **({"eot_tokens": eot_tokens} if eot_tokens else {})})
        strategy = StrategyLoader()(tokenizer, cfg, {"type": "chat_template", "field_messages": "messages"})
        rows = [json.loads(line) for line in open(job["data"], encoding="utf-8") if line.strip()]
        out = [strategy.tokenize_prompt(row) for row in rows]
        results.append([{"input_ids": list(o["input_ids"]), "labels": list(o["labels"])} for o in out])
    print(json.dumps(results))


if __name__ == "__main__":
    main()
