#!/usr/bin/env bash
# run.sh: sets up a fresh Debian machine, builds tcpvigil and runs the agent in the foreground.
#
#   bash scripts/run.sh [tcpvigil run options, e.g. --listen 127.0.0.1:9977]
#   TV_RUN_ONLY_BUILD=1 bash scripts/run.sh   # install and build, then stop (CI's fresh root)
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
source scripts/toolchain.sh
tv_use_toolchain
cargo build --release --locked -p tcpvigil
if [ "${TV_RUN_ONLY_BUILD:-0}" = 1 ]; then
  echo "run.sh: TV_RUN_ONLY_BUILD=1: built ./target/release/tcpvigil, stopping before check and run"
  exit 0
fi
./target/release/tcpvigil check
exec ./target/release/tcpvigil run "$@"
