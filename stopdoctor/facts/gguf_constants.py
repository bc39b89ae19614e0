"""The few GGUF constants stopdoctor needs, copied from gguf-py so that `import gguf` stays off
the static path (each names the gguf.constants or llama.cpp source it mirrors).

Imports nothing from the package.
"""

from __future__ import annotations

import struct
from enum import IntEnum

# gguf.constants.GGUF_MAGIC is 0x46554747, written little-endian: the bytes b"GGUF".
GGUF_MAGIC = b"GGUF"
# v1 counted in 32 bits and is long gone; llama.cpp and gguf-py read v2 and v3 (gguf.constants.GGUF_VERSION).
SUPPORTED_VERSIONS = (2, 3)


class GGUFValueType(IntEnum):
    """Mirrors gguf.constants.GGUFValueType."""

    UINT8 = 0
    INT8 = 1
    UINT16 = 2
    INT16 = 3
    UINT32 = 4
    INT32 = 5
    FLOAT32 = 6
    BOOL = 7
    STRING = 8
    ARRAY = 9
    UINT64 = 10
    INT64 = 11
    FLOAT64 = 12


# Fixed-size types: (struct format for one scalar, numpy dtype string for an array of them; numpy is
# imported only when such an array is read).
FIXED_TYPES: dict[int, tuple[struct.Struct, str]] = {
    GGUFValueType.UINT8: (struct.Struct("<B"), "<u1"),
    GGUFValueType.INT8: (struct.Struct("<b"), "<i1"),
    GGUFValueType.UINT16: (struct.Struct("<H"), "<u2"),
    GGUFValueType.INT16: (struct.Struct("<h"), "<i2"),
    GGUFValueType.UINT32: (struct.Struct("<I"), "<u4"),
    GGUFValueType.INT32: (struct.Struct("<i"), "<i4"),
    GGUFValueType.FLOAT32: (struct.Struct("<f"), "<f4"),
    GGUFValueType.BOOL: (struct.Struct("<?"), "?"),
    GGUFValueType.UINT64: (struct.Struct("<Q"), "<u8"),
    GGUFValueType.INT64: (struct.Struct("<q"), "<i8"),
    GGUFValueType.FLOAT64: (struct.Struct("<d"), "<f8"),
}


class Keys:
    """The metadata keys we read; names mirror gguf.constants.Keys.General / Keys.Tokenizer."""

    ARCHITECTURE = "general.architecture"  # Keys.General.ARCHITECTURE
    NAME = "general.name"  # Keys.General.NAME
    FINETUNE = "general.finetune"  # Keys.General.FINETUNE
    ALIGNMENT = "general.alignment"  # Keys.General.ALIGNMENT
    MODEL = "tokenizer.ggml.model"  # Keys.Tokenizer.MODEL
    PRE = "tokenizer.ggml.pre"  # Keys.Tokenizer.PRE
    LIST = "tokenizer.ggml.tokens"  # Keys.Tokenizer.LIST
    TOKEN_TYPE = "tokenizer.ggml.token_type"  # Keys.Tokenizer.TOKEN_TYPE
    SCORES = "tokenizer.ggml.scores"  # Keys.Tokenizer.SCORES
    MERGES = "tokenizer.ggml.merges"  # Keys.Tokenizer.MERGES
    BOS_ID = "tokenizer.ggml.bos_token_id"  # Keys.Tokenizer.BOS_ID
    EOS_ID = "tokenizer.ggml.eos_token_id"  # Keys.Tokenizer.EOS_ID
    EOT_ID = "tokenizer.ggml.eot_token_id"  # Keys.Tokenizer.EOT_ID
    EOM_ID = "tokenizer.ggml.eom_token_id"  # Keys.Tokenizer.EOM_ID
    UNK_ID = "tokenizer.ggml.unknown_token_id"  # Keys.Tokenizer.UNK_ID
    PAD_ID = "tokenizer.ggml.padding_token_id"  # Keys.Tokenizer.PAD_ID
    ADD_BOS = "tokenizer.ggml.add_bos_token"  # Keys.Tokenizer.ADD_BOS
    ADD_EOS = "tokenizer.ggml.add_eos_token"  # Keys.Tokenizer.ADD_EOS
    CHAT_TEMPLATE = "tokenizer.chat_template"  # Keys.Tokenizer.CHAT_TEMPLATE
    CHAT_TEMPLATE_N = "tokenizer.chat_template.{name}"  # Keys.Tokenizer.CHAT_TEMPLATE_N
    CHAT_TEMPLATES = "tokenizer.chat_templates"  # Keys.Tokenizer.CHAT_TEMPLATES


class TokenType(IntEnum):
    """Mirrors gguf.constants.TokenType (llama.cpp's llama_token_type)."""

    NORMAL = 1
    UNKNOWN = 2
    CONTROL = 3
    USER_DEFINED = 4
    UNUSED = 5
    BYTE = 6


# ggml type -> (elements per block, bytes per block): every type llama.cpp reads (ggml.c type_traits,
# gguf-py GGML_QUANT_SIZES); a tensor of any other type makes the file corrupt, as llama.cpp says.
TYPE_SIZES: dict[int, tuple[int, int]] = {
    0: (1, 4), 1: (1, 2), 2: (32, 18), 3: (32, 20), 6: (32, 22), 7: (32, 24), 8: (32, 34), 9: (32, 40),
    10: (256, 84), 11: (256, 110), 12: (256, 144), 13: (256, 176), 14: (256, 210), 15: (256, 292),
    16: (256, 66), 17: (256, 74), 18: (256, 98), 19: (256, 50), 20: (32, 18), 21: (256, 110), 22: (256, 82),
    23: (256, 136), 24: (1, 1), 25: (1, 2), 26: (1, 4), 27: (1, 8), 28: (1, 8), 29: (256, 56), 30: (1, 2),
    34: (256, 54), 35: (256, 66), 39: (32, 17), 40: (64, 36), 41: (128, 18),
}
