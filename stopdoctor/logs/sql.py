"""The normalising query: engine-neutral DuckDB SQL that reads log lines of JSON text and picks
each field from whichever logged shape the line has, to run unchanged on a bigger DuckDB
(MotherDuck, a large VM) over object storage; and the relation a log file is read as.

Shapes recognised per line (request+response pairs under `request`/`response`, the response
optionally under `response.body` as in OpenAI batch output): OpenAI-compatible chat and completions
(vLLM, TGI's messages API, llama.cpp server, transformers serve, SGLang `matched_stop`), TGI
`/generate` (`details.finish_reason`), llama.cpp `/completion` (`stop_type`, `stopped_*`,
`stopping_word`), Ollama `/api/chat` and `/api/generate` (`done_reason`).

Imports: logs.vocabulary (the prefilter's words), analysis.diagnose (its user labels). Builds text only; runs nothing.
"""

from __future__ import annotations

import re

from stopdoctor.logs.vocabulary import TurnVocabulary
from stopdoctor.analysis.diagnose import USER_LABELS

# Text that ends a sentence (or a code block) when an answer was cut by the budget.
_SENTENCE_END = r"""[.!?…。！？:;"'”’)\]*`>]$"""

OVERRIDABLE = ("text", "finish_reason", "stop_reason", "model", "max_tokens", "output_tokens", "reasoning_tokens",
               "timestamp")


def _path(root: str, suffix: str) -> str:
    return "$" + suffix if root == "$" else root + suffix


# Characters a printed script must not carry raw (`--show-sql` on a terminal): controls, line
# breaks, escape sequences, bidi overrides. In a literal they become `chr(N)`, the same string.
_RAW_UNSAFE = re.compile("([\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069])")


def sql_comment(text: str) -> str:
    """`text` for a `--` comment line: what must not be printed raw shown as an escape (`\\x1b`)."""
    return _RAW_UNSAFE.sub(lambda m: f"\\x{ord(m.group()):02x}" if ord(m.group()) <= 0xFF else f"\\u{ord(m.group()):04x}", text)


def sql_string(text: str) -> str:
    """`text` as a SQL string literal (a constant expression `'a' || chr(27) || 'b'` when it holds
    a character that must not be printed raw)."""
    if not _RAW_UNSAFE.search(text):
        return "'" + text.replace("'", "''") + "'"
    pieces = [f"chr({ord(part)})" if i % 2 else "'" + part.replace("'", "''") + "'"
              for i, part in enumerate(_RAW_UNSAFE.split(text)) if part]
    return "(" + " || ".join(pieces) + ")"


def _sql_regex(pattern: str) -> str:
    return sql_string(pattern)


def _re2_escape(text: str) -> str:
    """A literal for RE2 (DuckDB's regex engine): Python's re.escape writes a backslash before a
    raw newline, which RE2 rejects."""
    return "".join("\\" + c if c in r"\.^$|?*+()[]{}" else {"\n": r"\n", "\t": r"\t", "\r": r"\r"}.get(c, c)
                   for c in text)


def prefilter_sql(vocabulary: TurnVocabulary, column: str) -> str:
    """A SQL condition true for every text in which `diagnose` may find a turn or an ender
    that ran on: literal headers and ender texts, bare role words alone on a line, and user labels
    at a line start (a transcript; alone, where a family has no header). A superset; Python decides."""
    literals = sorted({h for _, headers, _ in vocabulary.families for h in headers.values()}
                      | {e.text for e in vocabulary.enders.values() if e.text})
    words = sorted({w for family in vocabulary.family_words for w in family})
    # One RE2 pass over the text, whatever the number of families.
    alternatives = [_re2_escape(text) for text in literals]
    if words:
        alternatives.append(r"(?m:^[ \t]*(?:" + "|".join(_re2_escape(w) for w in words) + r")[ \t]*$)")
    # A user label at a line start, dressed or not: a transcript (`diagnose.transcript_turns`)
    # whatever the family, and a lone label where a family has no header.
    alternatives.append(r"(?m:^[ \t]*(?:#{1,4}[ \t]*)?(?:\*\*)?(?:" + "|".join(USER_LABELS) + r")(?:\*\*)?[ \t]*:)")
    terms = [f"regexp_matches({column}, {_sql_regex('|'.join(alternatives))})"] if alternatives else []
    return "(" + " OR ".join(terms) + ")" if terms else "false"


#QUERY

def source_sql(path: str, con=None, both_line_ends: bool = False) -> str:
    """One row per physical line, numbered from 1 (blank lines kept, so numbers match `sed -n`).
    A JSON line cannot hold a raw control character, so chr(1) never splits one. A Parquet row
    is a line too: its one text column when it has only that (a JSON log stored as text), else
    the row as a JSON object; rows are numbered from 1. `both_line_ends`: lines end with CRLF or
    LF, mixed in the file (`inputs.check_log_file` says so)."""
    if is_parquet(path):
        scan = f"read_parquet({sql_string(path)}, file_row_number = true)"
        columns = con.execute(f"DESCRIBE SELECT * FROM read_parquet({sql_string(path)})").fetchall() if con else []
        if len(columns) == 1 and columns[0][1] in ("VARCHAR", "JSON"):
            line = '"' + columns[0][0].replace('"', '""') + '"::VARCHAR'
        else:
            line = "to_json(struct_pack(*COLUMNS(* EXCLUDE (file_row_number))))::VARCHAR"
        return f"(SELECT file_row_number + 1 AS line_no, {line} AS line FROM {scan})"
    return f"(SELECT ordinality AS line_no, line FROM {_lines_csv(path, both_line_ends)} WITH ORDINALITY)"


def _lines_csv(path: str, both_line_ends: bool = False) -> str:
    # DuckDB detects one line end a file and refuses a file that mixes them; told CRLF in its
    # lenient mode it ends a line at either (and at a lone CR: `check_log_file` rules that out).
    ends = ", new_line = '\\r\\n', strict_mode = false" if both_line_ends else ""
    return (f"read_csv({sql_string(path)}, columns = {{'line': 'VARCHAR'}}, delim = chr(1), quote = '', escape = '', "
            f"header = false, auto_detect = false, max_line_size = 8388608, compression = 'auto'{ends})")


def unnumbered_source_sql(path: str, both_line_ends: bool = False) -> str:
    """A JSONL file's lines as `source_sql` reads them, each with `line_no` 1 (a placeholder): the
    relation for a parallel read in file order (`logs.query`), numbered afterwards by the `rowid` of
    the table it was written into. No ordinality: numbering in the scan keeps it on one core."""
    return f"(SELECT 1::BIGINT AS line_no, line FROM {_lines_csv(path, both_line_ends)})"


def glob_literal(path: str) -> str:
    """A local `path` as a DuckDB file pattern that matches only that file: DuckDB expands `*`,
    `?` and `[...]` in any path it is given; each of them as a one-character class is itself."""
    return "".join(f"[{c}]" if c in "*?[" else c for c in path)


def is_parquet(path: str) -> bool:
    """A Parquet file (read with read_parquet, one row a line), not JSONL."""
    return path.lower().endswith((".parquet", ".parq", ".pq"))


def is_remote(path: str) -> bool:
    """A URL DuckDB opens itself (s3://, https://, ...), not a local file."""
    return bool(re.match(r"^[a-z][a-z0-9+]*://", path))


def whole_number_sql(expr: str) -> str:
    """SQL: `expr` (a number logged as text or a number) as a BIGINT; NULL when it is neither."""
    return f"try_cast(try_cast({expr} AS DOUBLE) AS BIGINT)"
