#!/usr/bin/env bash
# Round trip through the bridge next to a direct Cyclone DDS round trip, measured in the same run, inside a
# private network namespace (only lo; needs root):
#   bridge:   shoal-ros2-peer rtt --(shoal ping)--> bridge --(ROS /ping, UInt8MultiArray)--> Cyclone echo
#             --(ROS /pong)--> bridge --(shoal pong)--> shoal-ros2-peer
#   baseline: Cyclone rtt --(ROS /bping)--> Cyclone echo --(ROS /bpong)--> Cyclone rtt
# Both go through the same Python echo peer, so the difference is the bridge (twice) plus shoal.
# Usage: bridge-ros2/bench/roundtrip.sh [PROFILE_DIR]   (default: $CARGO_TARGET_DIR or target, /debug)
# Sizes and counts: SIZES="64 1048576" COUNT64=500 COUNT1M=50. Prints one JSON summary line per measurement.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
BIN="${1:-${CARGO_TARGET_DIR:-$ROOT/target}/debug}"
PY="$("$ROOT/scripts/dds-venv")"
PEER="$ROOT/bridge-ros2/tests/dds/peer.py"
[ "$(id -u)" = 0 ] || { echo "roundtrip.sh: needs root (ip netns)" >&2; exit 1; }
NS="shoal_br_bench_$$"
# Every process in the namespace is one this script started.
cleanup() { ip netns pids "$NS" 2>/dev/null | xargs -r kill 2>/dev/null || true; wait 2>/dev/null || true
            ip netns del "$NS" 2>/dev/null || true; }
trap cleanup EXIT
ip netns add "$NS"; ip -n "$NS" link set lo up; ip -n "$NS" link set lo multicast on
ip -n "$NS" route add 224.0.0.0/4 dev lo
export CYCLONEDDS_URI="file://$ROOT/bridge-ros2/tests/dds/cyclone_lo.xml"
X() { ip netns exec "$NS" "$@"; }

X "$BIN/shoal-ros2-bridge" --stats-interval-ms 0 --topic ping=raw,direction=shoal_to_ros \
    --topic pong=raw,direction=ros_to_shoal 2>/dev/null | grep -v remote_endpoint >&2 &
X "$PY" "$PEER" echo /ping /pong --timeout 600 >/dev/null &
X "$PY" "$PEER" echo /bping /bpong --timeout 600 >/dev/null &
sleep 2
for size in ${SIZES:-64 1048576}; do
    if [ "$size" -le 65536 ]; then n=${COUNT64:-500}; else n=${COUNT1M:-50}; fi
    echo "{\"path\":\"shoal->bridge->ROS2->bridge->shoal\",\"result\":$(X "$BIN/shoal-ros2-peer" rtt --ping ping --pong pong --size "$size" --count "$n" | tail -1)}"
    echo "{\"path\":\"cyclone->cyclone (baseline)\",\"result\":$(X "$PY" "$PEER" rtt /bping /bpong "$size" "$n" | tail -1)}"
done
