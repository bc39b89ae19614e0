"""Read a safetensors file's header, and a few rows of one of its tensors, without loading it.

`read_header(source)` reads the 8-byte length and the JSON header through a `ByteSource` (a local
file read with `pread`, or any object with `name`, `size` and `read(offset, length)`, such as an
HTTP range reader), and refuses a hostile header with one `InputError` line before building
anything big: a truncated file, a length past the file or over 100 MB (safetensors' own limit),
JSON nested deeper than a header ever is, more objects than a header ever holds, shapes whose
size does not match their byte range, byte ranges past the end of the data.
`read_rows(source, tensor, ids)` reads just the rows asked for and converts them to float32
(F64, F32, F16, BF16, FP8 E4M3/E5M2, integers) as `array('f')` rows (`facts.floats`).

Imports: stopdoctor.core.errors, stopdoctor.facts.floats. No numpy, no safetensors, no torch.
"""

from __future__ import annotations

import json
import os
import stat
import struct
from collections.abc import Iterable, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Protocol

from stopdoctor.core.errors import InputError
from stopdoctor.core.records import record
from stopdoctor.facts.floats import Row, row_of

# safetensors refuses headers over 100 MB (safetensors/src/tensor.rs MAX_HEADER_SIZE).
MAX_HEADER_BYTES = 100_000_000
# A real header holds three containers a tensor (its object, shape, offsets); 2 million is
# ~650k tensors. json.loads builds ~70 bytes a container: the cap keeps it under ~150 MB.
MAX_CONTAINERS = 2_000_000
MAX_DIMS = 8
_LENGTH = struct.Struct("<Q")

# dtype -> bytes per element (safetensors' Dtype enum; sub-byte types have no whole size).
ITEM_SIZES: dict[str, int] = {
    "BOOL": 1, "U8": 1, "I8": 1, "F8_E5M2": 1, "F8_E4M3": 1, "F8_E8M0": 1, "I16": 2, "U16": 2, "F16": 2,
    "BF16": 2, "I32": 4, "U32": 4, "F32": 4, "F64": 8, "I64": 8, "U64": 8,
}
_SUB_BYTE = {"F4", "F6_E2M3", "F6_E3M2"}  # packed; rows are not read from these


class ByteSource(Protocol):
    """Where the bytes come from: a local file, or ranges of a remote one."""

    name: str
    size: int

    def read(self, offset: int, length: int) -> bytes: ...

    # optional: `read_many(spans)`, the bytes of many (offset, length) at once (`RangeReader`)


