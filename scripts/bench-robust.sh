#!/usr/bin/env bash
# bench-robust.sh: the whole robustness suite (docs/robustness.md): the fast root tests CI runs
# (load without kernel config, RTO count, attribution, kill -9, two daemons, full disk, hostile
# input and hostile files, floods, web endpoint and floods of local clients against it), a longer
# fuzz (decoder, recordings, config, filters, plot's series, web requests), the BPF cost per
# program, the churn-and-scale bench in release mode, and optionally the one-hour soak. Prints
# every figure the tests print.
# Usage: bash scripts/bench-robust.sh [--fuzz-secs N] [--soak MINUTES]   (root)
set -euo pipefail
cd "$(dirname "$0")/.."
fuzz=60
soak=0
while [ $# -gt 0 ]; do
  case $1 in
    --fuzz-secs) fuzz=${2:?}; shift 2 ;;
    --soak) soak=${2:?}; shift 2 ;;
    *) echo "bench-robust: unknown argument $1 (--fuzz-secs N, --soak MINUTES)" >&2; exit 2 ;;
  esac
done
case $fuzz$soak in *[!0-9]*) echo "bench-robust: --fuzz-secs and --soak take whole numbers" >&2; exit 2 ;; esac
[ "$(id -u)" = 0 ] || { echo "bench-robust: needs root" >&2; exit 2; }
step() { printf '\n== %s ==\n' "$*"; }
t0=$(date +%s)

step "fast suite (what CI runs), one test at a time"
s=$(date +%s)
CI=true cargo test --locked -p tcpvigil --test robust_load --test robust_rto --test robust_owner \
  --test robust_kill --test robust_disk --test robust_web --test robust_web_flood --test robust_input \
  --test robust_hostile --test robust_flood \
  -- --test-threads=1 --nocapture 2>&1 | grep -vE '^\s+(Compiling|Running)|^$|^running|^test result: ok. 0'
echo "fast suite: $(( $(date +%s) - s )) s"

step "fuzz, ${fuzz} s per target"
TV_FUZZ_SECS=$fuzz cargo test --locked -p tcpvigil --test robust_input -- --test-threads=1 --nocapture never_panic 2>&1 |
  grep -E 'inputs in|panicked|test result'

step "BPF run time per program over one iperf3 stream"
cargo build --locked -p tcpvigil --bin tcpvigil >/dev/null 2>&1
bash scripts/bench-progs.sh 8 target/debug/tcpvigil

step "churn and scale (release build)"
cargo test --locked --release -p tcpvigil --test robust_scale -- --ignored --test-threads=1 --nocapture 2>&1 |
  grep -vE '^\s+(Compiling|Running)|^$|^running'

if [ "$soak" -gt 0 ]; then
  step "soak, ${soak} min"
  bash scripts/bench-soak.sh "$soak" target/soak 20
fi
echo "bench-robust: $(( $(date +%s) - t0 )) s"
