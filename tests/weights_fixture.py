"""Session fixture: the broken copies of the real SmolLM2 model (end-of-turn row untrained), built
once per session from the real models by fixtures/broken_weights.py into a temporary folder.

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


@pytest.fixture(scope="session")
def broken_weights(real_models, tmp_path_factory) -> BrokenWeights:
    from fixtures.broken_weights import reserved_copy_hf, zeroed_gguf, zeroed_hf

    root = tmp_path_factory.mktemp("broken-weights")
    return BrokenWeights(
        zeroed_hf(real_models.smollm2_hf, root / "smollm2-eot-zeroed"),
        reserved_copy_hf(real_models.smollm2_hf, root / "smollm2-eot-reserved-copy"),
        zeroed_gguf(real_models.smollm2_gguf, root / "smollm2-eot-zeroed.gguf"),
    )
