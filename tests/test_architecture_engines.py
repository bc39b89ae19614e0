"""Engine knowledge lives in runtimes/engines/ only: no module elsewhere branches on an engine's
name (`serving.kind == "vllm"`, `kind in ("llamacpp", "vllm")`, `identity.engine == "llama.cpp"`);
it asks the engine (`runtimes.engines.serving_engine(kind)`, a field or a function of `Engine`).
Read with `ast`; the names are the registry's own spellings, so a new engine is covered as soon as
its module exists."""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path

from stopdoctor.runtimes.engines import engines

PACKAGE = Path(__file__).resolve().parents[1] / "stopdoctor"
ENGINES_FOLDER = PACKAGE / "runtimes" / "engines"
NAMES = {n for e in engines() for n in (*e.names(), *e.stop_set_names())}

# Branches not yet moved into their engine's module, per file: this list only shrinks. Remove an
# entry (or lower its count) when you move a branch; the test fails when the count is not exact.
NOT_YET_MOVED: dict[str, int] = {}


def _strings(node: ast.AST) -> set[str]:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return {node.value}
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return {s for element in node.elts for s in _strings(element)}
    return set()


def engine_branches(path: Path) -> list[tuple[int, str]]:
    """(line, engine name) for each comparison of a value with an engine's name."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not isinstance(node, ast.Compare):
            continue
        operands = [node.left, *node.comparators]
        if all(_strings(o) or isinstance(o, ast.Constant) for o in operands):
            continue  # two constants: no branch on a value
        for operand in operands:
            found += [(node.lineno, name) for name in sorted(_strings(operand) & NAMES)]
    return found


def test_no_module_outside_the_engines_branches_on_an_engine_name():
    counts = Counter()
    lines = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        if ENGINES_FOLDER in path.parents:
            continue
        branches = engine_branches(path)
        if branches:
            name = str(path.relative_to(PACKAGE.parent))
            counts[name] = len(branches)
            lines[name] = branches
    assert dict(counts) == NOT_YET_MOVED, {name: lines[name] for name in counts if counts[name] != NOT_YET_MOVED.get(name)}


def test_the_check_sees_a_branch(tmp_path):
    path = tmp_path / "m.py"
    path.write_text('def f(serving):\n    if serving.kind == "vllm":\n        return 1\n'
                    '    return serving.kind in ("request", "llamacpp")\n', encoding="utf-8")
    assert engine_branches(path) == [(2, "vllm"), (4, "llamacpp")]
