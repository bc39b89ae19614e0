"""Read a GGUF file's header (its metadata key/values) without touching tensor data.

`read_header(path)` maps the file and walks only the key/value section: numeric arrays become
zero-copy numpy views, string arrays are decoded in bulk (lazily for big ones such as merges).
`gguf.GGUFReader` is not used: it builds one Python object per array element, which takes ~10 s and
~700 MiB for Gemma's 262k-token vocabulary; this reader takes a fraction of a second.

Building a tokenizer from the header is `stopdoctor.facts.gguf_tokenizer`.

Imports: numpy, stopdoctor.core.errors, stopdoctor.core.types. Not `gguf` (its import costs ~70 ms, more than
this whole reader's own work on a small model) and not torch.
"""

from __future__ import annotations

import mmap
import stat
import struct
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import accumulate, repeat
from pathlib import Path
from types import MappingProxyType
from typing import Any

import numpy as np

from stopdoctor.core.errors import InputError
from stopdoctor.core.types import Token
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
_SEPARATOR = "\x00" * 8  # see _decode_strings


_KEY_PRIME = 0x9E3779B97F4A7C15  # spreads the length over the key's bits (a filter: matches are checked whole)


def _string_key(raw: bytes) -> int:
    """A string's length mixed with its first eight bytes, as `LazyStrings._keys` computes it."""
    return ((len(raw) * _KEY_PRIME) ^ int.from_bytes(raw[:8], "little")) & 0xFFFFFFFFFFFFFFFF


