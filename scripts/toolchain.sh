# toolchain.sh: sourced by the scripts that run cargo: makes `cargo` on PATH one at least as new as the workspace's rust-version.
#
# A rustup toolchain on PATH that is new enough is used as it is. Otherwise Debian's toolchain
# (rustc-web/cargo-web, installed by scripts/install-deps.sh as /usr/bin/cargo, /usr/bin/rustc,
# /usr/bin/rustfmt) is put first on PATH, so that cargo, the rustc it calls and `cargo fmt` are
# one toolchain.
#
#   source scripts/toolchain.sh; tv_use_toolchain || exit 1

# The workspace's minimum Rust, from Cargo.toml ([workspace.package] rust-version).
tv_rust_version() {
	sed -n 's/^rust-version *= *"\([0-9.]*\)".*/\1/p' "$(dirname "${BASH_SOURCE[0]}")/../Cargo.toml" | head -1
}

# tv_toolchain_ok DIR: DIR's cargo and rustc (or, with no DIR, those on PATH) are at least rust-version.
tv_toolchain_ok() {
	local need tool v
	need=$(tv_rust_version)
	for tool in cargo rustc; do
		[[ -n ${1:-} ]] && tool=$1/$tool
		v=$("$tool" --version 2>/dev/null | awk '{print $2}') || return 1
		v=${v%%-*} # 1.85.0-nightly -> 1.85.0
		[[ -n $v ]] && printf '%s\n%s\n' "$need" "$v" | sort -V -C || return 1
	done
}

# Puts a new enough toolchain first on PATH (PATH's own, else /usr/bin's); fails when there is none.
tv_use_toolchain() {
	tv_toolchain_ok && return 0
	if tv_toolchain_ok /usr/bin; then
		export PATH="/usr/bin:$PATH"
		return 0
	fi
	echo "no cargo/rustc at least $(tv_rust_version) (the workspace's rust-version) on PATH or in /usr/bin:" \
		"run scripts/install-deps.sh (Debian 12: rustc-web/cargo-web)" >&2
	return 1
}
