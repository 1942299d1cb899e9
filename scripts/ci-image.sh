#!/usr/bin/env bash
# ci-image.sh: builds the OCI image from scratch and runs deploy/kubernetes/daemonset.yaml's container spec in podman: check, run, scrape.
#
# The container runs as the manifest says: its args, its capabilities (and no others), a
# read-only root, host network and PID namespaces, its host mounts (BTF, the cgroup root, the
# dump directory) and the ConfigMap's config; only the node IP and port are replaced (127.0.0.1
# and a free port). Also: with CAP_BPF alone the agent must refuse to start (exit 2).
# Podman here: runc (crun refuses this machine's hybrid cgroup layout) and rlimits no higher than
# the caller's (it lacks CAP_SYS_RESOURCE to raise them).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/toolchain.sh # a cargo at least as new as rust-version (Debian's when rustup's is older)
tv_use_toolchain
start=$SECONDS
fail() { echo "ci-image: FAIL: $*" >&2; exit 1; }
ok() { echo "ci-image: ok: $*"; }
for t in buildah podman runc; do command -v $t >/dev/null || fail "$t is not installed (scripts/install-deps.sh)"; done

bin=${TCPVIGIL_BIN:-target/debug/tcpvigil}
[[ -x $bin ]] || cargo build --locked -p tcpvigil --bin tcpvigil
archive=target/oci/tcpvigil.tar
image=$(TCPVIGIL_BIN=$bin TCPVIGIL_IMAGE_ARCHIVE=$archive bash scripts/build-image.sh)
tar tf "$archive" | grep -qx 'index.json' || fail "$archive is not an OCI archive"
size=$(podman image inspect "$image" --format '{{.Size}}')
ok "built $image from scratch ($((size / 1000000)) MB; OCI archive $archive) in $((SECONDS - start)) s"

work=$(mktemp -d)
name=tcpvigil-ci-$$
cleanup() { podman rm -f "$name" >/dev/null 2>&1 || true; rm -rf "$work"; }
trap cleanup EXIT
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
# The manifest's container as podman arguments (one per line), and its config.
python3 - "$image" "$port" "$work" <<'PY' > "$work/args"
import sys, yaml
image, port, work = sys.argv[1], sys.argv[2], sys.argv[3]
docs = list(yaml.safe_load_all(open("deploy/kubernetes/daemonset.yaml")))
cm = next(d for d in docs if d["kind"] == "ConfigMap")
ds = next(d for d in docs if d["kind"] == "DaemonSet")
pod = ds["spec"]["template"]["spec"]
c = pod["containers"][0]
sc = c["securityContext"]
unit = open("deploy/systemd/tcpvigil.service").read()
caps = next(l.split("=", 1)[1].split() for l in unit.splitlines() if l.startswith("CapabilityBoundingSet="))
assert sorted("CAP_" + x for x in sc["capabilities"]["add"]) == sorted(caps), (sc["capabilities"], caps)
assert sc["capabilities"]["drop"] == ["ALL"] and not sc.get("privileged")
assert pod["hostNetwork"] and pod["hostPID"]
paths = [v["hostPath"]["path"] for v in pod["volumes"] if "hostPath" in v]
assert not any(p.startswith("/boot") for p in paths), paths
open(f"{work}/tcpvigil.toml", "w").write(cm["data"]["tcpvigil.toml"])
out = ["--network=host", "--pid=host", "--cap-drop=all"]
out += [f"--cap-add={x}" for x in sc["capabilities"]["add"]]
if sc.get("readOnlyRootFilesystem"):
    out.append("--read-only")
vols = {v["name"]: v for v in pod["volumes"]}
for m in c["volumeMounts"]:
    v = vols[m["name"]]
    src = f"{work}" if "configMap" in v else v["hostPath"]["path"]
    if v["name"] == "dumps":
        src = f"{work}/dumps"
    out.append(f"--volume={src}:{m['mountPath']}" + (":ro" if m.get("readOnly") else ""))
out.append(image)
for a in c["args"]:
    out.append(a.replace("$(NODE_IP):9977", f"127.0.0.1:{port}"))
