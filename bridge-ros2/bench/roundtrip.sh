#!/usr/bin/env bash
# Round trip and throughput through the bridge next to a direct Cyclone DDS round trip, measured in the same run,
# inside a private network namespace (only lo; needs root):
#   bridge:   shoal-ros2-peer --(shoal ping)--> bridge --(ROS /ping, UInt8MultiArray)--> Cyclone echo
#             --(ROS /pong)--> bridge --(shoal pong)--> shoal-ros2-peer
#   baseline: Cyclone peer --(ROS /bping)--> Cyclone echo --(ROS /bpong)--> Cyclone peer
# Both go through the same kind of Python echo peer, so the difference is the bridge (twice) plus shoal.
# Latency: one message at a time (rtt); throughput: up to WINDOW messages in flight (tput).
# Usage: bridge-ros2/bench/roundtrip.sh [PROFILE_DIR]   (default: ${CARGO_TARGET_DIR:-target}/release; build it
#        first with: cargo build --release -p shoal-ros2-bridge --bins)
# Environment: SIZES="64 1048576" COUNT64=500 COUNT1M=50 WINDOW=8. Prints one JSON line per measurement, then a
# table with the bridge / baseline ratios.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
BIN="${1:-${CARGO_TARGET_DIR:-$ROOT/target}/release}"
PY="$("$ROOT/scripts/dds-venv")"
PEER="$ROOT/bridge-ros2/tests/dds/peer.py"
WINDOW="${WINDOW:-8}"
[ "$(id -u)" = 0 ] || { echo "roundtrip.sh: needs root (ip netns)" >&2; exit 1; }
for b in shoal-ros2-bridge shoal-ros2-peer; do
    [ -x "$BIN/$b" ] || { echo "roundtrip.sh: no $BIN/$b (cargo build --release -p shoal-ros2-bridge --bins)" >&2; exit 1; }
done
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
X "$PY" "$PEER" echo /ping /pong --timeout 1200 >/dev/null &
X "$PY" "$PEER" echo /bping /bpong --timeout 1200 >/dev/null &
sleep 2
echo "load: $(uptime)"
RESULTS=()
for size in ${SIZES:-64 1048576}; do
    if [ "$size" -le 65536 ]; then n=${COUNT64:-500}; else n=${COUNT1M:-50}; fi
    for mode in rtt tput; do
        b=$(X "$BIN/shoal-ros2-peer" "$mode" --ping ping --pong pong --size "$size" --count "$n" \
            $([ "$mode" = tput ] && echo --window "$WINDOW") | tail -1)
        c=$(X "$PY" "$PEER" "$mode" /bping /bpong "$size" "$n" $([ "$mode" = tput ] && echo --window "$WINDOW") | tail -1)
        echo "{\"path\":\"shoal->bridge->ROS2->bridge->shoal\",\"mode\":\"$mode\",\"result\":$b}"
        echo "{\"path\":\"cyclone->cyclone (baseline)\",\"mode\":\"$mode\",\"result\":$c}"
        RESULTS+=("$mode $size $b" "$mode $size $c")
    done
done
printf '%s\n' "${RESULTS[@]}" | python3 -c '
import json, sys
rows = [l.split(" ", 2) for l in sys.stdin.read().splitlines()]
print("| measure | size B | bridge (received/sent) | Cyclone baseline (received/sent) | bridge / baseline |")
print("|---|---|---|---|---|")
for k in range(0, len(rows), 2):
    mode, size, b = rows[k]
    b, c = json.loads(b), json.loads(rows[k + 1][2])
    keys = [("p50_us", "RTT p50 us"), ("p99_us", "RTT p99 us")] if mode == "rtt" else [("msgs_per_s", "msgs/s"), ("mb_per_s", "MB/s")]
    for key, label in keys:
        bv, cv = b.get(key), c.get(key)
        ratio = "%.2f" % (bv / cv) if bv and cv else "-"
        fmt = lambda v, r: ("-" if v is None else "%.1f" % v) + " (%s/%s)" % (r.get("received"), r.get("count"))
        print("| %s | %s | %s | %s | %s |" % (label, size, fmt(bv, b), fmt(cv, c), ratio))
'
