"""SD15x and SD45x: reasoning models — stops that end a reply inside its thought, budgets too small
for thinking and answer together, sampling the card forbids, a serving parser that misreads the thought.

Model rules take the `Analysis` (its `reasoning`, learnt from the template by
`stopdoctor.template.reasoning`); serving rules a `ServingInput`. Every rule is silent on a model
whose template shows no thought: precision first.
Runtime behaviour cited: vLLM `vllm/reasoning/deepseek_r1_reasoning_parser.py` (text before `</think>`
is reasoning, all of it when none comes), `qwen3_reasoning_parser.py`, `gptoss_reasoning_parser.py`;
llama.cpp `common/arg.cpp` (`--reasoning-format none|deepseek|auto`, `--reasoning-budget`).
The serving parser rules cite the source version they describe: vLLM's `qwen3` parser required both
`<think>` and `</think>` in the output (`if self.start_token not in model_output or self.end_token not
in model_output: return None, model_output`) until PR #34779 (vllm #22507 on 0.10.0, #27118 on
0.11.0; fixed from 0.16.1rc0), while `deepseek_r1` reads a reply without `<think>` as reasoning up to
`</think>`. llama.cpp (vendored by llama-cpp-python 0.3.36): `--reasoning off` only passes
`enable_thinking=false` to the template (common/chat.cpp `common_chat_template_direct_apply_impl`),
and `--reasoning-budget N` is applied only when the chat parser knows the thought's tags
(tools/server/server-common.cpp: `if (!chat_params.thinking_end_tags.empty())`), which the
`--no-jinja` legacy route never sets.
"""

from __future__ import annotations

import re

from stopdoctor.analysis.core import Analysis
from stopdoctor.core.findings import Severity
from stopdoctor.core.types import Location
from stopdoctor.facts.card import card_output_tokens
from stopdoctor.facts.card_sampling import card_sampling, card_values
from stopdoctor.facts.serving_config import REQUEST
from stopdoctor.runtimes.engines import engine, serving_engine
from stopdoctor.rules.configured_stops import inside_turn  # SD420 owns a stop inside the turn
from stopdoctor.rules.inputs import ServingInput
from stopdoctor.rules.registry import Rule, rule

# vLLM reasoning parsers by the framing they read (runtimes/engines/vllm.py cites each parser).
VLLM_PARSERS = engine("vllm").reasoning_parsers  # type: ignore[union-attr]  # a registered engine
HARMONY_PARSERS = frozenset().union(*(p.names for p in VLLM_PARSERS if p.framing == "harmony"))
# Parsers that read everything before `</think>` as reasoning, all of the output when none comes.
OPEN_ENDED_PARSERS = frozenset().union(*(p.names for p in VLLM_PARSERS if p.framing == "open-ended"))
# Parsers that needed the open tag in the output (vLLM's qwen3 until PR #34779, 0.16.1rc0).
OPEN_TAG_PARSERS = frozenset().union(*(p.names for p in VLLM_PARSERS if p.framing == "open-tag"))
MIN_REASONING_BUDGET = 1024  # below this a thinking model ends inside its thought on most prompts


def _harmony_hazards(analysis: Analysis, ids: list[int]) -> list[tuple[int, str]]:
    return [(i, why) for i in ids if (text := analysis.facts.vocab.text_of(i)) is not None
            and (why := analysis.reasoning.stop_hazard(text)) is not None]


@rule("SD150", "harmony-stop-set", Severity.ERROR)
def harmony_stop_set(analysis: Analysis, self: Rule):
    """A Harmony model (gpt-oss) stops on `<|end|>`/`<|message|>`, or not on `<|return|>`/`<|call|>`.

    What it checks:
    For a template that writes the reply in Harmony channels, the model's own stop ids
    (generation_config.json / config.json eos_token_id): none may close the analysis message or
    frame a message, and the answer's `<|return|>` and the tool call's `<|call|>` must be there.

    Why it matters:
    `<|end|>` closes the analysis message: stopping on it returns an empty answer after the
    thinking (vmlx-swift PR #254). `<|message|>`/`<|start|>` stop after about three tokens (ollama
    #17939). Without `<|call|>` a tool call never ends.

    Example:
    generation_config.json eos_token_id [200002, 199999, 200007] where 200007 is `<|end|>`.

    Fix:
    Stop on `<|return|>` and `<|call|>` (and the eos); remove `<|end|>` and the channel tokens.
    """
    if analysis.reasoning.style != "harmony":
        return
    transformers = analysis.runtime("transformers")
    where = {s.id: s.location for s in transformers.stops}
    for token_id, why in _harmony_hazards(analysis, transformers.ids):
        yield self.finding(f"the model stops on {analysis.facts.vocab.text_of(token_id)} ({token_id}): {why}",
                           f"remove {token_id} from the stop ids; stop on {', '.join(analysis.reasoning.stop_texts)}",
                           where.get(token_id), token=token_id)
    needed = analysis.reasoning_stop_ids()
    for text, token_id in zip(analysis.reasoning.stop_texts, needed):
        if token_id not in transformers.ids:
            severity = Severity.ERROR if token_id == needed[0] else Severity.WARNING
            what = "the answer never ends" if severity is Severity.ERROR else "a tool call never ends"
            yield self.finding(f"the model does not stop on {text} ({token_id}): {what}",
                               f"add {token_id} to eos_token_id in generation_config.json",
                               Location("generation_config.json", "eos_token_id"), severity, token=token_id)


