#!/usr/bin/env bash
# bench-datapath.sh: prints the agent's cost: BPF run time per hooked event, and the throughput a
# bulk transfer over veth keeps with the agent running and no connection selected.
# Usage: bash scripts/bench-datapath.sh [seconds]   (root; builds the release binary)
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-10}
cargo build --release --locked -p tcpvigil >/dev/null 2>&1
bin=./target/release/tcpvigil
s=tvbs$$ r=tvbr$$
cleanup() { ip netns del $s 2>/dev/null || true; ip netns del $r 2>/dev/null || true; [ -n "${agent:-}" ] && kill "$agent" 2>/dev/null || true; }
trap cleanup EXIT
ip netns add $s; ip netns add $r
ip link add vb$s netns $s type veth peer name vb$r netns $r
ip -n $s addr add 10.250.0.1/24 dev vb$s; ip -n $s link set vb$s up; ip -n $s link set lo up
ip -n $r addr add 10.250.0.2/24 dev vb$r; ip -n $r link set vb$r up; ip -n $r link set lo up
ip netns exec $r iperf3 -s -D -p 5400 >/dev/null
sleep 0.3
rate() { ip netns exec $s iperf3 -c 10.250.0.2 -p 5400 -t "$secs" -J | python3 -c 'import json,sys; print(json.load(sys.stdin)["end"]["sum_received"]["bits_per_second"]/1e9)'; }

base=$(rate)
echo "baseline: $base Gbit/s"
sysctl -qw kernel.bpf_stats_enabled=1
if $bin run --help >/dev/null 2>&1; then
  $bin run --listen 127.0.0.1:0 >/dev/null 2>&1 & agent=$!
else
  $bin record --out /dev/null --conn 192.0.2.1 >/dev/null 2>&1 & agent=$!
fi
sleep 3
with=$(rate)
echo "with agent: $with Gbit/s"
python3 - "$base" "$with" <<'PY'
import sys
b, w = map(float, sys.argv[1:])
print(f"throughput loss: {100*(b-w)/b:.2f} %  (budget 2 %)")
PY
bpftool prog show -j | python3 -c '
import json,sys
progs=[p for p in json.load(sys.stdin) if p.get("name","").startswith("tv_") and p.get("run_cnt",0)>0]
for p in sorted(progs, key=lambda p: -p["run_cnt"]):
    n, c, t = p["name"], p["run_cnt"], p["run_time_ns"]
    print("%-18s %10d runs %8.1f ns/run" % (n, c, t / c))
'
sysctl -qw kernel.bpf_stats_enabled=0
