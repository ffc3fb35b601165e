#!/usr/bin/env python3
"""Reads an MCAP file with the `mcap` package and decodes its protobuf channels with mcap-protobuf-support;
prints JSON lines for shoal's record/play tests.

Usage: read_mcap.py FILE

Lines: {"event": "channel", id, topic, message_encoding, schema_name, schema_encoding, metadata} per channel;
{"event": "msg", topic, log_time, publish_time, sequence, size, digest (FNV-1a 64 hex of the bytes),
 "decoded" (the protobuf message as a dict, for protobuf channels)} per message, in file order;
{"event": "metadata", name, metadata} per metadata record; then
{"event": "summary", "messages", "statistics_message_count" (null without a summary), "channels"}.
Exit codes: 0 read, 1 the file (or a protobuf message in it) could not be read.
"""

import json
import sys

from google.protobuf.json_format import MessageToDict
from mcap.reader import make_reader
from mcap_protobuf.decoder import DecoderFactory


def fnv1a64(data):
    h = 0xCBF29CE484222325
    for b in data:
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return f"{h:016x}"


def emit(obj):
    print(json.dumps(obj), flush=True)


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    path = sys.argv[1]
    decoders = DecoderFactory()
    with open(path, "rb") as f:
        reader = make_reader(f, decoder_factories=[decoders])
        summary = reader.get_summary()
        if summary is not None:
            for cid, ch in sorted(summary.channels.items()):
                schema = summary.schemas.get(ch.schema_id)
                emit({"event": "channel", "id": cid, "topic": ch.topic, "message_encoding": ch.message_encoding,
                      "schema_name": schema.name if schema else None,
                      "schema_encoding": schema.encoding if schema else None, "metadata": dict(ch.metadata)})
        n = 0
        cache = {}
        for schema, channel, message in reader.iter_messages(log_time_order=False):
            n += 1
            line = {"event": "msg", "topic": channel.topic, "log_time": message.log_time,
                    "publish_time": message.publish_time, "sequence": message.sequence,
                    "size": len(message.data), "digest": fnv1a64(message.data) if len(message.data) <= 65536 else None}
            if channel.message_encoding == "protobuf":
                if channel.id not in cache:
                    cache[channel.id] = decoders.decoder_for(channel.message_encoding, schema)
                decode = cache[channel.id]
                if decode is None:
                    sys.exit(f"no protobuf decoder for channel {channel.topic} (schema {schema})")
                line["decoded"] = MessageToDict(decode(message.data), preserving_proto_field_name=True)
            emit(line)
        for m in reader.iter_metadata():
            emit({"event": "metadata", "name": m.name, "metadata": dict(m.metadata)})
        stats = summary.statistics if summary is not None else None
        emit({"event": "summary", "messages": n,
              "statistics_message_count": stats.message_count if stats is not None else None,
              "channels": len(summary.channels) if summary is not None else None})


if __name__ == "__main__":
    main()
