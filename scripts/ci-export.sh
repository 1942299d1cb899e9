#!/usr/bin/env bash
# Checks of the export side: metrics format (promtool check metrics, OpenMetrics parser),
# Prometheus rules (promtool check/test rules), the install command (scripts/install.sh into a
# temporary root), the installed systemd unit (systemd-analyze verify and security), the
# dashboards (generated = committed; Grafana's dashboard linter or its port). The real
# Prometheus against the live daemon and lab is a cargo test: agent/tests/prometheus.
# Installs what it needs (Debian packages, Go modules, a PyPI package in a venv) when run as
# root; otherwise a missing tool is a loud skip, and under CI=true a failure.
#
#   scripts/ci-export.sh            # everything
#   EXPOSURE_MAX=3.0 scripts/ci-export.sh
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
source scripts/toolchain.sh # a cargo at least as new as rust-version (Debian's when rustup's is older)
tv_use_toolchain
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
EXPOSURE_MAX=${EXPOSURE_MAX:-3.0}
failures=0
passed=0

say() { printf '\n== %s\n' "$*"; }
ok() { passed=$((passed + 1)); printf 'ok: %s\n' "$*"; }
fail() { failures=$((failures + 1)); printf 'FAILED: %s\n' "$*" >&2; }
skip() {
	if [[ "${CI:-}" == "true" ]]; then
		fail "cannot run under CI: $*"
	else
		printf 'SKIPPED (not CI): %s\n' "$*" >&2
	fi
}

apt_updated=0
apt_install() { # apt_install COMMAND PACKAGE
	command -v "$1" >/dev/null 2>&1 && return 0
	if [[ $(id -u) -ne 0 ]]; then
		return 1
	fi
	if [[ $apt_updated -eq 0 ]]; then
		apt-get update -qq >/dev/null
		apt_updated=1
	fi
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$2" >/dev/null
	command -v "$1" >/dev/null 2>&1
}

# --- Metrics: unit tests, then the text a scrape returns through promtool and a strict
# OpenMetrics parser. -----------------------------------------------------------------------
say "cargo test -p tcpvigil --lib export"
if TCPVIGIL_SCRAPE_OUT="$work/scrape.txt" cargo test -q -p tcpvigil --lib export; then
	ok "export unit tests"
else
	fail "export unit tests"
fi

say "promtool check metrics"
if apt_install promtool prometheus; then
	if [[ -s "$work/scrape.txt" ]] && promtool check metrics <"$work/scrape.txt"; then
		ok "promtool check metrics ($(grep -vc '^#' "$work/scrape.txt") series)"
	else
		fail "promtool check metrics"
	fi
else
	skip "promtool (Debian package prometheus) is not installed and this is not root"
fi

say "OpenMetrics parser (Python prometheus_client)"
venv="${XDG_CACHE_HOME:-$HOME/.cache}/tcpvigil-ci-venv"
if [[ ! -x "$venv/bin/python" ]]; then
	python3 -m venv "$venv" >/dev/null 2>&1 || true
fi
if [[ -x "$venv/bin/python" ]] && { "$venv/bin/python" -c 'import prometheus_client' 2>/dev/null ||
	"$venv/bin/pip" install -q 'prometheus-client>=0.20' >/dev/null 2>&1; }; then
	if [[ -s "$work/scrape.txt.openmetrics" ]] && "$venv/bin/python" - "$work/scrape.txt.openmetrics" <<'EOF'; then
import sys
from prometheus_client.openmetrics.parser import text_string_to_metric_families
fams = list(text_string_to_metric_families(open(sys.argv[1]).read()))
bad = [f.name for f in fams if not f.name.startswith(("tcpvigil_", "process_"))]  # the standard process metrics too
assert not bad, bad
print(f"{len(fams)} families, {sum(len(f.samples) for f in fams)} samples parsed")
EOF
		ok "OpenMetrics text parses"
	else
		fail "OpenMetrics text does not parse"
	fi
else
	skip "python3 venv with prometheus-client (PyPI) unavailable"
fi

