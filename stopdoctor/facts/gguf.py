"""Read a GGUF file's header (its metadata key/values) without touching tensor data.

`read_header(path)` maps the file and walks only the key/value section: numeric arrays become
zero-copy numpy views when first read (numpy is imported then, not before: `inspect` of a GGUF
never needs it), string arrays are decoded lazily (`stopdoctor.facts.gguf_strings`).
`gguf.GGUFReader` is not used: it builds one Python object per array element, which takes ~10 s and
~700 MiB for Gemma's 262k-token vocabulary; this reader takes a fraction of a second.

Building a tokenizer from the header is `stopdoctor.facts.gguf_tokenizer`.

Imports: stopdoctor.core.errors, stopdoctor.core.types, stopdoctor.facts.gguf_strings; numpy when a
numeric array is first read. Not `gguf` (its import costs ~70 ms, more than
this whole reader's own work on a small model) and not torch.
"""

from __future__ import annotations

import mmap
import re
import stat
import struct
from array import array as int_array  # `array` is also a _Parser method
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from stopdoctor.core.errors import InputError
from stopdoctor.core.records import record
from stopdoctor.core.types import Token
from stopdoctor.facts.gguf_strings import LazyStrings, decode_strings, walk_strings
from stopdoctor.facts.gguf_constants import FIXED_TYPES, GGUF_MAGIC, SUPPORTED_VERSIONS, TYPE_SIZES, GGUFValueType, Keys, TokenType

_HEADER = struct.Struct("<4sIQQ")  # magic, version, tensor count, key/value count
_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")
_ARRAY_HEAD = struct.Struct("<IQ")  # element type, element count
_MAX_DIMS = 4  # GGML_MAX_DIMS
_MAX_TENSOR_NAME = 4096  # llama.cpp's names are under 64 bytes (GGML_MAX_NAME); a corrupt one is not
# The header (keys, vocabulary, merges, tensor table) is read through a memory map of at most this
# many bytes from the start: the largest real headers are ~50 MB; a 20 GB file is not mapped whole.
MAX_HEADER_MAP = 512 << 20
_MAX_NESTING = 8  # the spec allows arrays of arrays; nobody nests deep, a corrupt file might
# The largest vocabularies have 262k tokens, merge tables ~500k entries; more is a corrupt file.
_MAX_STRINGS = 4_000_000
_EAGER_STRINGS = 256  # string arrays up to this many items are decoded at once, bigger ones on first use
__all__ = ["GGUFHeader", "GGUFTensor", "GGUFValueType", "LazyStrings", "read_header"]


def _ids_of_small(region: bytes, values: Iterable[int]) -> list[int] | None:
    """`NumericArray.ids_of` when every value of the array is below 256 (a token-type array): the
    low bytes marked by a 256-byte table, each run of marks found by two C scans (Gemma's 6,414
    control tokens lie in a few runs; ~2 ms against ~8 for the regex). None when a value is not."""
    count = len(region) // 4
    if region[1::4].count(0) + region[2::4].count(0) + region[3::4].count(0) != 3 * count:
        return None
    table = bytearray(256)
    for value in values:
        table[value] = 1
    marks = region[0::4].translate(table)
    found: list[int] = []
    at = marks.find(1)
    while at >= 0:
        stop = marks.find(0, at)
        stop = count if stop < 0 else stop
        found.extend(range(at, stop))
        at = marks.find(1, stop)
    return found


@record
class NumericArray:
    """Where a numeric array lies in the mapped header: read as a zero-copy numpy view on first use."""

    buffer: Any
    dtype: str  # a numpy dtype string, FIXED_TYPES'
    count: int
    offset: int

    def load(self) -> Any:
        import numpy as np

        return np.frombuffer(self.buffer, dtype=np.dtype(self.dtype), count=self.count, offset=self.offset)

    def ids_of(self, values: Iterable[int], limit: int) -> list[int] | None:
        """The indices below `limit` whose value is one of `values` (small non-negative ints), for a
        4-byte integer array, without numpy: a C scan of the bytes for `v 0 0 0` at a multiple of 4
        (an unaligned match never hides an aligned one: it would need the aligned value's low byte
        to be 0). None for another element type."""
        if self.dtype not in ("<i4", "<u4") or not all(0 <= v < 256 for v in values):
            return None
        region = self.buffer[self.offset: self.offset + 4 * min(self.count, limit)]
        found = _ids_of_small(region, values)
        if found is not None:
            return found
        wanted = re.compile(b"[" + b"".join(re.escape(bytes([v])) for v in sorted(values)) + b"]\x00\x00\x00")
        return [m.start() >> 2 for m in wanted.finditer(region) if not m.start() & 3]

    def value_at(self, index: int) -> int | None:
        """One element of a 4-byte integer array, without numpy (None for another type)."""
        if self.dtype not in ("<i4", "<u4") or not 0 <= index < self.count:
            return None
        return struct.unpack_from("<i" if self.dtype == "<i4" else "<I", self.buffer, self.offset + 4 * index)[0]


