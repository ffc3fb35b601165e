#!/usr/bin/env python3
"""eCAL 6.1.1 monitoring peer: prints what eCAL's monitoring layer knows, as JSON lines.

Usage: monitor.py --seconds N [--interval-ms MS] [--topic-contains S] [--unit NAME] [--state SEV:LEVEL:INFO]

Initializes eCAL with the Monitoring component (0x08; without it `get_monitoring` raises),
then every interval prints one line
  {"event": "snapshot", "t": <s since start>, "self_pid": ..., "processes": [...],
   "publishers": [...], "subscribers": [...]}
until N seconds have passed or SIGTERM/SIGINT arrives, then {"event": "done", "snapshots": K}.
A "ready" line comes first. `--state` makes this process announce that state (eCAL's `process.set_state`;
SEV one of unknown, healthy, warning, critical, failed; LEVEL 1 to 5). `--topic-contains` keeps only topics whose name contains S (other
processes on the host register too). Exit codes: 0 ok, 2 bad arguments, 3 eCAL not usable.
"""

import argparse
import math
import os
import struct
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ecal_common as ec  # noqa: E402


def process_dict(p):
    return {
        "pid": p.process_id,
        "host_name": p.host_name,
        "unit_name": p.unit_name,
        "process_name": p.process_name,
        "process_parameter": p.process_parameter,
        "shm_transport_domain": p.shm_transport_domain,
        "component_init_state": p.component_init_state,
        "component_init_info": p.component_init_info,
        "ecal_runtime_version": p.ecal_runtime_version,
        "config_file_path": p.config_file_path,
        "time_sync_module_name": p.time_sync_module_name,
        "time_sync_state": int(p.time_sync_state),
        "state_severity": int(p.state_severity),
        "state_severity_level": int(p.state_severity_level),
        "state_info": p.state_info,
        "registration_clock": p.registration_clock,
    }


def layer_name(t):
    name = str(t).rsplit(".", 1)[-1]
    return {"UDP_MC": "udp", "SHM": "shm", "TCP": "tcp", "NONE": "none"}.get(name, name.lower())


def _varint(buf, i):
    shift = value = 0
    while True:
        b = buf[i]
        i += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, i
        shift += 7


def _fields(buf):
    """(field number, wire type, value) of one protobuf message; value is int, bytes or the 8 raw bytes."""
    i = 0
    while i < len(buf):
        key, i = _varint(buf, i)
        num, wt = key >> 3, key & 7
        if wt == 0:
            v, i = _varint(buf, i)
        elif wt == 1:
            v, i = buf[i:i + 8], i + 8
        elif wt == 2:
            n, i = _varint(buf, i)
            v, i = buf[i:i + n], i + n
        elif wt == 5:
            v, i = buf[i:i + 4], i + 4
        else:
            raise ValueError(f"wire type {wt}")
        yield num, wt, v


def serialized_latencies(ecal_core):
    """topic_id -> eCAL's `data_latency_us` {count, latest, min, max, mean, variance} (infinities as None),
    read from the serialized monitoring (`eCAL.pb.Monitoring`: topics are field 4, `Topic.topic_id` 6,
    `data_latency_us` 31); the binding's Topic objects do not expose it."""
    out = {}
    names = {1: "count", 2: "latest", 3: "min", 4: "max", 5: "mean", 6: "variance"}
    for num, _, topic in _fields(ecal_core.monitoring.get_serialized_monitoring()):
        if num != 4:
            continue
        topic_id, latency = None, None
        for tnum, _, v in _fields(topic):
            if tnum == 6:
                topic_id = v.decode()
            elif tnum == 31:
                latency = {}
                for snum, wt, sv in _fields(v):
                    if snum in names:
                        x = sv if wt == 0 else struct.unpack("<d", sv)[0]
                        # eCAL's "nothing measured" is min +inf / max -inf, which JSON cannot carry: null.
                        latency[names[snum]] = x if wt == 0 or math.isfinite(x) else None
        if topic_id is not None and latency is not None:
            out[topic_id] = latency
    return out


def topic_dict(t, latencies):
    return {
        "topic_name": t.topic_name,
        "topic_id": t.topic_id,
        "direction": t.direction,
        "pid": t.process_id,
        "host_name": t.host_name,
        "unit_name": t.unit_name,
        "process_name": t.process_name,
        "shm_transport_domain": t.shm_transport_domain,
        "datatype": ec.datatype_dict(t.datatype_information),
        # eCAL's monitor always lists udp, shm and tcp; `active` is what the sender marked active.
        "layers": [{"type": layer_name(l.type), "active": bool(l.active)} for l in t.transport_layer],
        "active_layers": [layer_name(l.type) for l in t.transport_layer if l.active],
        "topic_size": t.topic_size,
        "connections_local": t.connections_local,
        "connections_external": t.connections_external,
        "message_drops": t.message_drops,
        "data_id": t.data_id,
        "data_clock": t.data_clock,
        "data_frequency": t.data_frequency,
        "registration_clock": t.registration_clock,
        "data_latency_us": latencies.get(str(t.topic_id)),
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, required=True, help="how long to run")
    ap.add_argument("--interval-ms", type=int, default=250, help="time between snapshots")
    ap.add_argument("--topic-contains", default="", help="list only topics whose name contains this")
    ap.add_argument("--unit", default="shoal_ecal_monitor", help="eCAL unit name of this monitor")
    ap.add_argument("--state", default="", help="announce this process state: SEVERITY:LEVEL:INFO")
    args = ap.parse_args()
    if args.seconds <= 0 or args.interval_ms <= 0:
        ec.fail("--seconds and --interval-ms must be positive", code=2)

    ecal_core, stop = ec.start(args.unit, ec.DEFAULT | ec.MONITORING)
    emit_count = 0
    try:
        if args.state:
            sev, level, info = (args.state.split(":", 2) + ["", ""])[:3]
            ecal_core.process.set_state(getattr(ecal_core.process.Severity, sev.upper()),
                                        getattr(ecal_core.process.SeverityLevel, "LEVEL" + (level or "1")), info)
        ec.emit({"event": "ready", "pid": os.getpid(), "ecal_version": ecal_core.get_version_string(),
                 "host_name": os.uname().nodename})
        start = time.monotonic()
        deadline = start + args.seconds
        while not stop.is_set():
            try:
                mon = ecal_core.monitoring.get_monitoring()
            except RuntimeError as e:
                ec.fail(f"get_monitoring failed: {e}", code=3)
            keep = lambda t: args.topic_contains in t.topic_name  # noqa: E731
            lat = serialized_latencies(ecal_core)
            ec.emit({
                "event": "snapshot",
                "t": round(time.monotonic() - start, 3),
                "self_pid": os.getpid(),
                "processes": [process_dict(p) for p in mon.processes],
                "publishers": [topic_dict(t, lat) for t in mon.publishers if keep(t)],
                "subscribers": [topic_dict(t, lat) for t in mon.subscribers if keep(t)],
            })
            emit_count += 1
            now = time.monotonic()
            if now >= deadline:
                break
            stop.sleep(min(args.interval_ms / 1000.0, deadline - now))
        ec.emit({"event": "done", "snapshots": emit_count})
    finally:
        ecal_core.finalize()
    return 0


if __name__ == "__main__":
    sys.exit(main())
