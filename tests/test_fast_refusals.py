"""Refusals that the header or the machine already decide come before the slow work: no tokenizer
is converted from a GGUF with no chat template to say it has none, and torch is not imported to
say there is no CUDA device. Measured in work (what was built or imported), never in seconds."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from stopdoctor.core.errors import InputError
from stopdoctor.facts.vocab import Vocabulary

from .helpers import cli

gguf = pytest.importorskip("gguf")


@pytest.fixture
def no_template_gguf(tmp_path: Path) -> Path:
    """A GGUF with a vocabulary and no tokenizer.chat_template (as Gemma 3's base GGUF)."""
    path = tmp_path / "base.gguf"
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_tokenizer_model("gpt2")
    tokens = ["<s>", "</s>", "a", "b", "User", ":"] + [f"t{i}" for i in range(300)]
    writer.add_token_list(tokens)
    writer.add_token_types([3, 3] + [1] * (len(tokens) - 2))
    writer.add_token_merges(["t 0"])
    writer.add_bos_token_id(0)
    writer.add_eos_token_id(1)
    writer.add_tensor("token_embd.weight", np.ones((4, 8), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


@pytest.fixture
def no_tokenizer(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(self: Vocabulary):
        raise AssertionError("the tokenizer was built before the refusal")

    monkeypatch.setattr(Vocabulary, "tokenizer", refuse)


def test_probe_stop_from_template_refuses_without_building_the_tokenizer(no_template_gguf: Path, no_tokenizer) -> None:
    from stopdoctor.api import probe_stops

    with pytest.raises(InputError, match="no chat template"):
        probe_stops(str(no_template_gguf), [], from_template=True)


def test_generate_messages_refuses_without_building_the_tokenizer(no_template_gguf: Path, no_tokenizer) -> None:
    run = cli("generate", str(no_template_gguf), "-m", "user", "hi")
    assert run.code == 2 and "no chat template" in run.stderr


def test_generate_device_cuda_refuses_before_the_model_or_torch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from stopdoctor import api
    from stopdoctor.actions.generate import local

    def unreachable(*args, **kwargs):
        raise AssertionError("the model was read before the device was checked")

    monkeypatch.setattr(local, "GPU_DEVICE_FILES", (str(tmp_path / "no-such-device"),))
    monkeypatch.setattr(local, "require_torch", unreachable)
    monkeypatch.setattr(api, "plan_generation", unreachable)
    monkeypatch.setattr("sys.platform", "linux")
    run = cli("generate", str(tmp_path), "-m", "user", "hi", "--device", "cuda")
    assert run.code == 2 and "no CUDA device" in run.stderr


def test_a_gpu_device_file_leaves_the_answer_to_torch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Precision: with a GPU device file present nothing is refused early (torch decides)."""
    from stopdoctor.actions.generate import local

    present = tmp_path / "nvidiactl"
    present.touch()
    monkeypatch.setattr(local, "GPU_DEVICE_FILES", (str(present),))
    local.check_device("cuda")
    local.check_device("cpu")
    with pytest.raises(InputError, match="use auto, cpu or cuda"):
        local.check_device("tpu")
