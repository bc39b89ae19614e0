"""SD4xx: the serving configuration — what a server command line, Modelfile or request does to
the model's stops.

These rules check a `ServingInput`: a model's analysis and one serving configuration.
Runtime behaviour cited in each doc was read from the runtime's source:
vLLM `vllm/sampling_params.py`, `vllm/config/model.py`, `vllm/transformers_utils/config.py`;
llama.cpp `src/llama-chat.cpp`; Ollama `runner/llamarunner/runner.go`, `model/models/*/model.go`.
"""

from __future__ import annotations

import re

from stopdoctor.analysis.core import Analysis
from stopdoctor.core.errors import StopdoctorError
from stopdoctor.core.findings import Severity
from stopdoctor.core.records import record
from stopdoctor.facts.serving import ServingConfig
from stopdoctor.rules.configured_stops import inside_turn  # SD420 owns a stop inside the turn
from stopdoctor.rules.inputs import ServingInput
from stopdoctor.facts.serving_config import REQUEST
from stopdoctor.runtimes.advice import serving_stop_lines
from stopdoctor.runtimes.engine_stops import LLAMA_CPP_SET
from stopdoctor.runtimes.engines import serving_engine
from stopdoctor.runtimes.serving import served_stops
from stopdoctor.rules.registry import Rule, rule

# vLLM applies only these keys of --override-generation-config (ModelConfig.get_diff_sampling_param).
VLLM_OVERRIDE_APPLIED = ("repetition_penalty", "temperature", "top_k", "top_p", "min_p", "max_new_tokens")
VLLM_OVERRIDE_STOP_KEYS = ("eos_token_id", "stop", "stop_token_ids", "stop_strings")
# Special-token-looking markers a Go template writes literally.
MARKER = re.compile(r"<\|[^|<>\s]{1,40}\|>|<(?:start|end)_of_turn>|</s>|<s>|\[/?INST\]")
TINY_SHARE = 0.5  # max_tokens cutting more than this share of ordinary answers is a warning


def _end_markers(analysis: Analysis, serving: ServingConfig) -> list[tuple[str, int | None, str]]:
    """(text, id when one special token, where it comes from) of the end-of-turn in use: the
    serving file's own Jinja template when it has one, else the model's."""
    facts = analysis.facts
    engine = serving_engine(serving.kind)
    if serving.template is not None and engine is not None and engine.serves_jinja_template:
        from stopdoctor.template.turns import find_end_of_turn

        try:
            markers = find_end_of_turn(serving.template.value, facts.special_token_texts(), list(facts.vocab.special_tokens))
        except StopdoctorError:
            return []
        out = []
        for marker in markers:
            token_id = facts.vocab.id_of(marker.text)
            special = token_id is not None and facts.vocab.is_special(token_id)
            out.append((marker.text, token_id if special else None, serving.template.key))
        return out
    if serving.template_name is not None:
        builtin = engine.builtin_template_ends if engine is not None else {}
        text = builtin.get(str(serving.template_name.value))
        if text is None:
            return []
        token_id = facts.vocab.id_of(text)
        return [(text, token_id if token_id is not None and facts.vocab.is_special(token_id) else None,
                 f"--chat-template {serving.template_name.value}")]
    return [(m.text, m.ids[0] if m.single_special else None, f"the model's template ({m.template})")
            for m in analysis.end_of_turn]


