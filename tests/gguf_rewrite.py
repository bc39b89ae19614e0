"""Test setup: a copy of a real GGUF with one metadata value replaced (another length allowed), the
tensor data copied unchanged after the re-padded tensor table. Built on stopdoctor's own layout
reader (`stopdoctor.actions.gguf_edit.read_layout`); the product only ever edits integer keys.
"""

from __future__ import annotations

import shutil
import struct
from pathlib import Path

from stopdoctor.actions.gguf_edit import read_layout
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