@rule("SD151", "greedy-reasoning", Severity.WARNING)
def greedy_reasoning(analysis: Analysis, self: Rule):
    """A thinking model is set to greedy decoding.

    What it checks:
    A template that thinks by default, with generation_config.json `do_sample: false` or
    `temperature: 0`.

    Why it matters:
    Reasoning model cards (Qwen3, DeepSeek-R1: "DO NOT use greedy decoding, as it can lead to
    performance degradation and endless repetitions") ask for sampling at about 0.6: greedy
    thinking loops until the budget runs out (Qwen3 #1427).

    Example:
    generation_config.json {"do_sample": false} on a Qwen3 model.

    Fix:
    Sample as the card says (Qwen3 thinking: temperature 0.6, top_p 0.95, top_k 20).
    """
    reasoning = analysis.reasoning
    if not reasoning.is_reasoning or reasoning.default_on is False:
        return
    sampling = analysis.facts.sampling
    do_sample, temperature = sampling.get("do_sample"), sampling.get("temperature")
    if do_sample is not None and do_sample.value is False:
        yield self.finding("the model thinks by default but decodes greedily (do_sample false): thinking loops",
                           "set do_sample true and the card's temperature (about 0.6)", do_sample.location)
    elif temperature is not None and isinstance(temperature.value, (int, float)) and temperature.value == 0:
        yield self.finding("the model thinks by default but temperature is 0 (greedy): thinking loops",
                           "set the card's temperature (about 0.6)", temperature.location)


# --- serving ---------------------------------------------------------------------------------


def _option(serving, *names: str):
    return next((serving.options[n] for n in names if n in serving.options), None)


