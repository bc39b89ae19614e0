"""Shared test setup: hermetic environment (no hub, HF cache in a temp dir), the repo root on
sys.path for `fixtures`, synthetic model folders built once per session, the realworld folder."""

from __future__ import annotations

import atexit
import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

# Hermetic: never reach the hub, never read the developer's HF cache.
_HF_HOME = tempfile.mkdtemp(prefix="stopdoctor-hf-")
os.environ["HF_HOME"] = _HF_HOME
os.environ["HF_HUB_CACHE"] = str(Path(_HF_HOME) / "hub")
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["HF_HUB_DISABLE_TELEMETRY"] = "1"
os.environ.pop("NO_COLOR", None)
os.environ["STOPDOCTOR_CACHE"] = tempfile.mkdtemp(prefix="stopdoctor-cache-")
TEMP_FOLDERS = (_HF_HOME, os.environ["STOPDOCTOR_CACHE"])
# Removed when the test process ends (pytest's own tmp_path folders are kept only for failures).
for _folder in TEMP_FOLDERS:
    atexit.register(shutil.rmtree, _folder, ignore_errors=True)

pytest_plugins = ["tests.realmodels_fixture"]

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
