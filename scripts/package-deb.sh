#!/usr/bin/env bash
# package-deb.sh: builds target/deb/tcpvigil_VERSION_ARCH.deb with dpkg-deb (no cargo-deb to install).
#
#   bash scripts/package-deb.sh                     # release build, then the package
#   TCPVIGIL_BIN=target/debug/tcpvigil bash scripts/package-deb.sh   # package this binary (CI)
#
# Contents: /usr/bin/tcpvigil (stripped), the hardened unit in /lib/systemd/system (ExecStart
# /usr/bin), /etc/tcpvigil/tcpvigil.toml and /etc/logrotate.d/tcpvigil as conffiles, Prometheus
# rules, an Alertmanager example and dashboards and the events schema under /usr/share/tcpvigil,
# the runbook of the alerts in /usr/share/doc/tcpvigil, man pages and bash/zsh/fish completions (from the
# binary's hidden `gen-docs`), maintainer scripts from deploy/debian.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${TCPVIGIL_BIN:-}
if [[ -z "$bin" ]]; then
	source scripts/toolchain.sh
	tv_use_toolchain
	cargo build --release --locked -p tcpvigil --bin tcpvigil
	bin=${CARGO_TARGET_DIR:-target}/release/tcpvigil
fi
[[ -x "$bin" ]] || { echo "package-deb: no binary at $bin" >&2; exit 2; }
version=$(awk -F'"' '/^version *=/ {print $2; exit}' agent/Cargo.toml)
arch=$(dpkg --print-architecture)
out=${TCPVIGIL_DEB_DIR:-target/deb}
root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT
chmod 0755 "$root"

install -d -m 0755 "$root/DEBIAN" "$root/usr/bin" "$root/lib/systemd/system" "$root/etc/tcpvigil" "$root/etc/logrotate.d" \
	"$root/usr/share/tcpvigil/prometheus" "$root/usr/share/tcpvigil/dashboards" "$root/usr/share/tcpvigil/schema" \
	"$root/usr/share/man/man1" "$root/usr/share/doc/tcpvigil" \
	"$root/usr/share/bash-completion/completions" "$root/usr/share/zsh/vendor-completions" \
	"$root/usr/share/fish/vendor_completions.d"
install -m 0755 "$bin" "$root/usr/bin/tcpvigil"
strip --strip-unneeded "$root/usr/bin/tcpvigil"
sed 's#/usr/local/bin/tcpvigil#/usr/bin/tcpvigil#g; s#^\# Installed by the README.s install command.*#\# Installed by the tcpvigil Debian package (scripts/package-deb.sh).#' \
	deploy/systemd/tcpvigil.service > "$root/lib/systemd/system/tcpvigil.service"
chmod 0644 "$root/lib/systemd/system/tcpvigil.service"
install -m 0644 deploy/tcpvigil.toml "$root/etc/tcpvigil/tcpvigil.toml"
install -m 0644 deploy/logrotate/tcpvigil "$root/etc/logrotate.d/tcpvigil"
install -m 0644 deploy/prometheus/tcpvigil.rules.yml deploy/prometheus/prometheus.yml deploy/prometheus/alertmanager.yml \
	"$root/usr/share/tcpvigil/prometheus/"
install -m 0644 dashboards/*.json "$root/usr/share/tcpvigil/dashboards/"
install -m 0644 docs/schema/events-v1.schema.json "$root/usr/share/tcpvigil/schema/"

gen=$(mktemp -d)
"$bin" gen-docs "$gen" >/dev/null
for m in "$gen"/man/*.1; do gzip -9n < "$m" > "$root/usr/share/man/man1/$(basename "$m").gz"; done
install -m 0644 "$gen/completions/tcpvigil.bash" "$root/usr/share/bash-completion/completions/tcpvigil"
install -m 0644 "$gen/completions/_tcpvigil" "$root/usr/share/zsh/vendor-completions/_tcpvigil"
install -m 0644 "$gen/completions/tcpvigil.fish" "$root/usr/share/fish/vendor_completions.d/tcpvigil.fish"
rm -rf "$gen"
install -m 0644 deploy/debian/copyright "$root/usr/share/doc/tcpvigil/copyright"
install -m 0644 README.md "$root/usr/share/doc/tcpvigil/README.md"
install -m 0644 deploy/README.md "$root/usr/share/doc/tcpvigil/README.deploy.md"
install -m 0644 docs/events.md "$root/usr/share/doc/tcpvigil/events.md"
install -m 0644 docs/runbook.md "$root/usr/share/doc/tcpvigil/runbook.md"
printf 'tcpvigil (%s) unstable; urgency=medium\n\n  * Package built from git %s.\n\n -- tcpvigil maintainers <tcpvigil@localhost>  %s\n' \
	"$version" "$(git rev-parse --short HEAD 2>/dev/null || echo unknown)" "$(date -R -d @"${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || date +%s)}")" \
	| gzip -9n > "$root/usr/share/doc/tcpvigil/changelog.gz"

install -m 0755 deploy/debian/postinst deploy/debian/prerm deploy/debian/postrm "$root/DEBIAN/"
printf '%s\n' /etc/tcpvigil/tcpvigil.toml /etc/logrotate.d/tcpvigil > "$root/DEBIAN/conffiles"
size=$(du -sk --exclude=DEBIAN "$root" | cut -f1)
cat > "$root/DEBIAN/control" <<CONTROL
Package: tcpvigil
Version: $version
Architecture: $arch
Maintainer: tcpvigil maintainers <tcpvigil@localhost>
Installed-Size: $size
Depends: libc6 (>= 2.34), libelf1 (>= 0.142), zlib1g (>= 1:1.2.0), libgcc-s1
Recommends: fonts-dejavu-core
Suggests: prometheus, logrotate
Section: net
Priority: optional
Homepage: https://github.com/tcpvigil/tcpvigil
Description: TCP loss-recovery observability agent for bulk transfers
 CO-RE eBPF programs watch the kernel's loss recovery per connection (SACK,
 retransmissions, lost retransmissions, congestion states, RTOs); a daemon turns
 that into diagnoses (communication stops with their cause and owner, unfair
 parallel streams, buffer and option limits), Prometheus metrics, JSON events and
 flight-recorder dumps. Runs as a hardened systemd service.
CONTROL
(cd "$root" && find . -type f ! -path './DEBIAN/*' -printf '%P\0' | sort -z | xargs -0 md5sum) > "$root/DEBIAN/md5sums"
chmod 0644 "$root/DEBIAN/control" "$root/DEBIAN/conffiles" "$root/DEBIAN/md5sums"
mkdir -p "$out"
deb="$out/tcpvigil_${version}_${arch}.deb"
dpkg-deb --root-owner-group -Zxz -z6 --build "$root" "$deb" >/dev/null
echo "$deb"