@rule("SD450", "reasoning-parser-mismatch", Severity.WARNING, input=ServingInput)
def reasoning_parser_mismatch(subject: ServingInput, self: Rule):
    """The server's reasoning parser does not read the model's thought framing.

    What it checks:
    vLLM `--reasoning-parser` (or `reasoning_parser` in its YAML) and llama.cpp `--reasoning-format`,
    `--reasoning` and `--reasoning-budget` against the reasoning structure of the model's template: a
    Harmony parser on a `<think>` model or the reverse; `deepseek_r1` on a model whose thinking can
    be turned off; `qwen3` on a template whose prompt already opens the thought; a parser on a model
    that does not think; `--reasoning-format none` on a thinking model; llama.cpp `--reasoning off`
    on a template that `enable_thinking=false` does not turn off; `--reasoning-budget` with
    `--no-jinja` or on a model that does not think.

    Why it matters:
    vLLM's `deepseek_r1` parser takes everything before `</think>` as reasoning, all of it when no
    `</think>` comes: on Qwen3 with `enable_thinking=false` every answer lands in
    `reasoning_content` and `content` is empty (vllm #17327). vLLM's `qwen3` parser before 0.16.1
    needed `<think>` in the output: on a prefilled template (Qwen3.5, Thinking-2507) the thought
    stays in `content` (vllm #22507, #27118). llama.cpp `--reasoning-format none` leaves the raw
    thought in `content`; `--reasoning off` only sets the template's `enable_thinking`; the reasoning
    budget is applied only when the Jinja template's parser knows the thought's tags.

    Example:
    vllm serve Qwen/Qwen3-8B --reasoning-parser deepseek_r1

    Fix:
    Use the parser of the model's framing (`qwen3` for Qwen3's switchable `<think>`,
    `openai_gptoss` for Harmony), or none for a model that does not think.
    """
    analysis, serving = subject.analysis, subject.serving
    reasoning = analysis.reasoning
    parser = _option(serving, "--reasoning-parser", "reasoning_parser", "reasoning-parser")
    served = serving_engine(serving.kind)
    if served is not None and not served.vllm_parser_names:
        parser = None  # parsers stopdoctor has not read: no verdict on their names
    if parser is not None and isinstance(parser.value, str) and parser.value:
        name = parser.value.strip().lower().replace("-", "_")
        where = serving.location(parser.key)
        if not reasoning.is_reasoning:
            yield self.finding(f"--reasoning-parser {name} on a model whose template shows no thought",
                               "drop --reasoning-parser, or check that this is the model you meant", where, Severity.INFO)
        elif reasoning.style == "harmony" and name not in HARMONY_PARSERS:
            yield self.finding(f"--reasoning-parser {name} on a Harmony model: its channels are not <think> tags",
                               "use --reasoning-parser openai_gptoss", where, Severity.ERROR)
        elif reasoning.style != "harmony" and name in HARMONY_PARSERS:
            yield self.finding(f"--reasoning-parser {name} reads Harmony channels; this model writes {reasoning.open or 'a thought'}…{reasoning.close}",
                               "use the parser of the model's <think> framing (qwen3, deepseek_r1…)", where, Severity.ERROR)
        elif name in OPEN_ENDED_PARSERS and reasoning.can_disable and not reasoning.prefilled:
            yield self.finding(f"--reasoning-parser {name} reads all output before {reasoning.close} as reasoning; with "
                               f"{reasoning.can_disable} no {reasoning.close} comes and every answer lands in reasoning_content",
                               "use --reasoning-parser qwen3 (it reads a reply without the thought as content)", where)
        elif name in OPEN_TAG_PARSERS and served is not None and served.open_tag_parser(name) and reasoning.prefilled \
                and reasoning.open == "<think>":
            yield self.finding(f"the prompt already opens the thought ({reasoning.open}), so the output holds only "
                               f"{reasoning.close}; vLLM's {name} parser before 0.16.1 needs both tags and then puts the "
                               "whole thought and the answer in content (vllm #22507, #27118)",
                               "use vLLM 0.16.1 or later (PR #34779); on an older vLLM use --reasoning-parser deepseek_r1 "
                               "if thinking is never turned off", where)
    yield from _llamacpp_reasoning(serving, reasoning, self)
    fmt = _option(serving, "--reasoning-format")
    if fmt is not None and str(fmt.value).strip().lower() == "none" and reasoning.is_reasoning and reasoning.default_on is not False:
        yield self.finding(f"--reasoning-format none on a thinking model: the raw {reasoning.open or 'thought'}…{reasoning.close} "
                           "stays in content", "drop --reasoning-format none (auto splits reasoning_content out)",
                           serving.location(fmt.key))


def _llamacpp_reasoning(serving, reasoning, self: Rule):
    """llama.cpp's `--reasoning off` and `--reasoning-budget N` against what the template can do
    (the engine's `ReasoningControls` name the flags)."""
    served = serving_engine(serving.kind)
    controls = served.reasoning_controls if served is not None else None
    if controls is None:
        return
    switch = _option(serving, *controls.switch)
    if switch is not None and str(switch.value).strip().lower() in ("off", "false", "0", "no") \
            and reasoning.is_reasoning and reasoning.default_on is not False:
        off = dict(reasoning.disable_with.extra) if reasoning.disable_with is not None else {}
        # llama.cpp closes a thought the prompt opens itself when enable_thinking is false (its chat
        # parsers append the close marker to a prompt ending with the open one): only a template
        # that neither opens the thought nor has that switch keeps thinking.
        if off.get("enable_thinking") is not False and not reasoning.prefilled:
            how = f"its switch is {reasoning.can_disable}" if reasoning.can_disable else "it has no switch to turn thinking off"
            yield self.finding(f"{switch.key} off only passes enable_thinking=false to the chat template; {how}, so the "
                               f"model still writes its {reasoning.open or 'thought'}…{reasoning.close}",
                               "use --reasoning-budget 0 (it forces the close at once), or a template whose "
                               "enable_thinking=false writes a closed thought", serving.location(switch.key))
    budget = _option(serving, controls.budget)
    try:
        tokens = int(str(budget.value)) if budget is not None else -1
    except ValueError:
        return
    if tokens < 0:
        return
    if not reasoning.is_reasoning:
        yield self.finding(f"--reasoning-budget {tokens} on a model whose template shows no thought: it has no effect",
                           "drop --reasoning-budget, or check that this is the model you meant",
                           serving.location(budget.key), Severity.INFO)
    elif controls.legacy_template in serving.options:
        yield self.finding(f"--reasoning-budget {tokens} with --no-jinja: the legacy template route knows no thought tags, "
                           "so llama.cpp never applies the budget and the thought runs unbounded",
                           "drop --no-jinja (the budget needs the Jinja template's parser)", serving.location(budget.key))


