"""Shared test setup: hermetic environment (no hub, HF cache in a temp dir), the repo root on
sys.path for `fixtures`, synthetic model folders built once per session, the realworld folder,
the template corpus analysed once per session, and `needs_torch` tests skipped, with the reason,
where torch cannot be imported (an install without the `runtime` extra)."""

from __future__ import annotations

import atexit
import functools
import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

# Bytecode is compiled and kept, as in any install: under PYTHONDONTWRITEBYTECODE every CLI run in a
# subprocess compiled the package from source again, and pytest rewrote every test module's asserts
# again in each xdist worker (~30 s of CPU in the quick loop).
sys.dont_write_bytecode = False
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)

# Hermetic: never reach the hub, never read the developer's HF cache or stopdoctor cache. One run's
# folders are shared by its xdist workers (they inherit the controller's environment, which loaded
# this file first): a GGUF's converted tokenizer (15 s for Gemma's 262k vocabulary) is built once a
# run, not once a worker; the cache writes are atomic. The process that made them removes them when
# it ends (pytest's own tmp_path folders are kept only for failures).
_INHERITED = os.environ.get("PYTEST_XDIST_WORKER") and os.environ.get("STOPDOCTOR_TEST_FOLDERS")
if _INHERITED:
    _HF_HOME, _CACHE = _INHERITED.split(os.pathsep)
else:
    _HF_HOME = tempfile.mkdtemp(prefix="stopdoctor-hf-")
    _CACHE = tempfile.mkdtemp(prefix="stopdoctor-cache-")
    os.environ["STOPDOCTOR_TEST_FOLDERS"] = os.pathsep.join((_HF_HOME, _CACHE))
os.environ["HF_HOME"] = _HF_HOME
os.environ["HF_HUB_CACHE"] = str(Path(_HF_HOME) / "hub")
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["HF_HUB_DISABLE_TELEMETRY"] = "1"
os.environ.pop("NO_COLOR", None)
os.environ["STOPDOCTOR_CACHE"] = _CACHE
TEMP_FOLDERS = (_HF_HOME, _CACHE)
if not _INHERITED:
    for _folder in TEMP_FOLDERS:
        atexit.register(shutil.rmtree, _folder, ignore_errors=True)

# typer turns the app into a click command on every `CliRunner.invoke` (~15-25 ms: every command's
# annotations evaluated), more than most commands here take to run; the quick loop's ~800 invocations
# paid it each time (~16 s of CPU). The CLI builds it once a process, and so do the tests now: one build per Typer app
# (none is changed after its commands are registered; tests/test_cold_imports.py checks the real
# `main()` in a subprocess, untouched by this).
import typer.testing  # noqa: E402

typer.testing._get_command = functools.cache(typer.testing._get_command)

pytest_plugins = ["tests.realmodels_fixture", "tests.weights_fixture", "tests.llamaserver_fixture"]

from fixtures.templates import find_realworld  # noqa: E402  (the repo root is on sys.path now)

# CI lays shared/ beside a fresh clone in another folder: looked for beside every ancestor
REALWORLD = find_realworld()


@pytest.fixture(scope="session")
def synth_root(tmp_path_factory) -> Path:
    from fixtures.synth import build_all

    root = tmp_path_factory.mktemp("synth")
    build_all(root)
    return root


@pytest.fixture(scope="session")
def realworld() -> Path:
    if not REALWORLD.is_dir():
        pytest.skip(f"{REALWORLD} is absent (it exists only in the development setup)")
    return REALWORLD


@pytest.fixture(scope="session")
def template_corpus():
    """The chat-template corpus and each template's analysis, computed once per run (tests/corpus.py)."""
    from tests.corpus import TemplateCorpus

    return TemplateCorpus()


@functools.cache
def torch_missing() -> str | None:
    """Why torch cannot be imported, or None. Imported only when a `needs_torch` test is about to
    run (those tests import it anyway), so runs without one never load it."""
    try:
        import torch  # noqa: F401
    except Exception as error:  # noqa: BLE001 - ImportError, or a broken build's OSError
        return (f"needs torch, which cannot be imported ({type(error).__name__}: {error}); "
                "install the runtime extra: pip install -e '.[runtime]'")
    return None


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    # before the test's fixtures: some load a model with torch
    if item.get_closest_marker("needs_torch") is not None and (reason := torch_missing()) is not None:
        pytest.skip(reason)


@pytest.fixture(scope="session")
def spark_session():
    """One local[2] Spark session for the whole test session (a JVM takes seconds to start);
    skipped with the reason when Java or pyspark is missing."""
    import shutil

    if shutil.which("java") is None:
        pytest.skip("no Java runtime: apt-get install -y default-jre-headless (the .ci/run script does)")
    pytest.importorskip("pyspark", reason="pyspark not installed: pip install 'stopdoctor[spark]'")
    from stopdoctor.logs.spark import session

    return session()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # The fuzzers stay out of the quick loop (`pytest -m "not slow"`, issue 28): a `fuzz` test that
    # is not `slow` as well is a mistake to fix, not a test to run.
    unmarked = [item.nodeid for item in items
                if item.get_closest_marker("fuzz") is not None and item.get_closest_marker("slow") is None]
    if unmarked:
        raise pytest.UsageError("mark these fuzz tests slow as well: " + ", ".join(unmarked))
