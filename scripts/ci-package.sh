#!/usr/bin/env bash
# ci-package.sh: builds the .deb, lints it lightly, installs it with dpkg, runs the installed unit's commands, scrapes, removes and purges.
#
# Here, on the host (whose PID 1 is not systemd): the unit's ExecStartPre and ExecStart are run
# by hand as root (with --listen 127.0.0.1:0 and a ready file added, so that a daemon already on
# :9977 cannot collide), and `systemd-analyze verify` checks the installed unit. The
# systemctl-managed lifecycle is scripts/ci-systemd.sh (systemd as PID 1 of a container). CI packages the debug binary scripts/test.sh already built (stripped): a
# release build of the workspace would cost minutes; `bash scripts/package-deb.sh` builds release.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/toolchain.sh # a cargo at least as new as rust-version (Debian's when rustup's is older)
tv_use_toolchain
start=$SECONDS
fail() { echo "ci-package: FAIL: $*" >&2; exit 1; }
ok() { echo "ci-package: ok: $*"; }
[[ $(id -u) -eq 0 ]] || fail "needs root (dpkg -i)"
dpkg -s tcpvigil >/dev/null 2>&1 && fail "a tcpvigil package is already installed here; remove it first"

bin=${TCPVIGIL_BIN:-target/debug/tcpvigil}
[[ -x $bin ]] || cargo build --locked -p tcpvigil --bin tcpvigil
deb=$(TCPVIGIL_BIN=$bin bash scripts/package-deb.sh)
ok "built $deb ($(du -h "$deb" | cut -f1)) in $((SECONDS - start)) s"

# --- light lint (what lintian would flag first) ---
x=$(mktemp -d)
state_backup=""
cleanup() {
	rm -rf "$x"
	[[ -n $state_backup ]] && { rm -rf /var/lib/tcpvigil; mv "$state_backup" /var/lib/tcpvigil; }
	[[ -n ${pid:-} ]] && kill "$pid" 2>/dev/null || true
}
trap cleanup EXIT
dpkg-deb -x "$deb" "$x/root"
dpkg-deb -e "$deb" "$x/ctl"
for f in Package Version Architecture Maintainer Installed-Size Depends Section Priority Description; do
	[[ -n $(dpkg-deb -f "$deb" "$f") ]] || fail "control lacks $f"
done
while read -r c; do [[ -f $x/root$c ]] || fail "conffile $c not in the package"; done < "$x/ctl/conffiles"
(cd "$x/root" && md5sum --quiet -c "$x/ctl/md5sums") || fail "md5sums do not match"
bad_owner=$(dpkg-deb -c "$deb" | awk '$2 != "root/root"')
[[ -z $bad_owner ]] || fail "files not owned by root: $bad_owner"
dpkg-deb -c "$deb" | awk '{print $6}' | grep -q '^\./usr/local' && fail "files under /usr/local"
bad_mode=$(find "$x/root" \( -type f ! -perm 0644 ! -perm 0755 \) -o \( -type d ! -perm 0755 \))
[[ -z $bad_mode ]] || fail "unusual modes: $bad_mode"
for s in postinst prerm postrm; do sh -n "$x/ctl/$s" || fail "$s: syntax"; done
[[ -s $x/root/usr/share/doc/tcpvigil/copyright && -s $x/root/usr/share/doc/tcpvigil/changelog.gz ]] || fail "no copyright/changelog"
readelf -S "$x/root/usr/bin/tcpvigil" | grep -q '\.debug_info' && fail "the binary is not stripped"
for sub in run record watch analyze plot check; do
	zcat "$x/root/usr/share/man/man1/tcpvigil-$sub.1.gz" | grep -q '^\.TH' || fail "man page of $sub"
done
grep -q '^ExecStart=/usr/bin/tcpvigil run' "$x/root/lib/systemd/system/tcpvigil.service" || fail "unit ExecStart"
grep -q '/usr/local' "$x/root/lib/systemd/system/tcpvigil.service" && fail "unit refers to /usr/local"
grep -qx /etc/logrotate.d/tcpvigil "$x/ctl/conffiles" || fail "the logrotate snippet is not a conffile"
ok "lint: control fields, conffiles, md5sums, owners, modes, scripts, copyright, stripped, man pages, unit paths"

# --- install ---
if [[ -e /var/lib/tcpvigil ]]; then # left by a foreground run on a dev machine; put back at exit
	state_backup=$(mktemp -d)/tcpvigil
	mv /var/lib/tcpvigil "$state_backup"
