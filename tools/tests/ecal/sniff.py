#!/usr/bin/env python3
"""Registration sniffer: decodes the eCAL registration datagrams on the local registration port.

Usage: sniff.py --seconds N [--port 14000] [--pid P ...] [--topic-contains S]

Needs no eCAL library (plain sockets and a small protobuf reader), so it shows exactly which
fields a sender wrote, including zero and empty ones ("present" = written on the wire).
Binds 0.0.0.0:PORT with SO_REUSEADDR (as eCAL does, so every receiver gets each broadcast) and
prints one line per registration sample:
  {"event": "sample", "t", "from", "cmd", "cmd_name", "fields": {...}, "present": [...]}
where `fields` is the decoded Process or Topic (nested messages as objects, bytes as hex) and
`present` lists the field numbers written, in wire order. `--pid` keeps samples of those
process ids only. Ends with {"event": "done", "samples": K, "errors": E}.
Exit codes: 0 ok, 2 bad arguments or the port cannot be bound.
"""

import argparse
import os
import select
import socket
import struct
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ecal_common as ec  # noqa: E402

CMD_NAMES = {1: "set_sample", 2: "reg_publisher", 3: "reg_subscriber", 4: "reg_process", 5: "reg_service",
             6: "reg_client", 12: "unreg_publisher", 13: "unreg_subscriber", 14: "unreg_process",
             15: "unreg_service", 16: "unreg_client"}

# Schema: message -> {field: (name, kind)}; kind is "int", "str", "bytes", "double" or a message name.
SCHEMA = {
    "Sample": {1: ("cmd_type", "int"), 3: ("process", "Process"), 5: ("topic", "Topic"), 8: ("padding", "bytes")},
    "Process": {1: ("registration_clock", "int"), 2: ("host_name", "str"), 3: ("process_id", "int"),
                4: ("process_name", "str"), 5: ("unit_name", "str"), 6: ("process_parameter", "str"),
                12: ("state", "ProcessState"), 13: ("time_sync_state", "int"), 14: ("time_sync_module_name", "str"),
                15: ("component_init_state", "int"), 16: ("component_init_info", "str"),
                17: ("ecal_runtime_version", "str"), 18: ("shm_transport_domain", "str"),
                19: ("config_file_path", "str")},
    "ProcessState": {1: ("severity", "int"), 2: ("info", "str"), 3: ("severity_level", "int")},
    "Topic": {1: ("registration_clock", "int"), 2: ("host_name", "str"), 3: ("process_id", "int"),
              4: ("process_name", "str"), 5: ("unit_name", "str"), 6: ("topic_id", "str"), 7: ("topic_name", "str"),
              8: ("direction", "str"), 12: ("transport_layer", "TLayer"), 13: ("topic_size", "int"),
              16: ("connections_local", "int"), 17: ("connections_external", "int"), 18: ("message_drops", "int"),
              19: ("data_id", "int"), 20: ("data_clock", "int"), 21: ("data_frequency", "int"),
              28: ("shm_transport_domain", "str"), 30: ("datatype_information", "DataTypeInformation"),
              31: ("data_latency_us", "Statistics")},
    "DataTypeInformation": {1: ("name", "str"), 2: ("encoding", "str"), 3: ("descriptor_information", "bytes")},
    "TLayer": {1: ("type", "int"), 2: ("version", "int"), 3: ("active", "int"), 5: ("par_layer", "ConnectionPar"),
               6: ("enabled", "int")},
    "ConnectionPar": {1: ("layer_par_udpmc", "Empty"), 2: ("layer_par_shm", "LayerParShm"),
                      4: ("layer_par_tcp", "LayerParTcp"), 100: ("layer_par_shoal", "LayerParShoal")},
    "Empty": {},
    "LayerParShm": {1: ("memory_file_list", "str")},
    "LayerParTcp": {1: ("port", "int")},
    "LayerParShoal": {1: ("segment", "str"), 2: ("slot_count", "int"), 3: ("slot_size", "int"),
                      4: ("generation", "int"), 5: ("doorbell", "str")},
    "Statistics": {1: ("count", "int"), 2: ("latest", "double"), 3: ("min", "double"), 4: ("max", "double"),
                   5: ("mean", "double"), 6: ("variance", "double")},
}
REPEATED = {("Topic", 12), ("LayerParShm", 1)}


