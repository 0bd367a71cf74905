"""The fixed-width big-endian layouts of AMQP 1.0 values on the wire (network byte order, part 1 1.6).

Shared by the decoder, the encoder and the message builders: ``U`` unsigned, ``I`` signed, ``F``
IEEE 754 floating point, by width in bits; ``U8U8`` and ``U32U32`` are a compound's size and count.
"""

from __future__ import annotations

import struct

U8, I8, U16, I16, U32, I32, U64, I64, F32, F64, U8U8, U32U32 = (
    struct.Struct(layout) for layout in (">B", ">b", ">H", ">h", ">I", ">i", ">Q", ">q", ">f", ">d", ">BB", ">II")
)
