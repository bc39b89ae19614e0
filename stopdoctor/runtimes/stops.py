"""Effective stop ids: what each runtime would really stop on, computed from `ModelFacts`.

Runtimes disagree, which is why a model can stop under one server and run away under another.
The rules, as read from each runtime's source:

- transformers `generate`: `generation_config.eos_token_id` (int or list). The generation config
  is generation_config.json when it exists, else derived from config.json
  (`GenerationConfig.from_model_config`, which also looks into `text_config`/`decoder`/`generator`).
  The tokenizer's eos is never consulted (generation/utils.py `_prepare_special_tokens`).
- vLLM: the tokenizer's eos id, plus every id of the generation config's `eos_token_id`
  (`SamplingParams.update_from_generation_config` adds them as stop_token_ids); the generation
  config comes from generation_config.json, else config.json (`try_get_generation_config`).
  `--generation-config vllm` does not drop these ids: it only stops the generation config's
  sampling defaults from being applied (`ModelConfig.get_diff_sampling_param`).
- TGI: the generation config's `eos_token_id` when it is a list, else the tokenizer's eos
  (router `HubTokenizerConfig`/`GenerationConfig` handling in launcher/router).
- llama.cpp (and Ollama, which runs it): every end-of-generation (EOG) id, computed as
  llama-vocab.cpp does (see `LLAMA_CPP_EOG_TEXTS`). For an HF folder this is what
  `convert_hf_to_gguf.py` would produce: eos from the tokenizer config (config.json as fallback),
  the eot/eom ids its converter class writes for the architecture (`CONVERTER_TURN_TEXTS`), then
  the same rule over the vocabulary.

Imports: model, facts.
"""

from __future__ import annotations


from stopdoctor.core.records import record
from stopdoctor.facts.gguf_special import EOG_TEXTS, EOM_TEXTS, EOT_TEXTS, FIM_EOG_ROLES, FIM_TEXTS, control_by_text
from stopdoctor.facts.model_facts import ROLES, DeclaredId, ModelFacts
from stopdoctor.core.types import Location

RUNTIMES = ("transformers", "vllm", "tgi", "llama.cpp")

# llama.cpp's end-of-generation (EOG) rule, from src/llama-vocab.cpp (`llama_vocab::impl::load`,
# the llama.cpp vendored by llama-cpp-python 0.3.36). Tokens are looked up by exact text among ALL
# tokens (`token_to_id`), whatever their type:
# 1. eot/eom/fim ids come from the GGUF keys (tokenizer.ggml.eot_token_id, ...eom_token_id,
#    ...fim_pad/rep/sep_token_id); a missing one is auto-detected by text (the *_TEXTS below).
# 2. EOG = {fim_pad, fim_rep, fim_sep} ∪ {every token whose text is on LLAMA_CPP_EOG_TEXTS}
#    ∪ {eos, eot, eom} (the "sanity checks" add them when missing).
# 3. When EOG holds <|return|> and <|call|> (gpt-oss), or <|calls|> and <|flush|> (solar-open),
#    <|end|> is removed: it ends a message inside a turn there.
# 4. When EOG holds <|tool_response> or <|plamo:eos|>, </s> is removed (a normal token there).
LLAMA_CPP_EOG_TEXTS = EOG_TEXTS
LLAMA_CPP_EOT_TEXTS = EOT_TEXTS
LLAMA_CPP_EOM_TEXTS = EOM_TEXTS
LLAMA_CPP_FIM_EOG_TEXTS = {role: FIM_TEXTS[role] for role in FIM_EOG_ROLES}  # fim ids that are also EOG


def llama_cpp_control_by_text(facts: ModelFacts) -> set[int]:
    """Ids llama.cpp makes control whatever the GGUF's token type says (it logs "control-looking
    token ... its type will be overridden"): every token on LLAMA_CPP_EOG_TEXTS, always, and the
    eot/eom/fim token it auto-detects by text when no key names that role (stopdoctor.facts.gguf_special)."""
    vocab = facts.vocab
    texts = EOG_TEXTS + EOT_TEXTS + EOM_TEXTS + tuple(t for group in FIM_TEXTS.values() for t in group)
    index = vocab.ids_of(texts)
    gguf = facts.gguf
    # a role is named when the model declares it, or (fill-in-the-middle, which ModelFacts has no
    # role for) when the GGUF has its key, as gguf_tokenizer decides
    return control_by_text(index, lambda role: bool(facts.declared_for(role)) if role in ROLES
                           else gguf is not None and f"tokenizer.ggml.{role}_token_id" in gguf.metadata)


