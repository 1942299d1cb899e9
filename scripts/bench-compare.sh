#!/usr/bin/env bash
# bench-compare.sh: CPU cost of the alternatives in the README's comparison table, on N idle TCP connections.
#
#   bash scripts/bench-compare.sh [connections] [scrapes]     (root; default 1000 and 100)
#
# In a private network namespace with N established loopback connections (2N sockets), measures:
# node_exporter (Debian's prometheus-node-exporter) with only the netstat collector and with its
# defaults: CPU per scrape and series; `ss -tin` (what an `ss -ti` poller runs): CPU per poll and
# lines; tcpvigil run: CPU per scrape and series. CPU per scrape = (process CPU during K scrapes
# - its CPU over as long a time without scrapes) / K, from /proc/PID/stat (10 ms ticks).
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-1000}
k=${2:-100}
[[ $(id -u) -eq 0 ]] || { echo "bench-compare: needs root (a network namespace, BPF)" >&2; exit 2; }
[[ $n =~ ^[0-9]+$ && $k =~ ^[0-9]+$ && $n -ge 1 && $k -ge 1 ]] || { echo "usage: $0 [connections] [scrapes]" >&2; exit 2; }
command -v prometheus-node-exporter >/dev/null || { echo "bench-compare: apt-get install prometheus-node-exporter" >&2; exit 2; }
bin=${TCPVIGIL_BIN:-target/release/tcpvigil}
[[ -x $bin ]] || bin=target/debug/tcpvigil
[[ -x $bin ]] || { echo "bench-compare: build tcpvigil first (cargo build --release -p tcpvigil)" >&2; exit 2; }
export TV_N=$n TV_K=$k TV_BIN=$bin
exec unshare --net -- python3 - <<'PY'
import os, socket, subprocess, time, resource, urllib.request, tempfile, shutil

n, k, tv = int(os.environ["TV_N"]), int(os.environ["TV_K"]), os.environ["TV_BIN"]
subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
tick = os.sysconf("SC_CLK_TCK")
srv = socket.socket(); srv.bind(("127.0.0.1", 0)); srv.listen(4096)
conns = []
for _ in range(n):
    c = socket.create_connection(srv.getsockname()); a, _ = srv.accept(); conns += [c, a]

def cpu(pid):
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / tick

def free_port():
    s = socket.socket(); s.bind(("127.0.0.1", 0)); p = s.getsockname()[1]; s.close(); return p

def get(url):
    return urllib.request.urlopen(url, timeout=10).read().decode()

def per_scrape(pid, url):
    get(url)
    t0, c0 = time.time(), cpu(pid)
    for _ in range(k):
        body = get(url)
    busy, wall = cpu(pid) - c0, time.time() - t0
    c1 = cpu(pid); time.sleep(wall); idle = cpu(pid) - c1
    series = sum(1 for l in body.splitlines() if l and not l.startswith("#"))
    return max(busy - idle, 0) / k * 1e3, series, len(body)

def wait(url):
    for _ in range(300):
        try:
            get(url); return
        except Exception:
            time.sleep(0.1)
    raise SystemExit(f"{url} never answered")

rows = []
for label, extra in [("node_exporter 1.5 (netstat collector only)", ["--collector.disable-defaults", "--collector.netstat"]),
                     ("node_exporter 1.5 (default collectors)", [])]:
    port = free_port()
    p = subprocess.Popen(["prometheus-node-exporter", f"--web.listen-address=127.0.0.1:{port}"] + extra,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}/metrics"; wait(url)
    ms, series, size = per_scrape(p.pid, url)
    p.terminate(); p.wait()
    rows.append((label, f"{ms:.2f} ms CPU per scrape", f"{series} series, {size // 1024} KiB"))

before = resource.getrusage(resource.RUSAGE_CHILDREN)
for _ in range(k):
    out = subprocess.run(["ss", "-tin"], capture_output=True, text=True).stdout
after = resource.getrusage(resource.RUSAGE_CHILDREN)
ms = ((after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)) / k * 1e3
rows.append((f"`ss -tin` (one poll of {2 * n} sockets)", f"{ms:.2f} ms CPU per poll", f"{len(out.splitlines())} lines, {len(out) // 1024} KiB"))

d = tempfile.mkdtemp()
port = free_port()
p = subprocess.Popen([tv, "run", "--listen", f"127.0.0.1:{port}", "--dump-dir", f"{d}/dumps", "--log-format", "text"],
                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
url = f"http://127.0.0.1:{port}/metrics"; wait(url)
time.sleep(2)
ms, series, size = per_scrape(p.pid, url)
p.terminate(); p.wait(); shutil.rmtree(d)
rows.append((f"tcpvigil run ({os.path.basename(os.path.dirname(tv))} build)", f"{ms:.2f} ms CPU per scrape", f"{series} series, {size // 1024} KiB"))

print(f"{n} idle established loopback connections ({2 * n} sockets), {k} scrapes/polls each")
print("| what | cost | output |\n|---|---|---|")
for r in rows:
    print("| " + " | ".join(r) + " |")
PY
