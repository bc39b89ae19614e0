"""`stopdoctor diff A B`: what changed between two models (base and fine-tune, an HF folder and its
GGUF, a model and its quantized re-upload, two revisions), aspect by aspect, each difference
naming the file and key it comes from and whether it changes where generation stops.

Stop-relevant: the end-of-turn, any runtime's stop ids, a declared eos/eot/eom, how the
end-of-turn text tokenizes. Not stop-relevant (shown, exit 0): the rendered template when the
end-of-turn is the same, pad/bos, special tokens beyond those, sampling, other probe strings.

Imports: core, facts, template, analysis.
"""

from __future__ import annotations

import difflib

from stopdoctor.analysis.core import Analysis
from stopdoctor.analysis.differences import Difference, sampling_differences
from stopdoctor.core.errors import StopdoctorError
from stopdoctor.core.records import record
from stopdoctor.template.render import render_chat

CONVERSATION = [
    {"role": "system", "content": "You are helpful."},
    {"role": "user", "content": "Hi"},
    {"role": "assistant", "content": "Hello!"},
    {"role": "user", "content": "Name a colour."},
]
PROBES = ("Hello, world!", "  two  spaces and a tab\t.", "naïve café 東京 🙂", "1234567 + 89 = 1234656",
          "def f(x):\n    return x\n", "User: hi\nAssistant: hello")
STOP_ROLES = ("eos", "eot", "eom")


@record
class ModelDiff:
    a: str
    b: str
    differences: tuple[Difference, ...]

    @property
    def stop_relevant(self) -> list[Difference]:
        return [d for d in self.differences if d.stop_relevant]

    @property
    def worse(self) -> list[Difference]:
        return [d for d in self.differences if d.effect == "worse"]


def diff_analyses(a: Analysis, b: Analysis) -> ModelDiff:
    found: list[Difference] = []
    found += _template(a, b)
    ends_a, ends_b = [m.text for m in a.end_of_turn], [m.text for m in b.end_of_turn]
    if ends_a != ends_b:
        found.append(Difference("end_of_turn", "end-of-turn", ends_a, ends_b, _template_where(a), _template_where(b), True))
    runtimes_b = {s.runtime: s for s in b.stops}
    for stops in a.stops:
        other = runtimes_b.get(stops.runtime)
        if other is None:
            continue
        texts_a, texts_b = _named(a, stops.ids), _named(b, other.ids)
        if texts_a != texts_b:
            effect, why = _stop_effect(a, b, stops.runtime, stops.ids, other.ids)
            found.append(Difference("stop_ids", stops.runtime, texts_a, texts_b, _where(stops.stops), _where(other.stops),
                                    True, effect=effect, why=why))
    found += _declared(a, b)
    specials_a, specials_b = set(a.facts.vocab.special_tokens), set(b.facts.vocab.special_tokens)
    if specials_a != specials_b and specials_a and specials_b:
        ends = set(ends_a) | set(ends_b)
        gone, added = sorted(specials_a - specials_b), sorted(specials_b - specials_a)
        found.append(Difference("special_tokens", "special tokens", gone[:20], added[:20], None, None,
                                bool(ends & (specials_a ^ specials_b))))
    found += sampling_differences(a, b)
    found += _tokenization(a, b, ends_a or ends_b, set(ends_a) & set(ends_b))
    return ModelDiff(a.facts.source.spec, b.facts.source.spec, tuple(found))


def _stop_effect(a: Analysis, b: Analysis, runtime: str, ids_a: list[int], ids_b: list[int]) -> tuple[str, str]:
    """Whether `runtime` stops on each model's own end of turn in A and in B."""
    ends = ", ".join(m.text for m in b.end_of_turn) or "?"
    missed_a, missed_b = a.misses_end_of_turn(ids_a), b.misses_end_of_turn(ids_b)
    if missed_b and not missed_a:
        return "worse", f"no longer stops on the end of turn {ends}"
    if missed_a and not missed_b:
        return "better", f"now stops on the end of turn {ends}"
    return "", ""


def _named(analysis: Analysis, ids: list[int]) -> list[str]:
    vocab = analysis.facts.vocab
    return sorted(f"{vocab.text_of(i) or '?'} ({i})" for i in ids)


def _where(stops) -> str | None:
    return ", ".join(dict.fromkeys(str(s.location) for s in stops)) or None


def _template_where(analysis: Analysis) -> str | None:
    template = analysis.facts.template
    return str(template.location) if template is not None else None


