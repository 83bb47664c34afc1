"""Copies plan file IN to OUT with one byte of a buffer's name replaced by
0xff (not UTF-8, which proto3 string fields must be), the frame's length
and CRC-32 kept right, so that only the payload's parse can refuse it.

    corrupt-plan-utf8.py IN OUT
"""
import struct
import sys
import zlib

data = open(sys.argv[1], "rb").read()
assert data[:8] == b"BRAIDPLN", "not a plan file"
length, _ = struct.unpack("<QI", data[8:20])
payload = bytearray(data[20:20 + length])
# The name of the buffer "tokens", as it is serialized: the field's length
# byte, then the bytes.
at = payload.find(b"\x06tokens")
assert at >= 0, "no buffer named tokens"
payload[at + 1] = 0xFF
out = b"BRAIDPLN" + struct.pack("<QI", len(payload), zlib.crc32(payload)) + bytes(payload)
open(sys.argv[2], "wb").write(out)
