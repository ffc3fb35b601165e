#!/usr/bin/env python3
"""eCAL 6.1.1 subscriber for shoal's shared-memory interop tests (SHM layer only); prints JSON lines.

Usage: shm_sub.py --topic T --count N [--timeout-ms MS] [--idle-ms MS]

Lines: {"event": "ready", pid, topic_id, ...}, one {"event": "msg", n, size, intact, send_clock} per message (payload format:
shm_common.py), then {"event": "summary", received, intact, timed_out}.
Exit codes: 0 got N messages, 3 eCAL not usable, 5 timed out.
"""

import argparse
import os
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ecal_common as ec  # noqa: E402
import shm_common as sc  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--topic", required=True)
    ap.add_argument("--count", type=int, required=True)
    ap.add_argument("--timeout-ms", type=int, default=25000)
    ap.add_argument("--idle-ms", type=int, default=5000)
    args = ap.parse_args()

    ecal_core, stop = ec.start("shoal_shm_sub", ec.DEFAULT)
    lock = threading.Lock()
    state = {"received": 0, "intact": 0, "last": None}
    enough = threading.Event()

    def on_message(_topic_id, _datatype, data):
        payload = bytes(data.buffer)
        n, intact = sc.check(payload)
        with lock:
            state["received"] += 1
            state["intact"] += int(intact)
            state["last"] = time.monotonic()
            ec.emit({"event": "msg", "n": n, "size": len(payload), "intact": intact, "send_clock": data.send_clock})
            if state["received"] >= args.count:
                enough.set()

    try:
        scfg = ecal_core.get_subscriber_configuration()
        scfg.layer.udp.enable, scfg.layer.shm.enable, scfg.layer.tcp.enable = ec.layer_flags("shm")
        sub = ecal_core.Subscriber(args.topic, ecal_core.DataTypeInformation("", "", b""), scfg)
        sub.set_receive_callback(on_message)
        ec.emit_ready(sub, scfg)
        timed_out = ec.wait_until_enough(enough, stop, lock, state, args.timeout_ms, args.idle_ms)
        sub.remove_receive_callback()
        with lock:
            ec.emit({"event": "summary", "received": state["received"], "intact": state["intact"],
                     "timed_out": timed_out})
        del sub
    finally:
        ecal_core.finalize()
    return 5 if timed_out else 0


if __name__ == "__main__":
    sys.exit(main())
