"""What a cold command imports and builds (#28: import what the command needs, when it needs it).

Work, never seconds: each test runs one command in a fresh interpreter (`python -X importtime`) and
checks which heavy libraries it loaded, or counts what typer built. A busy machine cannot make
them fail.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

HEAVY = ("torch", "transformers", "huggingface_hub", "rich")


def imported_by(*args: str) -> set[str]:
    """Every module `stopdoctor ARGS` imports, by full name (the command must succeed)."""
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "stopdoctor", *args],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode in (0, 1), proc.stderr[-2000:]
    modules = {line.split("|")[-1].strip() for line in proc.stderr.splitlines() if line.startswith("import time:")}
    assert "stopdoctor.cli.app" in modules  # the check really saw the imports
    return modules


def test_gguf_inspect_without_a_template_imports_neither_jinja2_nor_tokenizers(real_gguf_models) -> None:
    from stopdoctor.facts.gguf import read_header

    gemma = real_gguf_models.gemma_gguf
    assert read_header(gemma).chat_template is None  # the base model: nothing to render
    modules = imported_by("inspect", "--json", str(gemma))
    assert "stopdoctor.facts.gguf" in modules
    assert not {"jinja2", "tokenizers", *HEAVY} & modules, sorted({"jinja2", "tokenizers", *HEAVY} & modules)


def test_gguf_inspect_imports_no_numpy(real_gguf_models) -> None:
    """The header walk, the token types of the control tokens and the few texts rules look up are
    read from the file's bytes; numpy (~70-100 ms) is imported only when a numeric array is read
    whole (--weights, a tokenizer conversion, the byte-level BPE rules of a gpt2 vocabulary)."""
    modules = imported_by("inspect", "--json", str(real_gguf_models.gemma_gguf))
    assert "stopdoctor.facts.gguf" in modules and "numpy" not in modules


def test_hf_inspect_imports_no_numpy_and_no_model_library(real_models) -> None:
    modules = imported_by("inspect", "--json", str(real_models.smollm2_hf))
    assert "jinja2" in modules and "tokenizers" in modules  # it renders the template, reads tokenizer.json
    assert not {"numpy", *HEAVY} & modules, sorted({"numpy", *HEAVY} & modules)


def test_probe_stop_imports_no_numpy_and_no_model_library(real_models) -> None:
    modules = imported_by("probe-stop", "\\nUser:", "--model", str(real_models.smollm2_hf))
    assert not {"numpy", "torch", "transformers", "huggingface_hub"} & modules


def test_a_command_that_renders_nothing_does_not_import_jinja2() -> None:
    """Every command runs inside `render_deadline`; entering it must not cost jinja2's import."""
    modules = imported_by("rules", "--json")
    assert "stopdoctor.template.limits" in modules
    assert "jinja2" not in modules


COUNT_BUILDS = """
import sys
import typer.main
built = []
original = typer.main.get_command_from_info
def counting(*args, **kwargs):
    built.append(1)
    return original(*args, **kwargs)
typer.main.get_command_from_info = counting
from stopdoctor.cli import app, main
sys.argv = ["stopdoctor", *sys.argv[1:]]
try:
    main()
except SystemExit:
    pass
print(len(built), len(app.registered_commands), file=sys.__stderr__)
"""


@pytest.mark.parametrize(("args", "one"), [
    (["rules", "--json"], True),
    (["probe-stop", "--help"], True),
    (["--help"], False),       # the command list needs them all
    (["inspectx"], False),     # so does "No such command ... Did you mean"
])
def test_typer_builds_only_the_command_that_runs(args: list[str], one: bool) -> None:
    proc = subprocess.run([sys.executable, "-c", COUNT_BUILDS, *args], capture_output=True, text=True, timeout=120)
    built, registered = map(int, proc.stderr.split()[-2:])
    assert registered > 10  # all of them are registered again afterwards
    assert built == (1 if one else registered), proc.stderr[-2000:]


