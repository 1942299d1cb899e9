#!/usr/bin/env bash
# install-deps.sh: installs the Debian packages tcpvigil needs to build and test, and a Rust toolchain (idempotent).
#
# Rust: a cargo/rustc on PATH at least as new as the workspace's rust-version is used as it is;
# otherwise Debian 12's rustc-web/cargo-web/rustfmt-web (/usr/bin/cargo, rustc, rustfmt; 1.85 in
# bookworm, newer in bookworm-security) are installed, and scripts/toolchain.sh puts /usr/bin first.
set -euo pipefail
here=$(dirname "$0")
pkgs=(clang llvm libelf-dev zlib1g-dev pkg-config make gcc libbpf-dev linux-libc-dev
      iperf3 nftables iptables iproute2 tcpdump ethtool procps iputils-ping
      bpftool fonts-dejavu-core
      ca-certificates                             # cargo fetches crates over HTTPS (a minimal Debian has no CA bundle)
      curl python3                                # lab fuzz and the issue-11 scenarios: curl, http.server, py/tcpflow.py
      tmux                                        # the watch test runs the view in a real terminal
      python3-jsonschema                          # events against docs/schema (scripts/validate-events.py)
      curl binutils systemd                       # ci-package.sh: scrape, readelf/strip, systemd-analyze verify
      buildah podman runc python3-yaml            # ci-image.sh: the image from scratch, run as the DaemonSet says
      util-linux python3 curl                     # robust_*: unshare, the RTO test's sender/receiver, scrapes
      qemu-system-x86 busybox-static xz-utils    # the kernel matrix (scripts/vm-matrix.sh)
      prometheus                                  # prometheus + promtool: agent/tests/prometheus runs the server binary directly
      prometheus-alertmanager                     # ci-export.sh: the inhibit rules of deploy/prometheus/alertmanager.yml, live
      logrotate                                   # ci-package.sh, ci-systemd.sh: deploy/logrotate/tcpvigil
      debootstrap)  # ci-fresh-debian.sh: a fresh Debian 12 root in which run.sh and test.sh's build run
missing=()
for p in "${pkgs[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  echo "install-deps: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q
  apt_updated=1
  apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

source "$here/toolchain.sh"
if ! tv_toolchain_ok && ! tv_toolchain_ok /usr/bin; then
  echo "install-deps: no cargo/rustc at least $(tv_rust_version) (Cargo.toml's rust-version): installing Debian's rustc-web, cargo-web, rustfmt-web"
  export DEBIAN_FRONTEND=noninteractive
  [ "${apt_updated:-0}" = 1 ] || apt-get update -q
  apt-get install -y -q --no-install-recommends rustc-web cargo-web rustfmt-web
  if ! tv_toolchain_ok /usr/bin; then
    echo "install-deps: Debian's toolchain here is $(/usr/bin/rustc --version 2>/dev/null || echo missing), older than" \
      "$(tv_rust_version): bookworm carries 1.85, bookworm-security newer; add bookworm-security to the apt sources" \
      "(deb http://deb.debian.org/debian-security bookworm-security main) and rerun" >&2
    exit 1
  fi
fi
tv_use_toolchain
echo "install-deps: Rust toolchain: $(cargo --version), $(rustc --version) ($(command -v cargo))"
