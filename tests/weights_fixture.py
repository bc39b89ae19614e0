"""Session fixture: the broken copies of the real SmolLM2 model (end-of-turn row untrained), built
from the real models by fixtures/broken_weights.py once per machine, beside the models
(fixtures/derived.py: `<models cache>/derived/`, built again when the builder or a model changes).

Registered from tests/conftest.py via ``pytest_plugins``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest


@dataclass(frozen=True)
class BrokenWeights:
    zeroed_hf: Path  # SmolLM2 HF folder, <|im_end|>'s embedding row zeroed (tied: lm_head too)
    reserved_hf: Path  # the same row replaced by a copy of reserved id 8's untrained row
    zeroed_gguf: Path  # SmolLM2 GGUF, <|im_end|>'s token_embd row zeroed


def derived_root(real_models) -> Path:
    return real_models.smollm2_gguf.parent / "derived"


@pytest.fixture(scope="session")
def broken_weights(real_models) -> BrokenWeights:
    from fixtures.broken_weights import reserved_copy_hf, zeroed_gguf, zeroed_hf
    from fixtures.derived import kept

    root, hf, gguf = derived_root(real_models), real_models.smollm2_hf, real_models.smollm2_gguf
    return BrokenWeights(
        kept(root, "smollm2-eot-zeroed", lambda target: zeroed_hf(hf, target), hf),
        kept(root, "smollm2-eot-reserved-copy", lambda target: reserved_copy_hf(hf, target), hf),
        kept(root, "smollm2-eot-zeroed.gguf", lambda target: zeroed_gguf(gguf, target), gguf),
    )
