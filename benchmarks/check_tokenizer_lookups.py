"""Check that tokenizer.json loaded without its merges (`facts.vocab._without_merges`, what
`inspect` reads) answers every lookup as the whole file does, on every tokenizer.json under the
given folders:

    python benchmarks/check_tokenizer_lookups.py DIR [DIR...]

Compared (with the json-module read of `facts.tokenizer_json` or the library's load without
merges, whichever `_without_merges` gives): the added tokens (id, content, special),
get_vocab_size(with_added_tokens=True), token_to_id of every vocabulary text, id_to_token of
every id up to the size + 3 (but the added tokens', which `Vocabulary` answers itself), and what model_facts reads of the post-processor. A file the whole load refuses must not load without its merges either, unless
the merges are what it refuses (told apart). Exit 1 on any difference.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import tokenizers

from stopdoctor.facts.tokenizer_json import PlainTokenizer
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
    plain = isinstance(lookup, PlainTokenizer)
    if plain:
        mine = {i: (content, special) for i, content, special in lookup.added}
    else:
        mine = {i: (t.content, t.special) for i, t in lookup.get_added_tokens_decoder().items()}
    theirs = {i: (t.content, t.special) for i, t in whole.get_added_tokens_decoder().items()}
    if mine != theirs:
        problems.append("added tokens")
    size = whole.get_vocab_size(with_added_tokens=True)
    if lookup.get_vocab_size(with_added_tokens=True) != size:
        problems.append("size")
    # Vocabulary answers an added token's text and id itself (by_text, by_id), the lookup the rest
    added_texts = {content for content, _ in theirs.values()}
    if any(lookup.token_to_id(text) != whole.token_to_id(text)
           for text in whole.get_vocab(with_added_tokens=True) if text not in added_texts):
        problems.append("token_to_id")
    if any(lookup.id_to_token(i) != whole.id_to_token(i) for i in range(size + 3) if i not in theirs):
        problems.append("id_to_token")
    theirs_processor = json.loads(whole.post_processor.__getstate__()) if whole.post_processor else None
    mine_processor = lookup.processor if plain else (json.loads(lookup.post_processor.__getstate__()) if lookup.post_processor else None)
    if _essential(mine_processor) != _essential(theirs_processor):
        problems.append("post_processor")
    kind = "json module" if plain else "library, no merges"
    return "DIFF: " + ", ".join(problems) if problems else f"same ({kind})"


def _essential(processor):
    """What model_facts reads of a post-processor: types, and TemplateProcessing's single."""
    if not isinstance(processor, dict):
        return processor
    if processor.get("type") == "Sequence":
        return ("Sequence", [_essential(p) for p in processor.get("processors", [])])
    if processor.get("type") == "TemplateProcessing":
        return ("TemplateProcessing", processor.get("single"))
    return processor.get("type")


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
