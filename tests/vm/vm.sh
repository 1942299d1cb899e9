#!/usr/bin/env bash
# vm.sh: fetch a Debian kernel package (cached), build a busybox initramfs with tcpvigil and the
# guest tests, boot it under qemu (TCG) and judge the TVTEST markers on its serial console.
#
#   vm.sh resolve KERNEL            package the matrix entry KERNEL resolves to
#   vm.sh fetch KERNEL              download + extract (cached), print the kernel's cache dir
#   vm.sh common TCPVIGIL TVGUEST   build the kernel-independent part of the initramfs
#   vm.sh boot KERNEL               boot KERNEL with the common part + its modules; exit 0 = all passed
#
# KERNEL is deb-6.1 or deb-6.12. Environment:
#   TV_VM_CACHE    download/extract cache (default /var/cache/tcpvigil-vm; kept between runs)
#   TV_VM_WORK     initramfs and logs of this run (default /tmp/tcpvigil-vm)
#   TV_VM_TIMEOUT  seconds one VM may run before it counts as a failure (default 300)
#   TV_VM_PKG_deb_6_1, TV_VM_PKG_deb_6_12   pin a package name instead of the newest one
#   TV_VM_TESTS    comma-separated guest tests to run (default: all)
#   TV_VM_DEBUG    set: the guest first prints a `tcpvigil check` with libbpf's full log
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
CACHE=${TV_VM_CACHE:-/var/cache/tcpvigil-vm}
WORK=${TV_VM_WORK:-/tmp/tcpvigil-vm}
TIMEOUT=${TV_VM_TIMEOUT:-300}
# Modules the guest tests need; their dependencies are added from each module's `depends=`.
MODULES=(veth sch_netem sch_tbf)

die() { echo "vm.sh: $*" >&2; exit 1; }
log() { echo "vm.sh: $*" >&2; }

# The package name pattern of each matrix entry (newest match wins).
pattern() {
  case $1 in
    deb-6.1) echo '^linux-image-6\.1\.0-[0-9]+-cloud-amd64-unsigned$' ;;
    deb-6.12) echo '^linux-image-6\.12\.[0-9]+\+deb[0-9]+-cloud-amd64-unsigned$' ;;
    *) die "unknown kernel '$1' (known: deb-6.1 deb-6.12)" ;;
  esac
}

resolve() {
  local pat var p
  pat=$(pattern "$1")
  var="TV_VM_PKG_${1//[^A-Za-z0-9]/_}"
  if [ -n "${!var:-}" ]; then echo "${!var}"; return; fi
  p=$(apt-cache pkgnames linux-image- 2>/dev/null | grep -E "$pat" | sort -V | tail -n 1 || true)
  if [ -z "$p" ]; then
    log "no package matches $pat in the apt lists; running apt-get update"
    apt-get update -q >&2 || true
    p=$(apt-cache pkgnames linux-image- 2>/dev/null | grep -E "$pat" | sort -V | tail -n 1 || true)
  fi
  if [ -z "$p" ] && [ -d "$CACHE/kernels" ]; then
    # Offline: the newest kernel already in the cache.
    p=$(ls "$CACHE/kernels" | grep -E "$pat" | sort -V | tail -n 1 || true)
  fi
  [ -n "$p" ] || die "no Debian package matches $pat (is deb.debian.org reachable?)"
  echo "$p"
}

# Print a module file's path inside an extracted kernel tree (names may use - or _).
find_module() {
  local tree=$1 name=$2 alt=${2//_/-}
  find "$tree" \( -name "$name.ko" -o -name "$name.ko.xz" -o -name "$name.ko.zst" \
    -o -name "$alt.ko" -o -name "$alt.ko.xz" -o -name "$alt.ko.zst" \) -print -quit
}

# Uncompressed module bytes on stdout (busybox insmod gets plain .ko files).
module_bytes() {
  case $1 in
    *.xz) xz -dc "$1" ;;
    *.zst) zstd -qdc "$1" ;;
    *) cat "$1" ;;
  esac
}

