#!/usr/bin/env bash
# ci-fresh-debian.sh: the README's two commands on a fresh Debian 12 root: run.sh until /metrics serves, then test.sh's install and build steps.
#
# The root is made by debootstrap (variant minbase: essential packages and apt, nothing else)
# from the Debian mirror this machine's apt uses, with the apt sources a Debian 12 installation
# has (bookworm, bookworm-updates, bookworm-security). The checkout's tracked and new files (no
# target/) are copied in. Inside a private mount namespace (the mounts vanish with it) the root
# gets /proc, /sys (with /sys/kernel/btf, /sys/fs/bpf, /sys/fs/cgroup) and /dev, and runs:
#   1. TV_RUN_ONLY_BUILD=1 bash scripts/run.sh   the install (a Rust toolchain included) and the release build
#   2. bash scripts/run.sh --listen 127.0.0.1:PORT   check, then the daemon, until a scrape has tcpvigil_ series
#   3. TV_TEST_ONLY_BUILD=1 bash scripts/test.sh   test.sh's install, format and build steps
# Step 2 loads BPF: it takes TV_LOCK (a flock file) when set, so that it can share a machine.
# The root reaches only the Debian mirror (apt) and crates.io (cargo); the daemon listens on loopback.
# The debootstrap result is cached as target/fresh-debian/base-*.tar (a rerun skips debootstrap);
# each run unpacks it into a new root and deletes that root at the end (TV_FRESH_KEEP=1 keeps it).
# TV_FRESH_CACHE=DIR keeps the root's cargo registry and target directory in DIR between runs
# (a rerun then compiles only what changed); unset, both are inside the root: a cold build.
#
#   bash scripts/ci-fresh-debian.sh
#   TV_LOCK=/tmp/tcpvigil-root.lock bash scripts/ci-fresh-debian.sh
#   TV_FRESH_CACHE=/var/cache/tcpvigil-fresh bash scripts/ci-fresh-debian.sh
#   bash scripts/ci-fresh-debian.sh --builds DIR   steps 1 and 3 only, the root kept in DIR
#   bash scripts/ci-fresh-debian.sh --serve DIR    then step 2 on that root, which is deleted after
# test.sh runs the two halves apart: the builds (CPU, at the lowest priority) beside the test suite,
# the daemon (BPF) after it, so that it never attaches while a test counts the kernel's programs.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)
start=$SECONDS
say() { echo "ci-fresh-debian: $* ($((SECONDS - start)) s)"; }
fail() { echo "ci-fresh-debian: FAIL: $*" >&2; exit 1; }
phase=all kept=""
case ${1:-} in
--builds | --serve)
	phase=${1#--} kept=${2:?"$1 needs the directory of the root"}
	;;
"") ;;
*) fail "unknown argument $1 (none, --builds DIR or --serve DIR)" ;;
esac
if [[ $(id -u) -ne 0 ]]; then
	[[ ${CI:-} == true ]] && fail "needs root (debootstrap, chroot)"
	echo "ci-fresh-debian: SKIPPED (not root, not CI)" >&2
	exit 0
fi
command -v debootstrap >/dev/null || fail "debootstrap is not installed (scripts/install-deps.sh)"

