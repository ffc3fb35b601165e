#!/usr/bin/env python3
"""eCAL 6.1.1 publisher for shoal's shared-memory interop tests (SHM layer only); prints JSON lines.

Usage: shm_pub.py --topic T --sizes 1024x20,65536x20 [--rate HZ] [--buffers N] [--ack-ms MS] [--zero-copy]
                  [--wait-subs K] [--wait-ms MS] [--settle-ms MS] [--linger-ms MS]

Sends one message per entry of --sizes (payload format: shm_common.py), message n = 1, 2, ...
Lines: {"event": "ready", pid, topic_id, ...}, {"event": "matched", subscribers}, {"event": "done", sent, failed}.
--settle-ms: wait this long after the subscriber matched before the first message (the subscriber must learn
the memfile name from our registration first; eCAL SHM delivers only the latest content to a late reader).
Exit codes: 0 ok, 3 eCAL not usable, 4 not enough subscribers within --wait-ms.
"""

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ecal_common as ec  # noqa: E402
import shm_common as sc  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--topic", required=True)
    ap.add_argument("--sizes", required=True)
    ap.add_argument("--rate", type=float, default=50.0)
    ap.add_argument("--buffers", type=int, default=1)
    ap.add_argument("--ack-ms", type=int, default=0)
    ap.add_argument("--zero-copy", action="store_true", help="eCAL's zero_copy_mode (header option bit 0)")
    ap.add_argument("--wait-subs", type=int, default=1)
    ap.add_argument("--wait-ms", type=int, default=15000)
    ap.add_argument("--settle-ms", type=int, default=1000)
    ap.add_argument("--linger-ms", type=int, default=500)
    args = ap.parse_args()
    sizes = sc.parse_sizes(args.sizes)

    ecal_core, stop = ec.start("shoal_shm_pub", ec.DEFAULT)
    try:
        pcfg = ecal_core.get_publisher_configuration()
        pcfg.layer.udp.enable, pcfg.layer.shm.enable, pcfg.layer.tcp.enable = ec.layer_flags("shm")
        pcfg.layer.shm.memfile_buffer_count = args.buffers
        pcfg.layer.shm.acknowledge_timeout_ms = args.ack_ms
        pcfg.layer.shm.zero_copy_mode = args.zero_copy
        pub = ecal_core.Publisher(args.topic, ecal_core.DataTypeInformation("shoal.test.Shm", "raw", b""), pcfg)
        ec.emit_ready(pub, pcfg)
        if not ec.wait_for_subscribers(pub, args.wait_subs, args.wait_ms, stop):
            ec.fail(f"only {pub.get_subscriber_count()} of {args.wait_subs} subscribers", code=4)
        ec.emit({"event": "matched", "subscribers": pub.get_subscriber_count()})
        stop.sleep(args.settle_ms / 1000.0)
        period = 1.0 / args.rate if args.rate > 0 else 0.0
        sent = failed = 0
        start = time.monotonic()
        for n, size in enumerate(sizes, start=1):
            if stop.is_set():
                break
            if pub.send(sc.make(n, size)):
                sent += 1
            else:
                failed += 1
            if period > 0:
                stop.sleep(start + n * period - time.monotonic())
        ec.emit({"event": "done", "sent": sent, "failed": failed})
        stop.sleep(args.linger_ms / 1000.0)
        del pub
    finally:
        ecal_core.finalize()
    return 0


if __name__ == "__main__":
    sys.exit(main())