class DecodeError(Exception):
    pass


def varint(buf, pos):
    result = shift = 0
    while True:
        if pos >= len(buf) or shift > 63:
            raise DecodeError("truncated varint")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7


def decode(buf, msg):
    """(fields, present) of protobuf `buf` read as message `msg` of SCHEMA."""
    schema = SCHEMA[msg]
    fields, present, pos = {}, [], 0
    while pos < len(buf):
        key, pos = varint(buf, pos)
        num, wt = key >> 3, key & 7
        if wt == 0:
            raw, pos = varint(buf, pos)
            value = raw - (1 << 64) if raw >= 1 << 63 else raw
        elif wt == 1:
            if pos + 8 > len(buf):
                raise DecodeError("truncated fixed64")
            value = struct.unpack_from("<d", buf, pos)[0]
            pos += 8
        elif wt == 2:
            n, pos = varint(buf, pos)
            if pos + n > len(buf):
                raise DecodeError("truncated length-delimited field")
            value = buf[pos:pos + n]
            pos += n
        elif wt == 5:
            pos += 4
            value = None
        else:
            raise DecodeError(f"wire type {wt}")
        present.append(num)
        name, kind = schema.get(num, (f"field_{num}", None))
        if wt == 2:
            if kind == "str":
                value = value.decode("utf-8", "replace")
            elif kind in SCHEMA:
                sub, sub_present = decode(value, kind)
                sub["_present"] = sub_present
                value = sub
            else:
                value = value.hex()
        if isinstance(value, float) and value != value:
            value = "nan"
        elif isinstance(value, float) and value in (float("inf"), float("-inf")):
            value = str(value)
        if (msg, num) in REPEATED:
            fields.setdefault(name, []).append(value)
        else:
            fields[name] = value
    return fields, present


def split_datagram(d):
    """The framed message of a non-fragmented ecaludp v5 datagram (None for fragments)."""
    if len(d) < 24 or d[:4] != b"ECAL" or d[4] != 5:
        raise DecodeError("not an ecaludp v5 datagram")
    dtype, _id, _num, length = struct.unpack_from("<IiII", d, 8)
    if dtype != 3:
        return None
    body = d[24:24 + length]
    if len(body) < 2:
        raise DecodeError("short body")
    name_len = struct.unpack_from("<H", body, 0)[0]
    return body[2 + name_len:]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, required=True)
    ap.add_argument("--port", type=int, default=14000)
    ap.add_argument("--pid", type=int, action="append", default=[], help="only samples of this process id")
    ap.add_argument("--topic-contains", default="", help="drop topic samples whose name lacks this")
    args = ap.parse_args()
    if args.seconds <= 0:
        ec.fail("--seconds must be positive", code=2)
    stop = ec.StopFlag()
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(("0.0.0.0", args.port))
    except OSError as e:
        ec.fail(f"cannot bind port {args.port}: {e}", code=2)
    ec.emit({"event": "ready", "pid": os.getpid(), "port": args.port})
    start = time.monotonic()
    deadline = start + args.seconds
    samples = errors = 0
    while not stop.is_set():
        left = deadline - time.monotonic()
        if left <= 0:
            break
        ready, _, _ = select.select([sock], [], [], min(left, 0.1))
        if not ready:
            continue
        data, peer = sock.recvfrom(65536)
        try:
            payload = split_datagram(data)
            if payload is None:
                continue
            fields, present = decode(payload, "Sample")
        except DecodeError as e:
            errors += 1
            ec.emit({"event": "error", "from": f"{peer[0]}:{peer[1]}", "error": str(e)})
            continue
        body = fields.get("process") or fields.get("topic") or {}
        if args.pid and body.get("process_id") not in args.pid:
            continue
        if "topic" in fields and args.topic_contains not in fields["topic"].get("topic_name", ""):
            continue
        cmd = fields.get("cmd_type", 0)
        samples += 1
        ec.emit({"event": "sample", "t": round(time.monotonic() - start, 3), "from": f"{peer[0]}:{peer[1]}",
                 "cmd": cmd, "cmd_name": CMD_NAMES.get(cmd, str(cmd)), "fields": body,
                 "present": body.get("_present", [])})
    ec.emit({"event": "done", "samples": samples, "errors": errors})
    return 0


if __name__ == "__main__":
    sys.exit(main())
