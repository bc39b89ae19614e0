"""`stopdoctor generate`'s work: run one request on an engine and diagnose the result
(`stopdoctor.analysis.diagnose`: why it stopped, or which token should have stopped it), and the
fragment test (base or instruct, by behaviour).

The request is `actions.generate.request`; the engines are `local` (transformers, imported lazily
by the caller) and `server`; this module needs neither.
Imports: core, facts, analysis, runtimes, actions.generate.request.
"""

from __future__ import annotations

from typing import Any

from stopdoctor.analysis.core import Analysis, analyze
from stopdoctor.analysis.reasoning_run import reasoning_outcome
from stopdoctor.analysis.diagnose import FINISH_STOP, Diagnosis, Generation, TurnEnder, diagnose, turn_enders, turn_headers
from stopdoctor.core.errors import InputError
from stopdoctor.core.records import record
from stopdoctor.core.types import Location
from stopdoctor.facts.model_facts import ModelFacts, load_model
from stopdoctor.runtimes.stops import RuntimeStops, StopId
from stopdoctor.actions.generate.request import Engine, GenerateRequest, Prompt, Sampling, build_prompt


@record
class GenerateResult:
    """One generation, its diagnosis, and the request it answered (prompt, stop set, budget,
    sampling), so that a report needs nothing else to say what was asked."""

    model: str
    engine: str
    device: str
    request: GenerateRequest
    generation: Generation
    diagnosis: Diagnosis
    enders: dict[int, TurnEnder]
    reasoning: Any = None  # stopdoctor.analysis.reasoning_run.ReasoningOutcome on a reasoning template


@record
class ModelContext:
    """A model's facts and their analysis: what every generation is built and diagnosed from."""

    facts: ModelFacts
    analysis: Analysis


def load_context(spec: str, revision: str | None = None) -> ModelContext:
    facts = load_model(spec, revision)
    return ModelContext(facts, analyze(facts))


def watch_end_of_turn(engine: Engine, analysis: Analysis) -> None:
    """Have a local engine record P(end-of-turn) at every step (a server gives no probabilities)."""
    if hasattr(engine, "watch"):
        from stopdoctor.analysis.weights import stop_targets

        engine.watch = stop_targets(analysis)


def run_generate(context: ModelContext, engine: Engine, prompt: Prompt, stops: RuntimeStops,
                 max_new_tokens: int, sampling: Sampling = Sampling()) -> GenerateResult:
    """Generate once with `engine` and diagnose the result against the model's turn structure."""
    if max_new_tokens < 1:
        raise InputError("--max-new-tokens must be at least 1")
    request = GenerateRequest(prompt, stops, max_new_tokens, sampling)
    watch_end_of_turn(engine, context.analysis)
    generation = engine.generate(prompt, stops, max_new_tokens, sampling)
    enders = turn_enders(context.analysis)
    diagnosis = diagnose(generation, enders, stops.ids, turn_headers(context.analysis),
                         context.facts.vocab.special_tokens)
    end_texts = tuple(e.text for e in context.analysis.end_of_turn)
    thought = reasoning_outcome(context.analysis.reasoning, generation, prompt.thinking, end_texts)
    return GenerateResult(context.facts.source.spec, engine.name, engine.device, request, generation, diagnosis, enders,
                          thought)


# --------------------------------------------------------------------------------------------
# Fragment test: base or instruct, by behaviour
# --------------------------------------------------------------------------------------------

FRAGMENT = "The old lighthouse keeper climbed the stairs and"
QUESTION = "What is the capital of France?"


@record
class FragmentProbe:
    name: str  # "raw fragment" | "chat question"
    prompt: str
    generation: Generation
    ended_turn: bool  # it emitted a turn-ending token within the budget


@record
class FragmentVerdict:
    verdict: str  # instruct | base | unclear
    reason: str
    probes: tuple[FragmentProbe, ...]
    max_new_tokens: int | None = None  # each probe's budget
    evidence: Any = None  # stopdoctor.actions.stop_odds.StopEvidence, when measured (check --live)


def fragment_test(context: ModelContext, engine: Engine, max_new_tokens: int = 48) -> FragmentVerdict:
    """An instruct model answers a question and ends its turn; a base model just continues the
    text. Every probe stops on any turn-ending id (template end-of-turn, eos, any runtime's stops)."""
    facts, analysis = context.facts, context.analysis
    enders = turn_enders(analysis)
    watch_end_of_turn(engine, analysis)
    stops = RuntimeStops("turn enders", tuple(StopId(i, e.text, Location("(any turn-ending token)")) for i, e in enders.items()),
                         "template end-of-turn, tokenizer eos and every runtime's stop ids")
    probes = []
    raw = build_prompt(facts, prompt=FRAGMENT, raw=True)
    # Rendered before any generation: the render time limit is for rendering, not for the model.
    prompt = build_prompt(facts, messages=[{"role": "user", "content": QUESTION}]) if facts.template is not None else None
    generation = engine.generate(raw, stops, max_new_tokens)
    probes.append(FragmentProbe("raw fragment", FRAGMENT, generation, generation.finish_reason == FINISH_STOP))
    chat = None
    if prompt is not None:
        generation = engine.generate(prompt, stops, max_new_tokens)
        chat = FragmentProbe("chat question", QUESTION, generation, generation.finish_reason == FINISH_STOP)
        probes.append(chat)
    if chat is not None:
        headers = turn_headers(analysis)
        turns = diagnose(chat.generation, enders, stops.ids, headers, facts.vocab.special_tokens).turns
        if chat.ended_turn and not turns:
            count = chat.generation.new_tokens
            after = f" after {count} tokens" if count is not None else ""
            verdict, reason = "instruct", f"answered the question and ended its turn{after} ({chat.generation.cause.text})"
        elif chat.ended_turn:
            verdict, reason = "unclear", "ended its turn, but only after writing another turn itself"
        else:
            verdict, reason = "base", (f"given a question through the chat template it never ended its turn in "
                                       f"{max_new_tokens} tokens: it continues text rather than answering")
    elif probes[0].ended_turn:
        verdict, reason = "unclear", "no chat template; it ended the fragment by itself"
    else:
        verdict, reason = "base", f"no chat template, and it continued the fragment for {max_new_tokens} tokens"
    return FragmentVerdict(verdict, reason, tuple(probes), max_new_tokens)
