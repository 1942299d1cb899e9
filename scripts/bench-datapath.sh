#!/usr/bin/env bash
# bench-datapath.sh: prints the agent's cost on a bulk transfer over veth: throughput kept with the
# daemon running and no connection selected, records handed to userspace per ACK, and BPF run time
# per hooked event beside the floor programs of bench/floor.bpf.c (an empty tp_btf/tcp_probe, and
# each step of the fast path alone), so the harness's own cost can be told from tcpvigil's.
# Usage: bash scripts/bench-datapath.sh [seconds per run] [pairs] [streams] [phase_min_rtt_ms]
# (root; builds the release binary). pairs 0 skips the throughput pairs; streams > 1 runs iperf3
# -P streams, one bulk group whose members report their rounds (the send phase) when their RTT is
# at least phase_min_rtt_ms (default 5 as shipped; veth's RTT is far below, so 0.001 makes every
# round a record: the worst case).
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-10}
pairs=${2:-5}
streams=${3:-1}
phase_ms=${4:-5}
cargo build --release --locked -p tcpvigil --bin tcpvigil --example bpf_floor >/dev/null 2>&1
bin=./target/release/tcpvigil
work=$(mktemp -d)
clang -O2 -g -target bpf -D__TARGET_ARCH_x86 -Iebpf/include -c bench/floor.bpf.c -o "$work/floor.bpf.o"
s=tvbs$$ r=tvbr$$
agent=
cleanup() {
  [ -s "$work/iperf3.pid" ] && kill "$(cat "$work/iperf3.pid")" 2>/dev/null || true
  ip netns del $s 2>/dev/null || true; ip netns del $r 2>/dev/null || true
  [ -n "$agent" ] && kill "$agent" 2>/dev/null || true
  exec 9>&- 2>/dev/null || true
  sysctl -qw kernel.bpf_stats_enabled=0 || true
  rm -rf "$work"
}
trap cleanup EXIT
ip netns add $s; ip netns add $r
ip link add vb$s netns $s type veth peer name vb$r netns $r
ip -n $s addr add 10.250.0.1/24 dev vb$s; ip -n $s link set vb$s up; ip -n $s link set lo up
ip -n $r addr add 10.250.0.2/24 dev vb$r; ip -n $r link set vb$r up; ip -n $r link set lo up
ip netns exec $r iperf3 -s -D -p 5400 -I "$work/iperf3.pid" >/dev/null
sleep 0.3
rate() { ip netns exec $s iperf3 -c 10.250.0.2 -p 5400 -t "$secs" -P "$streams" -J | python3 -c 'import json,sys; print(json.load(sys.stdin)["end"]["sum_received"]["bits_per_second"]/1e9)'; }
start_agent() {
  rm -f "$work/ready"
  printf '[detect.fairness]\nphase_min_rtt_ms = %s\n' "$phase_ms" >"$work/config.toml"
  $bin run --listen 127.0.0.1:0 --config "$work/config.toml" --ready-file "$work/ready" >"$work/agent.log" 2>&1 & agent=$!
  for _ in $(seq 100); do [ -s "$work/ready" ] && break; sleep 0.1; done
  [ -s "$work/ready" ] || { cat "$work/agent.log" >&2; echo "bench: the daemon did not get ready" >&2; exit 1; }
}
stop_agent() { kill "$agent"; wait "$agent" 2>/dev/null || true; agent=; }
metrics() { curl -s "http://$(cat "$work/ready")/metrics"; }

# Throughput: pairs of runs without and with the daemon, in alternating order so drift cancels.
echo "iperf3 with $streams stream(s), send phase on paths from $phase_ms ms"
[ "$pairs" -gt 0 ] && echo "throughput over veth, $pairs pairs of ${secs} s runs (Gbit/s):"
: >"$work/pairs"
for i in $(seq "$pairs"); do
  if ((i % 2)); then
    b=$(rate); start_agent; w=$(rate); stop_agent
  else
    start_agent; w=$(rate); stop_agent; b=$(rate)
  fi
  echo "$b $w" >>"$work/pairs"
  printf '  pair %d: without %.2f  with %.2f  (%+.1f %%)\n' "$i" "$b" "$w" "$(python3 -c "print(100*($w-$b)/$b)")"
