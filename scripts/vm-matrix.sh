#!/usr/bin/env bash
# vm-matrix.sh: the kernel matrix. Builds tcpvigil and the guest test driver, then runs
# `tcpvigil check` and the data-path agreement test on Debian's 6.1 and 6.12 cloud kernels
# (booted under qemu with TCG, from a busybox initramfs) and on this host's kernel natively.
# Exits non-zero on any FAIL or timeout; under CI=true a skipped kernel is a failure too.
#
#   scripts/vm-matrix.sh                 the whole matrix
#   TV_VM_KERNELS="deb-6.1 host" ...     a subset (deb-6.1, deb-6.12, host)
#   TV_VM_PROFILE=debug                  reuse the debug build instead of a release build
#   TV_VM_TCPVIGIL=/path/to/tcpvigil     test that binary (tvguest is still built here)
#
# Downloads are cached in TV_VM_CACHE (default /var/cache/tcpvigil-vm) and fetched again when
# absent; logs, results and the generated tables go to TV_VM_WORK (default /tmp/tcpvigil-vm).
# See docs/kernels.md for what it checks and the last results; tests/vm/vm.sh for the knobs.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
KERNELS=${TV_VM_KERNELS:-deb-6.1 deb-6.12 host}
export TV_VM_WORK=${TV_VM_WORK:-/tmp/tcpvigil-vm}
export TV_VM_TIMEOUT=${TV_VM_TIMEOUT:-240}
WORK=$TV_VM_WORK
CI=${CI:-false}
T0=$(date +%s)
step() { printf '\n== vm-matrix: %s ==\n' "$*"; }

# A kernel that cannot run here: loud, and a failure under CI=true.
skip() {
  echo "SKIPPED $*" >&2
  if [ "$CI" = true ]; then
    echo "vm-matrix: under CI=true a skip is a failure" >&2
    failed+=("$1 (skipped)")
  else
    skipped+=("$1")
  fi
}
failed=()
skipped=()

if [ "$(id -u)" != 0 ]; then
  skip "whole-matrix: needs root (eBPF and network namespaces on the host; device nodes in the initramfs)"
  [ ${#failed[@]} -eq 0 ] && exit 0 || exit 1
fi

step "dependencies"
if ! command -v qemu-system-x86_64 >/dev/null || ! command -v busybox >/dev/null || ! command -v clang >/dev/null; then
  bash scripts/install-deps.sh
fi
mountpoint -q /sys/fs/bpf || mount -t bpf bpf /sys/fs/bpf 2>/dev/null || true
mountpoint -q /sys/kernel/tracing || mount -t tracefs tracefs /sys/kernel/tracing 2>/dev/null || true

# TV_VM_PROFILE=debug reuses a debug build (e.g. the one scripts/test.sh just made) instead of
# compiling everything again in release; TV_VM_TCPVIGIL tests a tcpvigil binary built elsewhere.
PROFILE=${TV_VM_PROFILE:-release}
step "build ($PROFILE: tcpvigil, tvguest)"
tb=$(date +%s)
pkgs=(-p tcpvigil-vmtest)
[ -n "${TV_VM_TCPVIGIL:-}" ] || pkgs+=(-p tcpvigil)
if [ "$PROFILE" = release ]; then
  cargo build --release --locked "${pkgs[@]}" 2>&1 | tail -n 3
else
  cargo build --locked "${pkgs[@]}" 2>&1 | tail -n 3
fi
BIN=${CARGO_TARGET_DIR:-$ROOT/target}/$PROFILE
TCPVIGIL=${TV_VM_TCPVIGIL:-$BIN/tcpvigil}
build_secs=$(( $(date +%s) - tb ))
mkdir -p "$WORK"
rm -f "$WORK"/*.results
bash tests/vm/vm.sh common "$TCPVIGIL" "$BIN/tvguest"

run_host() {
  local results=$WORK/host.results t0 rc
  t0=$(date +%s)
  set +e
  "$BIN/tvguest" all --expect "${TV_VM_HOST_EXPECT:-any}" --tcpvigil "$TCPVIGIL" 2>&1 |
    tee "$WORK/host.log" | grep --line-buffered '^TVTEST'
  rc=${PIPESTATUS[0]}
  set -e
  grep -a '^TVTEST' "$WORK/host.log" > "$results" || true
  {
    echo "TVTEST KERNEL host $(uname -r) native"
    echo "TVTEST TIME $(( $(date +%s) - t0 ))"
    echo "TVTEST EXIT $rc"
  } >> "$results"
  bash tests/vm/vm.sh judge "$results" host
}

for k in $KERNELS; do
  step "$k"
  case $k in
    host)
      run_host || failed+=("$k")
      ;;
    deb-*)
      if ! pkg=$(bash tests/vm/vm.sh resolve "$k"); then
        skip "$k: no Debian package for it is reachable with apt"
        continue
      fi
      echo "vm-matrix: $k is $pkg"
      bash tests/vm/vm.sh boot "$k" || failed+=("$k")
      ;;
    *) echo "vm-matrix: unknown kernel $k" >&2; failed+=("$k") ;;
  esac
done

total=$(( $(date +%s) - T0 ))
step "summary"
bash tests/vm/table.sh "$WORK" "$total" "$build_secs" | tee "$WORK/kernels-table.md"
echo
echo "vm-matrix: took ${total}s (build ${build_secs}s); logs and serial consoles in $WORK"
[ ${#skipped[@]} -eq 0 ] || echo "vm-matrix: SKIPPED: ${skipped[*]}"
if [ ${#failed[@]} -gt 0 ]; then
  echo "vm-matrix: FAILED: ${failed[*]}" >&2
  exit 1
fi
echo "vm-matrix: all kernels passed"
