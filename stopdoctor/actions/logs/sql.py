"""The normalising query: engine-neutral DuckDB SQL that reads log lines of JSON text and picks
each field from whichever logged shape the line has, to run unchanged on a bigger DuckDB
(MotherDuck, a large VM) over object storage; and the relation a log file is read as.

Shapes recognised per line (request+response pairs under `request`/`response`, the response
optionally under `response.body` as in OpenAI batch output): OpenAI-compatible chat and completions
(vLLM, TGI's messages API, llama.cpp server, transformers serve, SGLang `matched_stop`), TGI
`/generate` (`details.finish_reason`), llama.cpp `/completion` (`stop_type`, `stopped_*`,
`stopping_word`), Ollama `/api/chat` and `/api/generate` (`done_reason`).

Imports: actions.logs.vocabulary (the prefilter's words). Builds text only; runs nothing.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Mapping

from stopdoctor.actions.logs.vocabulary import TurnVocabulary

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


def sql_string(text: str) -> str:
    """`text` as a SQL string literal."""
    return "'" + text.replace("'", "''") + "'"


def _sql_regex(pattern: str) -> str:
    return sql_string(pattern)


def _re2_escape(text: str) -> str:
    """A literal for RE2 (DuckDB's regex engine): Python's re.escape writes a backslash before a
    raw newline, which RE2 rejects."""
    return "".join("\\" + c if c in r"\.^$|?*+()[]{}" else {"\n": r"\n", "\t": r"\t", "\r": r"\r"}.get(c, c)
                   for c in text)


def prefilter_sql(vocabulary: TurnVocabulary, column: str) -> str:
    """A SQL condition true for every text in which `diagnose` may find a turn or an ender
    that ran on: literal headers and ender texts, bare role words alone on a line, and (when a
    family has no header) transcript labels. A superset; Python decides."""
    literals = sorted({h for _, headers, _ in vocabulary.families for h in headers.values()}
                      | {e.text for e in vocabulary.enders.values() if e.text})
    words = sorted({w for family in vocabulary.family_words for w in family})
    # One RE2 pass over the text, whatever the number of families.
    alternatives = [_re2_escape(text) for text in literals]
    if words:
        alternatives.append(r"(?m:^[ \t]*(?:" + "|".join(_re2_escape(w) for w in words) + r")[ \t]*$)")
    if any(not headers for _, headers, _ in vocabulary.families):
        alternatives.append(r"(?m:^(?:User|USER|Human|HUMAN)[ \t]*:)")
    terms = [f"regexp_matches({column}, {_sql_regex('|'.join(alternatives))})"] if alternatives else []
    return "(" + " OR ".join(terms) + ")" if terms else "false"


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
    path_list = "[" + ", ".join(sql_string(p) for p in paths) + "]"
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
    stop_words = ", ".join(sql_string(w) for w in _STOP_WORDS)
    length_words = ", ".join(sql_string(w) for w in _LENGTH_WORDS)
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
           {prefilter_sql(vocabulary, 'text')} AS turn_candidate
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


def source_sql(path: str, con=None) -> str:
    """One row per physical line, numbered from 1 (blank lines kept, so numbers match `sed -n`).
    A JSON line cannot hold a raw control character, so chr(1) never splits one. A Parquet row
    is a line too: its one text column when it has only that (a JSON log stored as text), else
    the row as a JSON object; rows are numbered from 1."""
    if is_parquet(path):
        scan = f"read_parquet({sql_string(path)}, file_row_number = true)"
        columns = con.execute(f"DESCRIBE SELECT * FROM read_parquet({sql_string(path)})").fetchall() if con else []
        if len(columns) == 1 and columns[0][1] in ("VARCHAR", "JSON"):
            line = '"' + columns[0][0].replace('"', '""') + '"::VARCHAR'
        else:
            line = "to_json(struct_pack(*COLUMNS(* EXCLUDE (file_row_number))))::VARCHAR"
        return f"(SELECT file_row_number + 1 AS line_no, {line} AS line FROM {scan})"
    return ("(SELECT ordinality AS line_no, line FROM read_csv("
            f"{sql_string(path)}, columns = {{'line': 'VARCHAR'}}, delim = chr(1), quote = '', escape = '', "
            "header = false, auto_detect = false, max_line_size = 8388608, compression = 'auto') "
            "WITH ORDINALITY)")


def is_parquet(path: str) -> bool:
    """A Parquet file (read with read_parquet, one row a line), not JSONL."""
    return path.lower().endswith((".parquet", ".parq", ".pq"))


def is_remote(path: str) -> bool:
    """A URL DuckDB opens itself (s3://, https://, ...), not a local file."""
    return bool(re.match(r"^[a-z][a-z0-9+]*://", path))
