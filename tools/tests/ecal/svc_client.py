#!/usr/bin/env python3
"""eCAL 6.1.1 service client peer for shoal's interop tests; prints JSON lines.

Usage: svc_client.py --service NAME --method M [--request TEXT | --request-hex HEX] [--count N] [--servers K]
                     [--timeout-ms MS] [--wait-ms MS] [--unit NAME]

Waits (up to --wait-ms) until K servers of NAME are connected, then calls method M with the request TEXT N times
(call_with_response, --timeout-ms each) and prints one line per response:
  {"event": "response", "n", "call_state" (none|executed|timeouted|failed), "ret_state", "error", "response" (text,
   latin-1), "response_hex", "size", "server_entity_id", "server_pid", "server_host"}
then {"event": "done", "calls", "responses"}.
Exit codes: 0 done, 2 bad arguments, 3 eCAL not usable, 5 no server connected in time.
"""

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ecal_common as ec  # noqa: E402


def state_name(s):
    return str(s).split(".")[-1].lower()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--service", required=True)
    ap.add_argument("--method", required=True)
    ap.add_argument("--request", default="hello")
    ap.add_argument("--request-hex", default=None, help="the request's bytes, hex (instead of --request)")
    ap.add_argument("--count", type=int, default=1)
    ap.add_argument("--servers", type=int, default=1)
    ap.add_argument("--timeout-ms", type=int, default=2000)
    ap.add_argument("--wait-ms", type=int, default=15000)
    ap.add_argument("--unit", default="shoal_ecal_svc_client")
    args = ap.parse_args()

    e, stop = ec.start(args.unit, ec.DEFAULT)
    client = e.ServiceClient(args.service)
    t0 = time.monotonic()
    while not stop.is_set():
        connected = [c for c in (client.get_client_instances() or []) if c.is_connected()]
        if len(connected) >= args.servers:
            break
        if time.monotonic() - t0 > args.wait_ms / 1000.0:
            ec.emit({"event": "no_server", "connected": len(connected)})
            e.finalize()
            sys.exit(5)
        time.sleep(0.05)
    ec.emit({"event": "connected", "ms": int((time.monotonic() - t0) * 1000)})
    responses = 0
    request = bytes.fromhex(args.request_hex) if args.request_hex is not None else args.request.encode()
    for n in range(args.count):
        for r in client.call_with_response(args.method, request, args.timeout_ms) or []:
            responses += 1
            sid = r.server_id.service_id
            ec.emit({
                "event": "response",
                "n": n,
                "call_state": state_name(r.call_state),
                "ret_state": int(r.ret_state),
                "error": r.error_msg,
                "response": bytes(r.response).decode("latin-1"),
                "response_hex": bytes(r.response).hex(),
                "size": len(r.response),
                "server_entity_id": str(sid.entity_id),
                "server_pid": int(sid.process_id),
                "server_host": sid.host_name,
            })
    ec.emit({"event": "done", "calls": args.count, "responses": responses})
    del client
    e.finalize()


if __name__ == "__main__":
    main()