@rule("SD401", "serving-drops-end-of-turn", Severity.ERROR, input=ServingInput)
def serving_drops_end_of_turn(subject: ServingInput, self: Rule):
    """The server, as configured, does not stop on the template's end-of-turn.

    What it checks:
    Works out the stop set the runtime will really use with this configuration and looks for the
    end-of-turn marker of the template in use (the config's own template when it sets one):
    vLLM: the tokenizer's eos plus the generation config's `eos_token_id`, read from the model
    (`--generation-config auto`, the default, and also `vllm`) or from the folder
    `--generation-config DIR` names; for a GGUF only the tokenizer eos.
    llama.cpp server: the GGUF eos/eot/eom ids (after `--override-kv`) plus its end-of-generation
    texts, plus `-r` strings. Ollama: the GGUF eos id plus `PARAMETER stop` strings.
    One root cause, one finding: when `--ignore-eos`/`ignore_eos` is set (SD405) or the config
    serves another family's template (SD402), that finding is reported and this one rides along
    in its evidence (`also`), so that no two fixes contradict each other.

    Why it matters:
    The model ends its turn with the marker; a server that does not stop there lets it write the
    next user turn and answer it, until max_tokens.

    Example:
    A Modelfile `FROM ./llama3.gguf` whose GGUF eos is `<|end_of_text|>` and with no
    `PARAMETER stop "<|eot_id|>"`.

    Fix:
    Add the end-of-turn as a stop: `PARAMETER stop "<|eot_id|>"` (Ollama);
    `--override-kv tokenizer.ggml.eos_token_id=int:N` (llama.cpp); for vLLM put the id in the
    model's generation_config.json `eos_token_id` (`stopdoctor fix MODEL --write`) and serve with
    `--generation-config auto`. `--override-generation-config` cannot add stop ids.

    How the runtimes decide (source):
    vLLM `SamplingParams.update_from_generation_config` adds the generation config's eos ids to
    `stop_token_ids` next to the tokenizer eos; the config comes from
    `ModelConfig.try_get_generation_config`, which loads the model's own file for both `auto` and
    `vllm` and the named folder otherwise (`transformers_utils/config.py try_get_generation_config`
    returns None for GGUF). Ollama's llama.cpp runner ends on `TokenIsEog(token)`; its own engine's
    vocabulary ends on `tokenizer.ggml.eos_token_id` plus `tokenizer.ggml.eos_token_ids`.
    """
    analysis, serving = subject.analysis, subject.serving
    # One root cause, one finding: a server told to ignore eos (SD405) or given another family's
    # template (SD402) misses the end-of-turn because of that; those findings carry this as evidence.
    if _ignores_eos(serving) or _template_mismatch(analysis, serving) is not None:
        return
    for miss in _missed_end_of_turn(analysis, serving):
        yield self.finding(miss.message, miss.fix, serving.location(miss.key), severity=miss.severity, **miss.evidence)


@record
class _Miss:
    """An end-of-turn marker the server, as configured, does not stop on (SD401's finding)."""

    message: str
    fix: str
    key: str
    severity: Severity | None
    evidence: dict


def _ignores_eos(serving: ServingConfig) -> bool:
    return serving.ignore_eos is not None and bool(serving.ignore_eos.value)


def _missed_end_of_turn(analysis: Analysis, serving: ServingConfig) -> list[_Miss]:
    engine = serving_engine(serving.kind)
    if serving.kind == REQUEST:
        return []
    stops = served_stops(analysis.facts, serving, analysis.stops)
    if not stops.complete:
        return []
    runner_eog = engine is not None and engine.runner_stops_on_eog
    llama_eog = set(analysis.runtime(LLAMA_CPP_SET).ids) if runner_eog else set()
    markers = [(text, token_id, origin) for text, token_id, origin in _end_markers(analysis, serving)
               if text.strip() and (token_id is None or analysis.stop_hazard(token_id) is None)]

    def stops_on(text: str, token_id: int | None) -> bool:
        return ((token_id is not None and token_id in stops.ids)
                or any(stop and stop in text for stop in stops.texts) or text.strip() in stops.texts)

    if any(stops_on(text, token_id) for text, token_id, _ in markers):
        return []  # the turn ends at the first marker the server stops on
    if analysis.turns is None or analysis.turns.style != "next-header":
        markers = markers[-1:]  # the turn's last closing token is the one to add
    misses = []
    plain: list[tuple[str, int | None, str]] = []
    for text, token_id, origin in markers:
        if runner_eog and engine is not None and engine.stop_fix is not None and token_id is not None and token_id in llama_eog:
            fix, key = engine.stop_fix(serving_stop_lines(serving.kind, [(text, token_id)]), serving, True)
            misses.append(_Miss(
                f"{text} (id {token_id}) is no PARAMETER stop and not the GGUF eos: Ollama's llama.cpp runner stops "
                f"on it (end-of-generation list), its own engine does not",
                fix, key, Severity.WARNING,
                dict(end_of_turn=text, id=token_id, stops=sorted(stops.ids))))
            continue
        plain.append((text, token_id, origin))
    if not plain:
        return misses
    # One cause (the server stops on no marker), one finding: a next-header template's headers
    # (GLM: <|user|>, <|observation|>) get one fix that sets each key once, never one per header.
    shown = " / ".join(f"{text} (id {token_id})" if token_id is not None else repr(text) for text, token_id, _ in plain)
    gguf = next(iter(analysis.facts.source.files), None) if analysis.facts.is_gguf else None
    # the advice inspect and fix give too
    line = serving_stop_lines(serving.kind, [(text, token_id) for text, token_id, _ in plain], gguf)
    if engine is not None and engine.stop_fix is not None:  # the engine's own key to set
        fix, key = engine.stop_fix(line, serving, all(token_id is not None for _, token_id, _ in plain))
    else:
        fix, key = line, "--model"
    text, token_id, origin = plain[0]
    misses.append(_Miss(
        f"{serving.kind} stops on {sorted(stops.ids)}{' and ' + repr(list(stops.texts)) if stops.texts else ''} "
        f"({stops.rule}), which misses the end-of-turn {shown} of {origin}",
        fix, key, None, dict(end_of_turn=text, id=token_id, end_of_turns=[t for t, _, _ in plain],
                             ids=[i for _, i, _ in plain], stops=sorted(stops.ids), stop_texts=list(stops.texts))))
    return misses


