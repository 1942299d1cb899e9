#!/usr/bin/env bash
# install-deps.sh: installs the Debian packages tcpvigil needs to build and test (idempotent).
set -euo pipefail
pkgs=(clang llvm libelf-dev zlib1g-dev pkg-config make gcc libbpf-dev linux-libc-dev
      iperf3 nftables iptables iproute2 tcpdump ethtool procps iputils-ping
      bpftool fonts-dejavu-core
      curl python3                                # lab fuzz and the issue-11 scenarios: curl, http.server, py/tcpflow.py
      tmux                                        # the watch test runs the view in a real terminal
      python3-jsonschema                          # events against docs/schema (scripts/validate-events.py)
      curl binutils systemd                       # ci-package.sh: scrape, readelf/strip, systemd-analyze verify
      buildah podman runc python3-yaml            # ci-image.sh: the image from scratch, run as the DaemonSet says
      util-linux python3 curl                     # robust_*: unshare, the RTO test's sender/receiver, scrapes
      qemu-system-x86 busybox-static xz-utils    # the kernel matrix (scripts/vm-matrix.sh)
      prometheus)   # prometheus + promtool: agent/tests/prometheus runs the server binary directly
missing=()
for p in "${pkgs[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  echo "install-deps: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q
  apt-get install -y -q --no-install-recommends "${missing[@]}"
fi
