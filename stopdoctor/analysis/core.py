"""Derived facts every check shares: the template's end-of-turn markers mapped to token ids, the
turn headers, the runtimes' effective stop ids, and the base/instruct verdict.

Computed once per model, before the checks run. Template errors propagate (the CLI turns them
into exit 2): a template that cannot be rendered cannot be diagnosed.
Imports: model, facts, template, runtimes, verdict.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace

from stopdoctor.core.records import record
from stopdoctor.facts.model_facts import ModelFacts
from stopdoctor.core.errors import TemplateError
from stopdoctor.runtimes.engine_stops import all_stops
from stopdoctor.runtimes.stops import RuntimeStops
from stopdoctor.template.limits import TemplateLimitError, overall_deadline_passed
from stopdoctor.template.reasoning import NONE as NO_REASONING, ReasoningStructure, analyze_reasoning
from stopdoctor.template.render import TemplateIgnoresMessages
from stopdoctor.template.turns import TurnStructure, analyze_turns, template_writes_bos
from stopdoctor.analysis.verdict import Verdict, decide


@record
class EndOfTurn:
    """The text a template writes after assistant content, and how the vocabulary encodes it."""

    text: str
    ids: tuple[int, ...]  # empty when the vocabulary cannot encode it (no tokenizer)
    single_special: bool  # always one token (special or added): the only form a stop id can match
    known: bool  # False when the vocabulary is too incomplete to tell
    evidence: str
    template: str  # the template's name
    kind: str = "token"  # "token" | "header" (next turn's header ends it) | "text" (plain-text header)

    @property
    def stop_id(self) -> int | None:
        """The id a runtime can stop on: the marker is always one token."""
        return self.ids[0] if self.single_special else None


@dataclass
class Analysis:
    facts: ModelFacts
    end_of_turn: list[EndOfTurn] = field(default_factory=list)
    turns: TurnStructure | None = None
    rejected_end_of_turn: list[tuple[EndOfTurn, str]] = field(default_factory=list)  # marker, why unsafe
    turn_headers: dict[str, str] = field(default_factory=dict)
    writes_bos: bool = False
    stops: list[RuntimeStops] = field(default_factory=list)
    verdict: Verdict | None = None
    ignores_messages: bool = False  # the template renders but never writes the messages
    reasoning: ReasoningStructure = NO_REASONING  # how the template frames a thought (template/reasoning.py)

    @property
    def end_of_turn_ids(self) -> set[int]:
        return {e.ids[0] for e in self.end_of_turn if e.single_special}

    # ---- the safe-stop rule: every stop id stopdoctor suggests goes through here ----------------

    def stop_hazard(self, token_id: int) -> str | None:
        """Why stopping on this id would cut an answer short or break a turn, or None when it is
        safe: never a whitespace-only token, never a token the template writes inside an
        assistant turn, never a token of a turn header (except the role header that ends a turn
        in a next-header template such as GLM-4's `<|user|>`)."""
        text = self.facts.vocab.text_of(token_id)
        if text is None:
            return None  # an id the vocabulary cannot name is judged by SD103, not here
        if not text.strip():
            return f"{text!r} is a whitespace-only token"
        reasoning = self.reasoning.stop_hazard(text)
        if reasoning is not None:
            return reasoning
        turns = self.turns
        if turns is None:
            return None
        if text in turns.inner:
            return f"the template writes {text} inside an assistant turn"
        header_ends = {m.text for m in self.end_of_turn if m.kind == "header"}
        if text not in header_ends and text in turns.header_tokens(self.facts.vocab.special_tokens):
            return f"{text} is part of a turn header"
        return None

    def required_stop_ids(self) -> list[int]:
        """The ids a runtime must stop on for assistant turns to end (any one of them suffices):
        the turn's closing tokens, or every role header that can follow. Safe by construction."""
        ids = [m.stop_id for m in self.end_of_turn if m.stop_id is not None]
        if self.turns is not None:  # earlier tokens of the same close end the turn too
            vocab = self.facts.vocab
            ids += [i for m in self.turns.also_ends if (i := vocab.is_single_token(m.text)) is not None
                    and i not in ids and self.stop_hazard(i) is None]
        return ids

    def primary_stop_ids(self) -> list[int]:
        """What a fix adds when a runtime stops on none of `required_stop_ids`: the last closing
        token of the turn ('<|END_RESPONSE|><|END_OF_TURN_TOKEN|>' → the latter), or every role
        header that can follow (GLM-4: `<|user|>` and `<|observation|>`)."""
        ids = [m.stop_id for m in self.end_of_turn if m.stop_id is not None]
        if self.turns is not None and self.turns.style == "next-header":
            return ids
        return ids[-1:]

    def misses_end_of_turn(self, stop_ids: Iterable[int]) -> bool:
        """True when a stop set contains none of the ids that end an assistant turn."""
        required = self.required_stop_ids()
        return bool(required) and not set(required) & set(stop_ids)

    def suggested_stop_ids(self, current: Iterable[int]) -> list[int]:
        """`current` (kept, in order) plus what is needed to end turns; every added id is safe."""
        current = list(dict.fromkeys(current))
        if not self.misses_end_of_turn(current):
            return current
        return current + [i for i in self.primary_stop_ids() if i not in current and self.stop_hazard(i) is None]

    def reasoning_stop_ids(self) -> list[int]:
        """What a runtime must stop on for a reasoning reply to end: Harmony's `<|return|>` and
        `<|call|>` (never `<|end|>`, which closes the analysis message); the end of turn otherwise."""
        if not self.reasoning.is_reasoning:
            return []
        if self.reasoning.stop_texts:
            vocab = self.facts.vocab
            return [i for t in self.reasoning.stop_texts if (i := vocab.is_single_token(t)) is not None]
        return self.required_stop_ids()

    def runtime(self, name: str) -> RuntimeStops:
        return next(s for s in self.stops if s.runtime == name)


def analyze(facts: ModelFacts) -> Analysis:
    analysis = Analysis(facts=facts)
    template = facts.template
    specials = facts.special_token_texts()
    if template is not None:
        known_special = list(facts.vocab.special_tokens)
        analysis.reasoning = _harmony_stops(_reasoning(template.source, specials, known_special), facts)
        try:
            analysis.turns = analyze_turns(template.source, specials, known_special)
        except TemplateIgnoresMessages:
            analysis.ignores_messages = True  # a defect to report, not a failure to run
        if analysis.turns is not None:
            analysis.turn_headers = dict(analysis.turns.headers)
            for marker in analysis.turns.end_of_turn:
                mapped = _map_marker(facts, marker.text, marker.evidence, template.name, marker.kind)
                hazard = (analysis.stop_hazard(mapped.stop_id) if mapped.stop_id is not None
                          else analysis.reasoning.stop_hazard(marker.text))
                if hazard is None:
                    analysis.end_of_turn.append(mapped)
                else:  # never reported as an end-of-turn, so never suggested as a stop
                    analysis.rejected_end_of_turn.append((mapped, hazard))
            _harmony_end_of_turn(analysis, template.name)
        bos = specials.get("bos_token")
        analysis.writes_bos = template_writes_bos(template.source, bos, specials)
    analysis.stops = all_stops(facts)  # the core runtimes, then the other engines
    unsafe = frozenset(d.id for d in facts.declared_for("eos") if d.id is not None and analysis.stop_hazard(d.id) is not None)
    analysis.verdict = decide(facts, analysis.end_of_turn_ids, unsafe)
    return analysis


# Harmony's end of generation (openai-harmony `stop_tokens_for_assistant_actions`): the answer ends
# <|return|>, a tool call <|call|>; <|end|> closes every message, the thought's too.
HARMONY_STOPS = ("<|return|>", "<|call|>")


def _harmony_stops(reasoning: ReasoningStructure, facts: ModelFacts) -> ReasoningStructure:
    """One answer for a Harmony reply: a template that closes the final answer with the token that
    closes the thought (Unsloth's gpt-oss template writes `<|end|>` there, never `<|return|>`)
    still needs the format's own stops, never the thought's close."""
    if reasoning.style != "harmony":
        return reasoning
    vocab = facts.vocab
    own = [t for t in HARMONY_STOPS if vocab.is_single_token(t) is not None]
    kept = [t for t in reasoning.stop_texts if reasoning.stop_hazard(t) is None]
    stops = tuple(dict.fromkeys([*own, *kept]))
    return reasoning if stops == reasoning.stop_texts else replace(reasoning, stop_texts=stops)


def _harmony_end_of_turn(analysis: Analysis, template: str) -> None:
    """A Harmony template whose turn close is the thought's close (refused above) or none: the
    reply ends where the reasoning section says it stops, so `end_of_turn` says the same."""
    reasoning = analysis.reasoning
    if reasoning.style != "harmony" or analysis.end_of_turn or not reasoning.stop_texts:
        return
    text = reasoning.stop_texts[0]
    evidence = (f"Harmony (gpt-oss): the reply ends {text}, the format's end of generation; the template closes the "
                f"final answer with {reasoning.close or 'nothing'}, which closes the thought too")
    analysis.end_of_turn.append(_map_marker(analysis.facts, text, evidence, template, "token"))
    if analysis.turns is not None:
        analysis.turns = replace(analysis.turns, style="token")


def _reasoning(source: str, specials: dict, known_special: list[str]) -> ReasoningStructure:
    """The reasoning structure, or none when the template cannot be probed for it: it refines the
    turn structure and never stops a run (only the command's overall deadline does)."""
    try:
        return analyze_reasoning(source, specials, known_special)
    except TemplateLimitError:
        if overall_deadline_passed():
            raise
        return NO_REASONING
    except TemplateError:
        return NO_REASONING


def _map_marker(facts: ModelFacts, text: str, evidence: str, template: str, kind: str) -> EndOfTurn:
    vocab = facts.vocab
    single = vocab.is_single_token(text)
    if single is not None and kind != "text":
        return EndOfTurn(text, (single,), True, True, evidence, template, kind)
    token_id = vocab.id_of(text)
    if vocab.tokenizer_file is not None or vocab.gguf_header is not None:
        ids = tuple(vocab.tokenizer().encode(text, add_special_tokens=False).ids)
        return EndOfTurn(text, ids, False, True, evidence, template, kind)
    # Only added tokens are known: a marker missing from them may still be special in the
    # absent tokenizer.json, so say "unknown" rather than "not special".
    return EndOfTurn(text, (token_id,) if token_id is not None else (), False, token_id is not None, evidence, template, kind)
