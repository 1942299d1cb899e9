#!/usr/bin/env bash
# bench-recorder.sh [SECONDS]: the flight recorder's memory per bulk connection, measured on the
# live daemon beside `lab run clean` (one 200 Mbit/s, 20 ms transfer) lasting SECONDS (default 45,
# longer than recorder.seconds_before = 30 s so the history reaches its steady size).
# Prints tcpvigil_recorder_memory_bytes and tcpvigil_recorder_connections every 5 s. Needs root.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-45}
target=${CARGO_TARGET_DIR:-target}
cargo build --release --locked -p tcpvigil -p tcpvigil-lab 2>&1 | tail -1
tmp=$(mktemp -d /tmp/tv-bench-rec.XXXXXX)
cleanup() {
	[ -n "${daemon:-}" ] && kill -INT "$daemon" 2>/dev/null && wait "$daemon" || true
	rm -rf "$tmp"
}
trap cleanup EXIT
TCPVIGIL_LOG=info "$target/release/tcpvigil" run --listen 127.0.0.1:0 --dump-dir "$tmp/dumps" \
	--ready-file "$tmp/ready" 2>"$tmp/daemon.log" &
daemon=$!
for _ in $(seq 300); do [ -e "$tmp/ready" ] && break; sleep 0.05; done
addr=$(sed 's/\x1b\[[0-9;]*m//g' "$tmp/daemon.log" | grep -o 'serving /metrics and /healthz on [0-9.:]*' | awk '{print $NF}')
[ -n "$addr" ] || { echo "bench-recorder: the daemon did not start:"; cat "$tmp/daemon.log"; exit 1; }
"$target/release/lab" run clean -q --duration "$secs" --out "$tmp/runs" >/dev/null &
lab=$!
echo "   t  memory_bytes  connections  bytes_per_connection"
t=0
while kill -0 "$lab" 2>/dev/null; do
	sleep 5
	t=$((t + 5))
	curl -s "http://$addr/metrics" >"$tmp/scrape"
	mem=$(awk '$1=="tcpvigil_recorder_memory_bytes"{print $2}' "$tmp/scrape")
	conns=$(awk '$1=="tcpvigil_recorder_connections"{print $2}' "$tmp/scrape")
	per=$([ "${conns:-0}" -gt 0 ] && echo $((mem / conns)) || echo -)
	printf '%4ds  %12s  %11s  %20s\n' "$t" "$mem" "$conns" "$per"
done
wait "$lab"