class LocalFile:
    """A regular local file, read with `pread` (no memory map: a few rows need a few reads)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.name = self.path.name
        try:
            info = self.path.stat()
            if not stat.S_ISREG(info.st_mode):  # a named pipe would block, a device never end
                raise InputError(f"{self.path}: cannot read the file (not a regular file).")
            self.fd = os.open(self.path, os.O_RDONLY)
        except OSError as error:
            raise InputError(f"{self.path}: cannot read the file ({error.strerror or error}).") from None
        self.size = info.st_size

    def read(self, offset: int, length: int) -> bytes:
        data = os.pread(self.fd, length, offset)
        if len(data) != length:
            raise InputError(f"{self.path}: truncated: needed {length} bytes at byte {offset}, the file ends at {self.size}")
        return data

    def close(self) -> None:
        os.close(self.fd)

    def __enter__(self) -> LocalFile:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()


@record
class SafetensorsTensor:
    name: str
    dtype: str
    shape: tuple[int, ...]
    start: int  # absolute byte offset of its data in the file
    nbytes: int

    @property
    def elements(self) -> int:
        count = 1
        for extent in self.shape:
            count *= extent
        return count


@record
class SafetensorsHeader:
    file: str
    size: int
    tensors: Mapping[str, SafetensorsTensor]
    metadata: Mapping[str, str]

    @property
    def elements(self) -> int:
        return sum(tensor.elements for tensor in self.tensors.values())


def read_header(source: ByteSource) -> SafetensorsHeader:
    """The header of a safetensors file; one InputError line for anything that is not a sound one."""
    name = source.name

    def fail(what: str) -> InputError:
        return InputError(f"{name}: not a usable safetensors file: {what}")

    if source.size < 8:
        raise fail(f"{source.size} bytes, shorter than the 8-byte header length")
    (length,) = _LENGTH.unpack(source.read(0, 8))
    if length > MAX_HEADER_BYTES:
        raise fail(f"header length {length} bytes is over the {MAX_HEADER_BYTES} byte limit")
    if length > source.size - 8:
        raise fail(f"header length {length} bytes runs past the end of the file ({source.size} bytes): truncated or corrupt")
    raw = source.read(8, length)
    if raw.count(b"{") + raw.count(b"[") > MAX_CONTAINERS:
        raise fail(f"the header holds more than {MAX_CONTAINERS} JSON objects and arrays")
    try:
        document = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise fail("the header is not UTF-8") from None
    except RecursionError:
        raise fail("the header's JSON is nested too deeply") from None
    except json.JSONDecodeError as error:
        raise fail(f"the header is not JSON ({error.msg} at byte {error.pos})") from None
    if not isinstance(document, dict):
        raise fail("the header is not a JSON object")
    data_start = 8 + length
    data_size = source.size - data_start
    metadata = document.pop("__metadata__", None) or {}
    if not isinstance(metadata, dict):
        raise fail("__metadata__ is not an object")
    tensors: dict[str, SafetensorsTensor] = {}
    for tensor_name, entry in document.items():
        shown = repr(tensor_name[:80])
        if not isinstance(entry, dict):
            raise fail(f"tensor {shown} is not an object")
        dtype, shape, offsets = entry.get("dtype"), entry.get("shape"), entry.get("data_offsets")
        if not isinstance(dtype, str) or (dtype not in ITEM_SIZES and dtype not in _SUB_BYTE):
            raise fail(f"tensor {shown} has an unknown dtype {str(dtype)[:20]!r}")
        if not (isinstance(shape, list) and len(shape) <= MAX_DIMS and all(_whole(d) for d in shape)):
            raise fail(f"tensor {shown} has no valid shape (at most {MAX_DIMS} non-negative integers)")
        if not (isinstance(offsets, list) and len(offsets) == 2 and all(_whole(o) for o in offsets)
                and offsets[0] <= offsets[1]):
            raise fail(f"tensor {shown} has no valid data_offsets [begin, end]")
        begin, end = offsets
        if end > data_size:
            raise fail(f"tensor {shown}'s data ends at byte {end} of the data, which holds only {data_size} bytes: "
                       "truncated or corrupt")
        elements = 1
        for extent in shape:
            elements *= extent
        if dtype in ITEM_SIZES and elements * ITEM_SIZES[dtype] != end - begin:
            raise fail(f"tensor {shown}: shape {shape[:MAX_DIMS]} of {dtype} needs {elements * ITEM_SIZES[dtype]} bytes, "
                       f"its data_offsets give {end - begin}")
        tensors[tensor_name] = SafetensorsTensor(tensor_name, dtype, tuple(shape), data_start + begin, end - begin)
    position = data_start
    for tensor in sorted(tensors.values(), key=lambda t: (t.start, t.nbytes)):
        # as safetensors' own validate(): the tensors' data contiguous, in order, covering the data
        if tensor.start != position:
            raise fail(f"tensor {tensor.name[:80]!r} starts at byte {tensor.start - data_start} of the data, "
                       f"expected {position - data_start}")
        position = tensor.start + tensor.nbytes
    if position != source.size:
        raise fail(f"the tensors' data ends at byte {position - data_start} but the file holds {data_size} bytes "
                   "of data: truncated or corrupt")
    return SafetensorsHeader(name, source.size, MappingProxyType(tensors),
                             MappingProxyType({str(k): str(v) for k, v in metadata.items()}))


def read_file_header(path: str | Path) -> SafetensorsHeader:
    """The checked header of a local safetensors file (`generate` reads it before torch loads)."""
    with LocalFile(path) as source:
        return read_header(source)


def _whole(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def read_rows(source: ByteSource, tensor: SafetensorsTensor, ids: Iterable[int]) -> dict[int, Row]:
    """Rows `ids` of a 2-D tensor as float32 vectors (FP8 unscaled: a block scale does not change
    whether a row is zero or a copy of another)."""
    if len(tensor.shape) != 2:
        raise InputError(f"{source.name}: tensor {tensor.name!r} has shape {list(tensor.shape)}, not [rows, columns]")
    if tensor.dtype not in ITEM_SIZES or tensor.dtype == "F8_E8M0":
        raise InputError(f"{source.name}: rows of a {tensor.dtype} tensor ({tensor.name!r}) cannot be read")
    count, width = tensor.shape
    row_bytes = width * ITEM_SIZES[tensor.dtype]
    # an id past the matrix is SD103's business, not a row to read
    wanted = [token_id for token_id in sorted(set(ids)) if 0 <= token_id < count]
    spans = [(tensor.start + token_id * row_bytes, row_bytes) for token_id in wanted]
    read_many = getattr(source, "read_many", None)  # a remote file reads them in a few parallel requests
    chunks = read_many(spans) if read_many is not None else [source.read(*span) for span in spans]
    return {token_id: row_of(chunk, tensor.dtype) for token_id, chunk in zip(wanted, chunks)}
