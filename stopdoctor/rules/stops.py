"""SD1xx: stop ids — what ends generation, per runtime, and whether it is the right token."""

from __future__ import annotations

import re

from stopdoctor.analysis.core import Analysis
from stopdoctor.core.types import Location
from stopdoctor.core.findings import Severity
from stopdoctor.runtimes.advice import gguf_eos_advice
from stopdoctor.runtimes.engines import registered
from stopdoctor.runtimes.engines import hf_runtimes
from stopdoctor.runtimes.stops import LLAMA_CPP_EOG_TEXTS, RUNTIMES, generation_eos, llama_cpp_control_by_text, tokenizer_eos
from stopdoctor.rules.registry import Rule, rule

HF_RUNTIMES = hf_runtimes()  # transformers, vLLM, TGI: the engine registry says which
END_LIKE = re.compile(r"end|eos|eot|</s>|stop|return|eom", re.IGNORECASE)


def _fix_location(analysis: Analysis) -> Location:
    facts = analysis.facts
    if facts.is_gguf:
        return Location(next(iter(facts.source.files)), "tokenizer.ggml.eos_token_id")
    if "generation_config.json" in facts.documents or "config.json" not in facts.documents:
        return Location("generation_config.json", "eos_token_id")
    return Location("config.json", "eos_token_id")


def _listed_gguf_end_ids(analysis: Analysis) -> set[int]:
    """The ids a GGUF lists in tokenizer.ggml.eos_token_ids (empty for an HF folder)."""
    return {d.id for d in analysis.facts.declared_for("eos")
            if d.id is not None and d.location.key == "tokenizer.ggml.eos_token_ids"}


@rule("SD101", "end-of-turn-not-a-stop-id", Severity.ERROR)
def end_of_turn_not_a_stop_id(analysis: Analysis, self: Rule):
    """The template's end-of-turn token is not a stop id of a runtime.

    What it checks:
    Renders the chat template, reads the token it writes right after assistant content (the
    end-of-turn marker), and looks it up in each runtime's effective stop ids. A GGUF that lists the
    marker in `tokenizer.ggml.eos_token_ids` is judged on llama.cpp alone (Ollama reads that list).

    Why it matters:
    The model was trained to end its turn with this token. A runtime that does not stop on it lets
    the model go on: it answers, writes the marker, then a fake next turn ("user ...") and answers
    again, until the token budget runs out.

    Example:
    Llama-3-Instruct with generation_config.json `"eos_token_id": 128001`: transformers never stops
    on `<|eot_id|>` (128009); vLLM and llama.cpp do (tokenizer eos / end-of-generation list).

    Fix:
    Add the end-of-turn id to generation_config.json `eos_token_id` (a list keeps the old id):
    `"eos_token_id": [128001, 128009]`. For a GGUF, set `tokenizer.ggml.eos_token_id` to the
    end-of-turn id (`stopdoctor fix FILE --write`; at serve time llama.cpp `--override-kv`).
    """
    location = _fix_location(analysis)
    required = analysis.required_stop_ids()
    # transformers with no stop id at all is SD106's finding (it names the cause precisely)
    # the core runtimes; another engine's miss is reported where it is served (check --serving)
    missing = [s.runtime for s in analysis.stops if s.runtime in RUNTIMES and s.complete and analysis.misses_end_of_turn(s.ids)
               and not (registered(s.runtime).generation_config_only and not s.ids and not analysis.facts.is_gguf)]
    if analysis.facts.is_gguf and set(required) & _listed_gguf_end_ids(analysis):
        # the GGUF lists its end ids in tokenizer.ggml.eos_token_ids (Unsloth's Gemma 4: eos 1 plus
        # [1, 106, 50]): Ollama stops on that list, llama.cpp on its own end-of-generation set; only
        # an HF loader of the GGUF reads the single eos, and the file is not what to change for it
        missing = [runtime for runtime in missing if registered(runtime).gguf_native]
    if not missing:
        return
    stopping = [s.runtime for s in analysis.stops if s.runtime in RUNTIMES and set(required) & set(s.ids)]
    primary = analysis.primary_stop_ids()
    markers = [m for m in analysis.end_of_turn if m.stop_id in primary]
    named = " / ".join(f"{m.text} (id {m.stop_id})" for m in markers)
    current = sorted({d.id for d in generation_eos(analysis.facts) if d.id is not None})
    wanted = analysis.suggested_stop_ids(current)
    verb = "ends assistant turns with" if analysis.turns is None or analysis.turns.style != "next-header" else "ends assistant turns where the next turn opens with"
    message = f"the template {verb} {named}, but {', '.join(missing)} will not stop on it"
    if stopping:
        message += f" ({', '.join(stopping)} will)"
    if analysis.facts.is_gguf:
        fix = gguf_eos_advice(location.file, primary[0])
    elif wanted == current:
        # generation_config.json already lists the end of turn: only the converted GGUF misses it
        # (convert_hf_to_gguf.py reads the tokenizer files, never generation_config.json)
        fix = "after convert_hf_to_gguf.py, " + gguf_eos_advice("MODEL.gguf", primary[0])
    else:
        fix = f"set {location.file} \"eos_token_id\": {wanted}"
    for marker in markers:
        yield self.finding(message, fix, location, end_of_turn=marker.text, id=marker.stop_id,
                           runtimes_missing=missing, runtimes_stopping=stopping, current=current, suggested=wanted)
        break  # one finding per model: the fix adds every primary id at once


