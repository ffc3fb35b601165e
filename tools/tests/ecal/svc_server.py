#!/usr/bin/env python3
"""eCAL 6.1.1 service server peer for shoal's interop tests; prints JSON lines.

Usage: svc_server.py --service NAME [--seconds S] [--unit NAME]

Offers service NAME with the methods
  echo   returns b"echo:" + request (ret_state 0); announced with request type "req_t" and response type "resp_t",
         encoding "raw";
  fail   returns ret_state 7 and b"failed on purpose";
and prints {"event": "ready", "service_id"} once the server is created, {"event": "call", "method", "size"} for
every call, and {"event": "done", "calls"} at the end (after --seconds or SIGTERM).
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
    ap.add_argument("--service", required=True)
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--unit", default="shoal_ecal_svc_server")
    args = ap.parse_args()

    e, stop = ec.start(args.unit, ec.DEFAULT)
    server = e.ServiceServer(args.service)
    calls = {"n": 0}

    def info(name, req, resp):
        mi = e.ServiceMethodInformation()
        mi.method_name = name
        dt = e.DataTypeInformation()
        dt.name, dt.encoding = req, "raw"
        mi.request_type = dt
        dt = e.DataTypeInformation()
        dt.name, dt.encoding = resp, "raw"
        mi.response_type = dt
        return mi

    def echo(method_info, request):
        calls["n"] += 1
        ec.emit({"event": "call", "method": "echo", "size": len(request)})
        return 0, b"echo:" + bytes(request)

    def failing(method_info, request):
        calls["n"] += 1
        ec.emit({"event": "call", "method": "fail", "size": len(request)})
        return 7, b"failed on purpose"

    if not server.set_method_callback(info("echo", "req_t", "resp_t"), echo):
        ec.fail("set_method_callback(echo) failed")
    if not server.set_method_callback(info("fail", "", ""), failing):
        ec.fail("set_method_callback(fail) failed")
    ec.emit({"event": "ready", "service_id": str(server.get_service_id().service_id.entity_id)})
    t0 = time.monotonic()
    while not stop.is_set() and time.monotonic() - t0 < args.seconds:
        stop.sleep(0.05)
    ec.emit({"event": "done", "calls": calls["n"]})
    del server
    e.finalize()


if __name__ == "__main__":
    main()
