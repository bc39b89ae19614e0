"""Rows of a model's embedding and output matrices, read without loading the weights.

`find_matrices(source)` locates the input embedding and the output projection (`lm_head`) in a
folder's safetensors files (one file or shards listed by `model.safetensors.index.json`) or in a
GGUF file (`token_embd`, `output`); no output tensor means tied embeddings. A hub id's files are
the HF cache's copies, or HTTP range reads of the hub's (`stopdoctor.facts.resolve.hub_weight_file`):
only the headers and the rows travel. `read_weight_rows` reads the rows of the ids asked for from
both. Which ids to read is the analysis' choice (`stopdoctor.analysis.weights`).

Imports: core, facts (floats, safetensors, gguf, gguf_rows, model_facts for guarded JSON, resolve
for hub ids). No numpy: a GGUF's rows import it (gguf_rows), a safetensors file's do not.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import field
from pathlib import Path
from typing import Any

from stopdoctor.core.errors import InputError
from stopdoctor.core.records import record
from stopdoctor.core.types import ModelSource
from stopdoctor.facts.floats import Row
from stopdoctor.facts.safetensors import ByteSource, LocalFile, SafetensorsTensor, read_header, read_rows

INDEX_FILE = "model.safetensors.index.json"
# Tensor names of the input embedding and the output projection across architectures, matched
# as name suffixes (a vision-language model nests the text model: model.language_model.embed_tokens).
EMBEDDING_NAMES = ("embed_tokens.weight", "wte.weight", "word_embeddings.weight", "tok_embeddings.weight",
                   "embedding.weight", "embeddings.weight")
OUTPUT_NAMES = ("lm_head.weight", "embed_out.weight", "output.weight")
# A shard index lists every tensor; a header can be large, but no real index is over this.
MAX_INDEX_BYTES = 64_000_000
# The widest embedding of any released language model is ~25k columns (PaLM 540B: 18,432); a
# row wider than this is a shape that lies, and reading it would cost megabytes a row.
MAX_COLUMNS = 65_536
# The rows kept in all, as float32 over both matrices: the rows past it (the optional special
# rows, last in the order asked) are not read, and `WeightRows.rows_cut` says how many.
MAX_ROW_BYTES_IN_ALL = 256 * 1024 * 1024
# A file name longer than a file system allows (255 bytes) is no shard of this folder.
MAX_NAME_BYTES = 255
# The embedding and output live in one or two shards (a vision-language model's text and vision
# towers, a few more): an index naming more for them is not read shard by shard.
MAX_MATRIX_SHARDS = 16


@record
class Matrix:
    """Where one matrix lives: `file` (a name under the model root), its tensor, dtype, shape as
    [rows (ids), columns]."""

    role: str  # "embedding" | "output"
    file: str
    tensor: str
    dtype: str
    rows: int
    columns: int
    path: Path = field(repr=False, compare=False, default=Path())
    entry: Any = field(repr=False, compare=False, default=None)  # SafetensorsTensor | GGUFTensor
    reader: Any = field(repr=False, compare=False, default=None)  # a hub file's ByteSource (range reads)


@record
class HttpTransfer:
    """What HTTP range reads of a hub model's weight files cost: `bytes` fetched out of the
    `file_bytes` the files hold, in `requests` requests to `host`."""

    host: str
    requests: int
    bytes: int
    file_bytes: int


@record
class WeightRows:
    """Rows read from the matrices; `output` is None when the embeddings are tied (lm_head shares
    the embedding, so its rows are the same vectors)."""

    format: str  # "safetensors" | "gguf"
    embedding: Matrix
    output: Matrix | None
    embedding_rows: dict[int, Row]
    output_rows: dict[int, Row]
    seconds: float = 0.0
    http: HttpTransfer | None = None  # a hub id's weights read over HTTP: what travelled
    rows_cut: int = 0  # ids asked for but not read: their rows would pass MAX_ROW_BYTES_IN_ALL

    @property
    def tied(self) -> bool:
        return self.output is None


def find_matrices(source: ModelSource, gguf_header: object = None) -> tuple[str, Matrix, Matrix | None]:
    """(format, embedding, output or None when tied); InputError when the model has no weights,
    or when a matrix's shape is not one a language model has (no columns, or rows megabytes wide:
    refused before a row is read). `gguf_header`: the GGUF header already read (`ModelFacts.gguf`),
    so it is not parsed twice."""
    if source.kind == "gguf":
        fmt, (embedding, output) = "gguf", _gguf_matrices(next(iter(source.files.values())), gguf_header)
    else:
        fmt, (embedding, output) = "safetensors", _safetensors_matrices(source)
    for matrix in (embedding, output):
        if matrix is not None:
            _check_shape(source, matrix)
    return fmt, embedding, output


def _check_shape(source: ModelSource, matrix: Matrix) -> None:
    where = f"{source.spec}: {matrix.file}: tensor {matrix.tensor[:80]!r}"
    if matrix.columns == 0:
        raise InputError(f"{where} has {matrix.rows} rows of 0 columns: an {matrix.role} matrix with no columns is "
                         "no language model's", hint="the weight file is corrupt or not a language model's")
    if matrix.columns > MAX_COLUMNS:
        raise InputError(f"{where} has rows {matrix.columns:,} columns wide: an implausible shape (no language model's "
                         f"{matrix.role} is wider than {MAX_COLUMNS:,}); its rows are not read",
                         hint="the header's shape is wrong, or this is not a language model's weight file")


def read_weight_rows(source: ModelSource, ids: Iterable[int], gguf_header: object = None) -> WeightRows:
    """The rows of `ids` (ids past a matrix are left out) of the embedding and output matrices.
    `ids` in the order they matter: when their rows would pass MAX_ROW_BYTES_IN_ALL, the last are
    not read (`rows_cut`)."""
    started = time.perf_counter()
    fmt, embedding, output = find_matrices(source, gguf_header)
    ordered = list(dict.fromkeys(ids))
    row_bytes = 4 * (embedding.columns + (output.columns if output is not None else 0))
    fitting = max(1, MAX_ROW_BYTES_IN_ALL // row_bytes)
    cut = max(0, len(ordered) - fitting)
    ids = sorted(ordered[:fitting])
    read = _read_gguf if fmt == "gguf" else _read_safetensors
    embedding_rows = read(embedding, ids)
    output_rows = read(output, ids) if output is not None else {}
    return WeightRows(fmt, embedding, output, embedding_rows, output_rows, time.perf_counter() - started,
                      _transfer(embedding, output), cut)


def _transfer(*matrices: Matrix | None) -> HttpTransfer | None:
    readers = {id(m.reader): m.reader for m in matrices if m is not None and hasattr(m.reader, "bytes_read")}
    if not readers:
        return None
    from stopdoctor.facts.remote import shown_host

    files = list(readers.values())
    return HttpTransfer(shown_host(files[0].url), sum(f.requests for f in files), sum(f.bytes_read for f in files),
                        sum(f.size for f in files))


# --- GGUF ------------------------------------------------------------------------------------


def _gguf_matrices(path: Path, header: Any = None) -> tuple[Matrix, Matrix | None]:
    from stopdoctor.facts.gguf import read_header
    from stopdoctor.facts.gguf_rows import type_name

    if header is None or getattr(header, "path", None) != path:
        header = read_header(path)

    def matrix(role: str, name: str) -> Matrix | None:
        tensor = header.tensors.get(name)
        if tensor is None:
            return None
        if len(tensor.shape) != 2:
            raise InputError(f"{path.name}: tensor {name!r} has shape {list(tensor.shape)}, not a matrix")
        return Matrix(role, path.name, name, type_name(tensor.type), tensor.shape[1], tensor.shape[0], path, tensor)

    embedding = matrix("embedding", "token_embd.weight")
    if embedding is None:
        raise InputError(f"{path.name}: no token_embd.weight tensor (a GGUF of a language model has one)")
    return embedding, matrix("output", "output.weight")


def _read_gguf(matrix: Matrix, ids: list[int]) -> dict[int, Row]:
    from stopdoctor.facts.gguf_rows import read_gguf_rows

    return read_gguf_rows(matrix.path, matrix.entry, ids)


# --- safetensors -----------------------------------------------------------------------------


def _safetensors_matrices(source: ModelSource) -> tuple[Matrix, Matrix | None]:
    tensors: dict[str, tuple[Path, SafetensorsTensor, ByteSource | None]] = {}
    files = _weight_files(source)
    for path, remote in files:
        with (LocalFile(path) if remote is None else _Shared(remote)) as handle:
            for name, tensor in read_header(handle).tensors.items():
                tensors[name] = (path, tensor, remote)
    embedding = _pick(tensors, EMBEDDING_NAMES, "embedding")
    if embedding is None:
        raise InputError(f"{source.spec}: no input embedding tensor (…{', …'.join(EMBEDDING_NAMES[:2])}) in "
                         f"{', '.join(path.name for path, _ in files)}")
    output = _pick(tensors, OUTPUT_NAMES, "output")
    if output is not None and output.rows != embedding.rows:
        output = None  # not a projection onto the vocabulary (an attention block's "output.weight")
    return embedding, output


def _weight_files(source: ModelSource) -> list[tuple[Path, ByteSource | None]]:
    """(path, range reader or None for a local file) of the safetensors files holding the
    matrices: the shards the index names for them, else every .safetensors file (a hub id not
    sharded: model.safetensors)."""
    root = source.root
    if source.kind == "hub":
        from stopdoctor.facts.resolve import hub_small_file, hub_weight_file

        index = hub_small_file(source, INDEX_FILE)
        names = _shards(index) if index is not None else ["model.safetensors"]
        if not names:
            raise InputError(f"{source.spec}: {INDEX_FILE} names no shard holding the embedding or output matrix",
                             hint="download the model and pass its folder")
        files = [(root / name, hub_weight_file(source, name)) for name in names]
        return [(path, None if isinstance(got, Path) else got) for path, got in files]
    index = root / INDEX_FILE
    if index.is_file():
        shards = _shards(index)
        for name in shards:
            if not _is_file(root / name):
                raise InputError(f"{index}: names {name!r}, which is not a file in the model folder")
        if shards:
            return [(root / name, None) for name in shards]
    local = sorted(p for p in root.glob("*.safetensors") if p.is_file())
    if not local:
        hint = "only pickled .bin weights: convert them to safetensors" if any(root.glob("*.bin")) else \
            "inspect --weights reads the embedding rows from the model's .safetensors or .gguf file"
        raise InputError(f"{root}: no .safetensors weights", hint=hint)
    return [(path, None) for path in local]


def _shards(index: Path) -> list[str]:
    """The shard names an index gives for the embedding and output tensors (every header is
    small, but only these shards are opened); a name outside the model folder is refused."""
    from stopdoctor.facts.model_facts import load_json

    data = load_json(index, INDEX_FILE, MAX_INDEX_BYTES)
    weight_map = data.get("weight_map") if isinstance(data, dict) else None
    if not isinstance(weight_map, dict) or not all(isinstance(v, str) for v in weight_map.values()):
        raise InputError(f"{index}: no weight_map of tensor name to file name")
    names = sorted({v for k, v in weight_map.items() if k.endswith(EMBEDDING_NAMES + OUTPUT_NAMES)})
    if len(names) > MAX_MATRIX_SHARDS:
        raise InputError(f"{index}: names {len(names):,} shards holding embedding or output tensors; a model keeps them "
                         f"in one or two (refused over {MAX_MATRIX_SHARDS}: each shard's header would be read)")
    for name in names:
        if not name or "/" in name or "\\" in name or name in (".", "..") or len(name.encode("utf-8", "replace")) > MAX_NAME_BYTES:
            raise InputError(f"{index}: names {name[:80]!r}{'…' if len(name) > 80 else ''}, which is not a file in the "
                             "model folder")
        if name == INDEX_FILE:
            raise InputError(f"{index}: names itself as the shard holding the embedding or output matrix")
    return names


def _is_file(path: Path) -> bool:
    try:
        return path.is_file()
    except OSError:  # a name the file system refuses, a loop of links
        return False


class _Shared:
    """A range reader used again and again: `with` leaves it open (it holds no file)."""

    def __init__(self, reader: ByteSource) -> None:
        self.reader = reader

    def __enter__(self) -> ByteSource:
        return self.reader

    def __exit__(self, *exc_info) -> None:
        pass


def _pick(tensors: dict[str, tuple[Path, SafetensorsTensor, ByteSource | None]], suffixes: tuple[str, ...], role: str) -> Matrix | None:
    for suffix in suffixes:
        # the shortest name with the suffix: the text model's, not a vision tower's
        names = sorted((n for n in tensors if n == suffix or n.endswith("." + suffix)), key=len)
        for name in names:
            path, tensor, reader = tensors[name]
            if len(tensor.shape) == 2:
                return Matrix(role, path.name, name, tensor.dtype, tensor.shape[0], tensor.shape[1], path, tensor, reader)
    return None


def _read_safetensors(matrix: Matrix, ids: list[int]) -> dict[int, Row]:
    if matrix.reader is not None:
        return read_rows(matrix.reader, matrix.entry, ids)
    with LocalFile(matrix.path) as handle:
        return read_rows(handle, matrix.entry, ids)
