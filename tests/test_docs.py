"""The manual (docs/) and the README, the front door: every rule has a current generated page,
every command a page, every example marked runnable runs and prints what the page shows, every
link resolves, and MkDocs builds the manual with `--strict`.

A runnable example is a fenced block right after `<!-- runnable: exit N -->`: its first line is
`$ stopdoctor ARGS`, the rest is the command's stdout (run from the repository root, NO_COLOR=1,
COLUMNS=100; a duration such as `(1.41 s)` is compared as `(t s)`), and N its exit code. An example
on `~/.cache/stopdoctor/test-models/…` runs on the real test models wherever fixtures/realmodels.py
put them (`bash .ci/test-deps` fetches them).
"""

from __future__ import annotations

import importlib.util
import inspect
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from stopdoctor.rules.runner import REGISTRY

from .helpers import cli, test_models_dir

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
README = ROOT / "README.md"
RUNNABLE = re.compile(r"^<!-- runnable: exit (\d+) -->\n```\w*\n\$ stopdoctor ([^\n]*)\n(.*?)^```", re.S | re.M)
LINK = re.compile(r"\]\(([^)\s]+)\)")
REAL_MODELS = "~/.cache/stopdoctor/test-models"  # how the pages write the real test models' folder


def _pages() -> list[Path]:
    """README.md and every page of the manual (docs/incoming/ holds notes for the coordinator, not pages)."""
    return [README, *sorted(p for p in DOCS.rglob("*.md") if "incoming" not in p.relative_to(DOCS).parts)]