# --- Prometheus rules ------------------------------------------------------------------------
say "promtool check/test rules"
if command -v promtool >/dev/null 2>&1; then
	if promtool check rules deploy/prometheus/tcpvigil.rules.yml &&
		promtool check config deploy/prometheus/prometheus.yml &&
		promtool test rules deploy/prometheus/tests/*.yml; then
		ok "rules: check and $(ls deploy/prometheus/tests/*.yml | wc -l) unit-test files"
	else
		fail "promtool rules"
	fi
else
	skip "promtool not installed"
fi

# --- A real Prometheus scraping a synthetic agent: every rule and dashboard expression must
# return data; one stop among eight bulk connections must not alert. ---------------------------
say "real Prometheus against a synthetic agent"
if command -v prometheus >/dev/null 2>&1 || apt_install prometheus prometheus; then
	read -r agent_port prom_port < <(python3 -c '
import socket
ps = []
for _ in range(2):
    s = socket.socket(); s.bind(("127.0.0.1", 0)); ps.append(s)
print(*[s.getsockname()[1] for s in ps])')
	cat >"$work/prometheus.yml" <<PROM_EOF
global: { scrape_interval: 1s, evaluation_interval: 1s }
rule_files: ["$root/deploy/prometheus/tcpvigil.rules.yml"]
scrape_configs:
  - job_name: tcpvigil
    static_configs: [ { targets: ["127.0.0.1:$agent_port"] } ]
PROM_EOF
	# Its own process group, so that stopping it also stops the test binary cargo runs.
	TCPVIGIL_SERVE_ADDR="127.0.0.1:$agent_port" TCPVIGIL_SERVE_SECS=50 setsid \
		cargo test -q -p tcpvigil --lib export::tests_http::serve_synthetic_metrics_for_prometheus -- --exact \
		>"$work/agent.log" 2>&1 &
	agent_pid=$!
	prometheus --config.file="$work/prometheus.yml" --storage.tsdb.path="$work/tsdb" \
		--web.listen-address="127.0.0.1:$prom_port" >"$work/prometheus.log" 2>&1 &
	prom_pid=$!
	if python3 - "$prom_port" "$root" <<'PY_EOF'; then
import json, re, sys, time, urllib.parse, urllib.request
port, root = sys.argv[1], sys.argv[2]
base = f"http://127.0.0.1:{port}/api/v1/"

def get(path, **q):
    url = base + path + ("?" + urllib.parse.urlencode(q) if q else "")
    with urllib.request.urlopen(url, timeout=5) as r:
        return json.load(r)["data"]

deadline = time.time() + 120  # the test binary may need building first
while True:  # until the target is up
    try:
        if any(t["health"] == "up" for t in get("targets")["activeTargets"]):
            break
    except Exception:
        pass
    if time.time() > deadline:
        sys.exit("the synthetic agent never came up")
    time.sleep(1)
time.sleep(32)  # pending -> firing of the stop alert (for: 10s), two 15 s rule evaluations

subst = {"$job": "tcpvigil", "$instance": ".+", "$transfer": ".*", "$conn": ".+", "$__rate_interval": "10s"}
exprs = []
for name in ("tcpvigil-fleet.json", "tcpvigil-drilldown.json"):
    d = json.load(open(f"{root}/dashboards/{name}"))
    for p in d["panels"]:
        for t in p.get("targets", []):
            e = t["expr"]
            for k, v in subst.items():
                e = e.replace(k, v)
            exprs.append((f"{name}: {p['title']}", e))
rules = open(f"{root}/deploy/prometheus/tcpvigil.rules.yml").read()
for rec in re.findall(r"- record: (\S+)", rules):
    exprs.append(("recording rule", rec))
bad = 0
for where, e in exprs:
    if not get("query", query=e)["result"]:
        bad += 1
        print(f"NO DATA: {where}: {e}")
print(f"{len(exprs) - bad} of {len(exprs)} dashboard and recording-rule expressions returned data")
alerts = {a["labels"]["alertname"]: a["state"] for a in get("alerts")["alerts"]}
print("alerts:", alerts)
# One network stop among the synthetic agent's eight bulk connections: a share of 1/8, below the
# stop alert's quarter, so the alert stays silent (a fleet host alerts on shares, not on one stop).
share = [float(r["value"][1]) for r in get("query", query='instance:tcpvigil_stopped_share:ratio{owner="network"}')["result"]]
print("network stop share:", share)
if not (len(share) == 1 and 0 < share[0] < 0.25):
    bad += 1
    print("the stopped share is not one stop among several bulk connections")
if "TcpvigilCommunicationStop" in alerts:
    bad += 1
    print("TcpvigilCommunicationStop is active for one stop among eight bulk connections")
for pending in ("TcpvigilUnfairGroup", "TcpvigilBufferLimited", "TcpvigilDroppingData"):
    if alerts.get(pending) != "pending":
        bad += 1
        print(f"{pending} is not pending")
sys.exit(1 if bad else 0)
PY_EOF
		ok "real Prometheus: expressions return data, the stop share is computed, one stop of eight does not alert"
	else
		tail -n 5 "$work/prometheus.log" "$work/agent.log" >&2 || true
		fail "real Prometheus end-to-end"
	fi
	kill "$prom_pid" 2>/dev/null || true
	kill -- "-$agent_pid" 2>/dev/null || kill "$agent_pid" 2>/dev/null || true
	wait "$prom_pid" "$agent_pid" 2>/dev/null || true
else
	skip "prometheus (Debian package) not installed"
fi

# --- Alertmanager: the shipped routing and inhibit rules, against a real Alertmanager. --------
say "Alertmanager: deploy/prometheus/alertmanager.yml (amtool, and a live inhibition check)"
if command -v amtool >/dev/null 2>&1 || apt_install amtool prometheus-alertmanager; then
	am_cfg=deploy/prometheus/alertmanager.yml
	if amtool check-config "$am_cfg" >/dev/null &&
		[[ $(amtool config routes test --config.file="$am_cfg" severity=critical 2>/dev/null) == pager ]] &&
		[[ $(amtool config routes test --config.file="$am_cfg" severity=warning 2>/dev/null) == tickets ]]; then
		ok "amtool: config checks; critical goes to the pager, warning does not"
	else
		fail "amtool check-config / routes test of $am_cfg"
	fi
	am_port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
	# No cluster listener (it would bind every interface and gossip).
	prometheus-alertmanager --config.file="$am_cfg" --storage.path="$work/am" \
		--web.listen-address="127.0.0.1:$am_port" --cluster.listen-address= >"$work/am.log" 2>&1 &
	am_pid=$!
	if python3 - "$am_port" <<'PY_EOF'; then
import json, sys, time, urllib.request
base = f"http://127.0.0.1:{sys.argv[1]}/api/v2/"
for _ in range(100):
    try:
        urllib.request.urlopen(base + "status", timeout=2).read()
        break
    except Exception:
        time.sleep(0.1)

def alert(name, want, **labels):
    return (dict(alertname=name, **labels), want)

# (labels, expected state): "suppressed" = inhibited by a path event.
cases = [
    # host a: a path event to 10.1.0.0/24 pages; the host's stop share alert beside it is its members'.
    alert("TcpvigilPathEvent", "active", job="tcpvigil", instance="a:9977", prefix="10.1.0.0/24", severity="critical"),
    alert("TcpvigilCommunicationStop", "suppressed", job="tcpvigil", instance="a:9977", severity="warning"),
    alert("TcpvigilStopsRecurring", "suppressed", job="tcpvigil", instance="a:9977", severity="warning"),
    # host b: stops with no path event: they alert.
    alert("TcpvigilCommunicationStop", "active", job="tcpvigil", instance="b:9977", severity="warning"),
    # 10.2.0.0/24 fails on several hosts: one fleet page; each host's path event towards it is
    # inhibited, and so (through it) is that host's stop alert.
    alert("TcpvigilPathEventAcrossHosts", "active", prefix="10.2.0.0/24", severity="critical"),
    alert("TcpvigilPathEvent", "suppressed", job="tcpvigil", instance="c:9977", prefix="10.2.0.0/24", severity="critical"),
    alert("TcpvigilCommunicationStop", "suppressed", job="tcpvigil", instance="c:9977", severity="warning"),
    # host d: a path event to another prefix is not inhibited by the fleet alert for 10.2.0.0/24.
    alert("TcpvigilPathEvent", "active", job="tcpvigil", instance="d:9977", prefix="10.3.0.0/24", severity="critical"),
]
body = json.dumps([{"labels": l} for l, _ in cases]).encode()
req = urllib.request.Request(base + "alerts", data=body, headers={"Content-Type": "application/json"}, method="POST")
urllib.request.urlopen(req, timeout=5).read()
time.sleep(1)
got = {tuple(sorted(a["labels"].items())): a["status"]["state"] for a in json.load(urllib.request.urlopen(base + "alerts", timeout=5))}
bad = 0
for labels, want in cases:
    state = got.get(tuple(sorted(labels.items())), "missing")
    mark = "ok" if state == want else "WRONG"
    bad += state != want
    print(f"  {mark}: {labels['alertname']} {labels.get('instance', '')} {labels.get('prefix', '')}: {state} (want {want})")
sys.exit(1 if bad else 0)
PY_EOF
		ok "Alertmanager inhibits the member stops of path events, and only those"
	else
		tail -n 5 "$work/am.log" >&2 || true
		fail "Alertmanager inhibition"
	fi
	kill "$am_pid" 2>/dev/null || true
	wait "$am_pid" 2>/dev/null || true
else
	skip "amtool / prometheus-alertmanager (Debian package prometheus-alertmanager) not installed"
fi

# --- The README's install command (scripts/install.sh) into a temporary root: binary, unit,
# config and rules in place, the installed config accepted by the installed binary. ------------
say "scripts/install.sh into a temporary root"
destdir="$work/root"
tv_bin="${CARGO_TARGET_DIR:-$root/target}/debug/tcpvigil"
if [[ -x "$tv_bin" ]] || cargo build -q --locked -p tcpvigil --bin tcpvigil; then
	if DESTDIR="$destdir" TCPVIGIL_BIN="$tv_bin" bash scripts/install.sh &&
		[[ -x "$destdir/usr/local/bin/tcpvigil" && -f "$destdir/etc/tcpvigil/tcpvigil.toml" &&
			-f "$destdir/etc/systemd/system/tcpvigil.service" && -f "$destdir/etc/logrotate.d/tcpvigil" &&
			-f "$destdir/etc/prometheus/rules/tcpvigil.rules.yml" ]] &&
		{ ! command -v promtool >/dev/null 2>&1 || promtool check rules "$destdir/etc/prometheus/rules/tcpvigil.rules.yml"; }; then
		ok "install.sh: binary, unit, config, logrotate snippet and rules installed; the installed config checks"
	else
		fail "install.sh into $destdir"
	fi
else
	fail "cargo build of the binary to install"
fi

# --- systemd unit: the installed one -----------------------------------------------------------
say "systemd-analyze verify / security (the unit install.sh installed)"
if apt_install systemd-analyze systemd; then
	# verify insists that the commands exist: it sees the temporary root's binary and config
	# (only those paths differ from the shipped unit; `--root=` would want a whole OS tree).
	sed -e "s#/usr/local/bin/tcpvigil#$destdir/usr/local/bin/tcpvigil#g" -e "s#/etc/tcpvigil/#$destdir/etc/tcpvigil/#g" \
		"$destdir/etc/systemd/system/tcpvigil.service" >"$work/tcpvigil.service" 2>/dev/null ||
		fail "no installed unit to verify"
	if [[ -s "$work/tcpvigil.service" ]] && systemd-analyze verify "$work/tcpvigil.service"; then
		ok "systemd-analyze verify"
	else
		fail "systemd-analyze verify"
	fi
	# ExecStartPre as the unit runs it: the config check of the installed binary.
	pre=$(sed -n 's/^ExecStartPre=//p' "$work/tcpvigil.service")
	if [[ -n "$pre" ]] && $pre >/dev/null; then
		ok "ExecStartPre ($pre)"
	else
		fail "ExecStartPre: '$pre'"
	fi
	if systemd-analyze security --offline=yes "$work/tcpvigil.service" >"$work/security.txt" 2>&1; then :; fi
	score=$(sed -n 's/.*Overall exposure level for tcpvigil.service: \([0-9.]*\).*/\1/p' "$work/security.txt")
	if [[ -n "$score" ]] && awk -v s="$score" -v m="$EXPOSURE_MAX" 'BEGIN { exit !(s <= m) }'; then
		ok "systemd-analyze security: exposure $score (at most $EXPOSURE_MAX)"
	else
		cat "$work/security.txt" >&2
		fail "systemd-analyze security: exposure '${score:-?}' above $EXPOSURE_MAX"
	fi
