"""Payload format of the eCAL shared-memory interop tests (tools/tests/ecal_shm.rs): fast to build and check
in Python at 1 MB sizes.

Message number `n` (1, 2, ...) of `size` bytes: byte i = (n * 31 + i) mod 256, then bytes 0..8 (if size >= 8)
replaced by n as u64 little-endian.
"""

import struct

_BASE = bytes(range(256))


def make(n, size):
    r = (n * 31) % 256
    rot = _BASE[r:] + _BASE[:r]
    body = (rot * (size // 256 + 1))[:size]
    if size >= 8:
        body = struct.pack("<Q", n) + body[8:]
    return body


def check(data):
    """(n, intact) of a payload; n is None when it is shorter than 8 bytes."""
    if len(data) < 8:
        return None, False
    n = struct.unpack_from("<Q", data, 0)[0]
    return n, bytes(data) == make(n, len(data))


def parse_sizes(text):
    """'1024x20,65536x5' -> [1024]*20 + [65536]*5."""
    out = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        size, _, count = part.partition("x")
        out.extend([int(size)] * int(count or "1"))
    return out