def _also(misses: list[_Miss]) -> dict:
    """SD401's finding, folded into the root cause's finding as evidence."""
    return {"also": "; ".join(f"SD401 serving-drops-end-of-turn follows from it: {m.message}" for m in misses)} if misses else {}


@rule("SD402", "serving-template-mismatch", Severity.ERROR, input=ServingInput)
def serving_template_mismatch(subject: ServingInput, self: Rule):
    """The serving config's chat template writes other turn markers than the model's own.

    What it checks:
    Compares the turn markers of the template the server uses (vLLM `--chat-template`, llama.cpp
    `--chat-template NAME`/`--chat-template-file`, Ollama `TEMPLATE`) with the model's template:
    its end-of-turn and turn headers, and any special-token-like marker the vocabulary lacks.

    Why it matters:
    A model prompted in another family's format (ChatML markers for a Llama-3 model) never writes
    the end-of-turn the server expects: it runs on or answers badly.

    Example:
    Ollama `TEMPLATE` with `<|im_start|>`/`<|im_end|>` on top of a Llama-3 GGUF.

    Fix:
    Use the model's own template (Ollama: copy the markers of its chat template into TEMPLATE;
    llama.cpp: `--jinja` without `--chat-template` uses the GGUF's own).

    How the runtimes decide (source):
    llama.cpp `src/llama-chat.cpp` `llm_chat_apply_template`: each built-in name writes fixed
    markers (chatml `<|im_end|>`, gemma `<end_of_turn>`, phi3 `<|end|>`, llama2/mistral `</s>`).
    Ollama renders TEMPLATE as a Go text/template: the markers are literal text in it.
    """
    analysis, serving = subject.analysis, subject.serving
    if serving.kind == REQUEST:
        return
    model_ends = {m.text for m in analysis.end_of_turn}
    if not model_ends:
        return
    vocab = analysis.facts.vocab
    engine = serving_engine(serving.kind)
    if engine is not None and engine.template_language == "go":
        if serving.template is None:
            return
        go = serving.template.value
        written = set(MARKER.findall(go))
        missing_vocab = sorted(m for m in written if vocab.id_of(m) is None and m not in ("<s>", "</s>", "[INST]", "[/INST]"))
        if missing_vocab and vocab.special_tokens:
            yield self.finding(
                f"TEMPLATE writes {', '.join(missing_vocab)}, which this model's vocabulary does not have",
                "copy the turn markers of the model's own chat template into TEMPLATE",
                serving.location(serving.template), markers=missing_vocab)
            return
        if not any(end.strip() and end.strip() in go for end in model_ends):
            yield self.finding(
                f"TEMPLATE never writes the model's end-of-turn {', '.join(sorted(model_ends))}",
                "close each assistant turn in TEMPLATE with the model's end-of-turn marker",
                serving.location(serving.template), severity=Severity.WARNING, expected=sorted(model_ends))
            return
        headers = [h for h in analysis.turn_headers.values() if h]
        model_markers = {m for h in headers for m in MARKER.findall(h)}
        foreign = sorted(m for m in written - model_markers - model_ends if m not in ("<s>", "</s>") and model_markers)
        if foreign:
            yield self.finding(
                f"TEMPLATE writes {', '.join(foreign)}, which the model's own template does not",
                "copy the turn markers of the model's own chat template into TEMPLATE",
                serving.location(serving.template), severity=Severity.WARNING, markers=foreign)
        return
    mismatch = _template_mismatch(analysis, serving)
    if mismatch is None:
        return
    message, fix, key, evidence = mismatch
    yield self.finding(message, fix, serving.location(key), **evidence, **_also(_missed_end_of_turn(analysis, serving)))


