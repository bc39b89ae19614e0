"""Guards on the log files `logs` reads, before DuckDB sees them: a path is a path (never a glob),
only regular files, a compressed file may not expand without bound, a line has a size limit, and a
line that is not UTF-8 is one bad line, not a failed file.

- `check_log_file(path)`: a local input is a regular file with no line over `MAX_LINE_BYTES`; a
  `.gz` expands to at most `MAX_GZ_RATIO` times its size (plus `GZ_ALLOWANCE`); one streaming pass,
  which also says whether its lines end both with CRLF and LF (read then with both).
- `literal_path(path, index, folder)`: the name DuckDB is given: the path itself, or a link to it
  under `folder` when its name holds glob characters (DuckDB expands `x[1].jsonl` to `x1.jsonl`).
- `utf8_copy(path, index, folder)`: a plain copy of the file with every line that is not UTF-8
  replaced by a marker that is not JSON (so it is counted as a bad line, as a non-JSON line is);
  made only after DuckDB refused the file for its encoding.
- `read_error(path, message)`: DuckDB's error about a file as one line a person can act on (out of
  memory: raise `STOPDOCTOR_LOGS_MEMORY`).

Imports: the standard library, `stopdoctor.core.errors`.
"""

from __future__ import annotations

import functools
import gzip
import os
import stat
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path

from stopdoctor.core.errors import InputError

# The longest line read (DuckDB's max_line_size in logs.sql): a logged response of
# 8 MB is far past any real answer; DuckDB holds a line several times over while it parses it,
# and its read buffer (16 lines of this size) must fit in its memory limit.
MAX_LINE_BYTES = 8 * 1024 * 1024

# DuckDB's memory for one run: past it, line numbering and the records spill to the temp
# directory, so a log of any size is read in bounded memory (STOPDOCTOR_LOGS_MEMORY overrides).
# Not less: the ordered parallel read (`query._ordered_read`) holds a few batches out of order, and with
# 512 MB DuckDB ran it on one thread (measured on 2 threads, 1M and 10M lines: serial at 512 MB,
# parallel at 576 MB; peak RSS of the whole 10M-line report 876 MiB).
MEMORY_LIMIT = "576MB"

# A .gz of JSON logs expands 5-15 times; 100 is generous, and a 5 MB file of 5 GB is a bomb.
MAX_GZ_RATIO = 100
GZ_ALLOWANCE = 256 * 1024 * 1024
NOT_UTF8_LINE = b"<a line that is not UTF-8 text>"
_GLOB_CHARACTERS = set("*?[]{}")
_CHUNK = 1 << 20


def check_log_file(path: str) -> bool:
    """A local log input: a regular file, no line longer than `MAX_LINE_BYTES`, and a `.gz` that
    does not expand past its bound. One streaming pass of one-byte searches (memchr: as fast as the
    file is read; 0.27-0.43 s -> 0.03-0.04 s on 389 MB, benchmarks/RESULTS.md): DuckDB
    itself drops a line longer than its read buffer without a word, and holds a long line many
    times over while it parses it.

    True when the file's lines end both ways, some with CRLF and some with LF alone, and no CR
    stands alone (a log appended to from Windows and Linux): DuckDB detects one line end a file and
    refuses the other (`sql.source_sql` then reads it with both)."""
    try:
        info = os.stat(path)
    except FileNotFoundError:
        raise InputError(f"{path}: no such file") from None
    except OSError as error:
        raise InputError(f"{path}: cannot be read: {error.strerror or error}") from None
    if not stat.S_ISREG(info.st_mode):
        raise InputError(f"{path}: is not a regular file (a folder, named pipe or device)",
                         hint="give the log files themselves, one per argument")
    if path.lower().endswith((".parquet", ".parq", ".pq", ".zst")):
        return False  # rows, not lines; zstd is left to DuckDB
    compressed = path.lower().endswith(".gz")
    bound = info.st_size * MAX_GZ_RATIO + GZ_ALLOWANCE
    chunks = functools.partial(_chunks, path, compressed, bound, info.st_size)  # each call reads the file anew
    scan = _LineScan(path, chunks)
    for chunk in chunks():
        scan.feed(chunk)
    scan.check()
    if not scan.cr:
        return False  # LF alone: read as before
    # A CR: a second pass (such files only) counts the lines and the CRs, and when some but not all
    # lines have a CR (CRLF alone, the common case of such files, ends here) a third counts the CRLFs:
    # some lines end with CRLF and others with LF when every CR is in a CRLF.
    lines = cr = 0
    for chunk in chunks():
        lines += chunk.count(b"\n")
        cr += chunk.count(b"\r")
    if not 0 < cr < lines:
        return False
    crlf, ends_in_cr = 0, False
    for chunk in chunks():
        crlf += chunk.count(b"\r\n") + (ends_in_cr and chunk[:1] == b"\n")
        ends_in_cr = chunk[-1:] == b"\r"
    return crlf == cr


def _chunks(path: str, compressed: bool, bound: int, size: int) -> Iterator[bytes]:
    try:
        with open(path, "rb") as handle:
            yield from _inflated(handle, path, bound, size) if compressed else iter(lambda: handle.read(_CHUNK), b"")
    except OSError as error:
        raise InputError(f"{path}: cannot be read: {error.strerror or error}") from None