print("\n".join(out))
PY
mkdir -p "$work/dumps"
mapfile -t args < "$work/args"
ok "manifest: capabilities = the unit's ($(grep -c -- --cap-add "$work/args")), drop ALL, hostNetwork, hostPID, no /boot"
common=(--runtime runc --ulimit nofile=1024:1024 --ulimit nproc=4096:4096)

# check, with the manifest's capabilities and mounts (everything but the args).
check_args=("${args[@]}")
idx=0; for i in "${!check_args[@]}"; do [[ ${check_args[$i]} == "$image" ]] && idx=$i; done
podman run --rm "${common[@]}" "${check_args[@]:0:$((idx + 1))}" check > "$work/check" 2>&1 || { cat "$work/check"; fail "tcpvigil check in the image"; }
grep -q "with BTF" "$work/check" && grep -q "cgroup-v2 root: /" "$work/check" || { cat "$work/check"; fail "check output"; }
ok "tcpvigil check in the image: $(grep -c preferred "$work/check") preferred, $(grep -c fallback "$work/check") fallback variants; cgroup-v2 root found"

# run, as the DaemonSet starts it; scrape; stop.
podman run -d --name "$name" "${common[@]}" "${args[@]}" >/dev/null
for _ in $(seq 100); do curl -sf "http://127.0.0.1:$port/healthz" >/dev/null && break; sleep 0.2; done
metrics=$(curl -sf "http://127.0.0.1:$port/metrics") || { podman logs "$name" | tail -20; fail "scrape"; }
n=$(grep -c '^tcpvigil_' <<<"$metrics" || true)
[[ $n -gt 10 ]] || fail "only $n series"
# The log to a file first: `podman logs | head -1` under pipefail fails whenever head exits before
# podman has written everything (SIGPIPE), as it did in CI.
podman logs "$name" > "$work/log" 2>&1
head -1 "$work/log" | python3 -c 'import json,sys; json.loads(sys.stdin.readline())' || { head -3 "$work/log"; fail "--log-format json"; }
podman stop -t 15 "$name" >/dev/null
code=$(podman inspect "$name" --format '{{.State.ExitCode}}')
[[ $code == 0 ]] || { podman logs "$name" | tail; fail "exit code $code on SIGTERM"; }
ok "the DaemonSet's container ran: $n tcpvigil_ series scraped, JSON logs, exit 0 on SIGTERM"

# BPF, PERFMON and NET_ADMIN only, with a seccomp profile that lets bpf(2) through (the runtime's
# default allows it only with CAP_SYS_ADMIN): it runs, serves, and skips other namespaces quietly.
name3=$name-3caps
podman run -d --name "$name3" "${common[@]}" --security-opt seccomp=unconfined --network=host --pid=host \
	--cap-drop=all --cap-add=BPF,PERFMON,NET_ADMIN --volume=/sys/kernel/btf:/sys/kernel/btf:ro \
	--volume=/sys/fs/cgroup:/host/sys/fs/cgroup:ro "$image" run --listen "127.0.0.1:$port" >/dev/null
for _ in $(seq 100); do curl -sf "http://127.0.0.1:$port/healthz" >/dev/null && break; sleep 0.2; done
sleep 3
n3=$(curl -sf "http://127.0.0.1:$port/metrics" | grep -c '^tcpvigil_' || true)
errors=$(podman logs "$name3" 2>&1 | grep -c ' ERROR ' || true)
podman rm -f "$name3" >/dev/null
[[ $n3 -gt 10 && $errors == 0 ]] || fail "BPF+PERFMON+NET_ADMIN: $n3 series, $errors ERROR lines"
ok "BPF+PERFMON+NET_ADMIN with bpf(2) allowed by seccomp: runs, $n3 series, no errors (no other namespaces)"

# Fewer capabilities than the manifest's: refused up front with exit 2.
set +e
podman run --rm "${common[@]}" --cap-drop=all --cap-add=BPF --volume=/sys/kernel/btf:/sys/kernel/btf:ro "$image" check > "$work/few" 2>&1
code=$?
set -e
[[ $code == 2 ]] && grep -q "missing CAP_PERFMON" "$work/few" || { cat "$work/few"; fail "CAP_BPF alone: exit $code"; }
ok "CAP_BPF alone: refused with exit 2 and the missing capabilities named"
podman rmi -f "$image" >/dev/null 2>&1 || true
echo "ci-image: done in $((SECONDS - start)) s"