def _template_mismatch(analysis: Analysis, serving: ServingConfig) -> tuple[str, str, str, dict] | None:
    """(message, fix, key, evidence) when a vLLM or llama.cpp config serves a template whose turns
    end otherwise than the model's own (SD402), else None."""
    engine = serving_engine(serving.kind)
    if serving.kind == REQUEST or (engine is not None and engine.template_language != "jinja") \
            or (serving.template is None and serving.template_name is None):
        return None
    model_ends = {m.text for m in analysis.end_of_turn}
    if not model_ends:
        return None
    ends = _end_markers(analysis, serving)
    key = (serving.template or serving.template_name).key  # type: ignore[union-attr]  # one is set: checked above
    if not ends:
        if serving.template is not None:
            return (f"the template given by {key} never closes an assistant turn", "use the model's own chat template",
                    key, {})
        return None
    served = {text for text, _, _ in ends}
    if served & model_ends:
        return None
    return (f"the template given by {key} ends turns with {', '.join(sorted(served))}; the model's own ends them with "
            f"{', '.join(sorted(model_ends))}", "use the model's own chat template (drop the flag)", key,
            dict(served=sorted(served), model=sorted(model_ends)))


def _tokenizer(analysis: Analysis):
    try:
        return analysis.facts.vocab.tokenizer()
    except StopdoctorError:
        return None


@rule("SD403", "stop-string-unreliable", Severity.WARNING, input=ServingInput)
def stop_string_unreliable(subject: ServingInput, self: Rule):
    """A stop string or stop id that will not fire where it should.

    What it checks:
    Request (and llama.cpp `-r`) stop strings that are one special token; `stop_token_ids` that
    are ordinary tokens, probed with `probe_stop`: encoded after typical preceding texts, the id
    often disappears into a merged token (" User" is one token, not " " + "User").

    Why it matters:
    vLLM matches stop strings on detokenized text, and by default (`skip_special_tokens=true`) a
    special token never reaches that text: the stop string never matches. An id taken from
    `encode("User")` misses wherever the tokenizer merges the word with what precedes it.

    Example:
    `"stop": ["<|im_end|>"]` sent to vLLM; `"stop_token_ids": [2724]` where 2724 is `User`.

    Fix:
    Stop on the special token's id (`stop_token_ids`), and on ordinary text with a stop string.

    How the runtimes decide (source):
    vLLM `SamplingParams` (`skip_special_tokens` defaults to True; stop strings are checked by the
    detokenizer on the output text); stop ids are compared with each sampled token id.
    """
    analysis, serving = subject.analysis, subject.serving
    vocab = analysis.facts.vocab
    engine = serving_engine(serving.kind)
    if serving.kind == REQUEST or (engine is not None and engine.stop_strings_on_visible_text):
        for setting in serving.stop:
            token_id = vocab.id_of(setting.value)
            if token_id is not None and vocab.is_special(token_id) and inside_turn(analysis, setting.value) is None:
                yield self.finding(
                    f"stop string {setting.value!r} is the special token {token_id}: servers that skip special tokens "
                    f"in the output text (vLLM's default) never see it",
                    f"use \"stop_token_ids\": [{token_id}]", serving.location(setting), stop=setting.value, id=token_id)
    if not serving.stop_token_ids:
        return
    tokenizer = _tokenizer(analysis)
    if tokenizer is None:
        return
    from stopdoctor.analysis.probe import probe_stop

    for setting in serving.stop_token_ids:
        token_id = setting.value
        if vocab.knows(token_id) is False:
            yield self.finding(f"stop_token_ids has {token_id}, outside the vocabulary (size {vocab.size})",
                               "remove it", serving.location(setting), severity=Severity.ERROR, id=token_id)
            continue
        if vocab.is_special(token_id):
            continue
        text = tokenizer.decode([token_id], skip_special_tokens=False)
        if not text:
            continue
        probe = probe_stop(tokenizer, [text], corpus=())[0]
        if probe.standalone_ids == [token_id] and probe.id_match_misses:
            yield self.finding(
                f"stop_token_ids {token_id} is the ordinary token {text!r}; after typical text it is encoded otherwise, "
                f"so the id misses in {probe.id_match_misses} of {len(probe.contexts)} contexts",
                f"use the stop string {text.strip()!r} instead", serving.location(setting),
                id=token_id, text=text, misses=probe.id_match_misses)


