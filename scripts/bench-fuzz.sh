#!/usr/bin/env bash
# bench-fuzz.sh [RUNS] [SEED] [lab fuzz options]: the randomized campaign (`lab fuzz`, default 100 runs
# of seed 1) beside the live daemon; progress per run on stderr, the confusion matrix, the mechanism
# matrix and every failing run (with its replay command) on stdout. About 25 s per run on 2 shared
# cores. Needs root. Options go to `lab fuzz` as they are, e.g. --judge-mechanism, --base-draws,
# --first K (a batch of a campaign).
# TV_FUZZ_PROFILE=release builds and runs the release binaries (default: debug, as the tests).
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-100}
seed=${2:-1}
shift $(( $# < 2 ? $# : 2 ))
case "$runs$seed" in *[!0-9]*) echo "usage: $0 [RUNS] [SEED] (numbers)" >&2; exit 2;; esac
profile=${TV_FUZZ_PROFILE:-debug}
target=${CARGO_TARGET_DIR:-target}
flag=""; [ "$profile" = release ] && flag="--release"
cargo build $flag --locked -p tcpvigil -p tcpvigil-lab 2>&1 | tail -1
out=${TV_FUZZ_OUT:-lab-runs/fuzz-$seed}
exec "$target/$profile/lab" fuzz --runs "$runs" --seed "$seed" --tcpvigil "$target/$profile/tcpvigil" --out "$out" "$@"
