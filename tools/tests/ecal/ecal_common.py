"""Shared helpers of the eCAL 6.1.1 peer scripts used by shoal's interop tests.

Every script prints JSON objects, one per line, on stdout and nothing else: eCAL's C++ core
logs to stdout, so `json_stdout()` moves the process's file descriptor 1 to stderr and keeps
a private duplicate of the original stdout for the JSON lines.

The payload format `pattern` is the one of shoal's `shoal-peer` (tools/src/bin/shoal-peer.rs), so
eCAL and shoal peers can check each other's messages:
bytes 0..8 clock (u64 LE), 8..16 send time (CLOCK_MONOTONIC ns, u64 LE), 16..24 FNV-1a 64 of
bytes 24.., and byte 24+i = (clock * 31 + i) mod 256. Payloads shorter than 24 bytes are the
pattern alone: byte i = (clock * 31 + i) mod 256.
"""

import json
import os
import signal
import struct
import sys
import threading
import time

_OUT = None

# eCAL init component flags (ecal/core/include/ecal/init.h; the binding's `init` module).
PUBLISHER = 0x01
SUBSCRIBER = 0x02
SERVICE = 0x04
MONITORING = 0x08
LOGGING = 0x10
TIMESYNC = 0x20
DEFAULT = PUBLISHER | SUBSCRIBER | SERVICE | LOGGING | TIMESYNC  # 55, the binding's default


def json_stdout():
    """Reserve the real stdout for JSON lines; everything else written to fd 1 goes to stderr."""
    global _OUT
    if _OUT is not None:
        return
    sys.stdout.flush()
    fd = os.dup(1)
    os.dup2(2, 1)
    _OUT = os.fdopen(fd, "w", buffering=1)


def emit(obj):
    """Print one JSON line on the reserved stdout."""
    out = _OUT if _OUT is not None else sys.stdout
    out.write(json.dumps(obj, sort_keys=True) + "\n")
    out.flush()


def fail(msg, code=1):
    """Report an error as JSON and on stderr, then exit with `code`."""
    emit({"event": "error", "error": msg})
    print(f"error: {msg}", file=sys.stderr)
    sys.exit(code)


def import_ecal():
    """Import the nanobind binding of eCAL 6.1.1 (exits with code 3 if it is not installed)."""
    try:
        import ecal.nanobind_core as ecal_core  # noqa: PLC0415
    except ImportError as e:  # pragma: no cover - depends on the venv
        fail(f"cannot import ecal.nanobind_core ({e}); run scripts/ecal-venv", code=3)
    return ecal_core


def initialize(ecal_core, unit_name, components):
    """`ecal_core.initialize` with the default configuration (from eCAL's defaults, no ecal.yaml)."""
    cfg = ecal_core.init.get_configuration()
    if not ecal_core.initialize(cfg, unit_name, components):
        fail(f"eCAL initialize({unit_name!r}, {components:#x}) failed", code=3)
    return cfg


def start(unit_name, components):
    """What every peer does first: JSON lines on stdout, a stop flag for SIGTERM/SIGINT, eCAL imported and
    initialized. Returns (ecal_core, stop)."""
    json_stdout()
    stop = StopFlag()
    ecal_core = import_ecal()
    initialize(ecal_core, unit_name, components)
    return ecal_core, stop


def wait_until_enough(enough, stop, lock, state, timeout_ms, idle_ms):
    """Waits until the event `enough` is set or `stop` is; returns True if it gave up first: `timeout_ms` since the
    call, or `idle_ms` since `state["last"]` (the monotonic time of the last message, read under `lock`)."""
    start = time.monotonic()
    while not enough.is_set() and not stop.is_set():
        now = time.monotonic()
        with lock:
            last = state["last"]
        if now - start >= timeout_ms / 1000.0 or (last is not None and now - last >= idle_ms / 1000.0):
            return True
        enough.wait(0.02)
    return False


class StopFlag:
    """Set by SIGTERM / SIGINT so that scripts can finalize eCAL and exit cleanly.

    The handler only stores a flag, taking no lock: Python runs a handler in the main thread between two bytecodes,
    also while that thread holds the lock inside `threading.Event.wait`, and a handler that takes the same lock (as
    `Event.set` does) then waits for itself forever (seen once in CI: an eCAL server never printed "done" after its
    SIGTERM, its main thread in `lock.acquire()`). `sleep` polls the flag instead."""

    SLICE = 0.01

    def __init__(self):
        self._stopped = False
        signal.signal(signal.SIGTERM, self._handler)
        signal.signal(signal.SIGINT, self._handler)

    def _handler(self, _signum, _frame):
        self._stopped = True

    def is_set(self):
        return self._stopped

    def sleep(self, seconds):
        """Sleep up to `seconds`; True if interrupted by a stop signal (seen within `SLICE`)."""
        end = time.monotonic() + max(0.0, seconds)
        while not self._stopped:
            left = end - time.monotonic()
            if left <= 0:
                return False
            time.sleep(min(left, self.SLICE))
        return True


