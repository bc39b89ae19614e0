"""The one line to write, per runtime, to make a server stop on an end-of-turn token: `inspect`,
`check` and `fix` all take their advice from here, so they give the same advice for one defect.

- A GGUF: its `tokenizer.ggml.eos_token_id` is set to the end-of-turn id. It is the one key every
  runtime reads (transformers, vLLM and SGLang load it as the tokenizer eos; llama.cpp adds the eos
  to its end-of-generation set, `llama_vocab::impl::load`), and llama.cpp still stops on the old
  eos when its text is on the end-of-generation list. `stopdoctor fix FILE --write` writes it; at
  serve time llama.cpp takes the same key as `--override-kv KEY=int:ID`.
- Serving files: vLLM `stop_token_ids` per request or the model's generation_config.json served
  with `--generation-config auto`; Ollama `PARAMETER stop "TEXT"`; llama.cpp
  `--override-kv tokenizer.ggml.eos_token_id=int:ID` (or `-r TEXT` for a marker that is no single
  token); SGLang and MLX read the model's generation_config.json `eos_token_id`.

Imports: nothing from stopdoctor.
"""

from __future__ import annotations

GGUF_EOS_KEY = "tokenizer.ggml.eos_token_id"


def gguf_eos_advice(file: str, token_id: int) -> str:
    """What inspect, check and fix say for a GGUF whose eos should be `token_id`."""
    return (f"set {GGUF_EOS_KEY} to {token_id}: `stopdoctor fix {file} --write` (or serve with llama.cpp "
            f"`--override-kv {GGUF_EOS_KEY}=int:{token_id}`)")


def llamacpp_override(token_id: int) -> str:
    return f"--override-kv {GGUF_EOS_KEY}=int:{token_id}"


def serving_stop_line(kind: str, text: str, token_id: int | None, gguf: str | None = None) -> str:
    """The exact line (flag, PARAMETER, JSON member) that makes a server of `kind` stop on the
    end-of-turn `text` (id `token_id` when it is one special token); `gguf`: the model's GGUF file
    name when it is one (its eos is then what to set)."""
    if kind == "ollama":
        return f'PARAMETER stop "{text}"'
    if kind == "llamacpp":
        return llamacpp_override(token_id) if token_id is not None else f"-r {text!r}"
    if kind == "request":
        return f'"stop_token_ids": [{token_id}]' if token_id is not None else f'"stop": [{text!r}]'
    if token_id is None:
        return "use a template whose end-of-turn is a special token"
    if kind == "vllm":
        return (f"add {token_id} to the model's generation_config.json eos_token_id (stopdoctor fix MODEL --write) "
                f"and serve with --generation-config auto (per request: \"stop_token_ids\": [{token_id}])")
    if kind == "llama-cpp-python" or gguf is not None:  # the GGUF's eos is what every engine reads
        return gguf_eos_advice(gguf or "MODEL.gguf", token_id)
    line = f"add {token_id} to the model's generation_config.json eos_token_id (stopdoctor fix MODEL --write)"
    if kind == "sglang":  # SamplingParams.stop_token_ids
        line += f"; per request: \"stop_token_ids\": [{token_id}]"
    return line


# llama.cpp reads each of these keys as one id and ends generation on all of them
# (`llama_vocab::impl::load`, the "sanity checks" after its end-of-generation list): a template
# ended by several next-turn headers (GLM: <|user|>, <|observation|>) gets one key per header, as
# convert_hf_to_gguf.py's `_set_vocab_glm` writes them; never two values for one key.
GGUF_END_KEYS = ("tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id", GGUF_EOS_KEY)


def serving_stop_lines(kind: str, markers: list[tuple[str, int | None]], gguf: str | None = None) -> str:
    """What makes a server of `kind` stop on every one of `markers` (text, id when one special
    token): `serving_stop_line` for one marker; for several, one line that sets each key once."""
    if len(markers) == 1:
        return serving_stop_line(kind, markers[0][0], markers[0][1], gguf)
    ids = [token_id for _, token_id in markers if token_id is not None]
    texts = [text for text, _ in markers]
    if kind == "ollama":
        return " and ".join(f'PARAMETER stop "{text}"' for text in texts)
    if kind == "llamacpp":
        keyed = list(zip(GGUF_END_KEYS, ids))
        rest = [text for text, token_id in markers if token_id not in {i for _, i in keyed}]
        return " ".join([f"--override-kv {key}=int:{token_id}" for key, token_id in keyed] + [f"-r {t!r}" for t in rest])
    all_ids = len(ids) == len(markers)
    if kind == "request":
        return f'"stop_token_ids": {ids}' if all_ids else f'"stop": {texts}'
    if not all_ids:
        return "use a template whose end-of-turn is a special token"
    line = f"add {' and '.join(map(str, ids))} to the model's generation_config.json eos_token_id (stopdoctor fix MODEL --write)"
    if kind == "vllm":
        return line + f" and serve with --generation-config auto (per request: \"stop_token_ids\": {ids})"
    if kind == "llama-cpp-python" or gguf is not None:
        return "serve it with llama.cpp " + serving_stop_lines("llamacpp", markers)
    if kind == "sglang":
        line += f"; per request: \"stop_token_ids\": {ids}"
    return line