@rule("SD451", "reasoning-budget-too-small", Severity.WARNING, input=ServingInput)
def reasoning_budget_too_small(subject: ServingInput, self: Rule):
    """The token budget served to a thinking model cannot hold its thought and its answer.

    What it checks:
    `max_tokens`/`max_completion_tokens` (request), `-n` (llama.cpp), `num_predict` (Ollama)
    below the output length the model card recommends for thinking (read from its README: the
    length for most queries, not a benchmarking ceiling), or below 1024 when the card says none,
    on a model that thinks by default.

    Why it matters:
    The budget is shared: thinking spends it first, so the answer ends with `length` inside
    `<think>` (Qwen3 #1427; SGLang's Engine default of 128 new tokens, sglang PR #27062).

    Example:
    {"max_tokens": 200} for Qwen3, whose card recommends 32,768 output tokens.

    Fix:
    Raise the budget to the card's output length, or turn thinking off for short answers.
    """
    analysis, serving = subject.analysis, subject.serving
    reasoning = analysis.reasoning
    if not reasoning.is_reasoning or reasoning.default_on is False or serving.max_tokens is None:
        return
    budget = serving.max_tokens.value
    if not isinstance(budget, int) or budget <= 0:
        return
    card = card_output_tokens(analysis.facts, thinking=True)
    floor = card.value if card is not None else MIN_REASONING_BUDGET
    if budget < floor:
        source = f"the model card recommends {floor:,} output tokens" if card is not None else \
            f"a thinking model needs at least {MIN_REASONING_BUDGET:,}"
        fix = f"raise it to {floor:,}" + (f" or turn thinking off ({reasoning.can_disable})" if reasoning.can_disable else "")
        yield self.finding(f"a budget of {budget:,} tokens is shared by thinking and answer; {source}: answers end "
                           f"inside {reasoning.open or 'the thought'}", fix, serving.location(serving.max_tokens.key),
                           budget=budget, recommended=floor)


_THOUGHT_TEXT = re.compile(r"^\s*$|^[\s\W]{1,4}$|^\s*[A-Za-z][A-Za-z ]{0,20}:?\s*$")


@rule("SD452", "stop-inside-thought", Severity.WARNING, input=ServingInput)
def stop_inside_thought(subject: ServingInput, self: Rule):
    """A stop string or id can fire inside the model's thought.

    What it checks:
    On a thinking model, serving stop strings that are ordinary text (a blank line, `"\\n\\n"`,
    a word such as `"Answer:"`), and stop strings or ids that close the thought or frame a
    Harmony message (`</think>`, `<|end|>`, `<|message|>`).

    Why it matters:
    Thoughts are long free text: an eval stop `"\\n\\n"` ends the reply inside `<think>`
    (lm-evaluation-harness PR #3700); a stop on the thought's close returns an empty answer.

    Example:
    {"stop": ["\\n\\n"]} for DeepSeek-R1.

    Fix:
    Remove the stop, or apply it to the answer only (after the reasoning parser split it out).
    """
    analysis, serving = subject.analysis, subject.serving
    reasoning = analysis.reasoning
    if not reasoning.is_reasoning:
        return
    for setting in serving.stop:
        text = setting.value
        if not isinstance(text, str) or inside_turn(analysis, text) is not None:
            continue  # SD420 reports a stop the template writes inside the turn: one finding per stop
        hazard = reasoning.stop_hazard(text)
        if hazard is not None:
            yield self.finding(f"stop string {text!r}: {hazard}", "remove it", serving.location(setting.key), Severity.ERROR)
        elif _THOUGHT_TEXT.match(text) and reasoning.default_on is not False:
            yield self.finding(f"stop string {text!r} is ordinary text: it fires inside the thought, before any answer",
                               "remove it, or apply it to the parsed answer only", serving.location(setting.key))
    for setting in serving.stop_token_ids:
        text = analysis.facts.vocab.text_of(setting.value) if isinstance(setting.value, int) else None
        hazard = reasoning.stop_hazard(text) if text and inside_turn(analysis, text) is None else None
        if hazard is not None:
            yield self.finding(f"stop id {setting.value} ({text}): {hazard}", "remove it", serving.location(setting.key),
                               Severity.ERROR)