def fnv1a64(data):
    """FNV-1a, 64 bit (the checksum shoal-peer uses)."""
    h = 0xCBF29CE484222325
    for b in data:
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def digest(data):
    """The digest printed for every payload: FNV-1a 64 of all bytes, as 16 hex digits."""
    return f"{fnv1a64(data):016x}"


_BYTE_VALUES = bytes(range(256))


def _pattern_bytes(clock, n):
    # (clock * 31 + i) & 0xFF for i in 0..n: the byte values 0..255 rotated and repeated (fast for megabytes).
    start = (clock * 31) & 0xFF
    period = _BYTE_VALUES[start:] + _BYTE_VALUES[:start]
    return (period * (n // 256 + 1))[:n]


def make_payload(clock, size):
    """The self-checking payload number `clock` of `size` bytes (see the module docs)."""
    if size < 24:
        return _pattern_bytes(clock, size)
    rest = _pattern_bytes(clock, size - 24)
    return struct.pack("<QQQ", clock, time.monotonic_ns(), fnv1a64(rest)) + rest


def check_payload(data):
    """(clock, intact) of a payload in the format above; clock is None when it is too short."""
    if len(data) < 24:
        return None, False
    clock, _sent, checksum = struct.unpack_from("<QQQ", data, 0)
    rest = data[24:]
    return clock, rest == _pattern_bytes(clock, len(rest)) and fnv1a64(rest) == checksum


def check_pattern(data):
    """(clock, intact) like `check_payload`, comparing every byte after the header with the pattern of its clock
    but not the header's FNV checksum (fast for megabytes)."""
    if len(data) < 24:
        return None, False
    clock = struct.unpack_from("<Q", data, 0)[0]
    return clock, data[24:] == _pattern_bytes(clock, len(data) - 24)


def layer_flags(layer):
    """(udp, shm, tcp) enable flags for a `--layer` value."""
    table = {
        "udp": (True, False, False),
        "shm": (False, True, False),
        "tcp": (False, False, True),
        "all": (True, True, True),
        "default": None,
    }
    if layer not in table:
        fail(f"unknown layer {layer!r} (udp, shm, tcp, all, default)", code=2)
    return table[layer]


# Descriptors longer than this are printed as length and digest only.
DESCRIPTOR_HEX_MAX = 1024


def datatype_dict(dt):
    """A `DataTypeInformation` as JSON: name, encoding, descriptor length, digest (FNV-1a 64 hex)
    and, up to DESCRIPTOR_HEX_MAX bytes, hex."""
    desc = dt.descriptor
    if isinstance(desc, str):
        desc = desc.encode("utf-8", "surrogateescape")
    desc = bytes(desc or b"")
    out = {
        "name": dt.name,
        "encoding": dt.encoding,
        "descriptor_len": len(desc),
        "descriptor_digest": digest(desc),
    }
    if len(desc) <= DESCRIPTOR_HEX_MAX:
        out["descriptor_hex"] = desc.hex()
    return out


def emit_ready(entity, cfg):
    """The "ready" line of a publisher or subscriber peer: pid, its topic id, the layers its
    configuration `cfg` enables and its data type information."""
    tid = entity.get_topic_id()
    emit({
        "event": "ready",
        "pid": os.getpid(),
        "host_name": tid.topic_id.host_name,
        "topic_id": tid.topic_id.entity_id,
        "topic_name": tid.topic_name,
        "layers": {"udp": cfg.layer.udp.enable, "shm": cfg.layer.shm.enable, "tcp": cfg.layer.tcp.enable},
        "datatype": datatype_dict(entity.get_data_type_information()),
    })


def wait_for_subscribers(pub, count, wait_ms, stop):
    """Waits until `pub` has `count` subscribers; returns False if `wait_ms` passed or `stop` was set first."""
    deadline = time.monotonic() + wait_ms / 1000.0
    while pub.get_subscriber_count() < count:
        if time.monotonic() >= deadline or stop.is_set():
            return False
        stop.sleep(0.01)
    return True


def descriptor_arg(hex_text, path):
    """Descriptor bytes from `--descriptor-hex` or `--descriptor-file` (exits with code 2 on errors)."""
    if hex_text and path:
        fail("give --descriptor-hex or --descriptor-file, not both", code=2)
    if path:
        try:
            with open(path, "rb") as f:
                return f.read()
        except OSError as e:
            fail(f"--descriptor-file: {e}", code=2)
    try:
        return bytes.fromhex(hex_text)
    except ValueError as e:
        fail(f"--descriptor-hex: {e}", code=2)
