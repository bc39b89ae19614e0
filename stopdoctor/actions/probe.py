"""Plain functions behind `stopdoctor probe-stop`: stop strings probed with the model's own
tokenizer after the default contexts and the template's own turn endings (the tokenizer-only
probe is `stopdoctor.analysis.probe`), and the stop strings a template's user header suggests; on a reasoning model, each stop
inside sample thoughts (`stopdoctor.analysis.thought_probe`). No printing, no exiting.

Imports: core, facts (model facts, vocabulary), analysis (the analysis, the probe), actions.render
(the template's special tokens, template errors with their line).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import field
from pathlib import Path
from typing import Any

from stopdoctor.core.errors import InputError, TemplateError
from stopdoctor.core.records import record
from stopdoctor.facts.model_facts import ModelFacts, load_text
from stopdoctor.facts.vocab import lone_surrogate
from stopdoctor.actions.render import special_token_map, with_template_line

# Stop strings are markers of a few characters; each is encoded in a dozen contexts.
MAX_STOP_CHARS = 4096
# Each stop is probed in ~20 contexts and over the corpus (~10-20 ms a stop): 256 stay within seconds.
MAX_STOPS = 256
MAX_CORPUS_BYTES = 16_000_000  # one --corpus file


@record
class ContextResult:
    probe: Any  # stopdoctor.analysis.probe.ContextProbe
    id_match_fires: bool  # the standalone ids occur in encode(context + stop)
    pieces: list[str]  # decoded text of each covering id


@record
class StopReport:
    probe: Any  # stopdoctor.analysis.probe.StopProbe
    contexts: list[ContextResult]
    standalone_pieces: list[str]
    # stopdoctor.analysis.thought_probe.ThoughtProbe on a reasoning model; None: not probed (no thought)
    inside_thought: Any = None

    @property
    def fires_inside_thought(self) -> bool:
        """The stop fires inside a sample thought of a template that thinks by default."""
        thought = self.inside_thought
        return thought is not None and thought.fires and thought.default_on

    @property
    def misses(self) -> int:
        return sum(not c.id_match_fires for c in self.contexts)

    @property
    def failed(self) -> bool:
        """What --fail-on-miss fails on: an id match would miss, or the stop fires in answers. A
        stop that is one special token is matched on its id, which quoted text never produces: an
        answer quoting the marker as text is no false stop, and the right stop must not fail."""
        quoted_only = self.probe.special_token_id is not None
        return self.misses > 0 or (bool(self.probe.false_positives) and not quoted_only) or self.fires_inside_thought


@record
class ProbeReport:
    model: str
    stops: list[StopReport]
    turn_endings: list[str]
    user_header: str | None
    corpus_files: list[str]
    notes: list[str] = field(default_factory=list)
    reasoning: Any = None  # stopdoctor.template.reasoning.ReasoningStructure when the template thinks

    @property
    def failed(self) -> bool:
        return any(s.failed for s in self.stops)


def template_stop_candidates(user_header: str, special_texts: Sequence[str]) -> list[str]:
    """Stop strings a template suggests: its user-turn header, the header as a decoder that
    skips special tokens shows it, and that form anchored to a line start."""
    out = [user_header]
    stripped = user_header
    for special in sorted({s for s in special_texts if s}, key=len, reverse=True):
        stripped = stripped.replace(special, "")
    if stripped.strip() and stripped != user_header:
        out.append(stripped)
        if not stripped.startswith("\n"):
            out.append("\n" + stripped)
    return out


def probe_model(
    facts: ModelFacts,
    stops: Sequence[str],
    *,
    from_template: bool = False,
    corpus: Sequence[tuple[str, str]] = (),
    corpus_files: Sequence[str] = (),
) -> ProbeReport:
    """Probe `stops` with the model's tokenizer after the default contexts and the template's
    own turn endings; with `from_template`, also the stop strings its user header suggests.
    `corpus` is (name, text) samples searched in addition to the built-in sample answers."""
    from stopdoctor.analysis.core import analyze
    from stopdoctor.analysis.probe import SAMPLE_ANSWERS, contains_run, probe_stop
    from stopdoctor.analysis.thought_probe import probe_thoughts

    notes: list[str] = []
    turn_endings: list[str] = []
    user_header: str | None = None
    reasoning = None
    if facts.template is not None:
        try:
            analysis = analyze(facts)
        except TemplateError as error:
            if from_template:
                raise with_template_line(error, facts.template) from error
            notes.append(f"template turn endings not probed: {error.message}")
        else:
            turn_endings = list(dict.fromkeys(e.text + "\n" for e in analysis.end_of_turn))
            user_header = analysis.turn_headers.get("user") or None
            reasoning = analysis.reasoning if analysis.reasoning.is_reasoning else None
    elif from_template:
        raise InputError(f"{facts.source.spec}: has no chat template to derive stop strings from",
                         hint="give the stop strings as arguments")
    candidates = list(stops)
    if from_template:
        if not user_header:
            raise TemplateError("the chat template has no user-turn header to derive stop strings from",
                                "give the stop strings as arguments")
        candidates += template_stop_candidates(user_header, [*facts.vocab.special_tokens, *special_token_map(facts).values()])
    candidates = list(dict.fromkeys(candidates))
    if not candidates:
        raise InputError("no stop strings to probe", hint="give STOP arguments or --from-template")
    if len(candidates) > MAX_STOPS:
        raise InputError(f"{len(candidates)} stop strings are more than the {MAX_STOPS} stopdoctor probes in one run",
                         hint="a runtime stops on a handful; probe them in smaller batches")
    if any(not s for s in candidates):
        raise InputError("an empty stop string cannot be probed")
    for stop in candidates:
        if (char := lone_surrogate(stop)) is not None:
            shown = f"byte 0x{ord(char) - 0xDC00:02x}" if 0xDC80 <= ord(char) <= 0xDCFF else f"\\u{ord(char):04x}"
            try:  # the bytes as given: surrogateescape undoes how Python decoded argv
                given = stop.encode("utf-8", "surrogateescape")
            except UnicodeEncodeError:  # a lone surrogate that no byte made (a \ud800 escape)
                given = stop.encode("utf-8", "backslashreplace")
            raise InputError(f"stop string \"{given.decode('utf-8', 'backslashreplace')[:60]}\" is not UTF-8 text ({shown})",
                             hint="give the stop as UTF-8 text; the tokenizer cannot encode anything else")
        if len(stop) > MAX_STOP_CHARS:
            raise InputError(f"a stop string of {len(stop)} characters is longer than the {MAX_STOP_CHARS} stopdoctor probes",
                             hint="stop strings are short markers such as '\\nUser:'")

    # built only now: a GGUF's tokenizer takes seconds to convert, and every refusal above is
    # decided from the header and the template alone
    tokenizer = facts.vocab.tokenizer()
    thoughts = probe_thoughts(reasoning, candidates) if reasoning is not None else []
    probes = probe_stop(tokenizer, candidates, corpus=[*SAMPLE_ANSWERS, *corpus],
                        turn_endings=turn_endings, user_header=user_header)

    def pieces(ids: Sequence[int]) -> list[str]:
        return [tokenizer.decode([i], skip_special_tokens=False) for i in ids]

    reports = []
    for index, probe in enumerate(probes):
        contexts = []
        for ctx in probe.contexts:
            full = tokenizer.encode(ctx.context + probe.stop, add_special_tokens=False).ids
            contexts.append(ContextResult(ctx, contains_run(full, probe.standalone_ids), pieces(ctx.ids)))
        reports.append(StopReport(probe, contexts, pieces(probe.standalone_ids), thoughts[index] if thoughts else None))
    return ProbeReport(facts.source.spec, reports, turn_endings, user_header, list(corpus_files), notes, reasoning)


def read_corpus(path: str | Path) -> tuple[str, str]:
    """A plain-text file of answers, searched as one sample (so stops that span blank lines are
    found too); each match is listed with its offset and an excerpt."""
    path = Path(path)
    return (path.name, load_text(path, path.name, max_bytes=MAX_CORPUS_BYTES))


def parse_escapes(text: str) -> str:
    r"""Shell arguments cannot hold a newline easily: `\n`, `\t`, `\r` and `\\` are read as escapes."""
    out = []
    i = 0
    while i < len(text):
        char = text[i]
        if char == "\\" and i + 1 < len(text) and text[i + 1] in "ntr\\":
            out.append({"n": "\n", "t": "\t", "r": "\r", "\\": "\\"}[text[i + 1]])
            i += 2
            continue
        out.append(char)
        i += 1
    return "".join(out)
