"""Rewrite one integer key of a GGUF file's metadata, the tensors byte for byte the same.

A GGUF is: header (magic, version, tensor count, key/value count), the key/values, the tensor
table (name, shape, type, offset relative to the data section), padding to `general.alignment`,
the tensor data. Changing an existing integer key keeps every length, so only its few bytes
change. Adding a key shifts the table and the data section; the tensor offsets are relative to
the data section, so the data bytes are copied unchanged after the new padding.

The new file is written beside the old one and renamed over it (a failure leaves the old file
whole); `backup` keeps the old file as FILE.bak (a hard link to the old bytes where the file
system allows one, else a copy).

Imports: core, facts.gguf (value types), writers.edits (link checks, backups).
"""

from __future__ import annotations

import errno
import os
import shutil
import struct
from pathlib import Path

from stopdoctor.core.records import record
from stopdoctor.writers.edits import refuse_linked, replace_with, stage_with
from stopdoctor.core.errors import InputError
from stopdoctor.facts.gguf import GGUFValueType

_INT_TYPES: dict[int, str] = {
    GGUFValueType.UINT8: "<B", GGUFValueType.INT8: "<b", GGUFValueType.UINT16: "<H", GGUFValueType.INT16: "<h",
    GGUFValueType.UINT32: "<I", GGUFValueType.INT32: "<i", GGUFValueType.UINT64: "<Q", GGUFValueType.INT64: "<q",
}
_FIXED_SIZES: dict[int, int] = {**{t: struct.calcsize(f) for t, f in _INT_TYPES.items()}, GGUFValueType.FLOAT32: 4,
                GGUFValueType.BOOL: 1, GGUFValueType.FLOAT64: 8}
COPY_CHUNK = 16 * 1024 * 1024


@record
class MetadataLayout:
    """Where things are in a GGUF file: each key's value type and byte span, the tensor table's
    span, and where the data section starts."""

    version: int
    tensor_count: int
    kv_count: int
    values: dict[str, tuple[int, int, int]]  # key → (value type, value start, value end)
    kv_end: int  # end of the key/value section = start of the tensor table
    table_end: int
    alignment: int
    data_start: int
    size: int