@rule("SD106", "no-stop-id", Severity.ERROR)
def no_stop_id(analysis: Analysis, self: Rule):
    """transformers has no stop id at all: generation only ends at the token budget.

    What it checks:
    generation_config.json exists without `eos_token_id` (or is absent and config.json declares
    none), so `model.generate` has nothing to stop on, whatever the template or tokenizer says.

    Why it matters:
    Every answer runs to max_new_tokens: after its end-of-turn the model writes fake turns, and a
    stop id declared only in the tokenizer is never consulted by transformers.

    Example:
    A multimodal repo whose generation_config.json has no `eos_token_id` while the language
    model's nested config declares 2.

    Fix:
    Set generation_config.json `"eos_token_id"` to the tokenizer's eos and the template's
    end-of-turn id.
    """
    facts = analysis.facts
    if facts.is_gguf or not ({"generation_config.json", "config.json"} & set(facts.documents)):
        return
    if analysis.runtime("transformers").ids:
        return
    location = _fix_location(analysis)
    tokenizer = [d.id for d in tokenizer_eos(facts) if d.id is not None]
    wanted = analysis.suggested_stop_ids(tokenizer)
    markers = ", ".join(m.text for m in analysis.end_of_turn) or None
    if wanted:
        fix = f"set {location.file} \"eos_token_id\": {wanted}"
    else:
        fix = (f"set {location.file} \"eos_token_id\" to the id of "
               + (markers if markers else "the tokenizer's eos token") + " (add tokenizer.json to let stopdoctor name it)")
    yield self.finding(f"{location.file} declares no eos_token_id, so transformers never stops before the token budget",
                       fix, location, suggested=wanted, end_of_turn=markers)


@rule("SD102", "stop-ids-disagree", Severity.WARNING)
def stop_ids_disagree(analysis: Analysis, self: Rule):
    """The files that declare eos disagree, so runtimes stop on different tokens.

    What it checks:
    Compares the effective stop ids of transformers, vLLM and TGI, computed from
    generation_config.json, config.json and the tokenizer's eos.

    Why it matters:
    The same model then stops under one server and runs away under another; a test in one
    stack says nothing about production in the other.

    Example:
    tokenizer_config.json `eos_token` is `<|eot_id|>` while generation_config.json says 128001:
    vLLM stops on both, transformers only on 128001.

    Fix:
    Declare the same set everywhere; generation_config.json `eos_token_id` as a list that contains
    the tokenizer's eos and the end-of-turn token.
    """
    # transformers with no stop id at all is no-stop-id's finding
    sets = {s.runtime: s.ids for s in analysis.stops if s.runtime in HF_RUNTIMES and s.complete
            and (s.ids or not registered(s.runtime).generation_config_only)}
    if len({tuple(v) for v in sets.values()}) <= 1 or analysis.facts.is_gguf:
        return
    union = sorted({i for ids in sets.values() for i in ids})
    described = "; ".join(f"{name} {ids}" for name, ids in sets.items())
    yield self.finding(
        f"runtimes stop on different ids: {described}",
        f"declare the same stop ids everywhere, e.g. generation_config.json \"eos_token_id\": {union}",
        _fix_location(analysis), per_runtime=sets,
    )