def _render(analysis: Analysis) -> str | None:
    template = analysis.facts.template
    if template is None:
        return None
    try:
        return render_chat(template.source, CONVERSATION, add_generation_prompt=True,
                           special_tokens=analysis.facts.special_token_texts())
    except StopdoctorError:
        return None


def _template(a: Analysis, b: Analysis) -> list[Difference]:
    rendered_a, rendered_b = _render(a), _render(b)
    if rendered_a == rendered_b:
        return []
    detail = "".join(difflib.unified_diff((rendered_a or "").splitlines(keepends=True),
                                          (rendered_b or "").splitlines(keepends=True), "a/template", "b/template"))
    return [Difference("template", "rendered conversation", rendered_a is not None, rendered_b is not None,
                       _template_where(a), _template_where(b), False, detail)]


def _declared(a: Analysis, b: Analysis) -> list[Difference]:
    """Declared ids file by file; an HF folder against a GGUF by role only (the converter gathers
    every file's declaration into one key)."""
    out = []
    by_file = a.facts.is_gguf == b.facts.is_gguf
    for role in ("bos", "eos", "eot", "eom", "pad"):
        files = {_kind(d.location.file) for d in a.facts.declared_for(role) + b.facts.declared_for(role)} if by_file else {"*"}
        for file in sorted(files):
            va = _values(a, role, file)
            vb = _values(b, role, file)
            if va[0] != vb[0]:
                out.append(Difference("declared", role if file == "*" else f"{role} ({file})", va[0], vb[0], va[1], vb[1], role in STOP_ROLES))
    return out


def _kind(file: str | None) -> str:
    """A GGUF's file name differs from copy to copy: its keys are compared as "GGUF"."""
    return "GGUF" if file and file.endswith(".gguf") else (file or "?")


def _values(analysis: Analysis, role: str, file: str) -> tuple[list[str], str | None]:
    declared = [d for d in analysis.facts.declared_for(role) if file == "*" or _kind(d.location.file) == file]
    vocab = analysis.facts.vocab
    values = sorted({f"{d.text or vocab.text_of(d.id) or '?'} ({d.id})" if d.id is not None else f"{d.text} (no id)"
                     for d in declared})
    return values, ", ".join(dict.fromkeys(str(d.location) for d in declared)) or None


def _tokenization(a: Analysis, b: Analysis, ends: list[str], shared_ends: set[str]) -> list[Difference]:
    """`shared_ends`: the end-of-turn texts both templates write (only their tokens can get worse)."""
    if _same_tokenizer_source(a, b):  # one tokenizer encodes as itself: nothing to load (1.6 s for Gemma's)
        return []
    try:
        tok_a, tok_b = a.facts.vocab.tokenizer(), b.facts.vocab.tokenizer()
    except StopdoctorError:
        return []
    out = []
    for probe in (*ends, *PROBES):
        ids_a = tok_a.encode(probe, add_special_tokens=False).ids
        ids_b = tok_b.encode(probe, add_special_tokens=False).ids
        if ids_a != ids_b:
            effect, why = "", ""
            if probe in shared_ends and len(ids_a) == 1 != len(ids_b):  # a stop id match needs the one token
                effect, why = "worse", f"the end of turn {probe} is no longer one token ({len(ids_b)} tokens)"
            elif probe in shared_ends and len(ids_b) == 1 != len(ids_a):
                effect, why = "better", f"the end of turn {probe} is now one token"
            out.append(Difference("tokenization", repr(probe), ids_a[:32], ids_b[:32], "tokenizer", "tokenizer",
                                  probe in ends, effect=effect, why=why))
    return out


def _same_tokenizer_source(a: Analysis, b: Analysis) -> bool:
    """Whether both sides build their tokenizer from the same file: the same tokenizer.json bytes,
    or the same GGUF file (a tokenizer built from a GGUF depends on nothing else)."""
    vocab_a, vocab_b = a.facts.vocab, b.facts.vocab
    file_a, file_b = vocab_a.tokenizer_file, vocab_b.tokenizer_file
    try:
        if file_a is not None and file_b is not None:
            return file_a.samefile(file_b) or (file_a.stat().st_size == file_b.stat().st_size
                                               and file_a.read_bytes() == file_b.read_bytes())
        header_a, header_b = vocab_a.gguf_header, vocab_b.gguf_header
        if file_a is None and file_b is None and header_a is not None and header_b is not None:
            return header_a.path.samefile(header_b.path)
    except OSError:
        return False
    return False
