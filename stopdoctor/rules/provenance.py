"""Rules over a model and the original it came from (`inspect MODEL --against ORIGINAL`): a quantized
or re-uploaded copy that dropped the original's eos ids (SD107) or sampling keys (SD108).

Imports: core, facts, runtimes, analysis, actions.diff (its sampling comparison), rules.
"""

from __future__ import annotations

import json

from stopdoctor.analysis.differences import sampling_differences
from stopdoctor.core.findings import Severity
from stopdoctor.core.types import Location
from stopdoctor.runtimes.advice import gguf_eos_advice
from stopdoctor.runtimes.sampling import GGUF_KEYS
from stopdoctor.runtimes.stops import primary_runtime
from stopdoctor.rules.inputs import ComparisonInput
from stopdoctor.rules.registry import Rule, rule

# llama.cpp command-line flag per generation_config.json sampling key (common/arg.cpp).
LLAMACPP_FLAGS = {"temperature": "--temp", "top_p": "--top-p", "top_k": "--top-k", "min_p": "--min-p",
                  "repetition_penalty": "--repeat-penalty"}


def _model_file(subject: ComparisonInput, hf_file: str) -> str:
    facts = subject.analysis.facts
    return next(iter(facts.source.files)) if facts.is_gguf else hf_file


@rule("SD107", "eos-dropped", Severity.WARNING, input=ComparisonInput)
def eos_dropped(subject: ComparisonInput, self: Rule):
    """The model no longer declares an eos id its original declares, and its runtime does not stop on it.

    What it checks:
    Every eos id the original declares (generation_config.json, config.json, the tokenizer files, or
    a GGUF's `tokenizer.ggml.eos_token_id(s)`) against what the model declares as eos, eot or eom
    and the stop ids of the model's own runtime (transformers for a folder, llama.cpp for a GGUF),
    matched by id or by token text.

    Why it matters:
    Quantizers and re-uploaders often copy config.json and the tokenizer but not
    generation_config.json, or convert with an older script: the id that ended the original's
    turns (Gemma 3's `<end_of_turn>` 106, Llama 3's `<|eot_id|>` 128009) is gone, and the copy
    runs on past its answer where the original stopped.

    Example:
    The original's generation_config.json says `"eos_token_id": [1, 106]`; the re-upload has no
    generation_config.json and config.json says `"eos_token_id": 1`: transformers never stops on 106.

    Fix:
    Copy the original's eos ids into the model's generation_config.json `eos_token_id` (a list); for
    a GGUF set `tokenizer.ggml.eos_token_id` to the end-of-turn id (`stopdoctor fix FILE --write`).
    """
    model, original = subject.analysis.facts, subject.original.facts
    runtime = primary_runtime(model)
    stops = set(subject.analysis.runtime(runtime).ids)
    kept = {d.id for role in ("eos", "eot", "eom") for d in model.declared_for(role) if d.id is not None} | stops
    kept_texts = {model.vocab.text_of(i) for i in kept} - {None}
    dropped: list[tuple[int, str | None, Location]] = []
    for declared in original.declared_for("eos"):
        if declared.id is None or declared.id in kept or any(d[0] == declared.id for d in dropped):
            continue
        text = declared.text or original.vocab.text_of(declared.id)
        if text is not None and text in kept_texts:
            continue
        dropped.append((declared.id, text, declared.location))
    if not dropped:
        return
    names = ", ".join(f"{t or '?'} ({i}, {loc})" for i, t, loc in dropped)
    first = dropped[0][0]
    if model.is_gguf:
        fix = gguf_eos_advice(_model_file(subject, ""), first)
        where = Location(_model_file(subject, ""), "tokenizer.ggml.eos_token_id")
    else:
        ids = sorted(kept & {d.id for d in model.declared_for("eos")} | {i for i, _, _ in dropped})
        fix = f"add them to the model's generation_config.json: \"eos_token_id\": {ids}"
        where = Location("generation_config.json", "eos_token_id")
    yield self.finding(
        f"the original ({original.source.spec}) declares eos {names}; this model declares no such id and "
        f"{runtime} does not stop on it: it runs on where the original stops",
        fix, where, dropped=[{"id": i, "text": t, "original_location": str(loc)} for i, t, loc in dropped],
        runtime=runtime)


@rule("SD108", "sampling-dropped", Severity.WARNING, input=ComparisonInput)
def sampling_dropped(subject: ComparisonInput, self: Rule):
    """The model lacks sampling keys its original declares: runtimes fall back to their own defaults.

    What it checks:
    The original's generation_config.json sampling keys (temperature, top_p, top_k, min_p,
    repetition_penalty, presence_penalty, do_sample), or a GGUF's `general.sampling.*`, against
    the model's (`stopdoctor diff`'s sampling comparison). For a GGUF only the keys a GGUF can hold
    count: temperature, top_p, top_k, min_p, repetition_penalty (gguf-py constants
    `general.sampling.temp|top_p|top_k|min_p|penalty_repeat`).

    Why it matters:
    Without them every runtime samples with its own defaults (llama.cpp temp 0.8, top_k 40; vLLM
    temperature 1.0; transformers greedy). Models tuned to sample at a given temperature (reasoning
    models above all) repeat themselves greedily or ramble hot and never reach their end-of-turn.

    Example:
    The original's generation_config.json sets `"temperature": 0.6, "top_p": 0.95`; a GGUF made by
    a converter before general.sampling.* (or an Ollama import) has none, so llama-server samples
    at 0.8 / 0.95 / top_k 40 / min_p 0.05.

    Fix:
    Copy the keys into the model's generation_config.json; for a GGUF pass them when serving
    (llama.cpp `--temp 0.6 --top-p 0.95`, an Ollama `PARAMETER temperature 0.6`) or convert again
    with a llama.cpp whose converter writes `general.sampling.*`.
    """
    model = subject.analysis.facts
    holdable = set(GGUF_KEYS) if model.is_gguf else None
    dropped = [d for d in sampling_differences(subject.original, subject.analysis)
               if d.after is None and d.before is not None and (holdable is None or d.what in holdable)]
    if not dropped:
        return
    listed = ", ".join(f"{d.what} {d.before} ({d.where_a})" for d in dropped)
    if model.is_gguf:
        flags = " ".join(f"{LLAMACPP_FLAGS[d.what]} {d.before}" for d in dropped if d.what in LLAMACPP_FLAGS)
        fix = f"serve with llama.cpp `{flags}` (Ollama: a PARAMETER per key), or convert again with a converter that writes general.sampling.*"
        where = Location(_model_file(subject, ""))
    else:
        keys = ", ".join(f"\"{d.what}\": {json.dumps(d.before)}" for d in dropped)
        fix = f"add to the model's generation_config.json: {keys}"
        where = Location("generation_config.json")
    yield self.finding(
        f"the original ({subject.original.facts.source.spec}) sets {listed}; this model does not, so runtimes "
        f"sample with their own defaults", fix, where,
        dropped={d.what: d.before for d in dropped})