class Metadata(Mapping[str, Any]):
    """The header's keys, read-only; a numeric array becomes its numpy view when first read."""

    def __init__(self, values: dict[str, Any]) -> None:
        self._values = values

    def __getitem__(self, key: str) -> Any:
        value = self._values[key]
        if isinstance(value, NumericArray):
            value = self._values[key] = value.load()
        return value

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __contains__(self, key: object) -> bool:
        return key in self._values

    def numeric(self, key: str) -> NumericArray | None:
        """Where the numeric array `key` lies, if it is one not yet read (None otherwise)."""
        value = self._values.get(key)
        return value if isinstance(value, NumericArray) else None


@record
class GGUFTensor:
    """One entry of the tensor table: `shape` as GGUF lists it (the row length first), `start` the
    absolute byte where its data begins (already checked to lie inside the file)."""

    name: str
    type: int  # a ggml type (gguf.constants.GGMLQuantizationType)
    shape: tuple[int, ...]
    start: int


@record
class GGUFHeader:
    """A GGUF file's header. `metadata` holds every key: scalars as Python values, numeric arrays as
    (read-only, zero-copy) numpy arrays, string arrays as list[str] or a `LazyStrings`. `tensors`
    is the tensor table by name (for reading a few rows: `stopdoctor.facts.gguf_rows`)."""

    path: Path
    version: int
    tensor_count: int
    metadata: Mapping[str, Any]
    tensors: Mapping[str, GGUFTensor] = field(default_factory=lambda: MappingProxyType({}))

    def get(self, key: str, default: Any = None) -> Any:
        return self.metadata.get(key, default)

    def _str(self, key: str) -> str | None:
        value = self.metadata.get(key)
        return value if isinstance(value, str) else None

    def _id(self, key: str) -> int | None:
        value = self.metadata.get(key)
        # bool is an int subclass; a token id stored as bool is a corrupt file, not id 0/1.
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        return None

    def _flag(self, key: str) -> bool | None:
        value = self.metadata.get(key)
        return value if isinstance(value, bool) else None

    @property
    def name(self) -> str | None:
        return self._str(Keys.NAME)

    @property
    def finetune(self) -> str | None:
        return self._str(Keys.FINETUNE)

    @property
    def architecture(self) -> str | None:
        return self._str(Keys.ARCHITECTURE)

    @property
    def tokenizer_model(self) -> str | None:
        """tokenizer.ggml.model: "gpt2" (byte-level BPE), "llama" (SentencePiece), "t5", ..."""
        return self._str(Keys.MODEL)

    @property
    def tokens(self) -> list[str] | None:
        value = self.metadata.get(Keys.LIST)
        if isinstance(value, LazyStrings):
            return value.to_list()
        return value if isinstance(value, list) else None

    @property
    def token_types(self) -> Any:
        """tokenizer.ggml.token_type as a numpy array (imports numpy), or None."""
        value = self.metadata.get(Keys.TOKEN_TYPE)
        return value if type(value).__name__ == "ndarray" else None

    def _unread_types(self) -> NumericArray | None:
        return self.metadata.numeric(Keys.TOKEN_TYPE) if isinstance(self.metadata, Metadata) else None

    def ids_of_types(self, types: Iterable[int], limit: int) -> list[int] | None:
        """The token ids below `limit` whose tokenizer.ggml.token_type is one of `types`, ascending
        (None without a token-type array); read from the file's bytes when the array is still unread."""
        types = tuple(types)
        unread = self._unread_types()
        found = unread.ids_of(types, limit) if unread is not None else None
        if found is not None:
            return found
        values = self.token_types
        if values is None:
            return None
        return [i for i, value in enumerate(values[:limit].tolist()) if value in types]

    def token(self, token_id: int) -> Token | None:
        """The token with this id; `special` is llama.cpp's CONTROL type (user-defined tokens such
        as `<think>` are matched whole but are not special, as in transformers)."""
        tokens = self.metadata.get(Keys.LIST)
        if not isinstance(tokens, (list, LazyStrings)) or not 0 <= token_id < len(tokens):
            return None
        unread = self._unread_types()
        kind = unread.value_at(token_id) if unread is not None else None
        if kind is None:
            types = self.token_types
            kind = int(types[token_id]) if types is not None and token_id < len(types) else None
        return Token(token_id, tokens[token_id], kind == TokenType.CONTROL)

    @property
    def chat_template(self) -> str | None:
        return self._str(Keys.CHAT_TEMPLATE)

    @property
    def named_chat_templates(self) -> dict[str, str]:
        """Named templates (e.g. "tool_use"): llama.cpp writes each to tokenizer.chat_template.<name>
        and lists the names in tokenizer.chat_templates."""
        prefix = Keys.CHAT_TEMPLATE + "."
        named = {  # keys first: reading every value would read the numeric arrays too (numpy)
            key[len(prefix) :]: value
            for key in self.metadata
            if key.startswith(prefix) and isinstance(value := self.metadata[key], str)
        }
        listed = self.metadata.get(Keys.CHAT_TEMPLATES)
        if isinstance(listed, (list, LazyStrings)):
            for name in listed:
                value = self.metadata.get(Keys.CHAT_TEMPLATE_N.format(name=name))
                if isinstance(value, str):
                    named[name] = value
        return named

    @property
    def bos_id(self) -> int | None:
        return self._id(Keys.BOS_ID)

    @property
    def eos_id(self) -> int | None:
        return self._id(Keys.EOS_ID)

    @property
    def pad_id(self) -> int | None:
        return self._id(Keys.PAD_ID)

    @property
    def eot_id(self) -> int | None:
        return self._id(Keys.EOT_ID)

    @property
    def eom_id(self) -> int | None:
        return self._id(Keys.EOM_ID)

    @property
    def unk_id(self) -> int | None:
        return self._id(Keys.UNK_ID)

    @property
    def add_bos(self) -> bool | None:
        return self._flag(Keys.ADD_BOS)

    @property
    def add_eos(self) -> bool | None:
        return self._flag(Keys.ADD_EOS)


