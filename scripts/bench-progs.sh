#!/usr/bin/env bash
# bench-progs.sh: BPF run count and time of each tcpvigil program over one iperf3 stream on veth,
# from the kernel's own statistics (kernel.bpf_stats_enabled=1, read with bpftool prog show).
# Usage: bash scripts/bench-progs.sh [seconds=8] [tcpvigil binary=target/debug/tcpvigil]   (root)
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-8}
bin=${2:-target/debug/tcpvigil}
case $secs in '' | *[!0-9]*) echo "bench-progs: seconds must be a whole number" >&2; exit 2 ;; esac
[ -x "$bin" ] || { echo "bench-progs: no binary $bin (cargo build -p tcpvigil)" >&2; exit 2; }
work=$(mktemp -d)
s=tvbps$$ r=tvbpr$$
agent=
old_stats=$(sysctl -n kernel.bpf_stats_enabled)
cleanup() {
  [ -n "$agent" ] && { kill -INT "$agent" 2>/dev/null; wait "$agent" 2>/dev/null || true; }
  [ -s "$work/iperf3.pid" ] && kill "$(cat "$work/iperf3.pid")" 2>/dev/null || true
  ip netns del $s 2>/dev/null || true; ip netns del $r 2>/dev/null || true
  sysctl -qw kernel.bpf_stats_enabled="$old_stats" || true
  rm -rf "$work"
}
trap cleanup EXIT
ip netns add $s; ip netns add $r
ip link add vp$s netns $s type veth peer name vp$r netns $r
ip -n $s addr add 10.252.0.1/24 dev vp$s; ip -n $s link set vp$s up; ip -n $s link set lo up
ip -n $r addr add 10.252.0.2/24 dev vp$r; ip -n $r link set vp$r up; ip -n $r link set lo up
ip netns exec $r iperf3 -s -D -p 5600 -I "$work/iperf3.pid" >/dev/null
"$bin" run --listen 127.0.0.1:0 --ready-file "$work/ready" >"$work/agent.log" 2>&1 & agent=$!
for _ in $(seq 300); do [ -s "$work/ready" ] && break; sleep 0.1; done
[ -s "$work/ready" ] || { cat "$work/agent.log" >&2; exit 1; }
sysctl -qw kernel.bpf_stats_enabled=1
snap() { bpftool -j prog show | python3 -c '
import json, sys
for p in json.load(sys.stdin):
    if p.get("name", "").startswith("tv_"):
        print(p["id"], p["name"], p.get("run_cnt", 0), p.get("run_time_ns", 0))'; }
snap >"$work/a"
ip netns exec $s iperf3 -c 10.252.0.2 -p 5600 -t "$secs" >/dev/null
snap >"$work/b"
echo "BPF programs of $bin over one ${secs} s iperf3 stream (kernel bpf_stats):"
python3 - "$work/a" "$work/b" <<'PY'
import sys
rd = lambda f: {l.split()[0]: l.split() for l in open(f)}
a, b = rd(sys.argv[1]), rd(sys.argv[2])
tot = 0
for i, (_, name, cnt, ns) in sorted(b.items(), key=lambda kv: kv[1][1]):
    c0, n0 = (int(a[i][2]), int(a[i][3])) if i in a else (0, 0)
    dc, dn = int(cnt) - c0, int(ns) - n0
    tot += dn
    if dc:
        print(f"  {name:20} runs {dc:>10}  time {dn/1e6:8.2f} ms  {dn/dc:6.0f} ns/run")
print(f"  total BPF time {tot/1e6:.2f} ms")
PY
