#!/usr/bin/env bash
# bench-soak.sh: runs the daemon for a long time under mixed low-rate lab traffic (steady streams,
# short connections, network stops, an unfair group of parallel streams) and samples its RSS,
# /metrics series, CPU time and open fds every period; prints the drift and writes a CSV and an SVG.
# Usage: bash scripts/bench-soak.sh [minutes=60] [out dir=target/soak] [period s=20]   (root)
# TV_BIN=path uses that binary instead of building target/release/tcpvigil.
set -euo pipefail
cd "$(dirname "$0")/.."
mins=${1:-60}
out=${2:-target/soak}
period=${3:-20}
case $mins$period in *[!0-9]*) echo "bench-soak: minutes and period must be whole numbers" >&2; exit 2 ;; esac
[ "$(id -u)" = 0 ] || { echo "bench-soak: needs root" >&2; exit 2; }
if [ -z "${TV_BIN:-}" ]; then
  cargo build --release --locked -p tcpvigil --bin tcpvigil >"$out.build.log" 2>&1 ||
    { tail -20 "$out.build.log" >&2; echo "bench-soak: the release build failed" >&2; exit 1; }
  TV_BIN=./target/release/tcpvigil
fi
mkdir -p "$out"
work=$(mktemp -d)
s=tvsks$$ r=tvskr$$
agent= pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  [ -n "$agent" ] && { kill -INT "$agent" 2>/dev/null; wait "$agent" 2>/dev/null || true; }
  # Deleting a namespace does not end its processes (the iperf3 -D servers, clients under way).
  for n in $s $r; do ip netns pids $n 2>/dev/null | xargs -r kill 2>/dev/null || true; ip netns del $n 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT
ip netns add $s; ip netns add $r
ip link add vk$s netns $s type veth peer name vk$r netns $r
ip -n $s addr add 10.251.0.1/24 dev vk$s; ip -n $s link set vk$s up; ip -n $s link set lo up
ip -n $r addr add 10.251.0.2/24 dev vk$r; ip -n $r link set vk$r up; ip -n $r link set lo up
# A 40 Mbit/s path (tbf: netem may be absent): low rate so the soak does not starve a shared machine.
tc -n $s qdisc add dev vk$s root tbf rate 40mbit burst 32kb limit 4mb
for p in 5501 5502 5503; do ip netns exec $r iperf3 -s -D -p $p >/dev/null; done

$TV_BIN run --listen 127.0.0.1:0 --ready-file "$work/ready" --events "$work/events.jsonl" \
  --dump-dir "$work/dumps" >"$work/agent.log" 2>&1 & agent=$!
for _ in $(seq 300); do [ -s "$work/ready" ] && break; sleep 0.1; done
[ -s "$work/ready" ] || { cat "$work/agent.log" >&2; echo "bench-soak: the daemon did not get ready" >&2; exit 1; }
url="http://$(cat "$work/ready")/metrics"

# Traffic, in loops until the end: a steady stream (with stops: the receiver drops everything for
# 3 s every 2 min), an unfair group (4 parallel streams against 1), and bursts of short connections.
# A failed iperf3 (a stop during its start, a busy server) must not end a loop for the rest of the
# run (subshells inherit `set -e`): each loop ignores failures and leaves a heartbeat, checked below.
end=$(( $(date +%s) + mins * 60 ))
beat() { date +%s >"$work/beat.$1"; }
( set +e; while [ "$(date +%s)" -lt $end ]; do beat steady
    ip netns exec $s iperf3 -c 10.251.0.2 -p 5501 -t 60 -b 8M >/dev/null 2>&1 || sleep 1; done ) & pids+=($!)
( set +e; while [ "$(date +%s)" -lt $end ]; do beat group
    ip netns exec $s iperf3 -c 10.251.0.2 -p 5502 -t 40 -P 4 -b 3M >/dev/null 2>&1 &
    ip netns exec $s iperf3 -c 10.251.0.2 -p 5503 -t 40 -b 3M >/dev/null 2>&1; wait; sleep 20; done ) & pids+=($!)
( set +e; while [ "$(date +%s)" -lt $end ]; do beat stops; sleep 120
    ip netns exec $r nft add table inet tvsoak 2>/dev/null
    ip netns exec $r nft add chain inet tvsoak in '{ type filter hook input priority -10; policy drop; }' 2>/dev/null
    sleep 3; ip netns exec $r nft delete table inet tvsoak 2>/dev/null; done ) & pids+=($!)
( set +e; while [ "$(date +%s)" -lt $end ]; do beat short
    for _ in $(seq 50); do ip netns exec $s iperf3 -c 10.251.0.2 -p 5501 -n 64K >/dev/null 2>&1; done; sleep 30; done ) & pids+=($!)

hz=$(getconf CLK_TCK)
csv="$out/soak.csv"
echo "t_s,rss_kib,series,cpu_s,fds,scrape_ms" >"$csv"
t0=$(date +%s)
while [ "$(date +%s)" -lt $end ]; do
  kill -0 "$agent" 2>/dev/null || { echo "bench-soak: the daemon died" >&2; tail "$work/agent.log" >&2; exit 1; }
  for l in steady group stops short; do
    b=$(cat "$work/beat.$l" 2>/dev/null || echo 0)
    [ $(( $(date +%s) - b )) -lt 200 ] || echo "bench-soak: the $l traffic loop has not run for $(( $(date +%s) - b )) s" >&2
  done
  rss=$(awk '/^VmRSS/ {print $2}' /proc/$agent/status)
  cpu=$(awk -v hz="$hz" '{printf "%.2f", ($14+$15)/hz}' /proc/$agent/stat)
  fds=$(ls /proc/$agent/fd | wc -l)
  a=$(date +%s%N); series=$(curl -sf --max-time 10 "$url" | grep -vc '^#' || true); b=$(date +%s%N)
  echo "$(( $(date +%s) - t0 )),$rss,$series,$cpu,$fds,$(( (b - a) / 1000000 ))" >>"$csv"
  sleep "$period"
done
cp "$work/agent.log" "$out/agent.log"
echo "bench-soak: ran $(( $(date +%s) - t0 )) s of the $(( mins * 60 )) s asked; daemon alive: $(kill -0 "$agent" 2>/dev/null && echo yes || echo no)"
python3 scripts/soak-report.py "$csv" "$out/soak.svg"
