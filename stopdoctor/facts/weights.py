"""Rows of a model's embedding and output matrices, read without loading the weights.

`find_matrices(source)` locates the input embedding and the output projection (`lm_head`) in a
folder's safetensors files (one file or shards listed by `model.safetensors.index.json`) or in a
GGUF file (`token_embd`, `output`); no output tensor means tied embeddings. `read_weight_rows`
reads the rows of the ids asked for from both. Which ids to read is the analysis' choice
(`stopdoctor.analysis.weights`).

Imports: numpy, core, facts (safetensors, gguf, gguf_rows, model_facts for guarded JSON).
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from stopdoctor.core.errors import InputError
from stopdoctor.core.types import ModelSource
from stopdoctor.facts.safetensors import LocalFile, SafetensorsTensor, read_header, read_rows

INDEX_FILE = "model.safetensors.index.json"
# Tensor names of the input embedding and the output projection across architectures, matched
# as name suffixes (a vision-language model nests the text model: model.language_model.embed_tokens).
EMBEDDING_NAMES = ("embed_tokens.weight", "wte.weight", "word_embeddings.weight", "tok_embeddings.weight",
                   "embedding.weight", "embeddings.weight")
OUTPUT_NAMES = ("lm_head.weight", "embed_out.weight", "output.weight")
# A shard index lists every tensor; a header can be large, but no real index is over this.
MAX_INDEX_BYTES = 64_000_000


@dataclass(frozen=True)
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
    entry: object = field(repr=False, compare=False, default=None)  # SafetensorsTensor | GGUFTensor


@dataclass(frozen=True)
class WeightRows:
    """Rows read from the matrices; `output` is None when the embeddings are tied (lm_head shares
    the embedding, so its rows are the same vectors)."""

    format: str  # "safetensors" | "gguf"
    embedding: Matrix
    output: Matrix | None
    embedding_rows: dict[int, np.ndarray]
    output_rows: dict[int, np.ndarray]
    seconds: float = 0.0

    @property
    def tied(self) -> bool:
        return self.output is None


def find_matrices(source: ModelSource, gguf_header: object = None) -> tuple[str, Matrix, Matrix | None]:
    """(format, embedding, output or None when tied); InputError when the model has no weights.
    `gguf_header`: the GGUF header already read (`ModelFacts.gguf`), so it is not parsed twice."""
    if source.kind == "gguf":
        return ("gguf", *_gguf_matrices(next(iter(source.files.values())), gguf_header))
    return ("safetensors", *_safetensors_matrices(source.root))


def read_weight_rows(source: ModelSource, ids: Iterable[int], gguf_header: object = None) -> WeightRows:
    """The rows of `ids` (ids past a matrix are left out) of the embedding and output matrices."""
    started = time.perf_counter()
    fmt, embedding, output = find_matrices(source, gguf_header)
    ids = sorted(set(ids))
    read = _read_gguf if fmt == "gguf" else _read_safetensors
    embedding_rows = read(embedding, ids)
    output_rows = read(output, ids) if output is not None else {}
    return WeightRows(fmt, embedding, output, embedding_rows, output_rows, time.perf_counter() - started)


# --- GGUF ------------------------------------------------------------------------------------


def _gguf_matrices(path: Path, header: object = None) -> tuple[Matrix, Matrix | None]:
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


def _read_gguf(matrix: Matrix, ids: list[int]) -> dict[int, np.ndarray]:
    from stopdoctor.facts.gguf_rows import read_gguf_rows

    return read_gguf_rows(matrix.path, matrix.entry, ids)


# --- safetensors -----------------------------------------------------------------------------


def _safetensors_matrices(root: Path) -> tuple[Matrix, Matrix | None]:
    files = _weight_files(root)
    tensors: dict[str, tuple[Path, SafetensorsTensor]] = {}
    for path in files:
        with LocalFile(path) as handle:
            for name, tensor in read_header(handle).tensors.items():
                tensors[name] = (path, tensor)
    embedding = _pick(tensors, EMBEDDING_NAMES, "embedding", root)
    if embedding is None:
        raise InputError(f"{root}: no input embedding tensor (…{', …'.join(EMBEDDING_NAMES[:2])}) in {', '.join(p.name for p in files)}")
    output = _pick(tensors, OUTPUT_NAMES, "output", root)
    if output is not None and output.rows != embedding.rows:
        output = None  # not a projection onto the vocabulary (an attention block's "output.weight")
    return embedding, output


def _weight_files(root: Path) -> list[Path]:
    """The safetensors files holding the weights; only the shards an index names that hold the
    matrices would be needed, but every header is small, so all headers are read."""
    index = root / INDEX_FILE
    if index.is_file():
        from stopdoctor.facts.model_facts import load_json

        data = load_json(index, INDEX_FILE, MAX_INDEX_BYTES)
        weight_map = data.get("weight_map") if isinstance(data, dict) else None
        if not isinstance(weight_map, dict) or not all(isinstance(v, str) for v in weight_map.values()):
            raise InputError(f"{index}: no weight_map of tensor name to file name")
        wanted = {v for k, v in weight_map.items() if k.endswith(EMBEDDING_NAMES + OUTPUT_NAMES)}
        shards = []
        for name in sorted(wanted):
            shard = (root / name).resolve()
            if shard.parent != root.resolve() or not shard.is_file():
                raise InputError(f"{index}: names {name!r}, which is not a file in the model folder")
            shards.append(shard)
        if shards:
            return shards
    files = sorted(p for p in root.glob("*.safetensors") if p.is_file())
    if not files:
        hint = "only pickled .bin weights: convert them to safetensors" if any(root.glob("*.bin")) else \
            "inspect --weights reads the embedding rows from the model's .safetensors or .gguf file"
        raise InputError(f"{root}: no .safetensors weights", hint=hint)
    return files


def _pick(tensors: dict[str, tuple[Path, SafetensorsTensor]], suffixes: tuple[str, ...], role: str,
          root: Path) -> Matrix | None:
    for suffix in suffixes:
        # the shortest name with the suffix: the text model's, not a vision tower's
        names = sorted((n for n in tensors if n == suffix or n.endswith("." + suffix)), key=len)
        for name in names:
            path, tensor = tensors[name]
            if len(tensor.shape) == 2:
                return Matrix(role, path.name, name, tensor.dtype, tensor.shape[0], tensor.shape[1], path, tensor)
    return None


def _read_safetensors(matrix: Matrix, ids: list[int]) -> dict[int, np.ndarray]:
    with LocalFile(matrix.path) as handle:
        return read_rows(handle, matrix.entry, ids)
