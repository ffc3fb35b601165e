#!/usr/bin/env python3
"""eCAL 6.1.1 publisher peer for shoal's interop tests; prints JSON lines.

Usage: pub.py --topic T [--count N] [--size S] [--rate HZ] [--layer udp|shm|tcp|all|default]
              [--start-delay-ms MS]
              [--type-name X] [--encoding E] [--descriptor-hex H | --descriptor-file F] [--wait-subs K] [--wait-ms MS]
              [--ack-ms MS] [--linger-ms MS] [--finalize-delay-ms MS] [--unit NAME] [--verbose]

Creates an eCAL publisher whose layers are exactly those of `--layer` (through
`PublisherConfiguration.layer.{udp,shm,tcp}.enable`) and sends N (0: until SIGTERM) payloads in
shoal-peer's self-checking format (see ecal_common.py) at HZ messages per second.
Lines: {"event": "ready", pid, host_name, topic_id, ...}, {"event": "matched", subscribers},
with --verbose one {"event": "sent", clock, size, digest} per message, then
{"event": "done", sent, failed_sends, subscribers}; after the linger time the publisher is deleted
({"event": "deleted"}) and eCAL finalized --finalize-delay-ms later (SIGTERM cuts the sending and the linger time short, not the finalize delay).
Exit codes: 0 ok, 2 bad arguments, 3 eCAL not usable, 4 not enough subscribers within --wait-ms.
"""

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ecal_common as ec  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--topic", required=True)
    ap.add_argument("--count", type=int, default=100, help="messages to send, 0 = until SIGTERM")
    ap.add_argument("--size", type=int, default=64, help="payload bytes")
    ap.add_argument("--rate", type=float, default=100.0, help="messages per second (0 = as fast as possible)")
    ap.add_argument("--layer", default="default", help="udp, shm, tcp, all or default (eCAL's config)")
    ap.add_argument("--type-name", default="")
    ap.add_argument("--encoding", default="")
    ap.add_argument("--descriptor-hex", default="", help="type descriptor bytes, hex")
    ap.add_argument("--descriptor-file", default="", help="type descriptor bytes, read from this file")
    ap.add_argument("--wait-subs", type=int, default=0, help="wait for this many subscribers before sending")
    ap.add_argument("--wait-ms", type=int, default=10000)
    ap.add_argument("--start-delay-ms", type=int, default=0,
                    help="wait this long after the match before the first send (TCP subscribers connect after it)")
    ap.add_argument("--linger-ms", type=int, default=500, help="stay registered this long after the last send")
    ap.add_argument("--finalize-delay-ms", type=int, default=0,
                    help="time between deleting the publisher (line 'deleted') and eCAL finalize")
    ap.add_argument("--ack-ms", type=int, default=0,
                    help="shared memory: wait up to this long for each subscriber's acknowledge (0 = eCAL's default, none)")
    ap.add_argument("--unit", default="shoal_ecal_pub")
    ap.add_argument("--verbose", action="store_true", help="one line per sent message")
    args = ap.parse_args()
    if args.count < 0 or args.size < 0 or args.rate < 0:
        ec.fail("--count, --size and --rate must not be negative", code=2)
    descriptor = ec.descriptor_arg(args.descriptor_hex, args.descriptor_file)
    flags = ec.layer_flags(args.layer)

    ecal_core, stop = ec.start(args.unit, ec.DEFAULT)
    try:
        pcfg = ecal_core.get_publisher_configuration()
        if flags is not None:
            pcfg.layer.udp.enable, pcfg.layer.shm.enable, pcfg.layer.tcp.enable = flags
        if args.ack_ms:
            pcfg.layer.shm.acknowledge_timeout_ms = args.ack_ms
        dt = ecal_core.DataTypeInformation(args.type_name, args.encoding, descriptor)
        pub = ecal_core.Publisher(args.topic, dt, pcfg)
        ec.emit_ready(pub, pcfg)
        if not ec.wait_for_subscribers(pub, args.wait_subs, args.wait_ms, stop):
            ec.emit({"event": "done", "sent": 0, "failed_sends": 0, "subscribers": pub.get_subscriber_count()})
            ec.fail(f"only {pub.get_subscriber_count()} of {args.wait_subs} subscribers within {args.wait_ms} ms",
                    code=4)
        ec.emit({"event": "matched", "subscribers": pub.get_subscriber_count()})
        stop.sleep(args.start_delay_ms / 1000.0)

        period = 1.0 / args.rate if args.rate > 0 else 0.0
        start = time.monotonic()
        sent = failed = 0
        clock = 0
        while (args.count == 0 or clock < args.count) and not stop.is_set():
            clock += 1
            payload = ec.make_payload(clock, args.size)
            if pub.send(payload):
                sent += 1
            else:
                failed += 1
            if args.verbose:
                ec.emit({"event": "sent", "clock": clock, "size": len(payload), "digest": ec.digest(payload)})
            if period > 0:
                stop.sleep(start + clock * period - time.monotonic())
        ec.emit({"event": "done", "sent": sent, "failed_sends": failed, "subscribers": pub.get_subscriber_count(),
                 "elapsed_ms": int((time.monotonic() - start) * 1000)})
        stop.sleep(args.linger_ms / 1000.0)
        del pub
        ec.emit({"event": "deleted"})
        # Not cut short by SIGTERM: the point is to let eCAL send the unregistration before finalize.
        time.sleep(args.finalize_delay_ms / 1000.0)
    finally:
        ecal_core.finalize()
    return 0


if __name__ == "__main__":
    sys.exit(main())
