"""The Zenoh side of the Zenoh bridge's tests (bridge-zenoh/tests/sites.rs): eclipse-zenoh 1.10.2 from PyPI (the venv
scripts/zenoh-venv makes) as a router, a subscriber and a publisher. JSON lines on stdout.

  peer.py router --listen tcp/10.0.0.1:7447
  peer.py sub --connect EP --key KEY --count N --size B [--timeout S] [--idle S]
  peer.py pub --connect EP --key KEY --count N --size B [--rate HZ] [--encoding E] [--attachment TEXT] [--wait S]

The messages are the probes of bridge-zenoh/src/probe.rs (a protobuf shoal_zenoh.test.Probe of exactly B bytes:
number, send time in ns, a pattern), built and checked here byte for byte the same way.
"""
import argparse, json, struct, sys, threading, time
import zenoh


def emit(**kw):
    print(json.dumps(kw), flush=True)


def varint(n):
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def pattern(seq, n):
    return bytes(((seq + i) % 251) for i in range(min(n, 251))) * (n // 251 + 1)


def probe(seq, sent_ns, size):
    size = max(size, 20)
    pad = size - 20
    while 19 + len(varint(pad)) + pad > size:
        pad -= 1
    return (b"\x09" + struct.pack("<Q", seq) + b"\x11" + struct.pack("<Q", sent_ns) + b"\x1a" + varint(pad)
            + pattern(seq, pad)[:pad])


def decode(b):
    if len(b) < 20 or b[0] != 0x09 or b[9] != 0x11 or b[18] != 0x1A:
        return None
    seq, sent = struct.unpack("<Q", b[1:9])[0], struct.unpack("<Q", b[10:18])[0]
    pad, shift, i = 0, 0, 19
    while True:
        c = b[i]
        pad |= (c & 0x7F) << shift
        i += 1
        if not c & 0x80:
            break
        shift += 7
    body = b[i:]
    if len(body) != pad or body != pattern(seq, pad)[:pad]:
        return None
    return seq, sent


def session(mode, connect=None, listen=None):
    c = zenoh.Config()
    c.insert_json5("mode", json.dumps(mode))
    if connect:
        c.insert_json5("connect/endpoints", json.dumps([connect]))
    if listen:
        c.insert_json5("listen/endpoints", json.dumps([listen]))
    c.insert_json5("scouting/multicast/enabled", "false")
    # Zenoh's shared-memory transport (on by default in the wheel) keeps a file in /dev/shm that a killed
    # process (the router-restart test kills its router) leaves behind; these peers reach the bridges over TCP.
    c.insert_json5("transport/shared_memory/enabled", "false")
    return zenoh.open(c)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["router", "sub", "pub"])
    ap.add_argument("--listen")
    ap.add_argument("--connect")
    ap.add_argument("--key")
    ap.add_argument("--count", type=int, default=0)
    ap.add_argument("--size", type=int, default=64)
    ap.add_argument("--rate", type=float, default=100.0)
    ap.add_argument("--encoding", default="application/protobuf;shoal_zenoh.test.Probe")
    ap.add_argument("--attachment")
    ap.add_argument("--timeout", type=float, default=60.0)
    ap.add_argument("--idle", type=float, default=0.0)
    ap.add_argument("--wait", type=float, default=1.0)
    a = ap.parse_args()

    if a.mode == "router":
        s = session("router", listen=a.listen)
        emit(event="ready", zid=str(s.zid()))
        while True:
            time.sleep(3600)

    if a.mode == "sub":
        s = session("client", connect=a.connect)
        lock = threading.Lock()
        st = {"received": 0, "intact": 0, "duplicates": 0, "seen": set(), "lat": [], "first": None, "last": None,
              "first_sent": None, "last_arrival": 0, "encoding": None, "attachment": None}
        done = threading.Event()

        def on(sample):
            now = time.time_ns()
            b = sample.payload.to_bytes()
            with lock:
                st["received"] += 1
                if st["encoding"] is None:
                    st["encoding"] = str(sample.encoding)
                    att = sample.attachment
                    st["attachment"] = att.to_bytes() if att is not None else b""
                st["first"] = st["first"] or time.monotonic()
                st["last"] = time.monotonic()
                d = decode(b)
                if d:
                    seq, sent = d
                    if seq in st["seen"]:
                        st["duplicates"] += 1
                    else:
                        st["seen"].add(seq)
                        if len(b) == a.size:
                            st["intact"] += 1
                    st["lat"].append((now - sent) // 1000)
                    st["first_sent"] = sent if st["first_sent"] is None else min(st["first_sent"], sent)
                    st["last_arrival"] = max(st["last_arrival"], now)
                if len(st["seen"]) >= a.count:
                    done.set()

        sub = s.declare_subscriber(a.key, on)
        emit(event="ready")
        end = time.monotonic() + a.timeout
        while not done.is_set() and time.monotonic() < end:
            time.sleep(0.02)
            with lock:
                if a.idle and st["last"] and time.monotonic() - st["last"] > a.idle:
                    break
        with lock:
            lat = sorted(st["lat"])
            att = st["attachment"] or b""
            head, _, desc = att.partition(b"\n")
            secs = (st["last"] - st["first"]) if st["first"] else 0.0
            pct = lambda p: lat[min(len(lat) - 1, round((len(lat) - 1) * p))] if lat else 0
            emit(event="summary", received=st["received"], intact=st["intact"], duplicates=st["duplicates"],
                 distinct=len(st["seen"]), encoding=st["encoding"], attachment_header=head.decode("latin-1"),
                 descriptor_hex=desc.hex(), latency_us={"p50": pct(0.5), "p99": pct(0.99)}, seconds=secs,
                 msgs_per_s=(st["received"] / secs) if secs > 0 else 0.0,
                 e2e_msgs_per_s=(len(st["seen"]) * 1e9 / (st["last_arrival"] - st["first_sent"]))
                 if st["first_sent"] is not None and st["last_arrival"] > st["first_sent"] else 0.0)
        sub.undeclare()
        s.close()
        return

    if a.mode == "pub":
        s = session("client", connect=a.connect)
        pub = s.declare_publisher(a.key, encoding=zenoh.Encoding(a.encoding),
                                  congestion_control=zenoh.CongestionControl.BLOCK)
        emit(event="ready")
        time.sleep(a.wait)
        start = time.monotonic()
        for seq in range(1, a.count + 1):
            if a.rate > 0:
                due = start + (seq - 1) / a.rate
                d = due - time.monotonic()
                if d > 0:
                    time.sleep(d)
            payload = probe(seq, time.time_ns(), a.size)
            if a.attachment is not None:
                pub.put(payload, attachment=a.attachment.encode())
            else:
                pub.put(payload)
        emit(event="done", sent=a.count, seconds=time.monotonic() - start)
        time.sleep(0.5)
        s.close()


if __name__ == "__main__":
    main()
