#!/usr/bin/env bash
# make-fixtures.sh: records lab scenarios as the daemon sees them (bulk samples every 50 ms, events,
# snapshots) into tests/fixtures/<scenario>.jsonl.gz, with the run's truth (stripped of its large
# ss/iperf3 parts) beside it as <scenario>.truth.json. agent/tests/fixtures.rs replays them offline.
# Usage: bash scripts/make-fixtures.sh [SCENARIO...]   (root; default: every judged scenario)
set -euo pipefail
cd "$(dirname "$0")/.."
out=${FIXTURE_OUT:-tests/fixtures} # FIXTURE_OUT: write elsewhere, e.g. to compare runs
scenarios=("$@")
if [ ${#scenarios[@]} -eq 0 ]; then
	scenarios=(clean outage tail-loss-rto zero-window lfn-buffer no-sack parallel-4-lossy lost-retransmit)
fi
cargo build --locked -q -p tcpvigil -p tcpvigil-lab
tv=./target/debug/tcpvigil lab=./target/debug/lab
work=$(mktemp -d)
trap 'kill "${rec:-}" 2>/dev/null || true; rm -rf "$work"' EXIT
mkdir -p "$out"
for sc in "${scenarios[@]}"; do
	echo "== $sc"
	rm -f "$work/ready"
	# Every lab flow goes to the receivers (10.72.x.2); the recorder keeps only those connections.
	$tv record --out "$work/$sc.jsonl" --sample-every 50 --ready-file "$work/ready" \
		--conn 10.72.1.2 2>"$work/$sc.record.log" &
	rec=$!
	for _ in $(seq 100); do [ -e "$work/ready" ] && break; sleep 0.1; done
	[ -e "$work/ready" ] || { cat "$work/$sc.record.log"; exit 1; }
	$lab run "$sc" --run-dir "$work/run-$sc" -q
	sleep 1.5
	kill -INT $rec
	wait $rec
	rec=
	python3 - "$work/run-$sc/truth.json" "$out/$sc.truth.json" <<'PY'
import json, sys
t = json.load(open(sys.argv[1]))
t["ss_samples"] = []
t["qdisc_stats"] = []
for f in t.get("flows", []):
    f["iperf"] = None
t["run_dir"] = "."
t["capture"] = None
json.dump(t, open(sys.argv[2], "w"), indent=1, sort_keys=True)
PY
	gzip -9 -n -c "$work/$sc.jsonl" >"$out/$sc.jsonl.gz"
	ls -l "$out/$sc.jsonl.gz" "$out/$sc.truth.json"
done