done
[ "$pairs" -gt 0 ] && python3 - "$work/pairs" <<'PY'
import statistics, sys
p = [tuple(map(float, l.split())) for l in open(sys.argv[1])]
loss = [100 * (b - w) / b for b, w in p]
b, w = statistics.median(x for x, _ in p), statistics.median(y for _, y in p)
print(f"median without {b:.2f}, with {w:.2f} Gbit/s: loss {100*(b-w)/b:.2f} % "
      f"(per pair {min(loss):+.1f} .. {max(loss):+.1f} %, mean {statistics.mean(loss):+.2f} %; budget 2 %)")
PY

# Run time per event and records per ACK, with the floor programs beside the daemon on the same ACKs.
sysctl -qw kernel.bpf_stats_enabled=1
bpftool prog show -j >"$work/existing.json" # programs of other tcpvigil instances are left out
start_agent
exec 9> >(exec ./target/release/examples/bpf_floor "$work/floor.bpf.o" 2>/dev/null)
sleep 1
metrics >"$work/m0"
cpu() { awk '/^cpu /{print $2+$3+$4+$7+$8}' /proc/stat; awk '{print $14+$15}' "/proc/$agent/stat"; getconf CLK_TCK; }
cpu >"$work/cpu0"
bpftool prog show -j >"$work/before.json"
rate >"$work/rate"
bpftool prog show -j >"$work/after.json"
cpu >"$work/cpu1"
metrics >"$work/m1"
exec 9>&-
stop_agent
python3 - "$work" <<'PY'
import json, re, sys
w = sys.argv[1]
old = {p["id"] for p in json.load(open(f"{w}/existing.json"))}
def load(p):
    return {p["id"]: p for p in json.load(open(p))
            if p.get("name", "").startswith(("tv_", "floor_")) and p["id"] not in old}
b, a = load(f"{w}/before.json"), load(f"{w}/after.json")
rows = []
for i, p in a.items():
    c = p.get("run_cnt", 0) - b.get(i, {}).get("run_cnt", 0)
    t = p.get("run_time_ns", 0) - b.get(i, {}).get("run_time_ns", 0)
    if c > 0:
        rows.append((c, p["name"], t / c))
floor = {n: ns for _, n, ns in rows if n.startswith("floor_")}
print("run time per event (kernel bpf_stats; floor_* measure the harness on the same ACKs):")
for c, n, ns in sorted(rows, reverse=True):
    extra = ""
    if n.startswith("tv_") and "floor_empty" in floor:
        extra = f"  ({ns - floor['floor_empty']:+.1f} ns above an empty program)"
    print("  %-16s %10d runs %8.1f ns/run%s" % (n, c, ns, extra))
def series(f):
    out = {}
    for l in open(f):
        m = re.match(r'(tcpvigil_\w+)(\{[^}]*\})? (\S+)', l)
        if m:
            out[m.group(1) + (m.group(2) or "")] = float(m.group(3))
    return out
m0, m1 = series(f"{w}/m0"), series(f"{w}/m1")
d = lambda k: m1.get(k, 0) - m0.get(k, 0)
acks = sum(c for c, n, _ in rows if n == "tv_tcp_probe")
samples, events = d('tcpvigil_kernel_records_total{kind="sample"}'), d('tcpvigil_kernel_records_total{kind="event"}')
if acks:
    print(f"records handed to the daemon: {samples:.0f} samples and {events:.0f} events for {acks:.0f} ACKs "
          f"({(samples + events) / acks:.4f} per ACK; no connection selected)")
# The transfer is CPU-bound on veth, so what the agent takes from the CPUs is what it can cost in
# throughput: tcpvigil's BPF run time plus the daemon's own CPU time, over all busy CPU time.
(busy0, d0, hz), (busy1, d1, _) = ([float(x) for x in open(f"{w}/{f}").read().split()] for f in ("cpu0", "cpu1"))
busy_s, daemon_s = (busy1 - busy0) / hz, (d1 - d0) / hz
bpf_s = sum(t for c, n, ns in rows if n.startswith("tv_") for t in [c * ns / 1e9])
gbit = float(open(f"{w}/rate").read())
print(f"CPU share at {gbit:.2f} Gbit/s: BPF {bpf_s*1e3:.1f} ms + daemon {daemon_s*1e3:.0f} ms of {busy_s:.2f} s busy "
      f"= {100*(bpf_s+daemon_s)/busy_s:.2f} % (the throughput a CPU-bound transfer can lose; budget 2 %)")
PY
