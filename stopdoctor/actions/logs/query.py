"""Response logs read at scale: why did each logged generation end, and did it end for the wrong
reason (cut by the token budget, ran on into a fake next turn)?

The engine is SQL on embedded DuckDB (imported lazily: other commands never pay for it). One
query per file reads every line as text (JSONL, .gz, local or any URL DuckDB can open), parses it
once, picks each field from whichever logged shape the line has, and materialises a narrow table
of normalised records; the distributions are GROUP BYs over that table. The text of an answer is
kept only where a cheap SQL prefilter (a superset of what `diagnose.find_turns` can find) says a
next turn may be in it; those few answers are then diagnosed in Python by `stopdoctor.analysis.diagnose`,
the same code `generate --server` uses. `normalise_sql` is the query, engine-neutral DuckDB SQL,
to run unchanged on a bigger DuckDB (MotherDuck, a large VM) over object storage.

Shapes recognised per line (request+response pairs under `request`/`response`, the response
optionally under `response.body` as in OpenAI batch output): OpenAI-compatible chat and completions
(vLLM, TGI's messages API, llama.cpp server, transformers serve, SGLang `matched_stop`), TGI
`/generate` (`details.finish_reason`), llama.cpp `/completion` (`stop_type`, `stopped_*`,
`stopping_word`), Ollama `/api/chat` and `/api/generate` (`done_reason`).

Imports: errors, diagnose, analysis/api (only with --model). Never prints.
"""

from __future__ import annotations

import functools
import re
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from stopdoctor.analysis.diagnose import FINISH_LENGTH, Diagnosis, Generation, HallucinatedTurn, StopCause, TurnEnder, _headline_turn, diagnose
from stopdoctor.core.errors import InputError, MissingDependencyError, require_file

# --------------------------------------------------------------------------------------------
# Where each field lives, per shape
# --------------------------------------------------------------------------------------------

# Where a response may sit, most specific first, and what to look for there: a logged pair's
# response (OpenAI batch output nests it under body, always OpenAI-shaped), else the line itself.
# Each path costs a lookup on every line: only what some server writes is listed.
_OPENAI = {
    "text": (".choices[0].message.content", ".choices[0].text"),
    "finish_reason": (".choices[0].finish_reason",),
    "stop_reason": (".choices[0].stop_reason", ".choices[0].matched_stop"),
    "model": (".model",),
    "shape:openai-chat": (".choices[0].message.role",),  # a chat answer without text (tool calls)
    "second_choice": (".choices[1].finish_reason",),  # n > 1: only the first choice is read
}
_ANY = {
    "text": _OPENAI["text"] + (".message.content", ".generated_text", ".content"),
    "finish_reason": _OPENAI["finish_reason"] + (".done_reason", ".details.finish_reason", ".stop_type"),
    "stop_reason": _OPENAI["stop_reason"] + (".stopping_word",),
    "model": (".model",),
    "stopped_limit": (".stopped_limit",),  # llama.cpp before stop_type
    "shape:openai-chat": _OPENAI["shape:openai-chat"],
    "second_choice": _OPENAI["second_choice"],
}
_RESPONSE_ROOTS: tuple[tuple[str, dict[str, tuple[str, ...]]], ...] = (
    ("$.response.body", _OPENAI), ("$.response", _ANY), ("$", _ANY))
_REQUEST_ROOTS: tuple[tuple[str, dict[str, tuple[str, ...]]], ...] = (
    ("$.request.body", {"max_tokens": (".max_tokens", ".max_completion_tokens"), "request_model": (".model",)}),
    ("$.request", {"max_tokens": (".max_tokens", ".max_completion_tokens", ".options.num_predict",
                                  ".parameters.max_new_tokens", ".n_predict"), "request_model": (".model",)}),
)
OVERRIDABLE = ("text", "finish_reason", "stop_reason", "model", "max_tokens")
# Which text path was found says the shape.
_SHAPE_OF_TEXT = {".choices[0].message.content": "openai-chat", ".choices[0].text": "openai-completions",
                  ".message.content": "ollama", ".generated_text": "tgi"}  # `content` alone says nothing

# Every finish_reason spelling, mapped to the two that matter.
_STOP_WORDS = ("stop", "eos_token", "stop_sequence", "eos", "word", "end_turn", "stop_token")
_LENGTH_WORDS = ("length", "max_tokens", "limit", "max_length", "model_length")