class _LineScan:
    """The length of the line in progress across chunks (a line past the limit is refused) and
    whether any CR occurs: searches for one byte (memchr), no count, so the pass runs at the speed
    the file is read. The number of a line refused is counted then, in a pass up to its start."""

    def __init__(self, path: str, chunks: Callable[[], Iterator[bytes]]) -> None:
        self.path = path
        self.chunks = chunks
        self.run = 0  # bytes since the last newline
        self.start = 0  # where the line in progress starts
        self.fed = 0
        self.cr = False

    def feed(self, chunk: bytes) -> None:
        self.cr = self.cr or b"\r" in chunk
        first = chunk.find(b"\n")
        if first < 0:
            self.run += len(chunk)
        else:
            self.run += first
            self.check()
            # Lines inside one chunk are shorter than the chunk, which is shorter than the limit.
            last = chunk.rfind(b"\n")
            self.run = len(chunk) - last - 1
            self.start = self.fed + last + 1
        self.fed += len(chunk)
        if self.run > MAX_LINE_BYTES:
            self.check()

    def check(self) -> None:
        if self.run > MAX_LINE_BYTES:
            raise InputError(f"{self.path}: line {self._line_number()} is longer than {MAX_LINE_BYTES >> 20} MB, "
                             "the longest a log line may be",
                             hint="a log line is one response; this is not a response log")

    def _line_number(self) -> int:
        """The number of the line in progress: the newlines before its start, plus one."""
        lines, left = 1, self.start
        for chunk in self.chunks():
            if left <= 0:
                break
            lines += chunk.count(b"\n", 0, left)
            left -= len(chunk)
        return lines


def _inflated(handle, path: str, bound: int, size: int):
    """The decompressed chunks of a gzip file (members one after another), refused once they pass
    `bound` bytes in all."""
    expanded = 0
    inflater = zlib.decompressobj(wbits=47)  # gzip or zlib header, as DuckDB reads it
    try:
        while data := handle.read(_CHUNK):
            while data:
                chunk = inflater.decompress(data, _CHUNK)
                expanded += len(chunk)
                if expanded > bound:
                    raise InputError(f"{path}: expands to more than {bound / 1e9:.1f} GB ({MAX_GZ_RATIO} times its "
                                     f"{size / 1e6:.1f} MB), more than a compressed log does",
                                     hint="a compression bomb, or decompress it and give the plain file")
                yield chunk
                data = inflater.unconsumed_tail
                if inflater.eof:  # a next gzip member follows (concatenated .gz files)
                    data = inflater.unused_data
                    inflater = zlib.decompressobj(wbits=47)
    except zlib.error:
        return  # not gzip after all: DuckDB says so when it reads it


def literal_path(path: str, index: int, folder: Path) -> str:
    """`path`, or a link to it named without glob characters: DuckDB expands `*`, `?`, `[...]`
    in any path it is given, and a path is a path. The link keeps the suffixes DuckDB reads the
    compression and format from."""
    if not _GLOB_CHARACTERS & set(path):
        return path
    suffixes = "".join(s for s in Path(path).suffixes[-2:] if not _GLOB_CHARACTERS & set(s))
    link = folder / f"log{index}{suffixes}"
    link.symlink_to(Path(path).resolve())
    return str(link)


def utf8_copy(path: str, index: int, folder: Path) -> str:
    """A plain-text copy of `path` (a .gz decompressed) in `folder`, line for line, with each line
    that is not UTF-8 replaced by a line that is not JSON, so that it is counted as bad."""
    copy = folder / f"utf8-{index}.jsonl"
    opener = gzip.open if path.lower().endswith(".gz") else open
    try:
        with opener(path, "rb") as source, open(copy, "wb") as target:
            while line := source.readline(MAX_LINE_BYTES + 1):
                if len(line) > MAX_LINE_BYTES:
                    raise InputError(f"{path}: a line is longer than {MAX_LINE_BYTES >> 20} MB, the longest a log line may be",
                                     hint="a log line is one response; this is not a response log")
                try:
                    line.decode("utf-8")
                except UnicodeDecodeError:
                    line = NOT_UTF8_LINE + (b"\n" if line.endswith(b"\n") else b"")
                target.write(line)
    except (OSError, EOFError, zlib.error) as error:
        raise InputError(f"{path}: cannot be read: {getattr(error, 'strerror', None) or error}") from None
    return str(copy)


def is_encoding_error(message: str) -> bool:
    return "Invalid unicode" in message or "not utf-8 encoded" in message


def read_error(path: str, message: str) -> InputError:
    """DuckDB's refusal of a file, as one line."""
    if "Maximum line size" in message or "max_line_size" in message:
        return InputError(f"{path}: a line is longer than {MAX_LINE_BYTES >> 20} MB, the longest a log line may be",
                          hint="a log line is one response; this is not a response log")
    first = message.strip().splitlines()[0] if message.strip() else "unknown error"
    if "Out of Memory" in message or "out of memory" in message:
        # The file is readable: the work did not fit DuckDB's memory limit (a shape the query
        # holds more of, e.g. every Gemini response's text until its stream is grouped).
        return InputError(f"{path}: DuckDB ran out of its memory limit reading it ({first})",
                          hint=f"raise the limit, e.g. STOPDOCTOR_LOGS_MEMORY=4GB (default {MEMORY_LIMIT})")
    if "state machine reached an invalid state" in message:
        # What is left of DuckDB's line-end detection after `check_log_file`'s CRLF + LF case: a CR
        # that ends no line among lines ending with LF (a JSON line never holds a raw CR in a string)
        return InputError(f"{path}: cannot split it into lines: a carriage return (\\r) stands alone among "
                          "lines that end with a line feed", hint=f"drop the carriage returns: tr -d '\\r' < {path} > fixed.jsonl")
    return InputError(f"{path}: cannot read it as JSONL/Parquet: {first}")