# The eot/eom tokens convert_hf_to_gguf.py writes, by token text, for an architecture of config.json
# (llama.cpp b10435: conversion/base.py `_set_vocab_glm`, used by Glm4MoeModel, Glm4MoeLiteModel and
# GlmMoeDsaModel, eom since llama.cpp PR #14939; `_set_vocab_glmedge`; conversion/glm.py
# Glm4Model.set_vocab; conversion/chatglm.py ChatGLMModel.set_vocab; SolarOpenModel.set_vocab).
# `SpecialVocab._set_special_token` keeps a role already read from the tokenizer files, and those
# never name eot/eom, so these are what the GGUF gets.
_GLM_NEXT_HEADERS = {"eot": "<|user|>", "eom": "<|observation|>"}
CONVERTER_TURN_TEXTS: dict[str, dict[str, str]] = {
    **dict.fromkeys(("Glm4MoeForCausalLM", "Glm4vMoeForConditionalGeneration", "Glm4MoeLiteForCausalLM",
                     "GlmMoeDsaForCausalLM"), _GLM_NEXT_HEADERS),
    **dict.fromkeys(("Glm4ForCausalLM", "Glm4vForConditionalGeneration", "GlmOcrForConditionalGeneration",  # noqa: RUF024 - one shared value, read only
                     "GlmForCausalLM", "ChatGLMModel", "ChatGLMForConditionalGeneration", "GlmasrModel"),
                    {"eot": "<|user|>"}),
    "SolarOpenForCausalLM": {"eot": "<|endoftext|>"},
}


def converter_turn_ids(facts: ModelFacts) -> dict[str, list[StopId]]:
    """The eot/eom ids convert_hf_to_gguf.py would write for this HF folder, by role (empty for a
    GGUF, an architecture it writes none for, or a token the vocabulary lacks: the converter then
    fails, and llama.cpp falls back to its own detection)."""
    if facts.is_gguf:
        return {}
    config = facts.documents.get("config.json")
    architectures = config.get("architectures") if isinstance(config, dict) else None
    if not isinstance(architectures, list) or not architectures or not isinstance(architectures[0], str):
        return {}
    # the converter picks its class by the first architecture (ModelBase.from_model_architecture)
    written = CONVERTER_TURN_TEXTS.get(architectures[0], {})
    found = facts.vocab.exact_ids(tuple(written.values()))
    return {role: [StopId(found[text], text, Location(f"convert_hf_to_gguf.py writes {role} for {architectures[0]}"))]
            for role, text in written.items() if text in found}


# llama.cpp's default eos per tokenizer model when the GGUF has no tokenizer.ggml.eos_token_id.
LLAMA_CPP_DEFAULT_EOS = {"llama": 2, "gpt2": 11, "t5": 1, "plamo2": 2}


@record
class StopId:
    id: int
    text: str | None
    location: Location


@record
class RuntimeStops:
    """The one stop-set type: what a runtime stops on, and what a `generate` run stops on.
    `runtime` names whose set it is ("transformers", "vllm", a request's, or generate's own
    sources: "--stop-id", "llama.cpp + --stop-id", "turn enders", "none")."""

    runtime: str
    stops: tuple[StopId, ...]
    rule: str  # how this runtime chose them, in one sentence
    complete: bool = True  # False when a file this runtime reads is absent or names an unknown token
    texts: tuple[str, ...] = ()  # stop strings (a serving file's: PARAMETER stop, -r, a request's "stop")

    @property
    def ids(self) -> list[int]:
        return sorted({s.id for s in self.stops})


def _stop_ids(declared: list[DeclaredId]) -> list[StopId]:
    return [StopId(d.id, d.text, d.location) for d in declared if d.id is not None]


def stop_ids(declared: list[DeclaredId]) -> list[StopId]:
    """The declared ids that are ids (an engine module's stop set is built from these)."""
    return _stop_ids(declared)


def config_top_eos(facts: ModelFacts) -> list[DeclaredId]:
    """config.json's top-level eos_token_id (what `json.load(config.json).get("eos_token_id")` sees)."""
    return [d for d in facts.declared_for("eos", "config.json") if "." not in (d.location.key or "")]


def generation_file_eos(facts: ModelFacts) -> list[DeclaredId]:
    """generation_config.json's own eos_token_id ids (none when the file is absent)."""
    return facts.declared_for("eos", "generation_config.json")


def generation_file_eos_value(facts: ModelFacts) -> object:
    """generation_config.json's raw `eos_token_id` value (None when absent), for engines that test
    its truth or its presence."""
    document = facts.documents.get("generation_config.json")
    return document.get("eos_token_id") if isinstance(document, dict) else None


def generation_eos(facts: ModelFacts) -> list[DeclaredId]:
    """The eos ids of the generation config transformers and vLLM would build."""
    if "generation_config.json" in facts.documents:
        return facts.declared_for("eos", "generation_config.json")
    top = [d for d in facts.declared_for("eos", "config.json") if "." not in (d.location.key or "")]
    return top or facts.declared_for("eos", "config.json")


def tokenizer_eos(facts: ModelFacts) -> list[DeclaredId]:
    """The eos a tokenizer object reports (`tokenizer.eos_token_id`)."""
    for file in facts.tokenizer_files:
        declared = facts.declared_for("eos", file)
        if declared:
            return [d for d in declared[:1] if d.id is not None]
    return []