@rule("SD103", "eos-id-invalid", Severity.ERROR)
def eos_id_invalid(analysis: Analysis, self: Rule):
    """An eos/stop id is outside the vocabulary, names an ordinary token, or names no end token.

    What it checks:
    Every declared eos/eot/eom id (generation_config.json, config.json, GGUF) is looked up in the
    vocabulary.

    Why it matters:
    An id past the vocabulary can never be generated; an ordinary word as eos stops generation in
    the middle of text; a declaration with no end token at all never stops.

    Example:
    Falcon-40B mirror: `eos_token_id` 2 is `>>INTRODUCTION<<`; the tokenizer's eos
    `<|endoftext|>` is id 11.

    Fix:
    Point the id at the tokenizer's eos / the template's end-of-turn token.
    """
    facts = analysis.facts
    vocab = facts.vocab
    # a tokenizer eos whose text the (complete) vocabulary lacks: no id can ever be generated for it
    if vocab.complete:
        for declared in facts.declared_for("eos"):
            if declared.id is None and declared.text and declared.location.file in ("tokenizer_config.json", "special_tokens_map.json"):
                yield self.finding(
                    f"{declared.location} is {declared.text!r}, which is not in the vocabulary: the tokenizer has no eos id",
                    "set eos_token to a token of this vocabulary (the template's end-of-turn or the model's eos)",
                    declared.location, text=declared.text)
    # the tokenizer's eos text is an independent witness of "the end token" (a GGUF has none:
    # its eos id is the very declaration under test)
    end_ids = {d.id for d in tokenizer_eos(facts)} | analysis.end_of_turn_ids
    # a GGUF token typed normal whose text is on llama.cpp's lists is control once loaded
    retyped = llama_cpp_control_by_text(facts) if facts.is_gguf else set()
    by_location: dict[str, list] = {}
    for declared in facts.declared:
        if declared.role in ("eos", "eot", "eom") and declared.id is not None and declared.location.file != "tokenizer_config.json":
            by_location.setdefault(str(declared.location), []).append(declared)
    for group in by_location.values():
        ends = 0
        for declared in group:
            token_id = declared.id
            known = vocab.knows(token_id)
            if known is False:
                yield self.finding(
                    f"{declared.location} is {token_id}, outside the vocabulary (size {vocab.size})",
                    "use the id of the eos / end-of-turn token", declared.location, id=token_id, vocab_size=vocab.size)
                ends += 1  # reported; the group needs no second finding
                continue
            text = vocab.text_of(token_id)
            if text is None:
                ends += 1  # cannot tell; do not accuse
                continue
            if not vocab.is_special(token_id) and token_id not in end_ids and token_id not in retyped:
                yield self.finding(
                    f"{declared.location} is {token_id}, the ordinary token {text!r}: generation stops in the middle of text",
                    "use the id of the eos / end-of-turn token", declared.location, id=token_id, text=text)
                ends += 1
                continue
            if token_id in end_ids or text in LLAMA_CPP_EOG_TEXTS or END_LIKE.search(text):
                ends += 1
        if group and ends == 0:
            first = group[0]
            expected = sorted(i for i in end_ids if i is not None)
            names = ", ".join(f"{vocab.text_of(d.id)!r} ({d.id})" for d in group)
            yield self.finding(
                f"{first.location} names {names}, which is no end-of-text or end-of-turn token"
                + (f"; the tokenizer's eos / end-of-turn is {expected}" if expected else ""),
                f"set {first.location} to {expected if expected else 'the eos token id'}",
                first.location, ids=[d.id for d in group], expected=expected)


@rule("SD104", "pad-is-eos", Severity.WARNING)
def pad_is_eos(analysis: Analysis, self: Rule):
    """The pad token and the eos token are the same token.

    What it checks:
    Compares the tokenizer's pad and eos (tokenizer_config.json / special_tokens_map.json, or the
    GGUF ids).

    Why it matters:
    SFT collators mask padding out of the loss; when pad == eos they mask the eos too, and the
    fine-tuned model never learns to stop.

    Example:
    `"pad_token": "</s>"` with `"eos_token": "</s>"`.

    Fix:
    Use a dedicated pad token (`<pad>`, `<|finetune_right_pad_id|>`, or add one), or a collator
    that keeps the first eos in the labels.
    """
    facts = analysis.facts
    pads = [d for d in facts.declared_for("pad") if d.location.file not in ("config.json", "generation_config.json")]
    eoss = [d for d in facts.declared_for("eos") if d.location.file not in ("config.json", "generation_config.json")]
    if not pads or not eoss:
        return
    pad, eos = pads[0], eoss[0]
    same = (pad.text is not None and pad.text == eos.text) or (pad.id is not None and pad.id == eos.id)
    if same:
        label = pad.text or f"id {pad.id}"
        yield self.finding(
            f"pad and eos are both {label} ({pad.location} and {eos.location})",
            "set a dedicated pad token; never train with pad == eos unless the collator keeps the eos label",
            pad.location, token=label, id=pad.id)


@rule("SD105", "eos-declarations-differ", Severity.INFO)
def eos_declarations_differ(analysis: Analysis, self: Rule):
    """config.json declares an eos that generation_config.json does not, though runtimes agree.

    What it checks:
    config.json `eos_token_id` against generation_config.json `eos_token_id`, as sets.

    Why it matters:
    Harmless today, but a tool that reads only one file (an exporter, a serving wrapper) picks a
    different stop set.

    Example:
    config.json eos 2 while generation_config.json lists [1, 107]: runtimes read the latter, an
    exporter reading config.json alone stops on 2.

    Fix:
    Make config.json and the tokenizer agree with generation_config.json.
    """
    facts = analysis.facts
    if facts.is_gguf:
        return
    sets = {s.runtime: s.ids for s in analysis.stops if s.runtime in HF_RUNTIMES and s.complete}
    if len({tuple(v) for v in sets.values()}) > 1:
        return  # stop-ids-disagree reports it
    config = {d.id for d in facts.declared_for("eos", "config.json") if d.id is not None and "." not in (d.location.key or "")}
    generation = {d.id for d in facts.declared_for("eos", "generation_config.json") if d.id is not None}
    if config and generation and not config <= generation:
        yield self.finding(
            f"config.json eos_token_id {sorted(config)} is not among generation_config.json's {sorted(generation)}",
            f"set config.json \"eos_token_id\" to {sorted(generation)} (or a member of it)",
            Location("config.json", "eos_token_id"), config=sorted(config), generation=sorted(generation))