def read_layout(path: Path) -> MetadataLayout:
    """Walk the header of a GGUF (the file was already read once by facts.gguf, which checked it)."""
    with open(path, "rb") as file:
        data = file.read(64 * 1024 * 1024) if path.stat().st_size > 0 else b""
        size = file.seek(0, 2)
    pos = 0

    def take(fmt: str) -> int:
        nonlocal pos
        need = struct.calcsize(fmt)
        if pos + need > len(data):
            raise InputError(f"{path}: the GGUF header is longer than stopdoctor edits (64 MiB) or truncated")
        (value,) = struct.unpack_from(fmt, data, pos)
        pos += need
        return value

    def skip_string() -> str:
        nonlocal pos
        length = take("<Q")
        if pos + length > len(data):
            raise InputError(f"{path}: the GGUF header is longer than stopdoctor edits (64 MiB) or truncated")
        text = data[pos:pos + length].decode("utf-8", "replace")
        pos += length
        return text

    def skip_value(value_type: int, depth: int = 0) -> None:
        nonlocal pos
        if value_type in _FIXED_SIZES:
            pos += _FIXED_SIZES[value_type]
        elif value_type == GGUFValueType.STRING:
            skip_string()
        elif value_type == GGUFValueType.ARRAY and depth < 8:
            element, count = take("<I"), take("<Q")
            if element in _FIXED_SIZES:
                pos += _FIXED_SIZES[element] * count
            else:
                for _ in range(count):
                    skip_value(element, depth + 1)
        else:
            raise InputError(f"{path}: unknown GGUF value type {value_type}")

    if data[:4] != b"GGUF":
        raise InputError(f"{path}: not a GGUF file")
    pos = 4
    version, tensor_count, kv_count = take("<I"), take("<Q"), take("<Q")
    values: dict[str, tuple[int, int, int]] = {}
    alignment = 32
    for _ in range(kv_count):
        key = skip_string()
        value_type = take("<I")
        start = pos
        skip_value(value_type)
        values[key] = (value_type, start, pos)
        if key == "general.alignment":
            # The spec's type is uint32, and llama.cpp refuses any other; a reader that takes a
            # BOOL or an int8 as a number pads otherwise than this editor: refuse, never guess.
            if value_type != GGUFValueType.UINT32:
                raise InputError(f"{path}: general.alignment is typed {_type_name(value_type)}, not UINT32 (the GGUF spec's "
                                 "type); readers disagree on its padding, so it is not edited")
            alignment = struct.unpack_from("<I", data, start)[0]
            if alignment <= 0 or alignment & (alignment - 1):
                raise InputError(f"{path}: general.alignment {alignment} is not a power of two; not edited")
    kv_end = pos
    for _ in range(tensor_count):
        skip_string()
        dims = take("<I")
        pos += 8 * dims + 4 + 8
    table_end = pos
    data_start = -(-table_end // alignment) * alignment
    return MetadataLayout(version, tensor_count, kv_count, values, kv_end, table_end, alignment, data_start, size)


@record
class GgufKeyEdit:
    """Set one integer metadata key of a GGUF file. Shown as a two-line diff of that key."""

    path: Path
    label: str
    key: str
    old: int | None  # None: the key is added
    new: int
    reason: str

    @property
    def before(self) -> str | None:  # the FileEdit shape the reporters read
        return None if self.old is None else f"{self.key} = {self.old}\n"

    @property
    def after(self) -> str:
        return f"{self.key} = {self.new}\n"

    def diff(self) -> str:
        lines = [f"--- a/{self.label} (GGUF metadata)\n", f"+++ b/{self.label} (GGUF metadata)\n", "@@ metadata @@\n"]
        if self.old is not None:
            lines.append(f"-{self.key} = {self.old}\n")
        lines.append(f"+{self.key} = {self.new}\n")
        return "".join(lines)

    def write(self, backup: bool = False) -> None:
        set_int_key(self.path, self.key, self.new, backup)

    def stage(self) -> Path:
        """The new file written beside the GGUF, not yet renamed over it (`writers.edits.FixPlan`)."""
        return stage_int_key(self.path, self.key, self.new)


def set_int_key(path: Path, key: str, value: int, backup: bool = False) -> None:
    """Write `key` = `value` into the GGUF at `path`, atomically; the tensor data is copied
    unchanged. An existing key keeps its integer type (the value must fit it); a new key is a
    uint32, as gguf-py writes token ids."""
    replace_with(stage_int_key(path, key, value), path, backup)


def stage_int_key(path: Path, key: str, value: int) -> Path:
    """`set_int_key`'s new file, staged beside `path` (a temporary file, flushed): every refusal
    comes before anything is written."""
    refuse_linked(path)
    layout = read_layout(path)
    existing = layout.values.get(key)
    if existing is not None and existing[0] not in _INT_TYPES:
        raise InputError(f"{path}: {key} is typed {_type_name(existing[0])}, not an integer; not edited")
    fmt = _INT_TYPES[existing[0]] if existing is not None else "<I"
    try:
        packed = struct.pack(fmt, value)
    except struct.error:
        raise InputError(f"{path}: {value} does not fit the type of {key}") from None

    def write(handle) -> None:
        with open(path, "rb") as source:
            if existing is not None:
                _copy(source, handle, 0, layout.size)
                handle.seek(existing[1])
                handle.write(packed)
            else:
                _write_added(source, handle, layout, key, packed)

    return stage_with(path, write, binary=True)


def _type_name(value_type: int) -> str:
    try:
        return GGUFValueType(value_type).name
    except ValueError:
        return f"type {value_type}"


def _write_added(source, target, layout: MetadataLayout, key: str, packed: bytes) -> None:
    source.seek(0)
    head = source.read(24)
    target.write(head[:16] + struct.pack("<Q", layout.kv_count + 1))
    _copy(source, target, 24, layout.kv_end)
    raw = key.encode("utf-8")
    target.write(struct.pack("<Q", len(raw)) + raw + struct.pack("<I", GGUFValueType.UINT32) + packed)
    _copy(source, target, layout.kv_end, layout.table_end)
    written = target.tell()
    target.write(b"\x00" * (-(-written // layout.alignment) * layout.alignment - written))
    _copy(source, target, layout.data_start, layout.size)


def _copy(source, target, start: int, end: int) -> None:
    """Bytes `start`..`end` of `source` appended to `target`, keeping holes holes: a sparse GGUF
    (tensor data never written) stays sparse, not gigabytes of zeros on disk. Holes are found with
    SEEK_DATA/SEEK_HOLE where the file system has them, and a block of zeros is skipped, not written;
    the file is extended to its length at the end."""
    pos = start
    while pos < end:
        data, hole = _data_run(source, pos, end)
        if data > pos:
            target.seek(data - pos, os.SEEK_CUR)
            pos = data
        while pos < hole:
            # pread: lseek(SEEK_DATA) moved the descriptor under the buffered reader's feet
            chunk = os.pread(source.fileno(), min(COPY_CHUNK, hole - pos), pos)
            if not chunk:
                raise InputError(f"{source.name}: the file ended early while copying")
            if chunk.count(0) == len(chunk):
                target.seek(len(chunk), os.SEEK_CUR)
            else:
                target.write(chunk)
            pos += len(chunk)
    target.truncate()  # the length, when the copy ended in a hole (truncate extends: no bytes written)


def _data_run(source, pos: int, end: int) -> tuple[int, int]:
    """(where data starts at or after `pos`, where that run of data ends), both at most `end`;
    (pos, end) where the file system cannot tell holes."""
    try:
        data = os.lseek(source.fileno(), pos, os.SEEK_DATA)
    except OSError as error:
        if error.errno == errno.ENXIO:  # only a hole from here to the end of the file
            return end, end
        return pos, end
    if data >= end:
        return end, end
    try:
        hole = os.lseek(source.fileno(), data, os.SEEK_HOLE)
    except OSError:
        hole = end
    return data, min(max(hole, data + 1), end)


def data_section_digest(path: Path) -> str:
    """sha256 of the tensor data section (for tests and for a check after writing)."""
    import hashlib

    layout = read_layout(path)
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        file.seek(layout.data_start)
        shutil.copyfileobj(file, _Hasher(digest), COPY_CHUNK)
    return digest.hexdigest()


class _Hasher:
    def __init__(self, digest) -> None:
        self.digest = digest

    def write(self, chunk: bytes) -> int:
        self.digest.update(chunk)
        return len(chunk)
