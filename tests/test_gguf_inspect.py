"""inspect on small GGUF files written with the gguf package's writer."""

from __future__ import annotations

import gguf
import numpy as np

from stopdoctor.api import inspect_model

TOKENS = ["<unk>", "<s>", "</s>", "<|im_start|>", "<|im_end|>", "hello", "world"]
TYPES = [2, 3, 3, 3, 3, 1, 1]
CHATML = "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"


def _write(path, tokens=TOKENS, types=TYPES, template=CHATML, keys=None, **ids):
    """A tiny GGUF: `ids` through the writer's add_<role>_token_id, `keys` as raw
    tokenizer.ggml.<key> uint32 values (fim ids, out-of-vocabulary ids)."""
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_name("Tiny-Chat-Instruct")
    writer.add_tokenizer_model("llama")
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_scores([0.0] * len(tokens))
    if template is not None:
        writer.add_chat_template(template)
    for role, value in ids.items():
        if role == "eos_ids":
            writer.add_array("tokenizer.ggml.eos_token_ids", value)
        else:
            getattr(writer, f"add_{role}_token_id")(value)
    for key, value in (keys or {}).items():
        writer.add_uint32(f"tokenizer.ggml.{key}", value)
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


# --- llama.cpp's end-of-generation rule on hand-made vocabularies (see runtimes.py) ------------


def _types(tokens):
    return [3 if t.startswith("<") else 1 for t in tokens]


def test_llama_cpp_drops_end_when_return_and_call_exist(tmp_path):
    tokens = ["<|endoftext|>", "<|start|>", "<|end|>", "<|return|>", "<|call|>", "<|message|>", "a"]
    path = _write(tmp_path / "oss.gguf", tokens, _types(tokens), None, eos=3)
    # <|end|> ends a message inside a gpt-oss turn: llama.cpp drops it from the set
    assert inspect_model(str(path)).analysis.runtime("llama.cpp").ids == [0, 3, 4]


def test_llama_cpp_fim_keys_and_out_of_vocabulary_ids(tmp_path):
    tokens = ["<|endoftext|>", "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>", "<|im_end|>", "a"]
    path = _write(tmp_path / "q.gguf", tokens, _types(tokens), None, keys={"eot_token_id": 99, "fim_pad_token_id": 1}, eos=4)
    # eot 99 is out of the vocabulary (ignored); fim pad from its key, repo and sep by text
    assert inspect_model(str(path)).analysis.runtime("llama.cpp").ids == [0, 1, 2, 3, 4]