def generation_known(facts: ModelFacts) -> bool:
    """A generation config can be built (generation_config.json, else config.json)."""
    return "generation_config.json" in facts.documents or "config.json" in facts.documents


def generation_file(facts: ModelFacts) -> str:
    """The file the generation config's eos comes from."""
    return "generation_config.json" if "generation_config.json" in facts.documents else "config.json"


def tokenizer_known(facts: ModelFacts) -> bool:
    """The tokenizer's eos is known: declared with an id, or the tokenizer files declare none."""
    declared = [d for f in ("tokenizer_config.json", "special_tokens_map.json") for d in facts.declared_for("eos", f)]
    return bool(tokenizer_eos(facts)) or (not declared and "tokenizer_config.json" in facts.documents)


def gguf_eos(facts: ModelFacts) -> list[StopId]:
    """A GGUF's tokenizer.ggml.eos_token_id: what transformers and vLLM load as its eos."""
    return _stop_ids([d for d in facts.declared_for("eos") if d.location.key == "tokenizer.ggml.eos_token_id"])


GGUF_EOS_RULE = "GGUF tokenizer.ggml.eos_token_id (transformers/vLLM load it as the eos)"


def llama_cpp_eog(facts: ModelFacts, eos: list[StopId]) -> list[StopId]:
    """The end-of-generation ids llama.cpp computes from `eos` and the vocabulary."""
    return _llama_cpp_eog(facts, eos)


def _llama_cpp_eog(facts: ModelFacts, eos: list[StopId]) -> list[StopId]:
    """The end-of-generation ids llama.cpp computes (see the rule above LLAMA_CPP_EOG_TEXTS)."""
    vocab = facts.vocab
    size = vocab.size

    def in_vocab(stops: list[StopId]) -> list[StopId]:  # llama.cpp ignores a key out of the vocabulary
        return [s for s in stops if size is None or 0 <= s.id < size]

    every_text = LLAMA_CPP_EOG_TEXTS + LLAMA_CPP_EOT_TEXTS + LLAMA_CPP_EOM_TEXTS + tuple(
        t for texts in LLAMA_CPP_FIM_EOG_TEXTS.values() for t in texts)
    ids_by_text = vocab.exact_ids(dict.fromkeys(every_text))

    def by_text(texts: tuple[str, ...], why: str, first_only: bool) -> list[StopId]:
        found = []
        for text in texts:
            token_id = ids_by_text.get(text)
            if token_id is not None:
                found.append(StopId(token_id, text, Location(why)))
                if first_only:
                    break
        return found

    eos = in_vocab(eos)
    header = vocab.gguf_header
    if not eos and facts.is_gguf and header is not None:
        default = LLAMA_CPP_DEFAULT_EOS.get(header.tokenizer_model or "")
        if default is not None and (size is None or default < size):
            eos = [StopId(default, vocab.text_of(default), Location("llama.cpp default eos of this tokenizer model"))]
    converted = converter_turn_ids(facts)
    eot = (in_vocab(_stop_ids(facts.declared_for("eot"))) or converted.get("eot")
           or by_text(LLAMA_CPP_EOT_TEXTS, "llama.cpp end-of-turn auto-detection", True))
    eom = (in_vocab(_stop_ids(facts.declared_for("eom"))) or converted.get("eom")
           or by_text(LLAMA_CPP_EOM_TEXTS, "llama.cpp end-of-message auto-detection", True))
    fim: list[StopId] = []
    for role, texts in LLAMA_CPP_FIM_EOG_TEXTS.items():
        fim += (in_vocab(_stop_ids(facts.declared_for(role)))
                or by_text(texts, f"llama.cpp {role.replace('_', ' ')} auto-detection (end-of-generation)", True))
    listed = by_text(LLAMA_CPP_EOG_TEXTS, "llama.cpp end-of-generation list", False)
    eog = dedupe(eos + eot + eom + fim + listed)

    def text(stop: StopId) -> str | None:
        return stop.text or vocab.text_of(stop.id)

    eog_texts = {text(s) for s in eog}
    if {"<|return|>", "<|call|>"} <= eog_texts or {"<|calls|>", "<|flush|>"} <= eog_texts:
        eog = [s for s in eog if text(s) != "<|end|>"]
    if eog_texts & {"<|tool_response>", "<|plamo:eos|>"}:
        eog = [s for s in eog if text(s) != "</s>"]
    return eog


def primary_runtime(facts: ModelFacts) -> str:
    """The runtime a model's own format runs in: llama.cpp for GGUF, transformers for HF folders.
    Its stop ids are the ones reported as "effective"."""
    return "llama.cpp" if facts.is_gguf else "transformers"


def dedupe(stops: list[StopId]) -> list[StopId]:
    """First declaration of each id wins (it is the one whose file is cited)."""
    seen: set[int] = set()
    out = []
    for stop in stops:
        if stop.id not in seen:
            seen.add(stop.id)
            out.append(stop)
    return out