@rule("SD404", "stop-string-false-positive", Severity.WARNING, input=ServingInput)
def stop_string_false_positive(subject: ServingInput, self: Rule):
    """A stop string (or ordinary stop id) that occurs inside ordinary answers.

    What it checks:
    Searches the probe's sample answers (transcripts, emails, code, markdown) for each stop
    string, and for the text of each ordinary (non-special) stop id.

    Why it matters:
    Generation is cut where the stop first occurs: a stop "User:" ends every answer that quotes a
    dialogue; a stop "\\n\\n" ends answers after their first paragraph.

    Example:
    `PARAMETER stop "User:"` or `"stop": ["###"]`.

    Fix:
    Stop on the end-of-turn token; if a text stop is needed, anchor it ("\\nUser:") or use the
    template's user header.

    How the runtimes decide (source):
    Every runtime ends at the first occurrence of a stop string in the decoded output (vLLM
    detokenizer stop check; Ollama runner `findStop`; llama.cpp server `find_stopping_strings`).
    """
    analysis, serving = subject.analysis, subject.serving
    from stopdoctor.analysis.probe import SAMPLE_ANSWERS, find_false_positives

    vocab = analysis.facts.vocab
    specials = set(vocab.special_tokens)
    for setting in serving.stop:
        if setting.value in specials:
            continue
        hits = find_false_positives(setting.value, SAMPLE_ANSWERS)
        if hits:
            names = sorted({h.sample for h in hits})
            yield self.finding(
                f"stop string {setting.value!r} occurs {len(hits)} time(s) in {len(names)} of {len(SAMPLE_ANSWERS)} "
                f"ordinary sample answers ({', '.join(names[:3])}): it would cut them short",
                "stop on the end-of-turn token, or anchor the string to a line start", serving.location(setting),
                stop=setting.value, samples=names, example=hits[0].excerpt)
    tokenizer = _tokenizer(analysis) if serving.stop_token_ids else None
    for setting in serving.stop_token_ids:
        if tokenizer is None or vocab.is_special(setting.value) or vocab.knows(setting.value) is False:
            continue
        ids_hit = [name for name, text in SAMPLE_ANSWERS
                   if setting.value in tokenizer.encode(text, add_special_tokens=False).ids]
        if ids_hit:
            yield self.finding(
                f"stop_token_ids {setting.value} ({tokenizer.decode([setting.value])!r}) is an ordinary token found in "
                f"{len(ids_hit)} of {len(SAMPLE_ANSWERS)} sample answers",
                "stop on the end-of-turn token id instead", serving.location(setting),
                id=setting.value, samples=ids_hit[:5])


@rule("SD405", "ignore-eos-set", Severity.ERROR, input=ServingInput)
def ignore_eos_set(subject: ServingInput, self: Rule):
    """`ignore_eos` / `--ignore-eos` is on: the end-of-turn token no longer stops generation.

    What it checks:
    A request body's `"ignore_eos": true`, a llama.cpp server's `--ignore-eos`.

    Why it matters:
    Every answer runs to max_tokens: the model ends its turn, then writes fake turns. It is a
    benchmarking switch, not a serving one.

    Example:
    `{"model": "m", "ignore_eos": true, "max_tokens": 2048}`.

    Fix:
    Remove it (`stopdoctor fix --serving FILE --write` sets a request's `ignore_eos` to false).

    How the runtimes decide (source):
    vLLM `SamplingParams.update_from_generation_config`: with `ignore_eos` the eos id is not kept
    and the generation config's eos ids are not added to `stop_token_ids`. llama.cpp
    `--ignore-eos` biases every end-of-generation token to -inf (common sampling setup).
    """
    analysis, serving = subject.analysis, subject.serving
    if serving.ignore_eos is None or not serving.ignore_eos.value:
        return
    ends = [m.text for m in analysis.end_of_turn]
    evidence = {"end_of_turn": ends[0]} if len(ends) == 1 else {"end_of_turn": ends} if ends else {}
    if _template_mismatch(analysis, serving) is None:
        evidence.update(_also(_missed_end_of_turn(analysis, serving)))
    shown = f" {', '.join(ends)}" if ends else ""
    yield self.finding(
        f"{serving.ignore_eos.key} is set: generation ignores the end-of-turn{shown} and runs to the token limit",
        f"remove {serving.ignore_eos.key}", serving.location(serving.ignore_eos.key), **evidence)


