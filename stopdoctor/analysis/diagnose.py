"""What a finished generation says about stopping: the diagnosis no runtime gives.

Given the ids a model generated (or only the text a server returned), find the first token that
should have ended the turn but was not a stop id (`should_have_stopped`), what would have happened
with it in the stop set (`Counterfactual`), and whether the model went on to write the next
user/system turn itself (`HallucinatedTurn`). Also holds the plain data every generation result is
made of (`Step`, `StopCause`, `Generation`) and the exit-code rule for `stopdoctor generate`.

Pure analysis: imports model, runtimes and analysis only; never torch or transformers.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import field
from typing import Any

from stopdoctor.analysis.core import Analysis
from stopdoctor.core.records import record
from stopdoctor.core.types import Location
from stopdoctor.runtimes.stops import tokenizer_eos

FINISH_STOP = "stop"
FINISH_LENGTH = "length"
FINISH_REPETITION = "repetition"  # vLLM's runtime loop stop: the engine cut a loop, not a finished answer


@record
class Step:
    """One generated token: `text` is what it added to the decoded text (specials visible)."""

    step: int
    id: int
    text: str
    special: bool
    p_end_of_turn: float | None = None  # P(the ids that end the turn) at this step, when the engine measures it


@record
class StopCause:
    """Why generation ended. kind: eos | stop_id | stop_string | length | unreported (a server
    said "stop" without saying on what; `text` lists what could have ended it) | repetition (a
    server stopped a loop: vLLM's finish_reason `repetition`)."""

    kind: str
    id: int | None = None
    text: str | None = None
    location: Location | None = None  # the file that declared the stop id
    stop_string: str | None = None
    step: int | None = None  # the token step that stopped it (for a stop string: whose text completed it)

    @property
    def finish_reason(self) -> str:
        return {"length": FINISH_LENGTH, "repetition": FINISH_REPETITION}.get(self.kind, FINISH_STOP)


@record
class Generation:
    """One generation, by any engine. `steps` is empty when the engine does not expose ids (a server)."""

    finish_reason: str
    cause: StopCause
    text: str  # the reported text: special tokens visible, no stop string, no stop token
    steps: tuple[Step, ...] = ()
    prompt: str = ""
    prompt_tokens: int | None = None
    server: dict[str, Any] | None = None  # what a server returned, as it returned it

    @property
    def tokens(self) -> list[int]:
        return [s.id for s in self.steps]

    @property
    def new_tokens(self) -> int | None:
        """How many tokens it generated: its steps, else what a server's `usage` says
        (`completion_tokens`); None when neither tells."""
        if self.steps:
            return len(self.steps)
        usage = (self.server or {}).get("usage")
        count = usage.get("completion_tokens") if isinstance(usage, dict) else None
        return count if isinstance(count, int) and not isinstance(count, bool) else None


@record
class TurnEnder:
    """A token that ends an assistant turn, and who says so."""

    id: int
    text: str | None
    reasons: tuple[str, ...]


@record
class ShouldHaveStopped:
    id: int
    text: str | None
    step: int | None  # None when found in server text, where steps are unknown
    reasons: tuple[str, ...]
    offset: int | None = None  # where its text starts in the generated text


@record
class Counterfactual:
    """With `stop_ids`, generation would have ended at `step` (finish_reason stop), saving `wasted` tokens."""

    stop_ids: tuple[int, ...]
    step: int
    wasted: int


@record
class HallucinatedTurn:
    step: int | None
    role: str
    evidence: str  # the text that opens the turn, as generated
    offset: int  # where that text starts in the generated text
    source: str  # "template header" | "role word on its own line" | "transcript labels" | "role label"


@record
class StopStringLeft:
    """A stop string the request asked for, yet in the returned text: the server did not cut there."""

    text: str
    offset: int


@record
class Diagnosis:
    should_have_stopped: ShouldHaveStopped | None
    counterfactual: Counterfactual | None
    hallucinated_turn: HallucinatedTurn | None
    turns: tuple[HallucinatedTurn, ...] = field(default_factory=tuple)
    stop_string_left: StopStringLeft | None = None

    @property
    def runaway_signs(self) -> bool:
        return self.should_have_stopped is not None or self.hallucinated_turn is not None


# --------------------------------------------------------------------------------------------
# What should end a turn
# --------------------------------------------------------------------------------------------


def turn_enders(analysis: Analysis) -> dict[int, TurnEnder]:
    """Every id that should end an assistant turn: the template's single-special end-of-turn
    markers, the tokenizer's eos, and any runtime's stop ids (if one runtime stops there, the
    model was meant to stop there), less those the safe-stop rule refuses."""
    found: dict[int, tuple[str | None, list[str]]] = {}

    def add(token_id: int, text: str | None, reason: str) -> None:
        entry = found.setdefault(token_id, (text, []))
        if text is not None and entry[0] is None:
            found[token_id] = (text, entry[1])
        if reason not in found[token_id][1]:
            found[token_id][1].append(reason)

    for marker in analysis.end_of_turn:
        if marker.single_special:
            add(marker.ids[0], marker.text, f"chat template ({marker.template}) ends assistant turns with it")
    for declared in tokenizer_eos(analysis.facts):
        assert declared.id is not None  # tokenizer_eos keeps the declared ids only
        add(declared.id, declared.text or analysis.facts.vocab.text_of(declared.id), f"tokenizer eos ({declared.location})")
    for stops in analysis.stops:
        for stop in stops.stops:
            add(stop.id, stop.text or analysis.facts.vocab.text_of(stop.id), f"{stops.runtime} stops on it ({stop.location})")
    # the safe-stop rule: a whitespace token, a turn header or a token written inside a turn never
    # "should have stopped" generation, whichever runtime lists it
    return {i: TurnEnder(i, text, tuple(reasons)) for i, (text, reasons) in found.items()
            if analysis.stop_hazard(i) is None}


def turn_headers(analysis: Analysis) -> dict[str, str]:
    """The headers whose appearance in generated text means a new non-assistant turn."""
    return {role: text for role, text in analysis.turn_headers.items()
            if role in ("user", "system") and re.search(r"\w", text)}


# --------------------------------------------------------------------------------------------
# The diagnosis
# --------------------------------------------------------------------------------------------


def should_have_stopped(steps: Sequence[Step], enders: Mapping[int, TurnEnder],
                        stop_ids: Iterable[int]) -> ShouldHaveStopped | None:
    """The first generated token that ends a turn but is not in the stop set."""
    stop_set = set(stop_ids)
    for step in steps:
        ender = enders.get(step.id)
        if ender is not None and step.id not in stop_set:
            return ShouldHaveStopped(step.id, ender.text, step.step, ender.reasons)
    return None


def should_have_stopped_in_text(text: str, enders: Mapping[int, TurnEnder],
                                stop_ids: Iterable[int]) -> ShouldHaveStopped | None:
    """The same for a server's text, where only token texts that survived detokenization show.
    An ender followed by more text was not stopped on, whatever was asked of the server (it may
    have refused `stop_token_ids`, or ignore them)."""
    stop_set = set(stop_ids)
    best: ShouldHaveStopped | None = None
    for ender in enders.values():
        if not ender.text:
            continue
        at = text.find(ender.text)
        if at < 0 or (best is not None and at >= (best.offset or 0)):
            continue
        went_on = bool(text[at + len(ender.text):].strip())
        if ender.id in stop_set and not went_on:
            continue
        reasons = ender.reasons + (("it was a requested stop id, yet the server went on past it",) if ender.id in stop_set else ())
        best = ShouldHaveStopped(ender.id, ender.text, None, reasons, offset=at)
    return best


def counterfactual(generation: Generation, missed: ShouldHaveStopped | None,
                   stop_ids: Iterable[int]) -> Counterfactual | None:
    """Only for a generation that ran past the missed token (it is never the last step of one
    that stopped on it)."""
    if missed is None or missed.step is None:
        return None
    produced = len(generation.steps)
    return Counterfactual(tuple(sorted(set(stop_ids) | {missed.id})), missed.step, produced - missed.step - 1)


# Role labels a plain-text transcript uses; matched at the start of a line only. Weak evidence:
# answers quote transcripts too, so a label only headlines when the template gives no header.
_ROLE_LABEL = re.compile(r"(?m)^(User|USER|Human|HUMAN)[ \t]*:")
_LABEL_ROLE = {"user": "user", "human": "user"}
_CODE_FENCE = re.compile(r"(?ms)^[ \t]*```.*?(?:^[ \t]*```|\Z)")


# A transcript's role labels: a label at the start of a line, as Markdown may dress it
# (`### User:`, `**User:**`). Conservative on purpose (measured on 67,594 real ChatGPT answers,
# tests/test_fake_turns.py): `Q:`/`A:` are not here (FAQs and flashcards use them), nor `Human:`
# alone (scripts and comparisons use it); a user label counts only when an assistant label
# follows it (`transcript_turns`).
_LABEL_DRESS = r"^[ \t]*(?:\#{1,4}[ \t]*)?(?:\*\*)?"
USER_LABELS = ("User", "USER", "Human", "HUMAN")
ASSISTANT_LABELS = ("Assistant", "ASSISTANT", "AI", "Bot", "ChatGPT", "GPT")
_USER_LABEL = re.compile(rf"(?m){_LABEL_DRESS}(?:{'|'.join(USER_LABELS)})(?:\*\*)?[ \t]*:")
_ASSISTANT_LABEL = re.compile(rf"(?m){_LABEL_DRESS}(?:{'|'.join(ASSISTANT_LABELS)})(?:\*\*)?[ \t]*:")
TRANSCRIPT = "transcript labels"
PROMPT_LABEL = "the prompt's own role label"


def transcript_turns(text: str, in_code=lambda offset: False) -> list[HallucinatedTurn]:
    """User turns written as a plain-text transcript: a user label at a line start, after some
    answer text whose last line does not introduce it (an answer ending in `:` is quoting an
    example), followed by an assistant label at a line start (`…Paris.\\nUser: And of
    Germany?\\nAssistant: Berlin.`). Offsets in `text`; `in_code(offset)` says what to skip."""
    found = []
    for match in _USER_LABEL.finditer(text):
        before = text[:match.start()].rstrip()
        if not before or in_code(match.start()) or before.endswith(":"):
            continue
        reply = next((m for m in _ASSISTANT_LABEL.finditer(text, match.end()) if not in_code(m.start())), None)
        if reply is not None:
            found.append(HallucinatedTurn(None, "user", match.group(0), match.start(), TRANSCRIPT))
    return found


def prompt_labels(prompt: str) -> dict[str, str]:
    """A plain-text prompt's own role labels (`Q: …\\nA:`): when it ends with a label at a line
    start (the model is asked to speak as it) and an earlier line starts with another label, that
    other label opening a line is the next user turn (`{"user": "\\nQ:"}`); else none."""
    labels = [(m.group(1), m.start()) for m in re.finditer(r"(?m)^[ \t]*([A-Za-z][\w ]{0,23}?)[ \t]*:", prompt)]
    if not labels or prompt.rstrip()[-1:] != ":" or prompt.rstrip().rsplit("\n", 1)[-1].strip() != labels[-1][0] + ":":
        return {}
    own = labels[-1][0]
    other = next((label for label, _ in reversed(labels[:-1]) if label != own), None)
    return {"user": f"\n{other}:"} if other else {}


@functools.lru_cache(maxsize=256)
def _alone_on_a_line(word: str) -> re.Pattern[str]:
    return re.compile(rf"(?m)^[ \t]*{re.escape(word)}[ \t]*$\n?")


def _stripped_header(header: str, specials: Iterable[str]) -> str:
    for special in sorted(specials, key=len, reverse=True):
        header = header.replace(special, "")
    return header


def find_turns(text: str, headers: Mapping[str, str], specials: Iterable[str] = (),
               labels: Mapping[str, str] | None = None) -> list[HallucinatedTurn]:
    """Every place in `text` where a user/system turn opens, step unknown (offset only).

    Four kinds of evidence: the template's own header (`<|im_start|>user\\n`); the header with its
    special tokens stripped, as a server that skips special tokens returns it, on its own line
    (`\\nuser\\n`); a transcript, a user label answered by an assistant label (`transcript_turns`);
    a lone transcript role label at the start of a line (`User:`, weak).
    """
    specials = list(specials)
    fenced = [(m.start(), m.end()) for m in _CODE_FENCE.finditer(text)]

    def in_code(offset: int) -> bool:
        return bool(fenced) and any(start <= offset < end for start, end in fenced)

    found: dict[int, HallucinatedTurn] = {}
    for role, header in headers.items():
        if header in text:  # a substring test first: most answers hold no header (logs ask many families)
            for match in re.finditer(re.escape(header), text):
                found.setdefault(match.start(), HallucinatedTurn(None, role, header, match.start(), "template header"))
        bare = _stripped_header(header, specials)
        word = bare.strip()
        if bare != header and word and word in text and re.fullmatch(r"\w+", word):
            # The bare role word alone on a line: what is left of the header once specials are gone.
            for match in _alone_on_a_line(word).finditer(text):
                if in_code(match.start()):
                    continue
                if not any(t.offset <= match.start() < t.offset + len(t.evidence) for t in found.values()):
                    found.setdefault(match.start(), HallucinatedTurn(None, role, match.group(0), match.start(),
                                                                     "role word on its own line"))
    for role, label in (labels or {}).items():
        for match in re.finditer(re.escape(label), text):
            if not in_code(match.start()) and not any(t.offset <= match.start() < t.offset + len(t.evidence)
                                                      for t in found.values()):
                found.setdefault(match.start(), HallucinatedTurn(None, role, label, match.start(), PROMPT_LABEL))
    for turn in transcript_turns(text, in_code):
        if not any(t.offset <= turn.offset < t.offset + len(t.evidence) for t in found.values()):
            found.setdefault(turn.offset, turn)
    for match in _ROLE_LABEL.finditer(text):
        said = _LABEL_ROLE.get(match.group(1).lower())
        if said and not in_code(match.start()) and not any(t.offset <= match.start() < t.offset + len(t.evidence) for t in found.values()):
            found.setdefault(match.start(), HallucinatedTurn(None, said, match.group(0), match.start(), "role label"))
    return [found[k] for k in sorted(found)]


def step_at(steps: Sequence[Step], offset: int) -> int | None:
    """The step whose text covers character `offset` of the concatenated step texts."""
    position = 0
    for step in steps:
        position += len(step.text)
        if offset < position:
            return step.step
    return None


def diagnose(generation: Generation, enders: Mapping[int, TurnEnder], stop_ids: Iterable[int],
             headers: Mapping[str, str], specials: Iterable[str] = ()) -> Diagnosis:
    """A plain-text prompt's own role labels (`prompt_labels` of `generation.prompt`: a base
    model asked `Q: …\\nA:`) are read as headers too, after the template's."""
    stop_ids = list(stop_ids)
    if generation.steps:
        missed = should_have_stopped(generation.steps, enders, stop_ids)
        full_text = "".join(s.text for s in generation.steps)
    else:
        missed = should_have_stopped_in_text(generation.text, enders, stop_ids)
        full_text = generation.text
    # Search everything generated (the stop string/token was the model's too), then keep what
    # lies in the reported text: a turn header cut off by a stop is the stop doing its job.
    labels = prompt_labels(generation.prompt) if generation.prompt else {}
    turns = [t for t in find_turns(full_text, headers, specials, labels) if t.offset < len(generation.text)]
    if generation.steps:
        turns = [HallucinatedTurn(step_at(generation.steps, t.offset), t.role, t.evidence, t.offset, t.source)
                 for t in turns]
    return Diagnosis(
        should_have_stopped=missed,
        counterfactual=counterfactual(generation, missed, stop_ids) if generation.finish_reason == FINISH_LENGTH else None,
        hallucinated_turn=headline_turn(turns, weak_allowed=not headers),
        turns=tuple(turns),
        stop_string_left=stop_string_left(generation),
    )


def stop_string_left(generation: Generation) -> StopStringLeft | None:
    """The first stop string a server was sent (`server["sent"]["stop"]`) that its returned text
    still holds: a server cuts the text before a stop string it matched, so one left in the answer
    was not matched (or not honoured), and the client is shown it."""
    sent = ((generation.server or {}).get("sent") or {}).get("stop") or ()
    return stop_string_in(generation.text, sent)


def stop_string_in(text: str, stops: Sequence[object]) -> StopStringLeft | None:
    """The stop string of `stops` met first in `text` (one a server should have cut before), if any;
    `generate --server` and probe-server's `stop-string` judge a returned text by it."""
    found = [(text.find(stop), stop) for stop in stops if isinstance(stop, str) and stop]
    at, stop = min(((at, stop) for at, stop in found if at >= 0), default=(-1, ""))
    return StopStringLeft(stop, at) if at >= 0 else None


def headline_turn(turns: Sequence[HallucinatedTurn], weak_allowed: bool) -> HallucinatedTurn | None:
    """The turn reported as *the* runaway among those a generation wrote (`diagnose` and the logs'
    per-family diagnosis pick it the same way). The first user turn: the model speaking for the
    user is the unmistakable runaway sign (an empty system turn often comes first, as with
    SmolLM2); else the first turn of any role. Transcript labels ("User:") count only when
    `weak_allowed` (the template offers no header to look for)."""
    strong = [t for t in turns if weak_allowed or t.source != "role label"]
    return next((t for t in strong if t.role == "user"), strong[0] if strong else None)


# A model that can end its turn puts far more than this on its end-of-turn at some point of an
# answer (SmolLM2: 0.77 at the end of a one-sentence answer); a zeroed row gets ~1e-8.
NEVER_STOPS = 1e-4


@record
class EndOfTurnOdds:
    """The highest P(end-of-turn) the model gave during a generation, and at which step."""

    max_p: float
    step: int
    steps: int

    @property
    def never(self) -> bool:
        return self.max_p < NEVER_STOPS


def end_of_turn_odds(generation: Generation) -> EndOfTurnOdds | None:
    measured = [(s.p_end_of_turn, s) for s in generation.steps if s.p_end_of_turn is not None]
    if not measured:
        return None
    p, best = max(measured, key=lambda m: m[0])
    return EndOfTurnOdds(p, best.step, len(measured))


def runaway(generation: Generation, diagnosis: Diagnosis) -> str | None:
    """Why this generation is a runaway, or None: the model wrote the next turn itself (even when
    something later stopped it), or it ran to the budget after a token that should have ended its
    turn; a server stopped a loop (finish_reason repetition) or left a stop string in the answer.
    None when it stopped in time (a stop string that cut the next turn off did its job), and for a
    plain length. `stopdoctor.rules.verdicts` makes it a finding, and the Report the exit code."""
    if diagnosis.hallucinated_turn is not None:
        return "it wrote the next turn itself"
    if diagnosis.stop_string_left is not None:
        return "the server left a stop string it was sent in the answer"
    if generation.finish_reason == FINISH_REPETITION:
        return "the server stopped a loop (finish_reason repetition)"
    if generation.finish_reason == FINISH_LENGTH and diagnosis.runaway_signs:
        return "it ran to the budget after a token that should have ended its turn"
    return None