def test_a_gguf_read_twice_in_one_process_has_its_tokenizer_built_once(real_gguf_models, tmp_path, monkeypatch) -> None:
    """`inspect --against`, `check`: the second read of a file reuses the first one's tokenizer
    (Gemma's cached 262k-token JSON took ~1 s a read); a changed file is read again. `diff A A`
    encodes nothing at all (one tokenizer file on both sides)."""
    import shutil

    from stopdoctor.writers.gguf_edit import set_int_key
    from stopdoctor.api import diff_models, diff_report, load
    from stopdoctor.facts import vocab

    reads = []
    original = vocab._read_or_convert
    monkeypatch.setattr(vocab, "_read_or_convert", lambda header, key: reads.append(key) or original(header, key))
    copy = tmp_path / "copy.gguf"
    shutil.copyfile(real_gguf_models.smollm2_gguf, copy)
    assert diff_report(diff_models(str(copy), str(copy))).exit_code() == 0
    assert reads == []
    first, second = load(str(copy)).vocab.tokenizer(), load(str(copy)).vocab.tokenizer()
    assert first is second and len(reads) == 1
    set_int_key(copy, "tokenizer.ggml.eos_token_id", 0)  # another file now: its tokenizer is read anew
    load(str(copy)).vocab.tokenizer()
    assert len(reads) == 2


def test_the_runner_knows_which_rule_families_check_each_kind() -> None:
    """`run_rules` imports only the families listed for its subject's kind: every module of
    stopdoctor.rules imported, each registered rule's module must be listed for its kind."""
    import importlib
    import pkgutil
    from collections import defaultdict

    import stopdoctor.rules as package
    from stopdoctor.rules import registry
    from stopdoctor.rules.runner import FAMILIES, kind_of

    for module in pkgutil.iter_modules(package.__path__):
        importlib.import_module(f"{package.__name__}.{module.name}")
    registered = defaultdict(set)
    for check in registry.REGISTRY.values():
        if check.code != "SD000":  # the crash pseudo-check, registered by the registry itself
            registered[kind_of(check.input)].add(check.function.__module__.rpartition(".")[2])
    assert {kind: set(families) for kind, families in FAMILIES.items()} == dict(registered)


def test_inspect_imports_only_the_model_rules_and_the_registry_stays_whole(real_gguf_models) -> None:
    modules = imported_by("inspect", "--json", str(real_gguf_models.gemma_gguf))
    assert {"stopdoctor.rules.stops", "stopdoctor.rules.template"} <= modules
    assert not {"stopdoctor.rules.labels", "stopdoctor.rules.logs", "stopdoctor.rules.provenance",
                "stopdoctor.rules.expect", "stopdoctor.rules.weights"} & modules
    code = ("from stopdoctor.rules import registry; from stopdoctor.rules.runner import REGISTRY; "
            "print(len(REGISTRY), REGISTRY is registry.REGISTRY, 'SD601' in REGISTRY)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    count, same, labels = proc.stdout.split()
    assert int(count) > 50 and same == "True" and labels == "True", proc.stderr[-2000:]


def test_gguf_inspect_imports_no_html_module(real_gguf_models) -> None:
    """Only the HTML pages escape HTML (`reporters.plain.html_text`): `html` is imported there."""
    modules = imported_by("inspect", "--json", str(real_gguf_models.gemma_gguf))
    assert "stopdoctor.reporters.plain" in modules and "html" not in modules


def test_the_card_patterns_are_compiled_only_for_a_card(real_gguf_models, real_models, tmp_path) -> None:
    """A model without a README.md (every GGUF file) never compiles the six card patterns; the
    first card read compiles them once, and what they find is as before."""
    import shutil

    from stopdoctor.api import inspect_model, load
    from stopdoctor.facts import card_sampling

    card_sampling._patterns.cache_clear()
    inspect_model(str(real_gguf_models.gemma_gguf))
    assert card_sampling._patterns.cache_info().currsize == 0
    folder = tmp_path / "model"
    shutil.copytree(real_models.smollm2_hf, folder, ignore=shutil.ignore_patterns("*.safetensors"))
    (folder / "README.md").write_text("We recommend temperature = 0.6 and top_p: 0.95.\n", encoding="utf-8")
    found = card_sampling.card_sampling(load(str(folder)))
    assert {key: sourced.value for key, sourced in found.items()} == {"temperature": 0.6, "top_p": 0.95}
    assert card_sampling._patterns.cache_info().currsize == 1
