"""A weight row as `array('f')`, read from its bytes without numpy.

`inspect --weights` judges a few hundred rows; numpy's import (~55-60 ms cold, OpenBLAS loaded
with it) cost more than reading and judging them. The float formats an embedding is stored in
are converted here with the standard library: F32 as it lies, BF16 by widening each value to the
upper half of a float32 (exact), F16 through `struct`'s half-precision format (exact), FP8
E4M3/E5M2 by table and by widening to F16 (exact), F64 and the integer types by C conversion
(round to nearest, overflow to infinity, as numpy's `astype(float32)`).
tests/test_weights_rows.py checks each dtype's bytes against numpy's reading of them.

Imports: the standard library only.
"""

from __future__ import annotations

import struct
import sys
from array import array

Row = array  # array('f'): one row of a matrix as float32 values

_BIG_ENDIAN = sys.byteorder == "big"
# safetensors' integer dtypes as little-endian struct codes
_STRUCT = {"I8": "b", "U8": "B", "I16": "h", "U16": "H", "I32": "i", "U32": "I", "I64": "q", "U64": "Q", "BOOL": "?"}
_E4M3: list[float] = []


def float32_row(data: bytes | bytearray) -> Row:
    """Little-endian float32 bytes as a row."""
    row = array("f")
    row.frombytes(data)
    if _BIG_ENDIAN:
        row.byteswap()
    return row


def bfloat16_row(data: bytes) -> Row:
    """bfloat16 is the upper half of a float32: each value's two bytes go above two zero bytes."""
    wide = bytearray(2 * len(data))
    wide[2::4] = data[0::2]
    wide[3::4] = data[1::2]
    return float32_row(wide)


def float16_row(data: bytes | bytearray) -> Row:
    return array("f", struct.unpack(f"<{len(data) // 2}e", data))


def _e4m3_table() -> list[float]:
    """The 256 values of float8 E4M3FN (bias 7, no infinities, 0x7F/0xFF NaN)."""
    if not _E4M3:
        for byte in range(256):
            sign = -1.0 if byte & 0x80 else 1.0
            exponent, mantissa = (byte >> 3) & 0xF, byte & 0x7
            if exponent == 0xF and mantissa == 0x7:
                _E4M3.append(float("nan"))
            elif exponent == 0:
                _E4M3.append(sign * mantissa / 8 * 2.0 ** -6)
            else:
                _E4M3.append(sign * (1 + mantissa / 8) * 2.0 ** (exponent - 7))
    return _E4M3


def row_of(data: bytes, dtype: str) -> Row:
    """The bytes of one row of a safetensors tensor of `dtype` as float32 values (FP8 unscaled)."""
    if dtype == "F32":
        return float32_row(data)
    if dtype == "BF16":
        return bfloat16_row(data)
    if dtype == "F16":
        return float16_row(data)
    if dtype == "F8_E4M3":
        return array("f", map(_e4m3_table().__getitem__, data))
    if dtype == "F8_E5M2":  # the upper byte of a float16
        wide = bytearray(2 * len(data))
        wide[1::2] = data
        return float16_row(wide)
    if dtype == "F64":
        wide_row = array("d")
        wide_row.frombytes(data)
        if _BIG_ENDIAN:
            wide_row.byteswap()
        return array("f", wide_row)
    code = _STRUCT[dtype]
    return array("f", struct.unpack(f"<{len(data) // struct.calcsize(code)}{code}", data))
