"""Check that tokenizer.json loaded without its merges (`facts.vocab._without_merges`, what
`inspect` reads) answers every lookup as the whole file does, on every tokenizer.json under the
given folders:

    python benchmarks/check_tokenizer_lookups.py DIR [DIR...]

Compared: the added tokens (id, content, special), get_vocab_size(with_added_tokens=True),
token_to_id of every vocabulary text, id_to_token of every id up to the size + 3, and the
post-processor. A file the whole load refuses must not load without its merges either, unless
the merges are what it refuses (told apart). Exit 1 on any difference.
"""

from __future__ import annotations

import sys
from pathlib import Path

import tokenizers

from stopdoctor.facts.vocab import _without_merges


def check(path: Path) -> str:
    lookup = _without_merges(path)
    try:
        whole = tokenizers.Tokenizer.from_file(str(path))
    except Exception as exc:  # noqa: BLE001
        return "whole load refuses, without merges too" if lookup is None else f"whole load refuses ({str(exc)[:60]}); loads without merges"
    if lookup is None:
        return "read whole (not laid out as the library writes it)"
    problems = []
    mine = {i: (t.content, t.special) for i, t in lookup.get_added_tokens_decoder().items()}
    theirs = {i: (t.content, t.special) for i, t in whole.get_added_tokens_decoder().items()}
    if mine != theirs:
        problems.append("added tokens")
    size = whole.get_vocab_size(with_added_tokens=True)
    if lookup.get_vocab_size(with_added_tokens=True) != size:
        problems.append("size")
    if any(lookup.token_to_id(text) != whole.token_to_id(text) for text in whole.get_vocab(with_added_tokens=True)):
        problems.append("token_to_id")
    if any(lookup.id_to_token(i) != whole.id_to_token(i) for i in range(size + 3)):
        problems.append("id_to_token")
    if (lookup.post_processor and lookup.post_processor.__getstate__()) != (whole.post_processor and whole.post_processor.__getstate__()):
        problems.append("post_processor")
    return "DIFF: " + ", ".join(problems) if problems else "same"


def main() -> None:
    files = sorted({p for folder in sys.argv[1:] for p in Path(folder).rglob("tokenizer.json") if p.is_file()})
    failed = 0
    for path in files:
        verdict = check(path)
        failed += verdict.startswith("DIFF") or "loads without merges" in verdict
        print(f"{verdict:50} {path}")
    print(f"{len(files)} files, {failed} different")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