# The mirrors this machine's apt uses (deb822 .sources or one-line lists), else Debian's own.
uris=$({ cat /etc/apt/sources.list.d/*.sources 2>/dev/null | sed -n 's/^URIs: *//p'
	grep -hs '^deb ' /etc/apt/sources.list /etc/apt/sources.list.d/*.list | awk '{print $2}'; } || true)
mirror=${TV_DEBIAN_MIRROR:-$(tr ' ' '\n' <<<"$uris" | grep -m1 -E '/debian/?$' || echo http://deb.debian.org/debian)}
security=${TV_DEBIAN_SECURITY:-$(tr ' ' '\n' <<<"$uris" | grep -m1 -E '/debian-security/?$' || echo http://deb.debian.org/debian-security)}
mirror=${mirror%/} security=${security%/}

cache=target/fresh-debian
mkdir -p "$cache"
base=$cache/base-bookworm-minbase-$(sed 's#[^A-Za-z0-9]#_#g' <<<"$mirror").tar
if [[ ! -s $base ]]; then
	boot=$(mktemp -d "$cache/boot.XXXXXX")
	debootstrap --variant=minbase bookworm "$boot" "$mirror" >"$cache/debootstrap.log" 2>&1 ||
		{ tail -20 "$cache/debootstrap.log" >&2; rm -rf --one-file-system "$boot"; fail "debootstrap from $mirror"; }
	tar -C "$boot" -cf "$base.tmp" . && mv "$base.tmp" "$base"
	rm -rf --one-file-system "$boot"
	say "debootstrap --variant=minbase bookworm from $mirror, cached as $base"
fi
case $phase in
all) root=$(mktemp -d "$cache/root.XXXXXX") ;;
builds) rm -rf --one-file-system "$kept" && mkdir -p "$kept" && root=$(cd "$kept" && pwd) ;;
serve) [[ -d $kept/src/tcpvigil ]] || fail "no root built in $kept (run --builds first)"; root=$(cd "$kept" && pwd) ;;
esac
daemon=""
cleanup() {
	[[ -n $daemon ]] && { kill -TERM -- "-$daemon" 2>/dev/null; wait "$daemon" 2>/dev/null; }
	# The mounts lived in the namespaces of the unshare runs, which are gone: nothing but the root's
	# own files is under it (--one-file-system guards that anyway). --builds keeps it for --serve.
	[[ ${TV_FRESH_KEEP:-0} == 1 || $phase == builds ]] || rm -rf --one-file-system "$root"
}
trap cleanup EXIT
if [[ $phase != serve ]]; then
	tar -C "$root" -xf "$base"
	cat >"$root/etc/apt/sources.list" <<-EOF
	deb $mirror bookworm main
	deb $mirror bookworm-updates main
	deb $security bookworm-security main
	EOF
	# A chroot's convention: package installs do not start services (prometheus, ...) in it.
	printf '#!/bin/sh\nexit 101\n' >"$root/usr/sbin/policy-rc.d" && chmod 0755 "$root/usr/sbin/policy-rc.d"
	cp -L /etc/resolv.conf "$root/etc/resolv.conf"
	# Where HTTPS leaves through an inspecting proxy, its CA is in the host's local CA store: the root
	# trusts the same certificates (ca-certificates, which install-deps.sh installs, adds them).
	if compgen -G '/usr/local/share/ca-certificates/*.crt' >/dev/null; then
		mkdir -p "$root/usr/local/share/ca-certificates"
		cp /usr/local/share/ca-certificates/*.crt "$root/usr/local/share/ca-certificates/"
	fi
	mkdir -p "$root/src/tcpvigil"
	git ls-files -z --cached --others --exclude-standard | xargs -0 -r sh -c 'for f; do [ -e "$f" ] && printf "%s\0" "$f"; done' sh |
		tar --null -T - -cf - | tar -C "$root/src/tcpvigil" -xf -
	say "fresh root $root: $(du -sh --exclude=src "$root" | cut -f1), checkout copied ($(du -sh "$root/src" | cut -f1))"
fi

# in_root LOG COMMAND...: COMMAND in the root's /src/tcpvigil, with /proc, /sys, /dev, /tmp mounted
# in a private mount namespace, a clean environment, output to LOG; its own session and process
# group (IN_ROOT_EXEC=1 in a background subshell: that subshell's pid is the group's id).
in_root() {
	local log=$1
	shift
	${IN_ROOT_EXEC:+exec} setsid unshare --mount --propagation private -- /bin/bash -c '
		set -e
		r=$1; shift
		mount -t proc proc "$r/proc"
		mount --rbind /sys "$r/sys"
		mount --rbind /dev "$r/dev"
		mount -t tmpfs -o mode=1777 tmpfs "$r/tmp"
		mount -t tmpfs tmpfs "$r/run"
		if [[ -n ${TV_FRESH_CACHE:-} ]]; then
			mkdir -p "$TV_FRESH_CACHE/registry" "$TV_FRESH_CACHE/target" "$r/root/.cargo/registry" "$r/src/tcpvigil/target"
			mount --bind "$TV_FRESH_CACHE/registry" "$r/root/.cargo/registry"
			mount --bind "$TV_FRESH_CACHE/target" "$r/src/tcpvigil/target"
		fi
		exec chroot "$r" /usr/bin/env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
			HOME=/root LANG=C.UTF-8 TERM=dumb CI="${CI:-}" /bin/bash -c "cd /src/tcpvigil && $*"
	' in_root "$root" "$@" >"$log" 2>&1
}
logs=target/fresh-debian/logs
mkdir -p "$logs"

if [[ $phase != serve ]]; then
	# 1. run.sh's install and build (everything it does before `tcpvigil check`).
	in_root "$logs/run-build.log" TV_RUN_ONLY_BUILD=1 bash scripts/run.sh ||
		{ tail -30 "$logs/run-build.log" >&2; fail "run.sh: install and build (log: $logs/run-build.log)"; }
	toolchain=$(sed -n 's/^install-deps: Rust toolchain: //p' "$logs/run-build.log" | tail -1)
	[[ -n $toolchain ]] || fail "run.sh did not report its Rust toolchain"
	say "run.sh installed the dependencies and built the release binary with $toolchain"

	# 3. test.sh's install and build steps.
	in_root "$logs/test-build.log" TV_TEST_ONLY_BUILD=1 bash scripts/test.sh ||
		{ tail -30 "$logs/test-build.log" >&2; fail "test.sh: install, format or build (log: $logs/test-build.log)"; }
	grep -q 'stopping after the build' "$logs/test-build.log" || fail "test.sh did not reach the end of its build step"
	say "test.sh: install, format and build steps passed"
fi

if [[ $phase == builds ]]; then
	say "builds done; the root stays in $root for --serve"
	exit 0
fi
# 2. run.sh itself: check, then the daemon until /metrics has tcpvigil_ series.
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
if [[ -n ${TV_LOCK:-} ]]; then
	exec {lockfd}>"$TV_LOCK"
	waited=$SECONDS
	flock "$lockfd"
	say "waited $((SECONDS - waited)) s for $TV_LOCK"
fi
(IN_ROOT_EXEC=1 in_root "$logs/run.log" bash scripts/run.sh --listen "127.0.0.1:$port") &
daemon=$!
n=0
for _ in $(seq 120); do
	n=$(curl -sf --max-time 2 "http://127.0.0.1:$port/metrics" | grep -c '^tcpvigil_' || true)
	[[ $n -gt 10 ]] && break
	kill -0 "$daemon" 2>/dev/null || break
	sleep 0.5
done
# SIGTERM to the root's process group (run.sh execs the daemon in it); wait until the daemon has
# detached its hooks and exited.
kill -TERM -- "-$daemon" 2>/dev/null || true
for _ in $(seq 60); do kill -0 -- "-$daemon" 2>/dev/null || break; sleep 0.25; done
wait "$daemon" 2>/dev/null || true
daemon=""
[[ -n ${lockfd:-} ]] && flock -u "$lockfd"
[[ $n -gt 10 ]] || { tail -30 "$logs/run.log" >&2; fail "run.sh: the daemon did not serve /metrics on 127.0.0.1:$port (log: $logs/run.log)"; }
grep -q 'where tcpvigil writes' "$logs/run.log" || fail "run.sh: no start-up line in $logs/run.log"
say "run.sh: tcpvigil check passed and the daemon served /metrics ($n tcpvigil_ series)"

toolchain=${toolchain:-$(sed -n 's/^install-deps: Rust toolchain: //p' "$logs/run-build.log" | tail -1)}
say "done: a fresh Debian 12 ran run.sh and test.sh's build with $toolchain"
