#!/usr/bin/env python3
"""eCAL 6.1.1 subscriber peer for shoal's interop tests; prints JSON lines.

Usage: sub.py --topic T [--count N] [--layer udp|shm|tcp|all|default] [--timeout-ms MS]
              [--idle-ms MS] [--type-name X] [--encoding E] [--descriptor-hex H | --descriptor-file F]
              [--finalize-delay-ms MS] [--unit NAME] [--quiet] [--until-clock C] [--pattern-only]

Creates an eCAL subscriber whose layers are exactly those of `--layer` (through
`SubscriberConfiguration.layer.{udp,shm,tcp}.enable`) and prints, for every message,
  {"event": "msg", "n", "size", "send_clock", "send_timestamp", "digest" (FNV-1a 64 hex),
   "pattern_clock", "intact" (shoal-peer's self-check), "pub_entity_id", "pub_host", "pub_pid",
   "type_name", "encoding"}
(unless --quiet), and at the end {"event": "summary", received, intact, timed_out, ...}, then
{"event": "deleted"} once the subscriber is deleted; eCAL is finalized --finalize-delay-ms later (also after SIGTERM).
It stops after N messages (0: only at SIGTERM or --timeout-ms), after the message with send clock C
(--until-clock; a publisher's last one), when --timeout-ms has passed
since start, or when no message came for --idle-ms after the first one.
Exit codes: 0 got N messages (or N = 0), 2 bad arguments, 3 eCAL not usable, 5 timed out.
"""

import argparse
import os
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ecal_common as ec  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--topic", required=True)
    ap.add_argument("--count", type=int, default=100, help="messages to receive, 0 = until SIGTERM / timeout")
    ap.add_argument("--layer", default="default", help="udp, shm, tcp, all or default (eCAL's config)")
    ap.add_argument("--timeout-ms", type=int, default=20000, help="give up this long after start")
    ap.add_argument("--idle-ms", type=int, default=5000, help="give up when no message came for this long")
    ap.add_argument("--type-name", default="")
    ap.add_argument("--encoding", default="")
    ap.add_argument("--descriptor-hex", default="", help="type descriptor bytes, hex")
    ap.add_argument("--descriptor-file", default="", help="type descriptor bytes, read from this file")
    ap.add_argument("--finalize-delay-ms", type=int, default=0,
                    help="time between deleting the subscriber (line 'deleted') and eCAL finalize")
    ap.add_argument("--unit", default="shoal_ecal_sub")
    ap.add_argument("--quiet", action="store_true", help="no line per message")
    ap.add_argument("--pattern-only", action="store_true",
                    help="check payloads by comparing every byte with the expected pattern, without the (slow, "
                         "pure Python) FNV checksum; msg lines carry no digest (for megabyte messages)")
    ap.add_argument("--until-clock", type=int, default=0,
                    help="also stop once a message with this send clock arrived (a publisher's last one), even if "
                         "fewer than --count came")
    args = ap.parse_args()
    if args.count < 0 or args.timeout_ms <= 0 or args.idle_ms <= 0:
        ec.fail("--count must not be negative, --timeout-ms and --idle-ms must be positive", code=2)
    descriptor = ec.descriptor_arg(args.descriptor_hex, args.descriptor_file)
    flags = ec.layer_flags(args.layer)

    ecal_core, stop = ec.start(args.unit, ec.DEFAULT)
    lock = threading.Lock()
    state = {"received": 0, "intact": 0, "bytes": 0, "last": None, "publishers": set()}
    enough = threading.Event()

    def on_message(topic_id, datatype, data):
        payload = bytes(data.buffer)
        clock, intact = ec.check_pattern(payload) if args.pattern_only else ec.check_payload(payload)
        with lock:
            if args.count and state["received"] >= args.count:
                return
            state["received"] += 1
            state["intact"] += int(intact)
            state["bytes"] += len(payload)
            state["last"] = time.monotonic()
            pub = topic_id.topic_id
            state["publishers"].add((pub.host_name, pub.process_id, pub.entity_id))
            n = state["received"]
            if not args.quiet:
                ec.emit({
                    "event": "msg", "n": n, "size": len(payload), "send_clock": data.send_clock,
                    "send_timestamp": data.send_timestamp,
                    "digest": None if args.pattern_only else ec.digest(payload),
                    "pattern_clock": clock, "intact": intact, "pub_entity_id": pub.entity_id,
                    "pub_host": pub.host_name, "pub_pid": pub.process_id,
                    "type_name": datatype.name, "encoding": datatype.encoding,
                })
            if (args.count and n >= args.count) or (args.until_clock and data.send_clock >= args.until_clock):
                enough.set()

    try:
        scfg = ecal_core.get_subscriber_configuration()
        if flags is not None:
            scfg.layer.udp.enable, scfg.layer.shm.enable, scfg.layer.tcp.enable = flags
        dt = ecal_core.DataTypeInformation(args.type_name, args.encoding, descriptor)
        sub = ecal_core.Subscriber(args.topic, dt, scfg)
        sub.set_receive_callback(on_message)
        ec.emit_ready(sub, scfg)
        start = time.monotonic()
        gave_up = ec.wait_until_enough(enough, stop, lock, state, args.timeout_ms, args.idle_ms)
        timed_out = gave_up and (args.count > 0 or args.until_clock > 0)
        sub.remove_receive_callback()
        with lock:
            ec.emit({
                "event": "summary", "received": state["received"], "intact": state["intact"],
                "bytes": state["bytes"], "publishers": len(state["publishers"]),
                "publisher_count": sub.get_publisher_count(), "timed_out": timed_out,
                "elapsed_ms": int((time.monotonic() - start) * 1000),
            })
        del sub
        ec.emit({"event": "deleted"})
        # Not cut short by SIGTERM: the point is to let eCAL send the unregistration before finalize.
        time.sleep(args.finalize_delay_ms / 1000.0)
    finally:
        ecal_core.finalize()
    return 5 if timed_out else 0


if __name__ == "__main__":
    sys.exit(main())