# Copy NAME and its dependencies (first) into DEST, appending to DEST/order.
add_module() {
  local tree=$1 dest=$2 name=$3 f deps d
  grep -qx "$name.ko" "$dest/order" 2>/dev/null && return 0
  f=$(find_module "$tree" "$name")
  [ -n "$f" ] || die "module $name not found in $tree"
  module_bytes "$f" > "$dest/$name.ko.tmp"
  deps=$(grep -a -o 'depends=[^[:cntrl:]]*' "$dest/$name.ko.tmp" | head -n 1 | cut -d= -f2 | tr ',' ' ')
  for d in $deps; do add_module "$tree" "$dest" "$d"; done
  mv "$dest/$name.ko.tmp" "$dest/$name.ko"
  echo "$name.ko" >> "$dest/order"
}

fetch() {
  local pkg dir tmp krel m
  pkg=$(resolve "$1")
  dir=$CACHE/kernels/$pkg
  if [ -f "$dir/.complete" ]; then echo "$dir"; return; fi
  log "fetching $pkg into $CACHE"
  mkdir -p "$CACHE/kernels"
  tmp=$(mktemp -d "$CACHE/.fetch.XXXXXX")
  (cd "$tmp" && apt-get download -q -o APT::Sandbox::User=root "$pkg" >&2) ||
    { rm -rf "$tmp"; die "apt-get download $pkg failed"; }
  dpkg-deb -x "$tmp"/*.deb "$tmp/x"
  krel=$(ls "$tmp/x/lib/modules")
  rm -rf "$dir" && mkdir -p "$dir/modules"
  cp "$tmp/x/boot/vmlinuz-$krel" "$dir/vmlinuz"
  cp "$tmp/x/boot/config-$krel" "$dir/config"
  : > "$dir/modules/order"
  for m in "${MODULES[@]}"; do add_module "$tmp/x/lib/modules/$krel" "$dir/modules" "$m"; done
  echo "$krel" > "$dir/release"
  dpkg-deb -f "$tmp"/*.deb Version > "$dir/version"
  rm -rf "$tmp"
  touch "$dir/.complete"
  log "cached $pkg ($krel; modules: $(tr '\n' ' ' < "$dir/modules/order"))"
  echo "$dir"
}

# Copy a binary to DEST inside ROOT with every library ldd names (same paths as on the host).
add_bin() {
  local root=$1 src=$2 dest=$3 lib
  mkdir -p "$root$(dirname "$dest")"
  cp -L "$src" "$root$dest"
  strip -g "$root$dest" 2>/dev/null || true
  { ldd "$src" 2>/dev/null || true; } | awk '/=> \//{print $3} /^[ \t]*\/lib/{print $1}' | while read -r lib; do
    [ -e "$root$lib" ] && continue
    mkdir -p "$root$(dirname "$lib")"
    cp -L "$lib" "$root$lib"
  done
}

cpio_of() { (cd "$1" && find . | sort | busybox cpio -o -H newc 2>/dev/null); }

common() {
  local tcpvigil=$1 tvguest=$2 root=$WORK/common bb
  [ -x "$tcpvigil" ] || die "no tcpvigil binary at $tcpvigil"
  [ -x "$tvguest" ] || die "no tvguest binary at $tvguest"
  bb=$(command -v busybox) || die "busybox not installed (package busybox-static)"
  ldd "$bb" >/dev/null 2>&1 && die "$bb is dynamically linked; install busybox-static"
  rm -rf "$root" && mkdir -p "$root"/{bin,sbin,usr/bin,usr/sbin,lib/modules,proc,sys,dev,run,tmp,root,etc}
  cp "$bb" "$root/bin/busybox"
  mknod "$root/dev/console" c 5 1
  mknod "$root/dev/null" c 1 3
  install -m 0755 "$HERE/guest/init" "$root/init"
  add_bin "$root" "$(command -v ip)" /sbin/ip
  add_bin "$root" "$(command -v tc)" /sbin/tc
  add_bin "$root" "$tcpvigil" /usr/bin/tcpvigil
  add_bin "$root" "$tvguest" /usr/bin/tvguest
  cpio_of "$root" > "$WORK/common.cpio"
  log "common initramfs: $(du -h "$WORK/common.cpio" | cut -f1)"
}

boot() {
  local name=$1 dir krel mods initrd serial results rc=0 t0 secs expect
  dir=$(fetch "$name")
  krel=$(cat "$dir/release")
  [ -f "$WORK/common.cpio" ] || die "run 'vm.sh common' first"
  mods=$WORK/mods-$name
  rm -rf "$mods" && mkdir -p "$mods/lib/modules"
  cp "$dir"/modules/* "$mods/lib/modules/"
  # No /boot/config-$(uname -r) in the guest (as in containers and minimal images) and Debian
  # builds no /proc/config.gz: the agent must measure CONFIG_HZ itself (agent/src/bpf/kconfig.rs).
  # TV_VM_BOOT_CONFIG=1 puts the file in /boot as on a full Debian host.
  if [ "${TV_VM_BOOT_CONFIG:-0}" = 1 ]; then
    mkdir -p "$mods/boot" && cp "$dir/config" "$mods/boot/config-$krel"
  fi
  initrd=$WORK/initrd-$name.cpio
  { cat "$WORK/common.cpio"; cpio_of "$mods"; } > "$initrd"
  serial=$WORK/$name.serial.log
  results=$WORK/$name.results
  expect=${TV_VM_EXPECT:-fentry}
  log "booting $name ($krel, $(cat "$dir/version")) under TCG, timeout ${TIMEOUT}s; serial log $serial"
  t0=$(date +%s)
  set +e
  timeout -k 10 "$TIMEOUT" qemu-system-x86_64 -accel tcg -cpu max -m 1024 -smp 2 \
    -nodefaults -no-user-config -display none -monitor none -nic none -no-reboot \
    -serial stdio -kernel "$dir/vmlinuz" -initrd "$initrd" \
    -append "console=ttyS0 panic=-1 loglevel=4 tv.expect=$expect${TV_VM_TESTS:+ tv.tests=$TV_VM_TESTS}${TV_VM_DEBUG:+ tv.debug=1}" \
    < /dev/null 2>&1 | tr -d '\r' | tee "$serial" | grep --line-buffered -E '^TVTEST|^ *TV '
  rc=${PIPESTATUS[0]}
  set -e
  secs=$(( $(date +%s) - t0 ))
  grep -a '^TVTEST' "$serial" > "$results" || true
  {
    echo "TVTEST KERNEL $name $krel $(cat "$dir/version")"
    echo "TVTEST TIME $secs"
  } >> "$results"
  if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
    echo "TVTEST FAIL vm-timeout $name did not power off within ${TIMEOUT}s" | tee -a "$results"
    echo "--- last 60 lines of $serial ---" >&2
    tail -n 60 "$serial" >&2
    return 1
  fi
  judge "$results" "$name"
}

# Exit 0 when the results have DONE with no failures, EXIT 0, and no FAIL line.
judge() {
  local results=$1 name=$2 done
  done=$(grep -a '^TVTEST DONE ' "$results" | tail -n 1 || true)
  if [ -z "$done" ]; then
    echo "TVTEST FAIL no-done $name: the guest never reported DONE (crash or panic? see the serial log)" | tee -a "$results"
    return 1
  fi
  if grep -aq '^TVTEST FAIL' "$results" || ! grep -aq '^TVTEST EXIT 0' "$results"; then
    log "$name: failures (serial log kept at $WORK/$name.serial.log)"
    return 1
  fi
  return 0
}

main() {
  mkdir -p "$WORK" "$CACHE"
  case ${1:-} in
    resolve) resolve "$2" ;;
    fetch) fetch "$2" ;;
    common) common "$2" "$3" ;;
    boot) boot "$2" ;;
    judge) judge "$2" "$3" ;;
    *) sed -n '2,16p' "$0" >&2; exit 2 ;;
  esac
}
main "$@"