else
	skip "systemd-analyze not installed"
fi

# --- Dashboards ------------------------------------------------------------------------------
say "dashboards: generated = committed"
cp dashboards/tcpvigil-*.json "$work/"
python3 dashboards/gen.py
if cmp -s dashboards/tcpvigil-fleet.json "$work/tcpvigil-fleet.json" &&
	cmp -s dashboards/tcpvigil-drilldown.json "$work/tcpvigil-drilldown.json"; then
	ok "dashboards match dashboards/gen.py"
else
	git --no-pager diff --stat -- dashboards/ || true
	fail "dashboards/*.json differ from what dashboards/gen.py generates"
fi

say "dashboards: lint --strict"
export PATH="$PATH:/usr/local/go/bin:$(go env GOPATH 2>/dev/null || echo "$HOME/go")/bin"
if command -v go >/dev/null 2>&1; then
	boards=(dashboards/tcpvigil-fleet.json dashboards/tcpvigil-drilldown.json)
	if command -v dashboard-linter >/dev/null 2>&1 || go install github.com/grafana/dashboard-linter@latest >"$work/go-install.log" 2>&1; then
		lint_ok=1
		for b in "${boards[@]}"; do
			dashboard-linter lint --strict "$b" || lint_ok=0
		done
		if [[ $lint_ok -eq 1 ]]; then ok "dashboard-linter lint --strict"; else fail "dashboard-linter"; fi
	else
		echo "dashboard-linter cannot be installed here ($(grep -m1 -o '40[0-9][^.]*' "$work/go-install.log" || echo 'see go install output'));"
		echo "running its port, dashboards/lint (see dashboards/README.md)"
		if (cd dashboards/lint && go run . --strict "${boards[@]/#dashboards/..}"); then
			ok "dashboards/lint --strict (port of dashboard-linter's rules)"
		else
			fail "dashboards/lint"
		fi
	fi
else
	skip "go not installed"
fi

printf '\nci-export: %d passed, %d failed\n' "$passed" "$failures"
[[ $failures -eq 0 ]]