fi
DEBIAN_FRONTEND=noninteractive dpkg -i "$deb" >/dev/null
[[ $(dpkg-query -W -f '${Status}' tcpvigil) == "install ok installed" ]] || fail "not installed"
/usr/bin/tcpvigil --version
bash -c '. /usr/share/bash-completion/completions/tcpvigil && complete -p tcpvigil' >/dev/null || fail "bash completion"
if command -v systemd-analyze >/dev/null; then
	systemd-analyze verify /lib/systemd/system/tcpvigil.service || fail "systemd-analyze verify"
	ok "systemd-analyze verify of the installed unit"
fi

# The logrotate snippet as logrotate reads it (-d: debug, nothing is rotated). The rotation itself
# against the running service (postrotate's SIGHUP through systemctl) is in scripts/ci-systemd.sh.
if command -v logrotate >/dev/null; then
	logrotate -d -s "$x/logrotate.state" /etc/logrotate.d/tcpvigil >"$x/logrotate.txt" 2>&1 ||
		{ cat "$x/logrotate.txt" >&2; fail "logrotate -d /etc/logrotate.d/tcpvigil"; }
	grep -q 'rotating pattern: /var/log/tcpvigil/\*.jsonl' "$x/logrotate.txt" ||
		{ cat "$x/logrotate.txt" >&2; fail "logrotate does not read the pattern of /etc/logrotate.d/tcpvigil"; }
	grep -qi 'error' "$x/logrotate.txt" && { cat "$x/logrotate.txt" >&2; fail "logrotate -d reports an error"; }
	ok "logrotate -d reads /etc/logrotate.d/tcpvigil without error"
else
	fail "logrotate is not installed (scripts/install-deps.sh)"
fi

# --- the unit's commands, by hand ---
unit=/lib/systemd/system/tcpvigil.service
pre=$(sed -n 's/^ExecStartPre=//p' "$unit")
cmd=$(sed -n 's/^ExecStart=//p' "$unit")
$pre >/dev/null || fail "ExecStartPre: $pre"
ready=$x/ready
# shellcheck disable=SC2086 # the unit's command line, word-split as systemd does
$cmd --listen 127.0.0.1:0 --ready-file "$ready" 2>"$x/log" &
pid=$!
for _ in $(seq 300); do [[ -s $ready ]] && break; kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
[[ -s $ready ]] || { cat "$x/log" >&2; fail "the installed daemon did not become ready"; }
addr=$(cat "$ready")
metrics=$(curl -sf "http://$addr/metrics") || fail "scrape"
n=$(grep -c '^tcpvigil_' <<<"$metrics" || true)
[[ $n -gt 10 ]] || fail "only $n tcpvigil_ series"
curl -sf "http://$addr/healthz" >/dev/null || fail "/healthz"
grep -q 'where tcpvigil writes' "$x/log" || fail "no start-up line saying where it writes"
grep -q $'\e' "$x/log" && fail "ANSI escapes in the log file"
kill -TERM "$pid"
wait "$pid" || fail "the daemon did not exit cleanly on SIGTERM"
pid=""
ok "installed ExecStart ran, $n tcpvigil_ series scraped from $addr, clean exit on SIGTERM"

# --- remove keeps the conffile, purge leaves nothing ---
files=$(dpkg-query -L tcpvigil)
dpkg -r tcpvigil >/dev/null
[[ ! -e /usr/bin/tcpvigil ]] || fail "binary left after remove"
[[ -f /etc/tcpvigil/tcpvigil.toml ]] || fail "remove deleted the conffile (policy: kept until purge)"
[[ $(dpkg-query -W -f '${Status}' tcpvigil) == "deinstall ok config-files" ]] || fail "state after remove"
dpkg -P tcpvigil >/dev/null
left=""
while read -r f; do
	[[ ( -f $f || -L $f ) && ! -d $f ]] && left+=" $f"
	[[ -d $f && $f == *tcpvigil* ]] && left+=" $f"
done <<<"$files"
for d in /etc/tcpvigil /var/lib/tcpvigil /var/lib/private/tcpvigil /var/log/tcpvigil; do [[ -e $d ]] && left+=" $d"; done
ls /var/lib/dpkg/info/tcpvigil.* >/dev/null 2>&1 && left+=" /var/lib/dpkg/info/tcpvigil.*"
[[ -z $left ]] || fail "left after purge:$left"
ok "remove kept /etc/tcpvigil/tcpvigil.toml; purge removed every file, the config, dumps and state"
echo "ci-package: done in $((SECONDS - start)) s"
