#!/usr/bin/env python3
"""eCAL 6.1.1 typed protobuf peer for shoal's typed interop tests (examples/tests/ecal_typed.rs); prints JSON lines.

Usage: typed_peer.py sub TOPIC DESCRIPTOR_FILE
       typed_peer.py pub TOPIC DESCRIPTOR_FILE

DESCRIPTOR_FILE holds shoal's FileDescriptorSet of `pb.Imu`.
sub: a raw eCAL subscriber that decodes with eCAL's own dynamic path (`ecal.msg.proto.helper` on the name and
     descriptor from the sender's registration). Lines: {"event": "ready"}, per message (up to 3) {"event": "msg",
     name, encoding, descriptor_equal (the descriptor received is DESCRIPTOR_FILE's), helper_equal (eCAL's helper
     computes the same descriptor for the type), seq, frame, status, unit, clock}, then {"event": "done", received}.
pub: an `ecal.msg.proto.Publisher` of the message class built from DESCRIPTOR_FILE (no protoc here) sends 3
     messages (seq 1..3, frame_id "from_ecal", attributes unit "g") once a subscriber matched.
     Lines: {"event": "ready"}, {"event": "sent", count}.
Exit codes: 0 ok, 2 bad arguments, 3 eCAL not usable.
"""

import os
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ecal_common as ec  # noqa: E402


def main():
    if len(sys.argv) != 4 or sys.argv[1] not in ("sub", "pub"):
        ec.fail(f"usage: {sys.argv[0]} sub|pub TOPIC DESCRIPTOR_FILE", code=2)
    mode, topic, desc_file = sys.argv[1:]
    with open(desc_file, "rb") as f:
        ours = f.read()
    ecal_core, stop = ec.start("shoal_typed_interop", ec.DEFAULT)
    from ecal.msg.proto import helper  # noqa: PLC0415 (prints its protobuf version: after json_stdout)
    import ecal.msg.proto.core as pbcore  # noqa: PLC0415

    if mode == "sub":
        got, enough, lock = [], threading.Event(), threading.Lock()

        def on_msg(_topic_id, dt, data):
            cls = helper.get_type_from_descriptor(dt.name, bytes(dt.descriptor))
            m = cls()
            m.ParseFromString(bytes(data.buffer))
            with lock:
                got.append({
                    "event": "msg", "name": dt.name, "encoding": dt.encoding,
                    "descriptor_equal": bytes(dt.descriptor) == ours,
                    "helper_equal": helper.get_descriptor_from_type(cls) == ours,
                    "seq": m.header.seq, "frame": m.header.frame_id, "status": m.Status.Name(m.status),
                    "unit": m.attributes["unit"], "clock": data.send_clock,
                })
                if len(got) >= 3:
                    enough.set()

        sub = ecal_core.Subscriber(topic, ecal_core.DataTypeInformation("", "", b""),
                                   ecal_core.get_subscriber_configuration())
        sub.set_receive_callback(on_msg)
        ec.emit({"event": "ready"})
        t0 = time.monotonic()
        while not enough.is_set() and not stop.is_set() and time.monotonic() - t0 < 30:
            enough.wait(0.05)
        with lock:
            results = got[:3]
        for g in results:
            ec.emit(g)
        ec.emit({"event": "done", "received": len(results)})
        # eCAL 6.1.1's finalize can deadlock while a receive callback thread winds down ("Resource deadlock
        # avoided"): the results are out, so leave without it.
        os._exit(0)

    cls = helper.get_type_from_descriptor("pb.Imu", ours)
    pub = pbcore.Publisher(cls, topic)
    ec.emit({"event": "ready"})
    try:
        t0 = time.monotonic()
        while pub.get_subscriber_count() == 0 and time.monotonic() - t0 < 20 and not stop.is_set():
            time.sleep(0.05)
        for seq in range(1, 4):
            m = cls()
            m.header.seq = seq
            m.header.frame_id = "from_ecal"
            m.status = 1
            m.attributes["unit"] = "g"
            m.temperature_c = 20.5
            pub.send(m)
            time.sleep(0.05)
        ec.emit({"event": "sent", "count": 3})
        time.sleep(0.5)
    finally:
        ecal_core.finalize()


if __name__ == "__main__":
    main()
