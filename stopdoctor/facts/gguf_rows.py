"""Read a few rows of a GGUF tensor (`token_embd`, `output`) and de-quantise only those.

GGUF lists a matrix's shape row length first: `token_embd.weight` is [hidden, vocab], so token
`i`'s row is the i-th run of `hidden` elements, `hidden / block` blocks of the tensor's type.
Each row's blocks are read with `pread` and de-quantised by `gguf.quants` (F32, F16, BF16, Q8_0,
Q4_0/1, Q5_0/1, the K-quants, the IQ types: whatever gguf-py knows).

Rows come back as `array('f')` (`facts.floats`), as safetensors rows do.

Imports: numpy, stopdoctor.core.errors, stopdoctor.facts (gguf, floats); `gguf` (pure numpy) lazily.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

import numpy as np

from stopdoctor.core.errors import InputError
from stopdoctor.facts.floats import Row, float32_row
from stopdoctor.facts.gguf import GGUFTensor


# The types embeddings come in, read here without `import gguf` (~0.1-0.2 s): ggml type ->
# (name, elements per block, bytes per block), as gguf.constants.GGML_QUANT_SIZES gives them.
_FAST = {0: ("F32", 1, 4), 1: ("F16", 1, 2), 8: ("Q8_0", 32, 34), 30: ("BF16", 1, 2)}


def type_name(tensor_type: int) -> str:
    if tensor_type in _FAST:
        return _FAST[tensor_type][0]
    from gguf.constants import GGMLQuantizationType

    try:
        return GGMLQuantizationType(tensor_type).name
    except ValueError:
        return f"type {tensor_type}"


def _dequantize_fast(raw: np.ndarray, tensor_type: int) -> np.ndarray:
    """F32, F16, BF16 and Q8_0 rows (a float16 scale, then 32 int8 quants a block) in plain numpy;
    tested against gguf-py's `dequantize`."""
    rows = raw.shape[0]
    if tensor_type == 0:
        return raw.view("<f4").reshape(rows, -1).copy()
    if tensor_type == 1:
        return raw.view("<f2").astype(np.float32).reshape(rows, -1)
    if tensor_type == 30:
        return (raw.view("<u2").astype(np.uint32) << 16).view(np.float32).reshape(rows, -1)
    blocks = raw.reshape(rows, -1, 34)
    scales = blocks[:, :, :2].copy().view("<f2").astype(np.float32)
    quants = blocks[:, :, 2:].view(np.int8).astype(np.float32)
    return (scales * quants).reshape(rows, -1)


def read_gguf_rows(path: Path, tensor: GGUFTensor, ids: Iterable[int]) -> dict[int, Row]:
    """Rows `ids` of a 2-D GGUF tensor as float32 vectors; ids past the matrix are skipped."""
    if len(tensor.shape) != 2:
        raise InputError(f"{path.name}: tensor {tensor.name!r} has shape {list(tensor.shape)}, not [columns, rows]")
    width, count = tensor.shape
    if tensor.type in _FAST:
        name, block, block_bytes = _FAST[tensor.type]
        qtype = None
    else:
        from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

        try:
            qtype = GGMLQuantizationType(tensor.type)
            block, block_bytes = GGML_QUANT_SIZES[qtype]
        except (ValueError, KeyError):
            raise InputError(f"{path.name}: tensor {tensor.name!r} has a ggml type ({tensor.type}) gguf-py cannot read") from None
        name = qtype.name
    if width % block:
        raise InputError(f"{path.name}: tensor {tensor.name!r}: rows of {width} do not split into {name} blocks of {block}")
    row_bytes = width // block * block_bytes
    size = path.stat().st_size
    if tensor.start + count * row_bytes > size:
        raise InputError(f"{path.name}: the data of tensor {tensor.name!r} runs past the end of the file")
    wanted = sorted({i for i in ids if 0 <= i < count})
    rows: dict[int, Row] = {}
    if not wanted:
        return rows
    fd = os.open(path, os.O_RDONLY)
    try:
        raw = np.frombuffer(b"".join(os.pread(fd, row_bytes, tensor.start + i * row_bytes) for i in wanted),
                            dtype=np.uint8).reshape(len(wanted), row_bytes)
    finally:
        os.close(fd)
    if qtype is None:
        values = _dequantize_fast(raw, tensor.type)
    else:
        from gguf.quants import dequantize

        try:
            values = dequantize(raw, qtype).astype(np.float32, copy=False).reshape(len(wanted), width)
        except (NotImplementedError, ValueError) as error:
            raise InputError(f"{path.name}: cannot de-quantise {name} rows: {error}") from None
    values = values.astype("<f4", copy=False)
    return {token_id: float32_row(values[k].tobytes()) for k, token_id in enumerate(wanted)}