class LazyStrings(Sequence[str]):
    """A GGUF string array (a vocabulary, a merge table) decoded on first access.

    Reading the header only has to find where the array ends; decoding 100k+ strings is deferred
    until someone asks for them, then done once in bulk.
    """

    def __init__(self, buffer: mmap.mmap, starts: np.ndarray, end: int, key: str) -> None:
        self._buffer = buffer
        self._starts = starts  # offset of each string's 8-byte length prefix
        self._end = end
        self._key = key
        self._items: list[str] | None = None
        self._keys_cache: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None

    def to_list(self) -> list[str]:
        if self._items is None:
            self._items = _decode_strings(self._buffer, self._starts, self._end)
        return self._items

    def __len__(self) -> int:
        return len(self._starts)

    def __getitem__(self, index):
        if self._items is None and isinstance(index, int):
            # One string (an eos token's text, say) does not need the whole array decoded.
            start = int(self._starts[index])
            (length,) = _U64.unpack_from(self._buffer, start)
            return self._buffer[start + 8 : start + 8 + length].decode("utf-8", "replace")
        return self.to_list()[index]

    def __iter__(self) -> Iterator[str]:
        return iter(self.to_list())

    def last_indices(self, texts: Iterable[str]) -> dict[str, int]:
        """text → the last index whose string is exactly it (llama.cpp's token_to_id keeps the last)."""
        return self._indices(texts, last=True)

    def first_indices(self, texts: Iterable[str]) -> dict[str, int]:
        """text → the first index whose string is exactly it (what a linear search finds)."""
        return self._indices(texts, last=False)

    def _indices(self, texts: Iterable[str], last: bool) -> dict[str, int]:
        """Only strings of a wanted byte length and first byte are decoded: a few lookups in a
        262k vocabulary cost a vectorised pass over the offsets, not a decode of it all."""
        # llama.cpp never looks up an empty text; a linear search (`first`) finds an empty token
        wanted = {t.encode("utf-8", "surrogatepass"): t for t in texts if t or not last}
        if not wanted or not len(self._starts):
            return {}
        if self._items is not None:
            texts = set(wanted.values())
            found = {}
            for i, item in enumerate(self._items):
                if item in texts and (last or item not in found):
                    found[item] = i
            return found
        starts, lengths, keys = self._keys()
        mask = np.isin(keys, np.array(sorted({_string_key(raw) for raw in wanted}), dtype=np.uint64))
        found = {}
        for index in np.flatnonzero(mask).tolist():
            start = int(starts[index]) + 8
            raw = self._buffer[start: start + int(lengths[index])]
            if raw in wanted and (last or wanted[raw] not in found):
                found[wanted[raw]] = index
        return found

    def _keys(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Each string's offset, byte length and `_string_key`, computed once for all lookups."""
        if self._keys_cache is None:
            size = len(self._buffer)
            starts = self._starts.astype(np.int64)
            lengths = np.append(starts[1:], self._end) - starts - 8
            # every byte offset read as a little-endian u64 (an unaligned, zero-copy view): one
            # gather reads a string's first eight bytes, then the bytes past its end are masked off
            words = np.ndarray((size - 7,), dtype="<u8", buffer=self._buffer, strides=(1,))
            inside = starts + 16 <= size
            heads = words[np.where(inside, starts + 8, 0)]
            masks = np.array([(1 << (8 * n)) - 1 for n in range(9)], dtype=np.uint64)
            keys = (lengths.astype(np.uint64) * np.uint64(_KEY_PRIME)) ^ (heads & masks[np.minimum(lengths, 8)])
            # a string within 16 bytes of the mapped end (a header that ends with its vocabulary)
            # gets the key of its own bytes, read one by one
            for index in np.flatnonzero(~inside).tolist():
                start = int(starts[index]) + 8
                keys[index] = _string_key(self._buffer[start: start + int(lengths[index])])
            self._keys_cache = (starts, lengths, keys)
        return self._keys_cache

    def __eq__(self, other: object) -> bool:
        if isinstance(other, LazyStrings):
            other = other.to_list()
        return isinstance(other, (list, tuple)) and self.to_list() == list(other)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"<LazyStrings {self._key}: {len(self)} strings>"


@dataclass(frozen=True)
class GGUFTensor:
    """One entry of the tensor table: `shape` as GGUF lists it (the row length first), `start` the
    absolute byte where its data begins (already checked to lie inside the file)."""

    name: str
    type: int  # a ggml type (gguf.constants.GGMLQuantizationType)
    shape: tuple[int, ...]
    start: int


@dataclass(frozen=True)
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
    def token_types(self) -> np.ndarray | None:
        value = self.metadata.get(Keys.TOKEN_TYPE)
        return value if isinstance(value, np.ndarray) else None

    def token(self, token_id: int) -> Token | None:
        """The token with this id; `special` is llama.cpp's CONTROL type (user-defined tokens such
        as `<think>` are matched whole but are not special, as in transformers)."""
        tokens = self.tokens
        if tokens is None or not 0 <= token_id < len(tokens):
            return None
        types = self.token_types
        special = types is not None and token_id < len(types) and int(types[token_id]) == TokenType.CONTROL
        return Token(token_id, tokens[token_id], special)

    @property
    def chat_template(self) -> str | None:
        return self._str(Keys.CHAT_TEMPLATE)

    @property
    def named_chat_templates(self) -> dict[str, str]:
        """Named templates (e.g. "tool_use"): llama.cpp writes each to tokenizer.chat_template.<name>
        and lists the names in tokenizer.chat_templates."""
        prefix = Keys.CHAT_TEMPLATE + "."
        named = {
            key[len(prefix) :]: value
            for key, value in self.metadata.items()
            if key.startswith(prefix) and isinstance(value, str)
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
        return GGUFHeader(self.path, version, tensor_count, MappingProxyType(metadata), MappingProxyType(tensors))

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
            shape = np.frombuffer(self.buffer, dtype="<u8", count=dims, offset=self.pos)
            self.pos += 8 * dims
            tensor_type = self.u32("a tensor type")
            self.need(8, "a tensor offset")
            (offset,) = _U64.unpack_from(self.buffer, self.pos)
            self.pos += 8
            elements = 1
            for extent in shape.tolist():
                elements *= extent
            tensors.append((name, tensor_type, offset, elements))
            shapes.append(tuple(shape.tolist()))
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
            _, dtype = fixed
            self.need(count * dtype.itemsize, f"an array of {count} values")
            # Zero-copy view into the map; read-only, which suits a header.
            values = np.frombuffer(self.buffer, dtype=dtype, count=count, offset=self.pos)
            self.pos += count * dtype.itemsize
            return values
        if element_type == GGUFValueType.STRING:
            self.need(count * 8, f"an array of {count} strings")
            if count > _MAX_STRINGS:  # each string costs an 8-byte offset here, and more once decoded
                raise self.fail(f"an array of {count} strings is more than the {_MAX_STRINGS} a header can hold")
            starts, end = self.walk_strings(count)
            self.pos = end
            if count <= _EAGER_STRINGS:
                return _decode_strings(self.buffer, starts, end)
            return LazyStrings(self.buffer, starts, end, self.key)
        if element_type == GGUFValueType.ARRAY:
            self.need(count * _ARRAY_HEAD.size, f"an array of {count} arrays")
            return [self.array(depth + 1) for _ in range(count)]
        raise self.fail(f"corrupt GGUF header: unknown array element type {element_type}")

    def walk_strings(self, count: int) -> tuple[np.ndarray, int]:
        """Offsets of the `count` length-prefixed strings from here, and the offset past the last.

        Strings are walked one by one (each length says where the next begins), which in Python is
        the costly part for a 262k vocabulary. Fast path: assume every length is < 256, so only the
        low byte of each 8-byte length matters, and let `accumulate` do the loop in C; then check the
        assumption for all offsets at once. If it fails (a long string, or a corrupt length) walk
        again reading full lengths, with bounds checks that name the problem.
        """
        buffer = self.buffer
        if count == 0:
            return np.empty(0, dtype=np.int64), self.pos
        found = _walk_short_strings(buffer, self.pos, count, self.size)
        if found is not None:
            return found
        try:
            starts = np.fromiter(
                accumulate(repeat(None, count - 1), lambda pos, _: pos + 8 + buffer[pos], initial=self.pos),
                dtype=np.int64,
                count=count,
            )
        except IndexError:  # ran off the end: let the careful walk say where and why
            return self.walk_strings_checked(count)
        last = int(starts[-1])
        end = last + 8 + buffer[last] if last < self.size else self.size + 1
        if end <= self.size and _all_lengths_below_256(buffer, starts):
            return starts, end
        return self.walk_strings_checked(count)

    def walk_strings_checked(self, count: int) -> tuple[np.ndarray, int]:
        starts = np.empty(count, dtype=np.int64)
        for index in range(count):
            starts[index] = self.pos
            self.need(8, f"the length of string {index} of {count}")
            (length,) = _U64.unpack_from(self.buffer, self.pos)
            self.pos += 8
            self.need(length, f"string {index} of {count}")
            self.pos += length
        return starts, self.pos


def _walk_short_strings(buffer: mmap.mmap, pos: int, count: int, size: int) -> tuple[np.ndarray, int] | None:
    """The offsets of `count` strings from `pos` without a Python step per string, or None.

    A string shorter than 256 bytes has a length prefix of one byte and seven NULs. Every byte
    followed by seven NULs is a candidate start; when the first `count` candidates begin at `pos`
    and each one's length leads to the next, they are exactly the strings a one-by-one walk finds
    (the walk would step from candidate to candidate). Anything else (a long string, NULs inside a
    string, a corrupt length) returns None and the walk is done one by one. The window grows
    until it holds `count` candidates, so only the array's own bytes are scanned.
    """
    window = min(size - pos, count * 24)
    while window >= 8:
        region = np.frombuffer(buffer, dtype=np.uint8, count=window, offset=pos)
        zero = region == 0
        seven = zero[1:-6].copy()  # seven[i]: bytes i+1 .. i+7 are all NUL
        for shift in range(2, 8):
            seven &= zero[shift: window - 7 + shift]
        starts = np.flatnonzero(seven)
        if len(starts) >= count or window == size - pos:
            break
        window = min(size - pos, window * 2)
    else:
        return None
    if len(starts) < count or starts[0] != 0:
        return None
    starts = starts[:count].astype(np.int64)
    following = starts + 8 + region[starts]
    if not np.array_equal(following[:-1], starts[1:]):
        return None
    end = pos + int(following[-1])
    if end > size:
        return None
    return starts + pos, end


def _all_lengths_below_256(buffer: mmap.mmap, starts: np.ndarray) -> bool:
    """Whether bytes 1..7 of every 8-byte length prefix at `starts` are zero."""
    first, last = int(starts[0]), int(starts[-1])
    region = np.frombuffer(buffer, dtype=np.uint8, count=last + 8 - first, offset=first)
    relative = starts - first
    high = np.zeros(len(starts), dtype=bool)
    for byte in range(1, 8):
        high |= region[relative + byte] != 0
    return not high.any()


def _decode_strings(buffer: mmap.mmap, starts: np.ndarray, end: int) -> list[str]:
    """Decode the length-prefixed strings at `starts` (the last ends at `end`).

    Fast path, when every length fits in one byte and no string holds a NUL: zero the length bytes,
    so each prefix becomes eight NULs, decode the whole block once and split it on those. Strings
    that are not valid UTF-8 on their own (raw byte tokens) take the slow path, decoded one by one
    with U+FFFD for the bad bytes, which is what a vocabulary needs.
    """
    count = len(starts)
    if count == 0:
        return []
    first = int(starts[0])
    if count > 16 and _all_lengths_below_256(buffer, starts):
        block = np.frombuffer(buffer, dtype=np.uint8, count=end - first, offset=first).copy()
        block[starts - first] = 0
        if block.size - np.count_nonzero(block) == 8 * count:  # the prefixes' NULs and no others
            try:
                text = block.tobytes().decode("utf-8")
            except UnicodeDecodeError:
                pass
            else:
                # The 8-NUL separators make each string decode on its own: a character split across two
                # strings is an error here too, so this equals decoding each string separately.
                strings = text.split(_SEPARATOR)
                if len(strings) == count + 1:
                    return strings[1:]
    strings = []
    for start in starts.tolist():
        (length,) = _U64.unpack_from(buffer, start)
        strings.append(buffer[start + 8 : start + 8 + length].decode("utf-8", "replace"))
    return strings
