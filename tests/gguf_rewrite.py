"""Test setup: a copy of a real GGUF with one metadata value replaced (another length allowed), the
tensor data copied unchanged after the re-padded tensor table. Built on stopdoctor's own layout
reader (`stopdoctor.writers.gguf_edit.read_layout`); the product only ever edits integer keys.
"""

from __future__ import annotations

import shutil
import struct
from pathlib import Path

from stopdoctor.writers.gguf_edit import read_layout
from stopdoctor.facts.gguf import GGUFValueType


def pack_string(text: str) -> bytes:
    raw = text.encode("utf-8")
    return struct.pack("<Q", len(raw)) + raw


def pack_int32_array(values: list[int]) -> bytes:
    return struct.pack("<IQ", GGUFValueType.INT32, len(values)) + struct.pack(f"<{len(values)}i", *values)


def with_value(source: Path, target: Path, key: str, packed: bytes) -> Path:
    """Copy `source` to `target` with `key`'s value bytes replaced by `packed` (same value type)."""
    layout = read_layout(source)
    _, start, end = layout.values[key]
    with open(source, "rb") as src, open(target, "wb") as out:
        head = src.read(layout.table_end)
        out.write(head[:start] + packed + head[end:])
        written = out.tell()
        out.write(b"\x00" * (-(-written // layout.alignment) * layout.alignment - written))
        src.seek(layout.data_start)
        shutil.copyfileobj(src, out, 16 * 1024 * 1024)
    return target


def pack_string_array(texts: list[str]) -> bytes:
    return struct.pack("<IQ", GGUFValueType.STRING, len(texts)) + b"".join(pack_string(t) for t in texts)


def with_values(source: Path, target: Path, replaced: dict[str, bytes], added: dict[str, tuple[int, bytes]] | None = None) -> Path:
    """Copy `source` to `target` with several keys' value bytes replaced (`replaced`: key → packed
    value of the same type) and keys appended (`added`: key → (GGUFValueType, packed value))."""
    layout = read_layout(source)
    with open(source, "rb") as src:
        head = src.read(layout.table_end)
    edits = sorted((layout.values[key][1], layout.values[key][2], packed) for key, packed in replaced.items())
    extra = b"".join(pack_string(key) + struct.pack("<I", value_type) + packed
                     for key, (value_type, packed) in (added or {}).items())
    pieces, pos = [], 0
    for start, end, packed in edits:
        pieces += [head[pos:start], packed]
        pos = end
    pieces += [head[pos:layout.kv_end], extra, head[layout.kv_end:]]
    header = bytearray(b"".join(pieces))
    struct.pack_into("<Q", header, 16, layout.kv_count + len(added or {}))  # magic, version, tensor count, kv count
    with open(source, "rb") as src, open(target, "wb") as out:
        out.write(header)
        written = out.tell()
        out.write(b"\x00" * (-(-written // layout.alignment) * layout.alignment - written))
        src.seek(layout.data_start)
        shutil.copyfileobj(src, out, 16 * 1024 * 1024)
    return target
