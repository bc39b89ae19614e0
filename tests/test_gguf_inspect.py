"""inspect on small GGUF files written with the gguf package's writer."""

from __future__ import annotations

import gguf
import numpy as np

from stopdoctor.api import inspect_model

TOKENS = ["<unk>", "<s>", "</s>", "<|im_start|>", "<|im_end|>", "hello", "world"]
TYPES = [2, 3, 3, 3, 3, 1, 1]
CHATML = "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"


def _write(path, **ids):
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_name("Tiny-Chat-Instruct")
    writer.add_tokenizer_model("llama")
    writer.add_token_list(TOKENS)
    writer.add_token_types(TYPES)
    writer.add_token_scores([0.0] * len(TOKENS))
    writer.add_chat_template(CHATML)
    for role, value in ids.items():
        if role == "eos_ids":
            writer.add_array("tokenizer.ggml.eos_token_ids", value)
        else:
            getattr(writer, f"add_{role}_token_id")(value)
    writer.add_tensor("w", np.zeros((2,), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def test_gguf_pad_is_eos(tmp_path):
    result = inspect_model(str(_write(tmp_path / "m.gguf", eos=4, pad=4, bos=1)))
    assert {f.name for f in result.findings} == {"pad-is-eos"}
    # llama.cpp: the eos plus "</s>", which is on its end-of-generation text list
    assert result.analysis.runtime("llama.cpp").ids == [2, 4]


def test_gguf_eos_outside_vocab_is_one_finding(tmp_path):
    result = inspect_model(str(_write(tmp_path / "m.gguf", eos=999, bos=1)))
    invalid = [f for f in result.findings if f.name == "eos-id-invalid"]
    assert len(invalid) == 1 and "outside the vocabulary" in invalid[0].message


def test_gguf_end_of_turn_missing_for_hf_runtimes_but_not_llama_cpp(tmp_path):
    result = inspect_model(str(_write(tmp_path / "m.gguf", eos=2, bos=1)))
    (finding,) = [f for f in result.findings if f.name == "end-of-turn-not-a-stop-id"]
    assert finding.evidence["id"] == 4
    assert finding.evidence["runtimes_stopping"] == ["llama.cpp"]  # <|im_end|> is on its list
    assert finding.location.file == "m.gguf"


def test_gguf_eos_token_ids_are_read(tmp_path):
    result = inspect_model(str(_write(tmp_path / "m.gguf", eos=2, bos=1, eos_ids=[2, 4])))
    keys = {(d.id, d.location.key) for d in result.facts.declared_for("eos")}
    assert (4, "tokenizer.ggml.eos_token_ids") in keys
    # transformers/vLLM read only tokenizer.ggml.eos_token_id
    assert result.analysis.runtime("transformers").ids == [2]
