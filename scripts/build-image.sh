#!/usr/bin/env bash
# build-image.sh: builds the tcpvigil OCI image from scratch with buildah (no base image, no registry).
#
#   bash scripts/build-image.sh                    # release build, image localhost/tcpvigil:VERSION
#   TCPVIGIL_BIN=target/debug/tcpvigil bash scripts/build-image.sh   # this binary (CI)
#   TCPVIGIL_IMAGE_ARCHIVE=target/oci/tcpvigil.tar bash scripts/build-image.sh  # also an OCI archive
#
# The image holds the stripped binary, the shared libraries `ldd` lists for it (glibc, libelf,
# zlib, libgcc_s), the DejaVu fonts the dump pictures use, the default config and an empty
# /var/lib/tcpvigil for dumps. Everything else (BTF, cgroup2, the host's /proc) comes from the
# host: see deploy/kubernetes/daemonset.yaml.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v buildah >/dev/null || { echo "build-image: buildah is not installed (apt-get install buildah)" >&2; exit 2; }
bin=${TCPVIGIL_BIN:-}
if [[ -z "$bin" ]]; then
	cargo build --release --locked -p tcpvigil --bin tcpvigil
	bin=${CARGO_TARGET_DIR:-target}/release/tcpvigil
fi
[[ -x "$bin" ]] || { echo "build-image: no binary at $bin" >&2; exit 2; }
version=$(awk -F'"' '/^version *=/ {print $2; exit}' agent/Cargo.toml)
image=${TCPVIGIL_IMAGE:-localhost/tcpvigil:$version}

stage=$(mktemp -d)
ctr=""
trap 'rm -rf "$stage"; [[ -n $ctr ]] && buildah rm "$ctr" >/dev/null 2>&1 || true' EXIT
install -D -m 0755 "$bin" "$stage/usr/bin/tcpvigil"
strip --strip-unneeded "$stage/usr/bin/tcpvigil"
# The loader and every library the binary links, at the paths ldd resolves (and /lib64 for the
# interpreter the ELF header names).
for lib in $(ldd "$bin" | awk '/=>/ {print $3} /^\t\// {print $1}'); do
	install -D -m 0755 "$(readlink -f "$lib")" "$stage$lib"
done
interp=$(readelf -l "$bin" | sed -n 's/.*Requesting program interpreter: \(.*\)]/\1/p')
[[ -e $stage$interp ]] || install -D -m 0755 "$(readlink -f "$interp")" "$stage$interp"
if [[ -d /usr/share/fonts/truetype/dejavu ]]; then
	mkdir -p "$stage/usr/share/fonts/truetype"
	cp -r /usr/share/fonts/truetype/dejavu "$stage/usr/share/fonts/truetype/"
fi
install -D -m 0644 deploy/tcpvigil.toml "$stage/etc/tcpvigil/tcpvigil.toml"
install -d -m 0755 "$stage/var/lib/tcpvigil" "$stage/tmp"
chmod 1777 "$stage/tmp"
printf 'root:x:0:0:root:/:/usr/bin/tcpvigil\n' > "$stage/etc/passwd"
printf 'root:x:0:\n' > "$stage/etc/group"

ctr=$(buildah from scratch)
buildah copy "$ctr" "$stage" / >/dev/null
buildah config \
	--entrypoint '["/usr/bin/tcpvigil"]' \
	--cmd '["run", "--config", "/etc/tcpvigil/tcpvigil.toml"]' \
	--env TCPVIGIL_LOG=info \
	--port 9977/tcp \
	--label org.opencontainers.image.title=tcpvigil \
	--label org.opencontainers.image.version="$version" \
	--label org.opencontainers.image.revision="$(git rev-parse HEAD 2>/dev/null || echo unknown)" \
	--label org.opencontainers.image.licenses=GPL-2.0-only \
	--label org.opencontainers.image.description="TCP loss-recovery observability agent (eBPF)" \
	"$ctr"
buildah commit --rm -q "$ctr" "$image" >/dev/null
ctr=""
if [[ -n ${TCPVIGIL_IMAGE_ARCHIVE:-} ]]; then
	mkdir -p "$(dirname "$TCPVIGIL_IMAGE_ARCHIVE")"
	rm -f "$TCPVIGIL_IMAGE_ARCHIVE"
	buildah push -q "$image" "oci-archive:$TCPVIGIL_IMAGE_ARCHIVE:$image" >/dev/null
fi
echo "$image"
