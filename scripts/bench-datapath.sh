#!/usr/bin/env bash
# bench-datapath.sh: prints the agent's cost: BPF run time per hooked event, and the throughput a
# bulk transfer over veth keeps with the agent running and no connection selected.
# The floor programs of bench/floor.bpf.c (an empty tp_btf/tcp_probe, and one doing only a
# socket-storage lookup and a clock read) run beside the agent on the same ACKs, so the harness's
# own cost (trampoline, run-time stats) can be told from tcpvigil's.
# Usage: bash scripts/bench-datapath.sh [seconds]   (root; builds the release binary)
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-10}
cargo build --release --locked -p tcpvigil --bin tcpvigil --example bpf_floor >/dev/null 2>&1
bin=./target/release/tcpvigil
work=$(mktemp -d)
clang -O2 -g -target bpf -D__TARGET_ARCH_x86 -Iebpf/include -c bench/floor.bpf.c -o "$work/floor.bpf.o"
s=tvbs$$ r=tvbr$$
cleanup() {
  [ -s "$work/iperf3.pid" ] && kill "$(cat "$work/iperf3.pid")" 2>/dev/null || true
  ip netns del $s 2>/dev/null || true; ip netns del $r 2>/dev/null || true
  [ -n "${agent:-}" ] && kill "$agent" 2>/dev/null || true
  exec 9>&- 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
ip netns add $s; ip netns add $r
ip link add vb$s netns $s type veth peer name vb$r netns $r
ip -n $s addr add 10.250.0.1/24 dev vb$s; ip -n $s link set vb$s up; ip -n $s link set lo up
ip -n $r addr add 10.250.0.2/24 dev vb$r; ip -n $r link set vb$r up; ip -n $r link set lo up
ip netns exec $r iperf3 -s -D -p 5400 -I "$work/iperf3.pid" >/dev/null
sleep 0.3
rate() { ip netns exec $s iperf3 -c 10.250.0.2 -p 5400 -t "$secs" -J | python3 -c 'import json,sys; print(json.load(sys.stdin)["end"]["sum_received"]["bits_per_second"]/1e9)'; }

base=$(rate)
echo "baseline: $base Gbit/s"
sysctl -qw kernel.bpf_stats_enabled=1
bpftool prog show -j >"$work/existing.json" # programs of other tcpvigil instances are left out
if $bin run --help >/dev/null 2>&1; then
  $bin run --listen 127.0.0.1:0 >/dev/null 2>&1 & agent=$!
else
  $bin record --out /dev/null --conn 192.0.2.1 >/dev/null 2>&1 & agent=$!
fi
# The floor programs stay attached while stdin (fd 9's pipe) is open.
exec 9> >(./target/release/examples/bpf_floor "$work/floor.bpf.o" 2>/dev/null)
sleep 3
with=$(rate)
echo "with agent: $with Gbit/s"
python3 - "$base" "$with" <<'PY'
import sys
b, w = map(float, sys.argv[1:])
print(f"throughput loss: {100*(b-w)/b:.2f} %  (budget 2 %)")
PY
# Run time per event, measured over a second transfer with the floor programs beside the agent
# (they stay attached while fd 9's pipe is open).
exec 9> >(exec ./target/release/examples/bpf_floor "$work/floor.bpf.o" 2>/dev/null)
sleep 1
bpftool prog show -j >"$work/before.json"
rate >/dev/null
bpftool prog show -j >"$work/after.json"
python3 - "$work/before.json" "$work/after.json" "$work/existing.json" <<'PY'
import json, sys
old = {p["id"] for p in json.load(open(sys.argv[3]))}
def load(p):
    return {p["id"]: p for p in json.load(open(p))
            if p.get("name", "").startswith(("tv_", "floor_")) and p["id"] not in old}
b, a = load(sys.argv[1]), load(sys.argv[2])
rows = []
for i, p in a.items():
    c = p.get("run_cnt", 0) - b.get(i, {}).get("run_cnt", 0)
    t = p.get("run_time_ns", 0) - b.get(i, {}).get("run_time_ns", 0)
    if c > 0:
        rows.append((c, p["name"], t / c))
floor = {n: ns for _, n, ns in rows if n.startswith("floor_")}
print("run time per event (kernel bpf_stats; floor_* are the measuring floor on the same ACKs):")
for c, n, ns in sorted(rows, reverse=True):
    extra = ""
    if n.startswith("tv_") and "floor_empty" in floor:
        extra = f"  ({ns - floor['floor_empty']:+.1f} ns above an empty program)"
    print("%-18s %10d runs %8.1f ns/run%s" % (n, c, ns, extra))
PY
sysctl -qw kernel.bpf_stats_enabled=0
