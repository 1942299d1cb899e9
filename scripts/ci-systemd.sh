#!/usr/bin/env bash
# ci-systemd.sh: the .deb under a real systemd: install (enabled + started by postinst), scrape, journal priorities, reload, stop/start, remove, purge.
#
# This machine's PID 1 is not systemd, so systemd runs as PID 1 of a podman container whose root
# is this machine's own root file system with a throw-away overlay on top (`--rootfs /:O`):
# nothing the test installs reaches the host. The container has its own network namespace (no
# port clash with a daemon on the host); the BPF hooks are global anyway. The unit runs with every
# hardening directive it has (DynamicUser, ProtectSystem, SystemCallFilter, ...), Type=notify.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/toolchain.sh # a cargo at least as new as rust-version (Debian's when rustup's is older)
tv_use_toolchain
start=$SECONDS
fail() { echo "ci-systemd: FAIL: $*" >&2; [[ -n ${name:-} ]] && podman exec "$name" journalctl -u tcpvigil --no-pager 2>/dev/null | tail -20 >&2; exit 1; }
ok() { echo "ci-systemd: ok: $*"; }
for t in podman runc; do command -v $t >/dev/null || fail "$t is not installed (scripts/install-deps.sh)"; done
[[ -x /lib/systemd/systemd ]] || fail "systemd is not installed (scripts/install-deps.sh)"
deb=$(ls -t target/deb/tcpvigil_*.deb 2>/dev/null | head -1 || true)
if [[ -z $deb ]]; then
	bin=${TCPVIGIL_BIN:-target/debug/tcpvigil}
	[[ -x $bin ]] || cargo build --locked -p tcpvigil --bin tcpvigil
	deb=$(TCPVIGIL_BIN=$bin bash scripts/package-deb.sh)
fi
deb=$(readlink -f "$deb")
name=tcpvigil-systemd-$$
work_log=$(mktemp)
trap 'podman rm -f "$name" >/dev/null 2>&1 || true; rm -f "$work_log"' EXIT
podman run -d --name "$name" --runtime runc --ulimit nofile=1024:1024 --ulimit nproc=4096:4096 \
	--systemd=always --tmpfs /tmp:rw,mode=1777,notmpcopyup --tmpfs /run:rw,notmpcopyup \
	--tmpfs /var/log/journal:rw,notmpcopyup --network none \
	--cap-add SYS_ADMIN,BPF,PERFMON,NET_ADMIN,SYS_PTRACE --volume "$(dirname "$deb")":/tv-deb:ro \
	--rootfs /:O /lib/systemd/systemd >/dev/null
ct() { podman exec "$name" "$@"; }
for _ in $(seq 60); do
	s=$(ct systemctl is-system-running 2>/dev/null || true)
	[[ $s == running || $s == degraded ]] && break
	sleep 0.5
done
[[ $s == running || $s == degraded ]] || fail "systemd did not come up ($s)"
ok "systemd is PID 1 of the container ($s)"
# Leftovers of foreground runs on a developer's machine would be migrated by DynamicUser=, which
# overlayfs refuses (EXDEV): start from a clean slate (in the overlay only).
ct rm -rf /var/lib/tcpvigil /var/lib/private/tcpvigil /etc/tcpvigil /var/log/tcpvigil

