#!/usr/bin/env bash
# test.sh: the whole test suite: installs what it needs, builds, runs unit, root/BPF and lab tests.
#
#   bash scripts/test.sh                        # everything (CI)
#   TV_TEST_ONLY_BUILD=1 bash scripts/test.sh   # stop after the install, format and build steps
set -euo pipefail
cd "$(dirname "$0")/.."
step() { printf '\n== %s ==\n' "$*"; }

step "dependencies"
bash scripts/install-deps.sh
source scripts/toolchain.sh
tv_use_toolchain # exported: every cargo below and in the ci-*.sh stages is this one
mountpoint -q /sys/fs/bpf || mount -t bpf bpf /sys/fs/bpf 2>/dev/null || true
mountpoint -q /sys/kernel/tracing || mount -t tracefs tracefs /sys/kernel/tracing 2>/dev/null || true

step "format"
cargo fmt --all -- --check

step "build"
cargo build --workspace --all-targets --locked 2>&1 | tail -3
if [ "${TV_TEST_ONLY_BUILD:-0}" = 1 ]; then
  echo "test.sh: TV_TEST_ONLY_BUILD=1: stopping after the build"
  exit 0
fi

# The fresh Debian 12 root's builds (scripts/ci-fresh-debian.sh: the README's two commands on a
# new machine) run beside the tests at the lowest CPU priority: they take the CPU the tests leave
# idle. Its daemon step runs at the end, alone.
fresh=""
if [ "${TV_FRESH_DEBIAN:-1}" = 1 ]; then
  mkdir -p target/fresh-debian
  nice -n 19 bash scripts/ci-fresh-debian.sh --builds target/fresh-debian/root >target/fresh-debian/builds.log 2>&1 &
  fresh=$!
fi

step "tests (unit, integration as root, lab)"
# The live scenario tests append their expected-vs-reported rows here; printed after the tests.
table=target/tmp/diagnoses.md
mkdir -p target/tmp && rm -f "$table"
# Root tests share namespaces, qdiscs and MIB counters: one at a time keeps the counters honest.
status=0
log=target/tmp/tests.log
cargo test --workspace --locked --no-fail-fast -- --test-threads=1 2>&1 | tee "$log" || status=${PIPESTATUS[0]}
if [ -s "$table" ]; then
  step "diagnoses of the lab scenarios by the live daemon (times in s from the traffic start)"
  echo "| scenario | expected (truth: start, length) | reported | start | duration | found |"
  echo "|---|---|---|---|---|---|"
  sort "$table"
fi
if [ "$status" -ne 0 ]; then
  # Last, where a long log is read first: why each failed test failed (its panic message).
  step "failed tests and their messages (the whole output: $log)"
  awk '/^thread .* panicked at /{n=0; p=1} p && /^(stack backtrace:|note: )/{p=0; print ""} p && n++ < 40' "$log"
  exit "$status"
fi

for extra in scripts/ci-*.sh; do
  [ -e "$extra" ] || continue
  [ "$extra" = scripts/ci-fresh-debian.sh ] && continue # below
  step "$extra"
  bash "$extra"
done

step "kernel matrix (Debian 6.1 and 6.12 under qemu, host natively)"
TV_VM_PROFILE=debug bash scripts/vm-matrix.sh

if [ -n "$fresh" ]; then
  step "scripts/ci-fresh-debian.sh (builds ran beside the tests; now the daemon)"
  fstatus=0
  wait "$fresh" || fstatus=$?
  cat target/fresh-debian/builds.log
  [ "$fstatus" -eq 0 ] || exit "$fstatus"
  bash scripts/ci-fresh-debian.sh --serve target/fresh-debian/root
fi
