#!/usr/bin/env python3
"""eCAL 6.1.1 logging peer for shoal's interop tests; prints JSON lines.

Usage: log_peer.py send --unit NAME --text TEXT [--count N] [--interval S]
       log_peer.py receive --unit NAME --text TEXT [--expect N] [--seconds S]

send     logs N records with eCAL's logging API (e.logging.log), cycling through the levels warning, error, info,
         fatal, each with content "TEXT <i> <level>"; prints {"event": "ready"} after initialize and
         {"event": "done", "sent"} at the end. eCAL's UDP log sink is on by default (levels info, warning, error,
         fatal), so every record goes out on UDP port 14001.
receive  enables eCAL's log receiver (c.logging.receiver.enable = True), prints {"event": "ready"}, then every record
         e.logging.get_logging() hands out whose content contains TEXT as {"event": "record", "time", "host_name",
         "process_id", "process_name", "unit_name", "level" (eCAL's name, lower case), "level_value", "content"},
         and {"event": "done", "records"} once N such records came or after S seconds.
Exit codes: 0 done, 2 bad arguments, 3 eCAL not usable.
"""

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ecal_common as ec  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("mode", choices=["send", "receive"])
    ap.add_argument("--unit", required=True)
    ap.add_argument("--text", required=True)
    ap.add_argument("--count", type=int, default=4)
    ap.add_argument("--interval", type=float, default=0.1)
    ap.add_argument("--expect", type=int, default=1)
    ap.add_argument("--seconds", type=float, default=20.0)
    args = ap.parse_args()

    ec.json_stdout()
    stop = ec.StopFlag()
    e = ec.import_ecal()
    cfg = e.init.get_configuration()
    if args.mode == "receive":
        cfg.logging.receiver.enable = True
    if not e.initialize(cfg, args.unit, ec.DEFAULT):
        ec.fail(f"eCAL initialize({args.unit!r}) failed", code=3)
    ec.emit({"event": "ready", "pid": os.getpid()})

    L = e.logging.LogLevel
    if args.mode == "send":
        levels = [L.WARNING, L.ERROR, L.INFO, L.FATAL]
        for i in range(args.count):
            level = levels[i % len(levels)]
            e.logging.log(level, f"{args.text} {i} {level.name.lower()}")
            if stop.sleep(args.interval):
                break
        ec.emit({"event": "done", "sent": args.count})
    else:
        by_value = {int(v.value): k.lower() for k, v in L.__members__.items()}
        got = 0
        end = time.monotonic() + args.seconds
        while got < args.expect and time.monotonic() < end and not stop.is_set():
            for m in e.logging.get_logging() or []:
                if args.text not in m.content:
                    continue
                got += 1
                ec.emit({"event": "record", "time": m.time, "host_name": m.host_name, "process_id": m.process_id,
                         "process_name": m.process_name, "unit_name": m.unit_name,
                         "level": by_value.get(int(m.level.value), str(m.level)), "level_value": int(m.level.value),
                         "content": m.content})
            stop.sleep(0.1)
        ec.emit({"event": "done", "records": got})
    e.finalize()


if __name__ == "__main__":
    main()
