"""Training datasets read as the SFT stacks read them: JSONL rows of chat `messages`,
`prompt`/`completion` (strings or message lists), or plain `text`.

`iter_examples` reads one row at a time (a dataset need not fit in memory), `count_examples` counts
rows without parsing them (a progress bar's total); a bad row is one InputError naming its line.

Imports: the standard library, `stopdoctor.core.errors`.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from stopdoctor.core.errors import InputError, require_file
from stopdoctor.core.records import record


@record
class Example:
    """One row of a dataset, and which of the three row kinds it is."""

    index: int  # 0-based row number among the non-blank lines
    line: int  # 1-based line in the file
    kind: str  # "messages" | "prompt-completion" | "text"
    row: dict

    @property
    def conversational(self) -> bool:
        """Rendered through the chat template: messages, or prompt and completion as message lists."""
        return self.kind == "messages" or (self.kind == "prompt-completion" and isinstance(self.row["prompt"], list))


def load_examples(path: str | Path, limit: int | None = None) -> list[Example]:
    """JSONL rows with `messages` (chat), `prompt`/`completion` (strings or message lists), or `text`."""
    examples = list(iter_examples(path, limit))
    if not examples:
        raise InputError(f"{Path(path).name}: holds no example")
    return examples


def iter_examples(path: str | Path, limit: int | None = None, bad: list[str] | None = None) -> Iterator[Example]:
    """`load_examples` one row at a time, so that a dataset's rows need not fit in memory. A bad
    row (not UTF-8, not JSON, no example's shape) is an error when it is reached, or, given `bad`,
    is skipped with its one-line reason appended there (as `logs` counts bad lines and goes on)."""
    return _rows(_data_file(path), limit, bad)


# The longest row read: a training example of 16 MB is far past any context length, and json.loads
# builds ~20x its text in objects. A row is read with this cap, never a whole "line" of gigabytes.
MAX_ROW_BYTES = 16 * 1024 * 1024
# As in model_facts.parse_json: ~70 bytes of objects per `[]`; a row never holds this many.
MAX_ROW_CONTAINERS = 1_000_000


def _data_file(path: str | Path) -> Path:
    require_file(str(path), "data file", "give a JSONL file with one example a line")
    return Path(path)


def _lines(handle) -> Iterator[tuple[int, bytes]]:
    """(line number, bytes) of each line, each read with the row cap: a longer line is refused
    naming it, after reading at most the cap."""
    number = 0
    while raw := handle.readline(MAX_ROW_BYTES + 1):
        number += 1
        if len(raw) > MAX_ROW_BYTES:
            raise InputError(f"{handle.name}: line {number} is longer than {MAX_ROW_BYTES >> 20} MB, the longest "
                             "row stopdoctor reads", "one training example a line; a row this long is no example")
        yield number, raw


def _rows(path: Path, limit: int | None, bad: list[str] | None = None) -> Iterator[Example]:
    count = 0
    with path.open("rb") as handle:
        for number, raw in _lines(handle):
            if limit is not None and count >= limit:
                break
            if not raw.strip():
                continue
            try:
                row = _parse_row(raw, number, path.name)
                kind = _kind(row, f"{path.name} line {number}")
            except InputError as error:
                if bad is None:
                    raise
                why = error.message.removeprefix(f"{path.name}: ").removeprefix(f"{path.name} line {number}: ")
                bad.append(why if why.startswith(f"line {number} ") else f"line {number}: {why}")
                continue
            yield Example(count, number, kind, row)
            count += 1


def _parse_row(raw: bytes, number: int, name: str) -> Any:
    """One JSONL line; every way it can fail is one InputError naming the line."""
    try:
        line = raw.decode("utf-8-sig" if number == 1 else "utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"{name}: line {number} is not UTF-8 text (byte {exc.start})",
                         "the data must be UTF-8 JSONL, as the datasets library writes it") from exc
    if line.count("[") + line.count("{") > MAX_ROW_CONTAINERS:
        raise InputError(f"{name}: line {number} holds more than {MAX_ROW_CONTAINERS} JSON arrays/objects",
                         "one training example a line; no example holds this many")
    try:
        return json.loads(line)
    except json.JSONDecodeError as exc:
        raise InputError(f"{name}: line {number} is not JSON: {exc.msg}",
                         "the data must be JSONL: one JSON object a line") from exc
    except RecursionError as exc:
        raise InputError(f"{name}: line {number} holds JSON nested too deeply") from exc
    except ValueError as exc:  # an integer of more digits than int() converts
        raise InputError(f"{name}: line {number} holds an integer of more than "
                         f"{sys.get_int_max_str_digits()} digits") from exc


def count_examples(path: str | Path, limit: int | None = None) -> int:
    """The number of non-blank lines (the examples `iter_examples` yields when every line is
    valid): the total a progress bar counts towards, read without parsing."""
    count = 0
    with _data_file(path).open("rb") as handle:
        for _, line in _lines(handle):
            if line.strip():
                count += 1
                if limit is not None and count >= limit:
                    break
    return count


def _kind(row: Any, where: str) -> str:
    if not isinstance(row, dict):
        raise InputError(f"{where}: an example must be a JSON object", None)
    if "messages" in row:
        messages = row["messages"]
        if not isinstance(messages, list) or not messages or not all(isinstance(m, dict) and "role" in m for m in messages):
            raise InputError(f"{where}: \"messages\" must be a non-empty list of {{role, content}} objects", None)
        return "messages"
    if "prompt" in row and "completion" in row:
        prompt, completion = row["prompt"], row["completion"]
        if isinstance(prompt, str) and isinstance(completion, str):
            return "prompt-completion"
        if isinstance(prompt, list) and isinstance(completion, list):
            return "prompt-completion"
        raise InputError(f"{where}: \"prompt\" and \"completion\" must both be strings or both message lists", None)
    if isinstance(row.get("text"), str):
        return "text"
    raise InputError(f"{where}: no \"messages\", \"prompt\"/\"completion\" or \"text\" field",
                     "rows need messages (chat), prompt and completion, or text; ShareGPT "
                     "\"conversations\" must be converted to messages first")