@rule("SD406", "max-tokens-truncates", Severity.WARNING, input=ServingInput)
def max_tokens_truncates(subject: ServingInput, self: Rule):
    """max_tokens (num_predict, -n) is too small for ordinary answers.

    What it checks:
    Tokenizes the probe's sample answers with the model's tokenizer and counts how many are
    longer than the configured limit.

    Why it matters:
    Answers are cut mid-sentence ("stops too early"), and `finish_reason` is "length", which
    clients often ignore.

    Example:
    `"max_tokens": 16`.

    Fix:
    Raise the limit; keep it as a runaway guard, not as the way answers end.

    How the runtimes decide (source):
    Every runtime stops at the limit whatever the text (vLLM `max_tokens`, Ollama `num_predict`,
    llama.cpp `n_predict`); OpenAI's `max_completion_tokens` supersedes `max_tokens`.
    """
    analysis, serving = subject.analysis, subject.serving
    if serving.max_tokens is None or serving.max_tokens.value < 0:
        return
    limit = serving.max_tokens.value
    tokenizer = _tokenizer(analysis)
    if tokenizer is None:
        return
    from stopdoctor.analysis.probe import SAMPLE_ANSWERS

    lengths = sorted(len(tokenizer.encode(text, add_special_tokens=False).ids) for _, text in SAMPLE_ANSWERS)
    cut = sum(n > limit for n in lengths)
    if not cut:
        return
    severity = Severity.WARNING if cut / len(lengths) > TINY_SHARE else Severity.INFO
    yield self.finding(
        f"{serving.max_tokens.key} {limit} cuts {cut} of {len(lengths)} ordinary sample answers "
        f"(median {lengths[len(lengths) // 2]} tokens, longest {lengths[-1]})",
        f"raise {serving.max_tokens.key} to at least {max(256, lengths[-1] * 2)}", serving.location(serving.max_tokens.key),
        severity=severity, limit=limit, cut=cut, samples=len(lengths))


@rule("SD407", "serving-override-ignored", Severity.WARNING, input=ServingInput)
def serving_override_ignored(subject: ServingInput, self: Rule):
    """vLLM `--override-generation-config` sets a stop key that vLLM never applies.

    What it checks:
    `eos_token_id`, `stop`, `stop_token_ids` in `--override-generation-config` (command line or
    `--config` YAML).

    Why it matters:
    The operator believes stops are fixed; vLLM takes only sampling keys from the override, so the
    model still runs away.

    Example:
    `--override-generation-config '{"eos_token_id": [128001, 128009]}'`.

    Fix:
    Put the ids in generation_config.json (`stopdoctor fix MODEL --write`), or serve with
    `--generation-config DIR` pointing at a folder whose generation_config.json has them; per
    request, send `stop_token_ids`.

    How the runtimes decide (source):
    vLLM `ModelConfig.get_diff_sampling_param` merges the override and keeps only
    repetition_penalty, temperature, top_k, top_p, min_p and max_new_tokens; the stop ids come from
    `try_get_generation_config`, which never sees the override.
    """
    serving = subject.serving
    if serving.override_generation_config is None:  # vLLM's --override-generation-config, its parser's alone
        return
    ignored = [k for k in serving.override_generation_config.value if k in VLLM_OVERRIDE_STOP_KEYS]
    if ignored:
        yield self.finding(
            f"{serving.override_generation_config.key} sets {', '.join(ignored)}, which vLLM does not apply "
            f"(it takes only {', '.join(VLLM_OVERRIDE_APPLIED)} from it)",
            "put the stop ids in the model's generation_config.json eos_token_id (stopdoctor fix MODEL --write)",
            serving.location(serving.override_generation_config.key), ignored=ignored)
