"""The fixed-width big-endian layouts of AMQP 1.0 values on the wire (network byte order, part 1 1.6).

Shared by the decoder, the encoder and the message builders: ``U`` unsigned, ``I`` signed, ``F``
IEEE 754 floating point, by width in bits; ``U8U8`` and ``U32U32`` are a compound's size and count.
"""

from __future__ import annotations

import struct
from typing import Final

U8: Final = struct.Struct(">B")
I8: Final = struct.Struct(">b")
U16: Final = struct.Struct(">H")
I16: Final = struct.Struct(">h")
U32: Final = struct.Struct(">I")
I32: Final = struct.Struct(">i")
U64: Final = struct.Struct(">Q")
I64: Final = struct.Struct(">q")
F32: Final = struct.Struct(">f")
F64: Final = struct.Struct(">d")
U8U8: Final = struct.Struct(">BB")
U32U32: Final = struct.Struct(">II")
