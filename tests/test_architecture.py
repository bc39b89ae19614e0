"""The package's shape, as the README's architecture section describes it: stages as folders,
imports pointing one way down the pipeline, no private names across modules, no module over 600
lines. Read with `ast` only (nothing is imported or run)."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "stopdoctor"
# The pipeline, first stage first: a module may import its own stage or an earlier one.
ORDER = ["core", "facts", "template", "runtimes", "analysis", "actions", "logs", "labels", "writers", "rules", "reporters",
         "config", "api", "gate", "fix", "cli", "__main__"]
TOP_LEVEL = {"__init__.py", "__main__.py", "api.py", "config.py", "gate.py", "fix.py"}
MAX_LINES = 600


def _modules() -> dict[str, Path]:
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def _imports(path: Path) -> list[tuple[str, list[str]]]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("stopdoctor"):
            found.append((node.module, [a.name for a in node.names]))
        elif isinstance(node, ast.Import):
            found += [(a.name, []) for a in node.names if a.name.startswith("stopdoctor")]
    return found


def _stage(module: str) -> int:
    parts = module.split(".")
    return ORDER.index(parts[1]) if len(parts) > 1 else 0  # `stopdoctor` itself: the version only


def test_no_import_runs_back_up_the_pipeline():
    modules = _modules()
    wrong = [f"{name} imports {target}" for name, path in modules.items() for target, _ in _imports(path)
             if target in modules and _stage(target) > _stage(name)]
    assert not wrong, "\n".join(wrong)


def test_no_relative_imports_and_no_private_names_across_modules():
    modules = _modules()
    wrong = []
    for name, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        wrong += [f"{name}: relative import" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.level]
        for target, names in _imports(path):
            if target != name and target in modules:
                wrong += [f"{name} imports {target}.{n}" for n in names if n.startswith("_") and not n.startswith("__")
                          and f"{target}.{n}" not in modules]
    assert not wrong, "\n".join(wrong)


def test_stages_are_folders_and_modules_stay_small():
    top = {p.name for p in PACKAGE.glob("*.py")}
    assert top <= TOP_LEVEL and len(top) <= 8, top
    folders = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").exists()}
    assert folders == {"core", "facts", "template", "runtimes", "analysis", "actions", "logs", "labels", "writers", "rules",
                       "reporters", "cli"}
    big = {name: n for name, path in _modules().items()
           if (n := len(path.read_text(encoding="utf-8").splitlines())) > MAX_LINES}
    assert not big, big


def test_every_module_says_what_lives_there():
    missing = [name for name, path in _modules().items()
               if path.stat().st_size and ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) is None]
    assert not missing, missing


def test_the_command_line_goes_through_the_public_entry_points():
    """cli/ imports the public entry points (api, config, gate, fix), plain data (core) and the
    reporters, never the stages themselves: every command goes through `stopdoctor.api`. The
    one exception is the command-wide template render deadline that `cli.app` sets."""
    allowed = ("stopdoctor.api", "stopdoctor.config", "stopdoctor.gate", "stopdoctor.fix", "stopdoctor.core",
               "stopdoctor.reporters", "stopdoctor.cli")
    exceptions = {("stopdoctor.cli.app", "stopdoctor.template.limits")}
    wrong = [f"{name} imports {target}" for name, path in _modules().items() if name.startswith("stopdoctor.cli")
             for target, _ in _imports(path)
             if target != "stopdoctor" and not target.startswith(allowed) and (name, target) not in exceptions]
    assert not wrong, "\n".join(wrong)


def test_rules_read_typed_inputs_and_import_no_action():
    """A rule judges the typed input an action or a pipeline built (rules/inputs.py); it never runs
    an action itself: nothing in rules/ imports stopdoctor.actions at run time (a result's type,
    under `if TYPE_CHECKING:`, is the input's type and may be named; the pipelines' result types in
    stopdoctor.logs and stopdoctor.labels are inputs too)."""
    wrong = []
    for name, path in _modules().items():
        if not name.startswith("stopdoctor.rules"):
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        typing_only = {id(n) for block in ast.walk(tree) if isinstance(block, ast.If)
                       and isinstance(block.test, ast.Name) and block.test.id == "TYPE_CHECKING"
                       for n in ast.walk(block)}
        wrong += [f"{name} imports {node.module}" for node in ast.walk(tree)
                  if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("stopdoctor.actions")
                  and id(node) not in typing_only]
        wrong += [f"{name} imports {a.name}" for node in ast.walk(tree) if isinstance(node, ast.Import)
                  and id(node) not in typing_only for a in node.names if a.name.startswith("stopdoctor.actions")]
    assert not wrong, "\n".join(wrong)


def test_one_stop_set_type():
    """One type says what a run stops on (STYLE: "one stop-set type"): `RuntimeStops`, used by the
    runtimes, the serving rules and generate alike. A stop set is a class named like one, or a
    dataclass holding a sequence of `StopId`s."""
    import re

    named = re.compile(r"Stop\w*Set|Stops$")
    found = []
    for module, path in _modules().items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.ClassDef):
                continue
            holds_ids = any(isinstance(item, ast.AnnAssign) and re.search(r"\[StopId\b", ast.unparse(item.annotation))
                            for item in node.body)
            if named.search(node.name) or holds_ids:
                found.append(f"{module}.{node.name}")
    assert found == ["stopdoctor.runtimes.stops.RuntimeStops"], found
