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

Imports: facts.serving_config (the request kind), runtimes.engines (the registry: each engine's own advice).
"""

from __future__ import annotations

from collections.abc import Sequence

from stopdoctor.facts.serving_config import REQUEST
from stopdoctor.runtimes.engines import serving_engine

GGUF_EOS_KEY = "tokenizer.ggml.eos_token_id"


def gguf_eos_advice(file: str, token_id: int) -> str:
    """What inspect, check and fix say for a GGUF whose eos should be `token_id`."""
    return (f"set {GGUF_EOS_KEY} to {token_id}: `stopdoctor fix {file} --write` (or serve with llama.cpp "
            f"`--override-kv {GGUF_EOS_KEY}=int:{token_id}`)")


def llamacpp_override(token_id: int) -> str:
    return f"--override-kv {GGUF_EOS_KEY}=int:{token_id}"


# llama.cpp reads each of these keys as one id and ends generation on all of them
# (`llama_vocab::impl::load`, the "sanity checks" after its end-of-generation list): a template
# ended by several next-turn headers (GLM: <|user|>, <|observation|>) gets one key per header, as
# convert_hf_to_gguf.py's `_set_vocab_glm` writes them; never two values for one key.
GGUF_END_KEYS = ("tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id", GGUF_EOS_KEY)


def llama_cpp_stop_lines(markers: Sequence[tuple[str, int | None]]) -> str:
    """llama.cpp's flags for end-of-turn markers: each id as one eos/eot/eom key (never two values
    for one key), the rest as `-r` strings."""
    if len(markers) == 1:
        text, token_id = markers[0]
        return llamacpp_override(token_id) if token_id is not None else f"-r {text!r}"
    ids = [token_id for _, token_id in markers if token_id is not None]
    keyed = list(zip(GGUF_END_KEYS, ids))
    rest = [text for text, token_id in markers if token_id not in {i for _, i in keyed}]
    return " ".join([f"--override-kv {key}=int:{token_id}" for key, token_id in keyed] + [f"-r {t!r}" for t in rest])


def serving_stop_line(kind: str, text: str, token_id: int | None, gguf: str | None = None) -> str:
    """The exact line (flag, PARAMETER, JSON member) that makes a server of `kind` stop on the
    end-of-turn `text` (id `token_id` when it is one special token); `gguf`: the model's GGUF file
    name when it is one (its eos is then what to set)."""
    return serving_stop_lines(kind, [(text, token_id)], gguf)


def serving_stop_lines(kind: str, markers: Sequence[tuple[str, int | None]], gguf: str | None = None) -> str:
    """What makes a server of `kind` (a serving kind, or "request") stop on every one of `markers`
    (text, id when one special token): the engine's own advice (`Engine.stop_advice`, in its module
    in `runtimes/engines/`), else the model's generation_config.json, which the HF-folder engines read."""
    ids = [token_id for _, token_id in markers if token_id is not None]
    texts = [text for text, _ in markers]
    all_ids = len(ids) == len(markers)
    if kind == REQUEST:
        if len(markers) == 1:
            return f'"stop_token_ids": [{ids[0]}]' if all_ids else f'"stop": [{texts[0]!r}]'
        return f'"stop_token_ids": {ids}' if all_ids else f'"stop": {texts}'
    found = serving_engine(kind)
    advice = found.stop_advice(markers, gguf) if found is not None and found.stop_advice is not None else None
    if advice is not None:
        return advice
    if not all_ids:
        return "use a template whose end-of-turn is a special token"
    if gguf is not None:  # the GGUF's eos is what every engine reads
        return (gguf_eos_advice(gguf, ids[0]) if len(markers) == 1
                else "serve it with llama.cpp " + llama_cpp_stop_lines(markers))
    shown = ids[0] if len(ids) == 1 else " and ".join(map(str, ids))
    line = f"add {shown} to the model's generation_config.json eos_token_id (stopdoctor fix MODEL --write)"
    if found is not None and found.request_stop_ids:
        line += f"; per request: \"stop_token_ids\": {ids}"
    return line