def read_header(path: str | Path) -> GGUFHeader:
    """Parse the header of the GGUF file at `path`; raise InputError if it is not a readable GGUF."""
    path = Path(path)
    try:
        if not stat.S_ISREG(path.stat().st_mode):  # a named pipe would block, a device never end
            raise InputError(f"{path}: cannot read the file (not a regular file but a folder, pipe or device).")
        with open(path, "rb") as file:
            size = file.seek(0, 2)
            if size == 0:
                raise InputError(f"{path}: the file is empty, not a GGUF model.")
            buffer = mmap.mmap(file.fileno(), min(size, MAX_HEADER_MAP), access=mmap.ACCESS_READ)
    except OSError as error:
        raise InputError(f"{path}: cannot read the file ({error.strerror or error}).") from None
    return _Parser(path, buffer, size).header()


class _Parser:
    """One pass over the key/value section. Every length is checked against the file size before
    it is used, so a corrupt file gives one clear InputError and never a huge allocation."""

    def __init__(self, path: Path, buffer: mmap.mmap, file_size: int | None = None) -> None:
        self.path = path
        self.buffer = buffer
        self.size = len(buffer)  # what the header may use: the mapped start of the file
        self.file_size = self.size if file_size is None else file_size
        self.pos = 0
        self.key = "header"  # the key being read, for error messages

    def fail(self, what: str) -> InputError:
        return InputError(f"{self.path}: {what} (at byte {self.pos}, reading {self.key}).")

    def need(self, count: int, what: str) -> None:
        """Make sure `count` bytes of `what` are there at the current position."""
        if self.pos + count > self.size and self.size < self.file_size:
            raise self.fail(f"the GGUF header runs past its first {self.size >> 20} MB ({what}), more than a real "
                            "header holds: a corrupt length or count")
        if count > self.size:
            raise self.fail(f"corrupt GGUF header: {what} claims {count} bytes, but the file has only {self.size}")
        if self.pos + count > self.size:
            raise self.fail(f"truncated GGUF file: the header runs past the end of the file ({what})")

    def header(self) -> GGUFHeader:
        if self.size < 4 or self.buffer[:4] != GGUF_MAGIC:
            found = bytes(self.buffer[:4])
            raise InputError(f"{self.path}: not a GGUF file (starts with {found!r}, expected b'GGUF').")
        self.need(_HEADER.size, "the fixed header")
        _, version, tensor_count, kv_count = _HEADER.unpack_from(self.buffer, 0)
        # A big-endian file has the same magic bytes but its version reads byte-swapped (3 -> 0x03000000).
        if version not in SUPPORTED_VERSIONS and int.from_bytes(version.to_bytes(4, "little"), "big") in SUPPORTED_VERSIONS:
            raise InputError(f"{self.path}: big-endian GGUF files are not supported.")
        if version not in SUPPORTED_VERSIONS:
            supported = " and ".join(f"v{v}" for v in SUPPORTED_VERSIONS)
            raise InputError(f"{self.path}: unsupported GGUF version {version} (this reader handles {supported}).")
        self.pos = _HEADER.size
        # A key/value takes at least 13 bytes (key length, type, one byte of value); a tensor entry
        # at least 24 (name length, dimension count, type, offset).
        if kv_count * 13 > self.size:
            raise self.fail(f"corrupt GGUF header: {kv_count} metadata entries cannot fit in {self.size} bytes")
        if tensor_count * 24 > self.size:
            raise self.fail(f"corrupt GGUF header: {tensor_count} tensors cannot fit in {self.size} bytes")
        metadata: dict[str, Any] = {}
        for index in range(kv_count):
            self.key = f"metadata entry {index}"
            key = self.string(strict=True, what="a key")
            # repr, shortened: a corrupt key may hold newlines or run for kilobytes, the message is one line.
            self.key = repr(key) if len(key) <= 80 else repr(key[:80]) + "..."
            if key in metadata:
                raise self.fail(f"corrupt GGUF header: duplicate key {key!r}")
            metadata[key] = self.value(self.u32("a value type"), depth=0)
        self.key = "the tensor table"
        self.need(tensor_count * 24, f"the table of {tensor_count} tensors")
        tensors = self.tensor_table(tensor_count, kv_count, metadata)
        return GGUFHeader(self.path, version, tensor_count, Metadata(metadata), MappingProxyType(tensors))

    def tensor_table(self, tensor_count: int, kv_count: int, metadata: Mapping[str, Any]) -> dict[str, GGUFTensor]:
        """Walk the tensor table (name, dimensions, type, offset) and check each tensor's data lies
        inside the file. llama.cpp refuses a file whose table does not parse or whose data is cut
        short; a wrong metadata count shows here too, as the table starts at the wrong byte."""
        miscounted = f"; the header's metadata count ({kv_count}) may be wrong"
        tensors: list[tuple[str, int, int, int]] = []  # name, type, offset, element count
        shapes: list[tuple[int, ...]] = []
        for index in range(tensor_count):
            self.key = f"tensor {index} of the tensor table"
            start = self.pos
            self.need(8, "a tensor name length")
            (length,) = _U64.unpack_from(self.buffer, self.pos)
            if length > _MAX_TENSOR_NAME:
                raise self.fail(f"corrupt GGUF tensor table: a tensor name of {length} bytes{miscounted}")
            name = self.string(strict=False, what="a tensor name")
            dims = self.u32("a dimension count")
            if not 1 <= dims <= _MAX_DIMS:
                self.pos = start
                raise self.fail(f"corrupt GGUF tensor table: tensor {name[:40]!r} has {dims} dimensions "
                                f"(at most {_MAX_DIMS}){miscounted}")
            self.need(8 * dims + 12, "a tensor's shape, type and offset")
            shape = struct.unpack_from(f"<{dims}Q", self.buffer, self.pos)
            self.pos += 8 * dims
            tensor_type = self.u32("a tensor type")
            self.need(8, "a tensor offset")
            (offset,) = _U64.unpack_from(self.buffer, self.pos)
            self.pos += 8
            elements = 1
            for extent in shape:
                elements *= extent
            tensors.append((name, tensor_type, offset, elements))
            shapes.append(shape)
        alignment = metadata.get(Keys.ALIGNMENT, 32)
        if not isinstance(alignment, int) or alignment <= 0 or alignment & (alignment - 1):
            raise self.fail(f"corrupt GGUF header: general.alignment {alignment!r} is not a power of two")
        data_start = -(-self.pos // alignment) * alignment
        expected = 0  # llama.cpp (gguf.cpp): each tensor's data follows the previous one's, padded to the alignment
        for name, tensor_type, offset, elements in tensors:
            self.key = f"tensor {name[:40]!r}"
            block = TYPE_SIZES.get(tensor_type)
            if block is None:
                raise self.fail(f"corrupt GGUF tensor table: tensor {name[:40]!r} has an unknown ggml type {tensor_type}")
            if offset != expected:
                raise self.fail(f"corrupt GGUF tensor table: tensor {name[:40]!r} has data offset {offset}, expected "
                                f"{expected} (data in table order, aligned to {alignment} bytes){miscounted}")
            nbytes = -(-elements // block[0]) * block[1]
            if data_start + offset + nbytes > self.file_size:
                raise self.fail(f"truncated GGUF file: the data of tensor {name[:40]!r} runs past the end of the file "
                                f"(needs byte {data_start + offset + nbytes}, the file has {self.file_size})")
            expected = offset + -(-nbytes // alignment) * alignment
        if self.file_size > data_start + expected:
            self.key = "the tensor data"
            raise self.fail(f"corrupt GGUF file: {self.file_size - data_start - expected} bytes after the last tensor's "
                            f"data that no tensor of the table owns; the header's tensor count ({tensor_count}) may be wrong")
        return {name: GGUFTensor(name, tensor_type, shape, data_start + offset)
                for (name, tensor_type, offset, _), shape in zip(tensors, shapes)}

    def u32(self, what: str) -> int:
        self.need(4, what)
        (value,) = _U32.unpack_from(self.buffer, self.pos)
        self.pos += 4
        return value

    def string(self, strict: bool, what: str) -> str:
        self.need(8, f"the length of {what}")
        (length,) = _U64.unpack_from(self.buffer, self.pos)
        self.pos += 8
        self.need(length, what)
        raw = self.buffer[self.pos : self.pos + length]
        try:
            text = raw.decode("utf-8") if strict else raw.decode("utf-8", "replace")
        except UnicodeDecodeError as error:
            raise self.fail(f"{what} is not valid UTF-8 ({error.reason} at byte {error.start} of it)") from None
        self.pos += length
        return text

    def value(self, value_type: int, depth: int) -> Any:
        fixed = FIXED_TYPES.get(value_type)
        if fixed is not None:
            scalar, _ = fixed
            self.need(scalar.size, "a value")
            (value,) = scalar.unpack_from(self.buffer, self.pos)
            self.pos += scalar.size
            return value
        if value_type == GGUFValueType.STRING:
            return self.string(strict=True, what="a string value")
        if value_type == GGUFValueType.ARRAY:
            return self.array(depth)
        raise self.fail(f"corrupt GGUF header: unknown value type {value_type}")

    def array(self, depth: int) -> Any:
        if depth >= _MAX_NESTING:
            raise self.fail(f"corrupt GGUF header: arrays nested more than {_MAX_NESTING} deep")
        self.need(_ARRAY_HEAD.size, "an array header")
        element_type, count = _ARRAY_HEAD.unpack_from(self.buffer, self.pos)
        self.pos += _ARRAY_HEAD.size
        fixed = FIXED_TYPES.get(element_type)
        if fixed is not None:
            scalar, dtype = fixed
            self.need(count * scalar.size, f"an array of {count} values")
            # A zero-copy numpy view into the map once read (read-only, which suits a header).
            values = NumericArray(self.buffer, dtype, count, self.pos)
            self.pos += count * scalar.size
            return values if depth == 0 else values.load()
        if element_type == GGUFValueType.STRING:
            self.need(count * 8, f"an array of {count} strings")
            if count > _MAX_STRINGS:  # each string costs an 8-byte offset here, and more once decoded
                raise self.fail(f"an array of {count} strings is more than the {_MAX_STRINGS} a header can hold")
            starts, end = self.walk_strings(count)
            self.pos = end
            if count <= _EAGER_STRINGS:
                return decode_strings(self.buffer, starts, end)
            return LazyStrings(self.buffer, starts, end, self.key)
        if element_type == GGUFValueType.ARRAY:
            self.need(count * _ARRAY_HEAD.size, f"an array of {count} arrays")
            return [self.array(depth + 1) for _ in range(count)]
        raise self.fail(f"corrupt GGUF header: unknown array element type {element_type}")

    def walk_strings(self, count: int) -> tuple[int_array, int]:
        """Offsets of the `count` length-prefixed strings from here, and the offset past the last.

        Strings are walked one by one (each length says where the next begins), which in Python is
        the costly part for a 262k vocabulary (`gguf_strings.walk_strings`); a walk that runs off
        the end is done again with checks that name the problem.
        """
        if count == 0:
            return int_array("q"), self.pos
        found = walk_strings(self.buffer, self.pos, count, self.size)
        return found if found is not None else self.walk_strings_checked(count)

    def walk_strings_checked(self, count: int) -> tuple[int_array, int]:
        starts = int_array("q", bytes(8 * count))
        for index in range(count):
            starts[index] = self.pos
            self.need(8, f"the length of string {index} of {count}")
            (length,) = _U64.unpack_from(self.buffer, self.pos)
            self.pos += 8
            self.need(length, f"string {index} of {count}")
            self.pos += length
        return starts, self.pos