# The package through a volume: the container's /tmp is its own, and a checkout may live under the host's.
ct dpkg -i "/tv-deb/$(basename "$deb")" >"$work_log" 2>&1 || { tail -20 "$work_log"; fail "dpkg -i"; }
for _ in $(seq 60); do [[ $(ct systemctl is-active tcpvigil || true) == active ]] && break; sleep 0.5; done
[[ $(ct systemctl is-active tcpvigil || true) == active ]] || fail "not active after install"
[[ $(ct systemctl is-enabled tcpvigil || true) == enabled ]] || fail "not enabled after install"
pid=$(ct systemctl show -p MainPID --value tcpvigil)
n=$(ct curl -sf http://127.0.0.1:9977/metrics | grep -c '^tcpvigil_' || true)
[[ $n -gt 10 ]] || fail "only $n series on :9977"
ok "dpkg -i enabled and started tcpvigil.service (Type=notify, DynamicUser): $n tcpvigil_ series"

journal=$(ct journalctl -u tcpvigil -o json --no-pager)
python3 - "$journal" <<'PY' || fail "journal priorities"
import json, sys
lines = [json.loads(l) for l in sys.argv[1].splitlines() if l.strip()]
ours = [d for d in lines if d.get("SYSLOG_IDENTIFIER") == "tcpvigil" and "where tcpvigil writes" in str(d.get("MESSAGE"))]
assert ours, "no start-up line in the journal"
d = ours[-1]
assert d["PRIORITY"] == "6", d["PRIORITY"]
assert not str(d["MESSAGE"]).startswith("<") and "\x1b" not in str(d["MESSAGE"]), d["MESSAGE"]
assert "/var/lib/tcpvigil/dumps" in d["MESSAGE"], d["MESSAGE"]
PY
ok "journal: the start-up line at priority 6 (info), no <N> left in the text, no escapes, names the dump directory"

ct systemctl reload tcpvigil
sleep 1
[[ $(ct systemctl is-active tcpvigil) == active && $(ct systemctl show -p MainPID --value tcpvigil) == "$pid" ]] || fail "reload"
ct systemctl stop tcpvigil
[[ $(ct systemctl show -p ExecMainStatus --value tcpvigil) == 0 ]] || fail "exit status after stop"
ct systemctl start tcpvigil
[[ $(ct systemctl is-active tcpvigil) == active ]] || fail "start after stop"
ct test -d /var/lib/private/tcpvigil/dumps || fail "StateDirectory= dumps"
ok "reload (same PID), stop (exit 0), start; dumps under /var/lib/private/tcpvigil (DynamicUser)"

# The events file through the shipped logrotate snippet: a forced rotation renames it, postrotate's
# SIGHUP (systemctl kill) makes the running daemon create it anew, owned and moded as the first.
events=/var/log/tcpvigil/findings.jsonl
ct sed -i "s|^# events = \"$events\"|events = \"$events\"|" /etc/tcpvigil/tcpvigil.toml
ct grep -q "^events = \"$events\"" /etc/tcpvigil/tcpvigil.toml || fail "could not enable export.events in the config"
ct systemctl restart tcpvigil
for _ in $(seq 60); do ct test -f "$events" && break; sleep 0.5; done
ct test -f "$events" || fail "the daemon did not create $events"
pid=$(ct systemctl show -p MainPID --value tcpvigil)
first=$(ct stat -c '%U %a' "$events")
# No finding comes without traffic: a line makes the file worth rotating (notifempty).
ct sh -c "echo '{\"marker\":\"before the rotation\"}' >> $events"
ct logrotate -f /etc/logrotate.d/tcpvigil >"$work_log" 2>&1 || { cat "$work_log"; fail "logrotate -f /etc/logrotate.d/tcpvigil"; }
ct grep -q 'before the rotation' "$events.1" || fail "the rotated file $events.1 does not hold the line written before"
for _ in $(seq 40); do ct test -f "$events" && break; sleep 0.25; done
ct test -f "$events" || fail "after the rotation the daemon did not reopen (create) $events: postrotate's SIGHUP did not reach it"
ct grep -q 'before the rotation' "$events" && fail "the new $events holds the old line"
user=$(ct ps -o user= -p "$pid" | tr -d ' ')
[[ $first == "$user "* ]] || fail "$events was created by $first, not by the service's user $user"
[[ $(ct stat -c '%U %a' "$events") == "$first" ]] || fail "new $events: $(ct stat -c '%U %a' "$events"), the first was $first"
[[ $(ct systemctl show -p MainPID --value tcpvigil) == "$pid" ]] || fail "the daemon was restarted, not signalled"
ok "logrotate -f rotated $events; postrotate's SIGHUP made the daemon (same PID) create it anew ($first)"

ct dpkg -r tcpvigil >/dev/null 2>&1 || fail "dpkg -r"
[[ $(ct systemctl is-active tcpvigil || true) != active ]] || fail "still running after remove"
ct test -f /etc/tcpvigil/tcpvigil.toml || fail "remove deleted the conffile"
ct test ! -e /etc/systemd/system/multi-user.target.wants/tcpvigil.service || fail "still enabled after remove"
ct dpkg -P tcpvigil >/dev/null 2>&1 || fail "dpkg -P"
for p in /etc/tcpvigil /etc/logrotate.d/tcpvigil /var/lib/tcpvigil /var/lib/private/tcpvigil /lib/systemd/system/tcpvigil.service /usr/bin/tcpvigil; do
	ct test ! -e "$p" || fail "$p left after purge"
done
ok "remove stopped and disabled it and kept the conffile; purge left no config, state or dumps"
echo "ci-systemd: done in $((SECONDS - start)) s"
