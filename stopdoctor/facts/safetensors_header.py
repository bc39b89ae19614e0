"""The guarded reader of a safetensors file's header, for `generate` to check weights before torch
loads them (and for anything else that reads a safetensors header: one reader, one set of limits).

`read_safetensors_header(path)` reads the 8-byte length and the JSON header with two reads (no
memory map, no weights) and refuses a hostile or broken file with one `InputError` line before
building anything big, checking what the safetensors library itself checks when it loads: a file
shorter than its header, a header length over 100 MB or past the end (2^63), JSON nested deeper
or holding more objects than a header ever does, an unknown dtype, a shape whose size does not
match its byte range ([2^40, 2^40] in 8 bytes), byte ranges that overlap, leave gaps or do not
end where the file ends (a cut file).

Branch `weights` adds `stopdoctor/facts/safetensors.py` with the same checks plus row reads; at
merge, this module's one function becomes a call to that reader.

Imports: the standard library, `stopdoctor.core.errors`.
"""

from __future__ import annotations

import json
import math
import os
import stat
import struct
from dataclasses import dataclass
from pathlib import Path

from stopdoctor.core.errors import InputError

# safetensors refuses headers over 100 MB (safetensors/src/tensor.rs MAX_HEADER_SIZE).
MAX_HEADER_BYTES = 100_000_000
# A real header holds three containers a tensor (its object, shape, offsets); 2 million is ~650k
# tensors. json.loads builds ~70 bytes a container: the cap keeps the header under ~150 MB.
MAX_CONTAINERS = 2_000_000
MAX_DIMS = 8
# dtype -> bits per element (safetensors' Dtype enum; F4/F6 are packed below a byte).
DTYPE_BITS: dict[str, int] = {
    "BOOL": 8, "U8": 8, "I8": 8, "F8_E5M2": 8, "F8_E4M3": 8, "F8_E8M0": 8, "I16": 16, "U16": 16, "F16": 16,
    "BF16": 16, "I32": 32, "U32": 32, "F32": 32, "F64": 64, "I64": 64, "U64": 64, "C64": 64,
    "F4": 4, "F6_E2M3": 6, "F6_E3M2": 6,
}


@dataclass(frozen=True)
class SafetensorsTensor:
    name: str
    dtype: str
    shape: tuple[int, ...]
    begin: int  # byte range within the data section
    end: int

    @property
    def elements(self) -> int:
        return math.prod(self.shape)


@dataclass(frozen=True)
class SafetensorsHeader:
    path: Path
    size: int
    tensors: tuple[SafetensorsTensor, ...]

    @property
    def elements(self) -> int:
        return sum(tensor.elements for tensor in self.tensors)


def read_safetensors_header(path: str | Path) -> SafetensorsHeader:
    """The checked header of the safetensors file at `path`; one InputError for anything else."""
    path = Path(path)

    def fail(what: str) -> InputError:
        return InputError(f"{path.name}: not a usable safetensors file: {what}",
                          hint="the safetensors library refuses it too; download or convert the weights again")

    try:
        info = path.stat()
        if not stat.S_ISREG(info.st_mode):  # a named pipe would block, a device never end
            raise InputError(f"{path.name}: is not a regular file (a folder, pipe or device)")
        fd = os.open(path, os.O_RDONLY)
    except OSError as error:
        raise InputError(f"{path.name}: cannot be read: {error.strerror or error}") from None
    try:
        size = info.st_size
        if size < 8:
            raise fail(f"{size} bytes, shorter than the 8-byte header length")
        (length,) = struct.unpack("<Q", os.pread(fd, 8, 0))
        if length > MAX_HEADER_BYTES:
            raise fail(f"a header length of {length} bytes, over the {MAX_HEADER_BYTES // 1_000_000} MB a header can be")
        if length > size - 8:
            raise fail(f"a header of {length} bytes in a file of {size}: truncated or corrupt")
        raw = os.pread(fd, length, 8)
    except OSError as error:
        raise InputError(f"{path.name}: cannot be read: {error.strerror or error}") from None
    finally:
        os.close(fd)
    if len(raw) != length:
        raise fail("the file changed while it was read")
    if raw.count(b"{") + raw.count(b"[") > MAX_CONTAINERS:
        raise fail(f"a header of more than {MAX_CONTAINERS} JSON objects and arrays")
    try:
        document = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise fail("the header is not UTF-8") from None
    except RecursionError:
        raise fail("the header's JSON is nested too deeply") from None
    except ValueError as error:  # JSONDecodeError, or an integer of more digits than int() converts
        raise fail(f"the header is not JSON ({getattr(error, 'msg', error)})") from None
    if not isinstance(document, dict):
        raise fail("the header is not a JSON object")
    data_size = size - 8 - length
    tensors = [_tensor(name, entry, fail) for name, entry in document.items() if name != "__metadata__"]
    tensors.sort(key=lambda tensor: (tensor.begin, tensor.end))
    position = 0
    for tensor in tensors:  # as safetensors' validate(): contiguous, in order, covering the data
        if tensor.begin != position:
            raise fail(f"tensor {tensor.name[:80]!r} starts at byte {tensor.begin} of the data, expected {position}")
        position = tensor.end
    if position != data_size:
        raise fail(f"the tensors' data ends at byte {position} but the file holds {data_size} bytes of data: "
                   "truncated or corrupt")
    return SafetensorsHeader(path, size, tuple(tensors))


def _tensor(name: str, entry: object, fail) -> SafetensorsTensor:
    shown = repr(name[:80])
    if not isinstance(entry, dict):
        raise fail(f"tensor {shown} is not an object")
    dtype, shape, offsets = entry.get("dtype"), entry.get("shape"), entry.get("data_offsets")
    if not isinstance(dtype, str) or dtype not in DTYPE_BITS:
        raise fail(f"tensor {shown} has an unknown dtype {str(dtype)[:20]!r}")
    if not (isinstance(shape, list) and len(shape) <= MAX_DIMS and all(_whole(d) for d in shape)):
        raise fail(f"tensor {shown} has no valid shape (at most {MAX_DIMS} non-negative integers)")
    if not (isinstance(offsets, list) and len(offsets) == 2 and all(_whole(o) for o in offsets) and offsets[0] <= offsets[1]):
        raise fail(f"tensor {shown} has no valid data_offsets [begin, end]")
    bits = math.prod(shape) * DTYPE_BITS[dtype]
    if bits % 8 or bits // 8 != offsets[1] - offsets[0]:
        raise fail(f"tensor {shown} of shape {shape} and dtype {dtype} takes {bits / 8:g} bytes, "
                   f"but its data_offsets give it {offsets[1] - offsets[0]}")
    return SafetensorsTensor(name, dtype, tuple(shape), offsets[0], offsets[1])


def _whole(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0