def _gen_rules():
    spec = importlib.util.spec_from_file_location("gen_rules", DOCS / "gen_rules.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# --- the rules' pages --------------------------------------------------------------------------


def test_a_rule_summary_is_its_whole_first_paragraph():
    for check in REGISTRY.values():
        if check.code == "SD000":  # documented in the registry itself, not by a docstring
            continue
        first = inspect.cleandoc(check.function.__doc__).split("\n\n")[0]
        assert check.summary == " ".join(first.split()), check.code
    # the summary that was cut at its first line break
    assert REGISTRY["SD273"].summary.endswith("llama.cpp splits its text into pieces."), REGISTRY["SD273"].summary


def test_every_rule_has_a_page_and_the_pages_are_current():
    gen = _gen_rules()
    for code in REGISTRY:
        assert (DOCS / "rules" / f"{code}.md").is_file(), f"{code} has no page; run: python docs/gen_rules.py"
    assert gen.stale() == [], "stale rule pages; run: python docs/gen_rules.py"


def test_the_rules_index_links_every_rule_with_its_whole_summary():
    index = (DOCS / "rules" / "index.md").read_text(encoding="utf-8")
    for code in REGISTRY:
        assert f"[{code}]({code}.md)" in index
    assert "llama.cpp splits its text into pieces." in index  # SD273, whole


def test_the_adding_a_rule_example_names_a_free_code_and_registers():
    """The example in docs/development.md is registered as written: the decorator refuses a code in use,
    and its doc must have the headings every rule's doc has."""
    from stopdoctor.core.findings import Severity
    from stopdoctor.rules.inputs import ServingInput
    from stopdoctor.rules.registry import Rule, rule

    text = (DOCS / "development.md").read_text(encoding="utf-8")
    block = next(b for b in re.findall(r"^```python\n(.*?)^```", text, flags=re.S | re.M) if "@rule(" in b)
    code = re.search(r'@rule\("(SD\d{3})"', block).group(1)
    assert code not in REGISTRY, f"the 'Adding a rule' example names {code}, a code in use"
    try:
        exec(compile(block, "docs/development.md", "exec"),
             {"rule": rule, "Rule": Rule, "Severity": Severity, "ServingInput": ServingInput})
        added = REGISTRY[code]
        assert set(added.sections) == {"What it checks", "Why it matters", "Example", "Fix"}
        assert added.summary and added.input is ServingInput
    finally:
        REGISTRY.pop(code, None)


# --- every command has a page ------------------------------------------------------------------


def test_every_command_has_a_page():
    import typer.main

    from stopdoctor.cli.app import app

    commands = typer.main.get_command(app).commands
    missing = [name for name in commands if not (DOCS / "commands" / f"{name}.md").is_file()]
    assert not missing, f"commands without a page under docs/commands/: {missing}"


def test_the_json_page_lists_every_schema():
    text = (DOCS / "json.md").read_text(encoding="utf-8")
    schemas = {m for path in (ROOT / "stopdoctor").rglob("*.py")
               for m in re.findall(r"stopdoctor\.[a-z-]+/\d+", path.read_text(encoding="utf-8"))}
    assert schemas, "no schema names found in the package"
    missing = sorted(s for s in schemas if f"`{s}`" not in text)
    assert not missing, f"docs/json.md does not list {missing}"


# --- the README is a front door ---------------------------------------------------------------


def test_the_readme_is_a_front_door_whose_two_commands_are_what_ci_runs():
    readme = README.read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 250
    run = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    commands = re.findall(r"^## Develop\n.*?^```bash\n(.*?)\n```\n\n```bash\n(.*?)\n```", readme, flags=re.S | re.M)
    assert commands, "the README's Develop section shows no two commands"
    install, test = commands[0]
    assert test == "bash .ci/test-deps && pytest"
    run_lines = [line.strip() for line in run.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    assert "bash .ci/test-deps" in run_lines and "pytest" in run_lines
    ci_install = next(line for line in run_lines if line.startswith("pip install -e"))
    assert ci_install in install
    assert RUNNABLE.search(readme), "the README's example is not marked runnable"


# --- examples and links -----------------------------------------------------------------------


def _examples() -> list:
    cases = []
    for page in _pages():
        for n, match in enumerate(RUNNABLE.finditer(page.read_text(encoding="utf-8")), 1):
            name = page.relative_to(ROOT).as_posix()
            cases.append(pytest.param(int(match.group(1)), match.group(2), match.group(3), id=f"{name}:{n}"))
    return cases


def test_the_runnable_examples_include_the_readme_and_logs():
    ids = {case.id.rsplit(":", 1)[0] for case in _examples()}
    assert {"README.md", "docs/commands/logs.md", "docs/commands/inspect.md"} <= ids, ids


def _redact(text: str) -> str:
    return re.sub(r"\(\d+\.\d+ s\)", "(t s)", text)


@pytest.mark.parametrize(("code", "command", "shown"), _examples())
def test_a_runnable_example_runs_and_its_output_is_current(monkeypatch, code, command, shown):
    monkeypatch.chdir(ROOT)
    args = shlex.split(command)
    models = str(test_models_dir())
    if any(REAL_MODELS in arg for arg in args):  # the real test models, wherever fixtures/realmodels.py put them
        if not Path(models).is_dir():
            pytest.skip(f"the real test models are not in {models}: run `bash .ci/test-deps` (the README's test command)")
        args = [arg.replace(REAL_MODELS, models) for arg in args]
    run = cli(*args, env={"NO_COLOR": "1", "COLUMNS": "100"})
    stdout = run.stdout.replace(models, REAL_MODELS)
    assert _redact(stdout) == _redact(shown), f"the page shows other output than `stopdoctor {command}` prints"
    assert run.code == code, run.stderr


def _slug(heading: str) -> str:
    """A heading's anchor as MkDocs (Python-Markdown's toc) makes it."""
    value = re.sub(r"[^\w\s-]", "", heading).strip().lower()
    return re.sub(r"[-\s]+", "-", value)


def test_every_relative_link_resolves():
    wrong = []
    for page in _pages():
        text = page.read_text(encoding="utf-8")
        text = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)  # code blocks hold no links
        for target in LINK.findall(text):
            if re.match(r"^[a-z]+:", target):
                continue  # an absolute URL
            path, _, anchor = target.partition("#")
            file = (page.parent / path).resolve() if path else page
            if not file.is_file():
                wrong.append(f"{page.relative_to(ROOT)}: {target} (no such file)")
                continue
            if anchor and file.suffix == ".md":
                headings = re.findall(r"^#+ (.*)$", file.read_text(encoding="utf-8"), flags=re.M)
                if anchor not in {_slug(h) for h in headings}:
                    wrong.append(f"{page.relative_to(ROOT)}: {target} (no such heading)")
    assert not wrong, "\n".join(wrong)


def test_the_manual_builds_strictly(tmp_path):
    pytest.importorskip("mkdocs", reason="MkDocs comes with the `dev` extra: pip install -e '.[dev]'")
    build = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
                           cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert build.returncode == 0, build.stderr
    assert "WARNING" not in build.stderr, build.stderr
    assert (tmp_path / "site" / "rules" / "SD273" / "index.html").is_file()
