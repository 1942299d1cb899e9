#!/usr/bin/env bash
# run.sh: sets up a fresh Debian machine, builds tcpvigil and runs the agent in the foreground.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
cargo build --release --locked -p tcpvigil
./target/release/tcpvigil check
exec ./target/release/tcpvigil run "$@"
