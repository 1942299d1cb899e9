#!/usr/bin/env bash
# install.sh: puts tcpvigil in place: the binary, the systemd unit, the default config and the
# logrotate snippet (existing ones are kept) and the Prometheus rules; then checks the installed
# config with the installed binary.
#
#   bash scripts/install.sh                          # as root: builds (release) and installs into /
#   DESTDIR=/tmp/root bash scripts/install.sh        # into a staging root (packaging; CI does this)
#   TCPVIGIL_BIN=target/debug/tcpvigil bash scripts/install.sh   # this binary instead of a build
#
# Not done here: `systemctl daemon-reload && systemctl enable --now tcpvigil`, and adding the
# rules to Prometheus' rule_files (deploy/README.md).
set -euo pipefail
cd "$(dirname "$0")/.."
dest=${DESTDIR:-}
bin=${TCPVIGIL_BIN:-}
if [[ -z "$bin" ]]; then
	source scripts/toolchain.sh
	tv_use_toolchain
	cargo build --release --locked -p tcpvigil
	bin=${CARGO_TARGET_DIR:-target}/release/tcpvigil
fi
[[ -x "$bin" ]] || { echo "install.sh: no binary at $bin" >&2; exit 2; }

install -D -m 0755 "$bin" "$dest/usr/local/bin/tcpvigil"
install -d -m 0755 "$dest/etc/tcpvigil"
if [[ -e "$dest/etc/tcpvigil/tcpvigil.toml" ]]; then
	echo "install.sh: keeping the existing $dest/etc/tcpvigil/tcpvigil.toml (the default is deploy/tcpvigil.toml)"
else
	install -m 0644 deploy/tcpvigil.toml "$dest/etc/tcpvigil/tcpvigil.toml"
fi
if [[ -e "$dest/etc/logrotate.d/tcpvigil" ]]; then
	echo "install.sh: keeping the existing $dest/etc/logrotate.d/tcpvigil (the default is deploy/logrotate/tcpvigil)"
else
	install -D -m 0644 deploy/logrotate/tcpvigil "$dest/etc/logrotate.d/tcpvigil"
fi
install -D -m 0644 deploy/systemd/tcpvigil.service "$dest/etc/systemd/system/tcpvigil.service"
install -D -m 0644 deploy/prometheus/tcpvigil.rules.yml "$dest/etc/prometheus/rules/tcpvigil.rules.yml"

# What the unit's ExecStartPre does at every start: a bad config stops here with exit 2.
"$dest/usr/local/bin/tcpvigil" run --check-config --config "$dest/etc/tcpvigil/tcpvigil.toml"
echo "install.sh: installed under ${dest:-/}: usr/local/bin/tcpvigil, etc/tcpvigil/tcpvigil.toml," \
	"etc/logrotate.d/tcpvigil, etc/systemd/system/tcpvigil.service, etc/prometheus/rules/tcpvigil.rules.yml"
if [[ -z "$dest" ]]; then
	echo "next: systemctl daemon-reload && systemctl enable --now tcpvigil"
fi