# Where a serving file sets presence penalty and temperature: a request's own keys, else the
# engine's serving-file options (`Engine.served_sampling_keys`; vLLM takes neither from the server:
# its generation-config keys are the five of runtimes/sampling.py, so only requests set them).
_REQUEST_KEYS: dict[str, tuple[str, ...]] = {"presence_penalty": ("presence_penalty",), "temperature": ("temperature",)}


def _served_keys(kind: str) -> dict[str, tuple[str, ...]] | None:
    if kind == REQUEST:
        return _REQUEST_KEYS
    served = serving_engine(kind)
    return dict(served.served_sampling_keys) if served is not None and served.served_sampling_keys else None


def _served_number(serving, names: tuple[str, ...]):
    setting = _option(serving, *names)
    if setting is None:
        return None, None
    try:
        return float(setting.value), setting
    except (TypeError, ValueError):
        return None, setting


@rule("SD453", "reasoning-sampling-against-card", Severity.WARNING, input=ServingInput)
def reasoning_sampling_against_card(subject: ServingInput, self: Rule):
    """A thinking model is served without the presence penalty its card asks for, or greedily.

    What it checks:
    On a model that thinks by default and whose model card (README.md) recommends a presence
    penalty above 0 or a temperature above 0: a request body, Ollama Modelfile or llama.cpp command
    that sets no presence penalty (or 0), or sets temperature 0. vLLM servers are not checked:
    presence penalty comes only from each request there.

    Why it matters:
    Every runtime's presence penalty defaults to 0 (vLLM `SamplingParams`, llama.cpp
    `common_params_sampling`, Ollama `DefaultOptions`) and generation_config.json cannot carry one
    to vLLM. Quantized Qwen3 cards ask for `presence_penalty=1.5` "to suppress repetitive outputs":
    without it thoughts loop (1Cat-vLLM #569: 251 repeats). Greedy thinking loops until the budget
    runs out (Qwen3, DeepSeek-R1 cards: "DO NOT use greedy decoding").

    Example:
    {"messages": [...], "max_tokens": 4096} for Qwen3-8B-AWQ, whose card says presence_penalty=1.5.

    Fix:
    Set the card's values in the request (`"presence_penalty": 1.5`), the Modelfile
    (`PARAMETER presence_penalty 1.5`) or the command (`--presence-penalty 1.5`).
    """
    analysis, serving = subject.analysis, subject.serving
    reasoning = analysis.reasoning
    keys = _served_keys(serving.kind)
    if keys is None or not reasoning.is_reasoning or reasoning.default_on is False:
        return
    card = card_sampling(analysis.facts)
    mentioned = card_values(analysis.facts)  # a value the card gives for some mode follows the card
    # a server's command line or Modelfile sets a default each request may override
    default_only = "" if serving.kind == "request" else " (a default: a request that sets its own overrides it)"
    wanted = card.get("presence_penalty")
    if wanted is not None and isinstance(wanted.value, (int, float)) and wanted.value > 0:
        value, setting = _served_number(serving, keys["presence_penalty"])
        if (value is None or value <= 0) and (value if value is not None else 0.0) not in mentioned.get("presence_penalty", set()):
            said = f"sets presence penalty {value:g}" if value is not None else "sets no presence penalty (every runtime's default is 0)"
            yield self.finding(f"the model card asks for presence_penalty {wanted.value:g} (README.md:{wanted.location.line}); "
                               f"this {serving.kind} {said}{default_only}: a thinking model repeats itself until the budget runs out",
                               f"set presence_penalty {wanted.value:g} as the card says ({keys['presence_penalty'][0]})",
                               serving.location(setting.key if setting is not None else None),
                               recommended=wanted.value)
    temperature = card.get("temperature")
    if temperature is not None and isinstance(temperature.value, (int, float)) and temperature.value > 0:
        value, setting = _served_number(serving, keys["temperature"])
        if value is not None and value <= 0 and value not in mentioned.get("temperature", set()):
            yield self.finding(f"temperature {value:g} (greedy){default_only} on a thinking model whose card recommends "
                               f"{temperature.value:g} (README.md:{temperature.location.line}): greedy thinking loops",
                               f"set temperature {temperature.value:g} as the card says", serving.location(setting.key),
                               recommended=temperature.value)