# Text that ends a sentence (or a code block) when an answer was cut by the budget.
_SENTENCE_END = r"""[.!?…。！？:;"'”’)\]*`>]$"""


def _path(root: str, suffix: str) -> str:
    return "$" + suffix if root == "$" else root + suffix


def _sql_string(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _sql_regex(pattern: str) -> str:
    return _sql_string(pattern)


def _re2_escape(text: str) -> str:
    """A literal for RE2 (DuckDB's regex engine): Python's re.escape writes a backslash before a
    raw newline, which RE2 rejects."""
    return "".join("\\" + c if c in r"\.^$|?*+()[]{}" else {"\n": r"\n", "\t": r"\t", "\r": r"\r"}.get(c, c)
                   for c in text)


@dataclass(frozen=True)
class TurnVocabulary:
    """What marks a next turn in text: per template family, the user/system headers and the
    special tokens (to strip, as servers do); and the end-of-turn token texts."""

    families: tuple[tuple[str, Mapping[str, str], tuple[str, ...]], ...]  # (name, headers, specials)
    enders: Mapping[int, TurnEnder]
    source: str  # "built-in families" | the model spec

    @functools.cached_property
    def family_words(self) -> tuple[frozenset[str], ...]:
        """Per family, the bare role words its headers leave once specials are stripped."""
        return tuple(frozenset(_bare_words(headers, specials)) for _, headers, specials in self.families)

    def prefilter_sql(self, column: str) -> str:
        """A SQL condition true for every text in which `diagnose` may find a turn or an ender
        that ran on: literal headers and ender texts, bare role words alone on a line, and (when a
        family has no header) transcript labels. A superset; Python decides."""
        literals = sorted({h for _, headers, _ in self.families for h in headers.values()}
                          | {e.text for e in self.enders.values() if e.text})
        words = sorted({w for _, headers, specials in self.families for w in _bare_words(headers, specials)})
        # One RE2 pass over the text, whatever the number of families.
        alternatives = [_re2_escape(text) for text in literals]
        if words:
            alternatives.append(r"(?m:^[ \t]*(?:" + "|".join(_re2_escape(w) for w in words) + r")[ \t]*$)")
        if any(not headers for _, headers, _ in self.families):
            alternatives.append(r"(?m:^(?:User|USER|Human|HUMAN)[ \t]*:)")
        terms = [f"regexp_matches({column}, {_sql_regex('|'.join(alternatives))})"] if alternatives else []
        return "(" + " OR ".join(terms) + ")" if terms else "false"


def _bare_words(headers: Mapping[str, str], specials: Sequence[str]) -> list[str]:
    words = []
    for header in headers.values():
        bare = header
        for special in sorted(specials, key=len, reverse=True):
            bare = bare.replace(special, "")
        if bare != header and re.fullmatch(r"\w+", bare.strip()):
            words.append(bare.strip())
    return words


# The families an unknown model most likely has: headers as their templates write them. Without
# --model a log is read against all of them; each alone is what `diagnose` checks for one model.
_FAMILIES: tuple[tuple[str, dict[str, str], tuple[str, ...]], ...] = (
    ("chatml", {"user": "<|im_start|>user\n", "system": "<|im_start|>system\n"}, ("<|im_start|>", "<|im_end|>")),
    ("llama-3", {"user": "<|start_header_id|>user<|end_header_id|>\n\n",
                 "system": "<|start_header_id|>system<|end_header_id|>\n\n"},
     ("<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>", "<|begin_of_text|>")),
    ("gemma", {"user": "<start_of_turn>user\n"}, ("<start_of_turn>", "<end_of_turn>")),
    ("phi-3", {"user": "<|user|>\n", "system": "<|system|>\n"}, ("<|user|>", "<|system|>", "<|end|>", "<|assistant|>")),
    ("granite", {"user": "<|start_of_role|>user<|end_of_role|>", "system": "<|start_of_role|>system<|end_of_role|>"},
     ("<|start_of_role|>", "<|end_of_role|>", "<|end_of_text|>")),
    ("harmony", {"user": "<|start|>user<|message|>", "system": "<|start|>system<|message|>"},
     ("<|start|>", "<|message|>", "<|end|>", "<|return|>")),
    ("deepseek", {"user": "<｜User｜>"}, ("<｜User｜>", "<｜Assistant｜>", "<｜end▁of▁sentence｜>")),
)
# End-of-turn texts no ordinary answer contains (not `</s>`: HTML's strikethrough closes with it).
_ENDERS = ("<|im_end|>", "<|eot_id|>", "<end_of_turn>", "<|end|>", "<|endoftext|>", "<|end_of_text|>",
           "<|return|>", "<｜end▁of▁sentence｜>")


def builtin_vocabulary() -> TurnVocabulary:
    enders = {-(i + 1): TurnEnder(-(i + 1), text, ("a well-known end-of-turn token",)) for i, text in enumerate(_ENDERS)}
    return TurnVocabulary(_FAMILIES, enders, "built-in families")


def model_vocabulary(spec: str, revision: str | None = None) -> TurnVocabulary:
    """The model's own headers, specials and turn enders, from its template and files."""
    from stopdoctor.analysis.core import analyze
    from stopdoctor.api import load
    from stopdoctor.analysis.diagnose import turn_enders, turn_headers

    facts = load(spec, revision)
    analysis = analyze(facts)
    specials = tuple(facts.vocab.special_tokens)
    return TurnVocabulary((("model", turn_headers(analysis), specials),), turn_enders(analysis), spec)


# --------------------------------------------------------------------------------------------
# The query
# --------------------------------------------------------------------------------------------


def _paths(overrides: Mapping[str, str]) -> tuple[list[str], dict[str, list[int]]]:
    """The flat list of JSON paths extracted from each line in one parse, and where each field's
    candidates sit in it (1-based, DuckDB lists). Shape evidence is keyed "shape:<name>"."""
    paths: list[str] = []
    where: dict[str, list[int]] = defaultdict(list)

    def add(name: str, path: str) -> None:
        paths.append(path)
        where[name].append(len(paths))

    for roots in (_RESPONSE_ROOTS, _REQUEST_ROOTS):
        for root, fields in roots:
            for name, suffixes in fields.items():
                if name in overrides or (name == "request_model" and "model" in overrides):
                    continue
                for suffix in suffixes:
                    add(name, _path(root, suffix))
                    if name == "text" and suffix in _SHAPE_OF_TEXT:
                        where["shape:" + _SHAPE_OF_TEXT[suffix]].append(len(paths))
                    if name == "stopped_limit":
                        where["shape:llama.cpp"].append(len(paths))
                    if name == "finish_reason" and suffix in (".stop_type", ".done_reason", ".details.finish_reason"):
                        shape = {".stop_type": "llama.cpp", ".done_reason": "ollama", ".details.finish_reason": "tgi"}[suffix]
                        where["shape:" + shape].append(len(paths))
    if "text" not in overrides:
        add("ollama_text", "$.response")  # Ollama /api/generate: the text is the string `response`
    for name, path in overrides.items():
        add(name, path)
    return paths, where


def _first(where: dict[str, list[int]], name: str) -> str:
    items = [f"v[{i}]" for i in where.get(name, [])]
    if not items:
        return "NULL"
    return items[0] if len(items) == 1 else f"coalesce({', '.join(items)})"


def normalise_sql(source: str, vocabulary: TurnVocabulary, overrides: Mapping[str, str] | None = None) -> str:
    """The query: from `source` (a relation with `line_no` and `line`, one log line of JSON text
    each) to one normalised record per line. DuckDB SQL only; no Python in the loop."""
    overrides = dict(overrides or {})
    paths, where = _paths(overrides)
    path_list = "[" + ", ".join(_sql_string(p) for p in paths) + "]"
    f = lambda name: _first(where, name)  # noqa: E731
    finish_raw = f("finish_reason")
    if "finish_reason" not in overrides:
        finish_raw = (f"coalesce({finish_raw}, CASE {f('stopped_limit')} WHEN 'true' THEN 'limit' "
                      "WHEN 'false' THEN 'stop' END)")
    text = f("text")
    if "text" not in overrides:
        # only for a line that has Ollama's done_reason: elsewhere `response` is the logged response object
        text = f"coalesce({text}, CASE WHEN {f('shape:ollama')} IS NOT NULL THEN {f('ollama_text')} END)"
    model = f("model") if "model" in overrides else f"coalesce({f('model')}, {f('request_model')})"
    stop_words = ", ".join(_sql_string(w) for w in _STOP_WORDS)
    length_words = ", ".join(_sql_string(w) for w in _LENGTH_WORDS)
    if overrides:
        shape = "CASE WHEN v IS NOT NULL AND (finish_raw IS NOT NULL OR text IS NOT NULL) THEN 'custom' END"
    else:
        shape = ("CASE WHEN v IS NULL THEN NULL "
                 + " ".join(f"WHEN {f('shape:' + name)} IS NOT NULL THEN '{name}'"
                            for name in ("openai-chat", "openai-completions", "ollama", "tgi", "llama.cpp"))
                 + " WHEN finish_raw IS NOT NULL OR text IS NOT NULL THEN 'other' END")
    return f"""
WITH parsed AS (
    SELECT line_no,
           line IS NULL OR trim(line) = '' AS blank,
           CASE WHEN json_valid(line) THEN json_extract_string(line, {path_list}) END AS v
    FROM {source}
), fields AS (
    SELECT line_no, blank, v,
           {finish_raw} AS finish_raw,
           {text} AS text,
           {model} AS model,
           {f('max_tokens')} AS max_tokens,
           {f('stop_reason')} AS stop_reason,
           {f('second_choice')} IS NOT NULL AS multi_choice
    FROM parsed
), records AS (
    SELECT line_no, blank, v IS NULL AND NOT blank AS bad,
           {shape} AS shape,
           finish_raw, model, max_tokens, stop_reason, multi_choice,
           CASE WHEN lower(finish_raw) IN ({stop_words}) THEN 'stop'
                WHEN lower(finish_raw) IN ({length_words}) THEN 'length'
                WHEN finish_raw IS NULL THEN '(none)' ELSE finish_raw END AS finish,
           text,
           {vocabulary.prefilter_sql('text')} AS turn_candidate
    FROM fields
)
SELECT line_no, blank, bad, shape, finish_raw, finish, model, max_tokens, stop_reason,
       coalesce(turn_candidate, false) AS turn_candidate,
       finish = 'length' AND text IS NOT NULL AND rtrim(text) <> ''
           AND NOT regexp_matches(rtrim(text), {_sql_regex(_SENTENCE_END)}) AS mid_sentence,
       CASE WHEN turn_candidate THEN text END AS candidate_text,
       CASE WHEN finish = 'length' THEN
           CASE WHEN length(rtrim(text)) > 120 THEN '…' || right(rtrim(text), 120) ELSE rtrim(text) END END AS tail,
       coalesce(multi_choice, false) AND shape IS NOT NULL AS multi_choice
FROM records
"""


def _source_sql(path: str, con=None) -> str:
    """One row per physical line, numbered from 1 (blank lines kept, so numbers match `sed -n`).
    A JSON line cannot hold a raw control character, so chr(1) never splits one. A Parquet row
    is a line too: its one text column when it has only that (a JSON log stored as text), else
    the row as a JSON object; rows are numbered from 1."""
    if _is_parquet(path):
        scan = f"read_parquet({_sql_string(path)}, file_row_number = true)"
        columns = con.execute(f"DESCRIBE SELECT * FROM read_parquet({_sql_string(path)})").fetchall() if con else []
        if len(columns) == 1 and columns[0][1] in ("VARCHAR", "JSON"):
            line = '"' + columns[0][0].replace('"', '""') + '"::VARCHAR'
        else:
            line = "to_json(struct_pack(*COLUMNS(* EXCLUDE (file_row_number))))::VARCHAR"
        return f"(SELECT file_row_number + 1 AS line_no, {line} AS line FROM {scan})"
    return ("(SELECT ordinality AS line_no, line FROM read_csv("
            f"{_sql_string(path)}, columns = {{'line': 'VARCHAR'}}, delim = chr(1), quote = '', escape = '', "
            "header = false, auto_detect = false, max_line_size = 268435456, compression = 'auto') "
            "WITH ORDINALITY)")


def _is_parquet(path: str) -> bool:
    return path.lower().endswith((".parquet", ".parq", ".pq"))


def _is_remote(path: str) -> bool:
    return bool(re.match(r"^[a-z][a-z0-9+]*://", path))


# --------------------------------------------------------------------------------------------
# The report
# --------------------------------------------------------------------------------------------

PROBLEMS = {
    "budget-truncated": "cut by the token budget (finish_reason length)",
    "mid-sentence": "cut by the budget in the middle of a sentence",
    "hallucinated-turn": "ran on into a next user/system turn it wrote itself",
    "ran-past-end-of-turn": "an end-of-turn token's text with more text after it",
}


@dataclass(frozen=True)
class Example:
    file: str
    line: int
    model: str | None
    finish_reason: str | None
    excerpt: str
    detail: str = ""


@dataclass(frozen=True)
class Problem:
    key: str
    description: str
    count: int
    share: float  # of responses
    examples: tuple[Example, ...]
    by_model: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class LogsSettings:
    overrides: Mapping[str, str] = field(default_factory=dict)
    max_length_share: float = 0.05  # SD701 budget-truncation-rate
    max_turn_share: float = 0.0  # SD702 hallucinated-turns-in-logs: any is too many by default
    examples: int = 5


@dataclass(frozen=True)
class LogsReport:
    files: tuple[str, ...]
    vocabulary: str
    lines: int
    blank: int
    bad_lines: int
    bad_examples: tuple[tuple[str, int], ...]
    unrecognised: int  # valid JSON with no response in any known shape
    responses: int
    shapes: dict[str, int]
    finish: dict[str, int]
    finish_raw: dict[str, int]
    by_model: dict[str, dict[str, int]]
    by_max_tokens: dict[str, dict[str, int]]
    stop_reasons: dict[str, int]
    problems: dict[str, Problem]
    settings: LogsSettings
    seconds: float
    # every answer flagged with a next turn or a run past end of turn: problem -> ((file, line), …)
    flagged: dict[str, tuple[tuple[str, int], ...]] = field(default_factory=dict)
    multi_choice: int = 0  # responses with more than one choice (n > 1): only the first is read

    @property
    def length_share(self) -> float:
        return self.finish.get("length", 0) / self.responses if self.responses else 0.0


def _connect():
    try:
        import duckdb
    except ImportError:
        raise MissingDependencyError("stopdoctor logs needs the duckdb package",
                                     hint="pip install duckdb (or reinstall stopdoctor)") from None
    import tempfile

    con = duckdb.connect()
    # Line numbering holds a file's lines until they are numbered; past memory they spill here,
    # not into the working directory (DuckDB's default for an in-memory database).
    con.execute(f"SET temp_directory = {_sql_string(str(Path(tempfile.gettempdir()) / 'stopdoctor-duckdb'))}")
    return con, duckdb


def show_sql(paths: Sequence[str], vocabulary: TurnVocabulary | None = None,
             settings: LogsSettings = LogsSettings()) -> str:
    """The normalising query for each file, to run as it is in another DuckDB (`--show-sql`)."""
    _check_inputs(paths)
    vocabulary = vocabulary or builtin_vocabulary()
    con, _ = _connect()
    try:
        return "".join(f"-- {path}\n{normalise_sql(_source_sql(path, con), vocabulary, settings.overrides).strip()};\n\n"
                       for path in paths)
    finally:
        con.close()


def parse_field_overrides(values: Sequence[str]) -> dict[str, str]:
    """`--field NAME=JSONPATH` (repeatable), e.g. finish_reason=$.output.stop."""
    overrides: dict[str, str] = {}
    for value in values:
        name, sep, path = value.partition("=")
        name = name.strip().replace("-", "_")
        if not sep or name not in OVERRIDABLE or not path.strip().startswith("$"):
            raise InputError(f"--field {value!r}: expected NAME=$.json.path with NAME one of {', '.join(OVERRIDABLE)}",
                             hint="e.g. --field finish_reason=$.output.stop --field text=$.output.text")
        overrides[name] = path.strip()
    return overrides


def _check_inputs(paths: Sequence[str]) -> None:
    if not paths:
        raise InputError("no log file given", hint="stopdoctor logs responses.jsonl [more.jsonl.gz …]")
    for path in paths:
        if _is_remote(path):
            continue
        require_file(path)


RUNNING_DONE = 99.9  # the most progress reported before the query has returned


def _run(con, sql: str, on_progress: Callable[[float], None] | None):
    """Run `sql`; with `on_progress`, in a worker thread while this one reports DuckDB's progress."""
    if on_progress is None:
        return con.execute(sql)
    con.execute("SET enable_progress_bar = true")  # DuckDB tracks progress only when asked…
    con.execute("SET enable_progress_bar_print = false")  # …and must not draw its own on stdout
    outcome: dict[str, Any] = {}

    def work() -> None:
        try:
            outcome["result"] = con.execute(sql)
        except BaseException as error:  # noqa: BLE001 - re-raised in the caller's thread
            outcome["error"] = error

    worker = threading.Thread(target=work, daemon=True)
    worker.start()
    while worker.is_alive():
        try:
            worker.join(0.1)
        except KeyboardInterrupt:
            con.interrupt()  # stop the query too, not only this thread
            raise
        try:
            done = con.query_progress()
        except Exception:  # noqa: BLE001 - progress is cosmetic
            done = -1
        if done is not None and done >= 0:
            # DuckDB's figure is its scan's: 100 while the rest of the query still runs.
            on_progress(min(done, RUNNING_DONE))
    if "error" in outcome:
        raise outcome["error"]
    on_progress(100.0)
    return outcome["result"]


def analyze_logs(paths: Sequence[str], vocabulary: TurnVocabulary | None = None,
                 settings: LogsSettings = LogsSettings(),
                 on_progress: Callable[[str, float], None] | None = None) -> LogsReport:
    """Read every file, normalise every line, and summarise. Bad lines are counted, never fatal."""
    _check_inputs(paths)
    vocabulary = vocabulary or builtin_vocabulary()
    started = time.perf_counter()
    con, duckdb = _connect()
    con.execute("CREATE TEMP TABLE rec (file VARCHAR, line_no BIGINT, blank BOOLEAN, bad BOOLEAN, shape VARCHAR, "
                "finish_raw VARCHAR, finish VARCHAR, model VARCHAR, max_tokens VARCHAR, stop_reason VARCHAR, "
                "turn_candidate BOOLEAN, mid_sentence BOOLEAN, candidate_text VARCHAR, "
                "tail VARCHAR, multi_choice BOOLEAN)")
    for index, path in enumerate(paths):
        def progress(start: float, span: float, p: str = path):
            if on_progress is None:
                return None
            def report(done: float) -> None:
                value = start + min(done, 100.0) * span / 100
                on_progress(p, 100.0 if value >= 100 else min(value, RUNNING_DONE))
            return report

        try:
            source = _source_sql(path, con)
            if not _is_parquet(path):
                # Number the lines first (one ordered pass, no parsing), so that the parsing below
                # runs on every core: numbering in the same pipeline would keep it on one.
                _run(con, f"CREATE OR REPLACE TEMP TABLE lines AS SELECT * FROM {source}", progress(0, 40))
                source = "lines"
            query = normalise_sql(source, vocabulary, settings.overrides)
            _run(con, f"INSERT INTO rec SELECT {_sql_string(path)} AS file, * FROM ({query})",
                 progress(0 if _is_parquet(path) else 40, 100 if _is_parquet(path) else 60))
            con.execute("DROP TABLE IF EXISTS lines")
        except duckdb.Error as error:
            first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
            raise InputError(f"{path}: cannot read it as JSONL/Parquet: {first}") from None
    report = _summarise(con, paths, vocabulary, settings)
    con.close()
    return _with_time(report, time.perf_counter() - started)


def _with_time(report: LogsReport, seconds: float) -> LogsReport:
    import dataclasses

    return dataclasses.replace(report, seconds=seconds)


def _rows(con, sql: str) -> list[tuple]:
    return con.execute(sql).fetchall()


def _nested(rows: list[tuple]) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for key, finish, count in rows:
        out.setdefault("(not logged)" if key is None else str(key), {})[finish] = count
    return out


def _mask_code(text: str) -> str:
    """Code blocks and inline code spans blanked (same length, newlines kept): an answer that
    shows a template or a transcript in code is quoting it, not writing a turn."""
    def blank(match: re.Match) -> str:
        return re.sub(r"[^\n]", " ", match.group(0))

    text = re.sub(r"(?ms)^[ \t]*(```|~~~).*?(?:^[ \t]*\1[^\n]*$|\Z)", blank, text)
    return re.sub(r"`[^`\n]+`", blank, text)


def _excerpt(text: str, offset: int, before: int = 40, after: int = 60) -> str:
    start = max(0, offset - before)
    return ("…" if start else "") + text[start:offset + after] + ("…" if offset + after < len(text) else "")


# A bare role word is a turn only where a turn could start: at the very start, after a blank
# line, after another role word, or after a line that ends a sentence or a block. "root\nuser\nguest"
# (a list) is not a turn; "Paris.\nsystem\n\nuser\n" (ChatML with its specials stripped) is.
_ENDS_A_BLOCK = re.compile(r"""[.!?…。！？:;)"'”’*`\]>|]\s*$""")


def _plausible_turn(text: str, turn: HallucinatedTurn, words: set[str]) -> bool:
    if turn.source != "role word on its own line":
        return True
    before = text[:turn.offset].rstrip(" \t")
    if not before or before.endswith("\n\n") or not before.endswith("\n"):
        return True  # start of the text, or after a blank line
    previous = before[:-1].rsplit("\n", 1)[-1].strip()
    return not previous or previous in words or bool(_ENDS_A_BLOCK.search(previous))


def diagnose_text(text: str, finish: str, vocabulary: TurnVocabulary) -> Diagnosis:
    """`diagnose` on one logged answer, per template family; the earliest evidence wins.

    Code (fenced or inline) is blanked first, and a bare role word counts only where a turn could
    start (`_plausible_turn`): precision first, an ordinary answer flagged costs more than a miss.
    Only the families that can tell something are asked: those whose header text occurs, plus one
    per new set of bare role words (a family whose headers do not occur finds exactly what another
    family with the same bare words finds)."""
    masked = _mask_code(text)
    generation = Generation(finish, StopCause("length" if finish == FINISH_LENGTH else "eos"), masked)
    stop_ids = list(vocabulary.enders)  # every ender is meant to stop: flag only those followed by more text
    asked: list[tuple[Mapping[str, str], tuple[str, ...]]] = []
    seen_words: set[str] = set()
    for (_, headers, specials), words in zip(vocabulary.families, vocabulary.family_words):
        if not headers or any(h in masked for h in headers.values()) or not words <= seen_words:
            asked.append((headers, specials))
            seen_words |= words
    if not asked:
        asked.append((vocabulary.families[0][1], vocabulary.families[0][2]))
    missed = None
    turns: dict[int, HallucinatedTurn] = {}
    weak_allowed = False
    for headers, specials in asked:
        found = diagnose(generation, vocabulary.enders, stop_ids, headers, specials)
        missed = missed or found.should_have_stopped
        weak_allowed = weak_allowed or not headers
        for turn in found.turns:
            if _plausible_turn(masked, turn, seen_words):
                turns.setdefault(turn.offset, turn)
    ordered = tuple(turns[k] for k in sorted(turns))
    return Diagnosis(missed, None, _headline_turn(ordered, weak_allowed=weak_allowed), ordered)


def _summarise(con, paths: Sequence[str], vocabulary: TurnVocabulary, settings: LogsSettings) -> LogsReport:
    (lines, blank, bad, responses, multi_choice), = _rows(con, """
        SELECT count(*), count(*) FILTER (blank), count(*) FILTER (bad), count(*) FILTER (shape IS NOT NULL),
               count(*) FILTER (multi_choice) FROM rec""")
    responses_filter = "shape IS NOT NULL"
    unrecognised = lines - blank - bad - responses
    bad_examples = tuple((f, n) for f, n in _rows(con, "SELECT file, line_no FROM rec WHERE bad ORDER BY file, line_no LIMIT 5"))
    shapes = dict(_rows(con, f"SELECT shape, count(*) FROM rec WHERE {responses_filter} GROUP BY 1 ORDER BY 2 DESC, 1"))
    finish = dict(_rows(con, f"SELECT finish, count(*) FROM rec WHERE {responses_filter} GROUP BY 1 ORDER BY 2 DESC, 1"))
    finish_raw = dict(_rows(con, f"SELECT coalesce(finish_raw, '(none)'), count(*) FROM rec WHERE {responses_filter} "
                                 "GROUP BY 1 ORDER BY 2 DESC, 1"))
    by_model = _nested(_rows(con, f"SELECT model, finish, count(*) FROM rec WHERE {responses_filter} "
                                  "GROUP BY 1, 2 ORDER BY 1 NULLS LAST, 3 DESC, 2"))
    by_max_tokens = _nested(_rows(con, f"SELECT max_tokens, finish, count(*) FROM rec WHERE {responses_filter} "
                                       "GROUP BY 1, 2 ORDER BY try_cast(max_tokens AS DOUBLE) NULLS LAST, 1, 3 DESC, 2"))
    stop_reasons = {}
    for value, count in _rows(con, f"SELECT stop_reason, count(*) FROM rec WHERE {responses_filter} AND stop_reason IS NOT NULL "
                                   "GROUP BY 1 ORDER BY 2 DESC, 1 LIMIT 50"):
        stop_reasons[f"id {value}" if re.fullmatch(r"\d+", value) else repr(value)] = count

    def share(count: int) -> float:
        return count / responses if responses else 0.0

    def per_model(where: str) -> dict[str, int]:
        return {("(not logged)" if m is None else m): c for m, c in _rows(
            con, f"SELECT model, count(*) FROM rec WHERE {where} GROUP BY 1 ORDER BY 2 DESC, 1 NULLS LAST")}

    n = settings.examples
    problems: dict[str, Problem] = {}
    length_count = finish.get("length", 0)
    length_examples = tuple(Example(f, line, model, raw, tail or "")
                            for f, line, model, raw, tail in _rows(
        con, f"SELECT file, line_no, model, finish_raw, tail FROM rec WHERE finish = 'length' ORDER BY file, line_no LIMIT {n}"))
    problems["budget-truncated"] = Problem("budget-truncated", PROBLEMS["budget-truncated"], length_count,
                                           share(length_count), length_examples, per_model("finish = 'length'"))
    mid = _rows(con, "SELECT count(*) FROM rec WHERE mid_sentence")[0][0]
    mid_examples = tuple(Example(f, line, model, raw, tail or "")
                         for f, line, model, raw, tail in _rows(
        con, f"SELECT file, line_no, model, finish_raw, tail FROM rec WHERE mid_sentence ORDER BY file, line_no LIMIT {n}"))
    problems["mid-sentence"] = Problem("mid-sentence", PROBLEMS["mid-sentence"], mid, share(mid), mid_examples,
                                       per_model("mid_sentence"))

    turns: list[Example] = []
    ran_on: list[Example] = []
    turn_models: Counter[str] = Counter()
    ran_models: Counter[str] = Counter()
    seen: dict[tuple[str, str], Diagnosis] = {}  # the same answer logged again is diagnosed once
    for f, line, model, raw, finish_value, text in _rows(
            con, "SELECT file, line_no, model, finish_raw, finish, candidate_text FROM rec "
                 "WHERE turn_candidate AND candidate_text IS NOT NULL ORDER BY file, line_no"):
        found = seen.get((text, finish_value))
        if found is None:
            found = diagnose_text(text, finish_value, vocabulary)
            if len(seen) < 100_000:
                seen[(text, finish_value)] = found
        name = "(not logged)" if model is None else model
        if found.hallucinated_turn is not None:
            turn = found.hallucinated_turn
            turns.append(Example(f, line, model, raw, _excerpt(text, turn.offset),
                                 f"{turn.role} turn ({turn.source}) at character {turn.offset}"))
            turn_models[name] += 1
        missed = found.should_have_stopped
        if missed is not None:
            ran_on.append(Example(f, line, model, raw, _excerpt(text, missed.offset or 0),
                                  f"{missed.text} at character {missed.offset}, more text after it"))
            ran_models[name] += 1
    problems["hallucinated-turn"] = Problem("hallucinated-turn", PROBLEMS["hallucinated-turn"], len(turns),
                                            share(len(turns)), tuple(turns[:n]), dict(turn_models.most_common()))
    problems["ran-past-end-of-turn"] = Problem("ran-past-end-of-turn", PROBLEMS["ran-past-end-of-turn"], len(ran_on),
                                               share(len(ran_on)), tuple(ran_on[:n]), dict(ran_models.most_common()))
    # Line numbers of every flagged answer, for callers that need them all (tests, --json).
    flagged = {"hallucinated-turn": tuple((e.file, e.line) for e in turns),
               "ran-past-end-of-turn": tuple((e.file, e.line) for e in ran_on)}
    return LogsReport(tuple(paths), vocabulary.source, lines, blank, bad, bad_examples, unrecognised, responses,
                      shapes, finish, finish_raw, by_model, by_max_tokens, stop_reasons, problems, settings, 0.0, flagged,
                      multi_choice)
