//! Shared helpers for root integration tests: skip rules, a two-namespace path, MIB counters.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)] // test helpers: a panic is a test failure
pub mod bpfobj;
pub mod churn;
pub mod daemon;
pub mod http;
pub mod judge;
pub mod mechanism;
pub mod prom;
pub mod promql;
pub mod schema;

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// Root tests skip loudly on a laptop; under CI=true a skip is a failure.
pub fn require_root(test: &str) -> bool {
    if nix::unistd::geteuid().is_root() {
        return true;
    }
    let msg = format!("SKIPPED {test}: needs root (eBPF, network namespaces)");
    if std::env::var("CI").as_deref() == Ok("true") {
        panic!("{msg}; under CI=true a skip is a failure");
    }
    eprintln!("{msg}");
    false
}

pub fn sh(cmd: &str) -> String {
    let out = Command::new("sh").arg("-c").arg(cmd).output().expect("run sh");
    assert!(out.status.success(), "`{cmd}` failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

pub fn sh_ok(cmd: &str) -> bool {
    Command::new("sh")
        .arg("-c")
        .arg(cmd)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
}

/// Two namespaces joined by a veth pair: `snd` (10.N.0.1) and `rcv` (10.N.0.2), removed on drop.
pub struct Pair {
    pub snd: String,
    pub rcv: String,
    pub snd_ip: String,
    pub rcv_ip: String,
}

impl Pair {
    pub fn new(tag: &str) -> Pair {
        let id = std::process::id() % 200 + 20;
        let snd = format!("tvt{tag}{id}s");
        let rcv = format!("tvt{tag}{id}r");
        let _ = sh_ok(&format!("ip netns del {snd}; ip netns del {rcv}"));
        sh(&format!("ip netns add {snd} && ip netns add {rcv}"));
        sh(&format!("ip link add v{snd} netns {snd} type veth peer name v{rcv} netns {rcv}"));
        let (snd_ip, rcv_ip) = (format!("10.{id}.0.1"), format!("10.{id}.0.2"));
        sh(&format!("ip -n {snd} addr add {snd_ip}/24 dev v{snd} && ip -n {snd} link set v{snd} up && ip -n {snd} link set lo up"));
        sh(&format!("ip -n {rcv} addr add {rcv_ip}/24 dev v{rcv} && ip -n {rcv} link set v{rcv} up && ip -n {rcv} link set lo up"));
        Pair { snd, rcv, snd_ip, rcv_ip }
    }

    /// Shape the sender's egress so the transfer is not limited by CPU alone. The queue is long
    /// enough never to refuse a packet: TcpRetransSegs counts a retransmission the local qdisc
    /// refused, the retransmit tracepoint does not.
    pub fn shape(&self, rate_mbit: u32, delay_ms: u32) {
        let _ = delay_ms;
        sh(&format!(
            "tc -n {} qdisc add dev v{} root tbf rate {rate_mbit}mbit burst 64kb limit 64mb",
            self.snd, self.snd
        ));
    }

    /// Drop `pct` percent of the data segments arriving at the receiver.
    pub fn random_loss(&self, port: u16, pct: u32) {
        sh(&format!(
            "ip netns exec {} nft -f - <<'EOF'\ntable inet tvt {{\n chain in {{ type filter hook input priority 0; policy accept;\n  tcp dport {port} numgen random mod 1000 < {} counter drop\n }}\n}}\nEOF",
            self.rcv,
            pct * 10
        ));
    }

    /// Drop everything arriving at the receiver for a while (an outage), in the background.
    pub fn outage_after(&self, after: Duration, len: Duration) -> std::thread::JoinHandle<()> {
        let rcv = self.rcv.clone();
        std::thread::spawn(move || {
            std::thread::sleep(after);
            let _ = sh_ok(&format!("ip netns exec {rcv} nft add table inet tvo; ip netns exec {rcv} nft add chain inet tvo in '{{ type filter hook input priority -10; policy drop; }}'"));
            std::thread::sleep(len);
            let _ = sh_ok(&format!("ip netns exec {rcv} nft delete table inet tvo"));
        })
    }

    /// TCP MIB counters of a namespace (Tcp* from /proc/net/snmp, TcpExt* from /proc/net/netstat).
    pub fn mib(&self, ns: &str) -> HashMap<String, i64> {
        let mut out = HashMap::new();
        for (file, prefix) in [("/proc/net/snmp", "Tcp"), ("/proc/net/netstat", "TcpExt")] {
            let text = sh(&format!("ip netns exec {ns} cat {file}"));
            let lines: Vec<&str> = text.lines().collect();
            for w in lines.windows(2) {
                let (h, v) = (w[0], w[1]);
                if h.starts_with(&format!("{prefix}:"))
                    && v.starts_with(&format!("{prefix}:"))
                    && h.split_whitespace().nth(1).map(|x| x.parse::<i64>().is_err()).unwrap_or(false)
                {
                    for (k, val) in h.split_whitespace().skip(1).zip(v.split_whitespace().skip(1)) {
                        if let Ok(n) = val.parse() {
                            out.insert(format!("{prefix}{k}"), n);
                        }
                    }
                }
            }
        }
        out
    }

    /// Wait (up to `limit`) until a namespace has no connection left that could still retransmit
    /// (listeners and TIME-WAIT aside), so MIB counters read after it are final: iperf3 returns while
    /// its closed sockets may still be resending a FIN.
    pub fn wait_settled(&self, ns: &str, limit: Duration) -> bool {
        let end = std::time::Instant::now() + limit;
        while std::time::Instant::now() < end {
            if sh(&format!("ip netns exec {ns} ss -Htn state connected exclude time-wait")).trim().is_empty() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        false
    }

    /// A Python receiver (`python3 -c script PORT`) in the receiver's namespace, given 300 ms to
    /// listen.
    pub fn python_receiver(&self, script: &str, port: u16) -> Child {
        let c = Command::new("ip")
            .args(["netns", "exec", &self.rcv, "python3", "-c", script, &port.to_string()])
            .stdout(Stdio::null())
            .spawn()
            .expect("start the Python receiver");
        std::thread::sleep(Duration::from_millis(300));
        c
    }

    /// A Python sender (`python3 -c script RECEIVER_IP PORT`) in the sender's namespace.
    pub fn python_sender(&self, script: &str, port: u16) -> Child {
        Command::new("ip")
            .args(["netns", "exec", &self.snd, "python3", "-c", script, &self.rcv_ip, &port.to_string()])
            .spawn()
            .expect("start the Python sender")
    }

    pub fn iperf_server(&self, port: u16) -> Child {
        let c = Command::new("ip")
            .args(["netns", "exec", &self.rcv, "iperf3", "-s", "-1", "-p", &port.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start iperf3 server");
        std::thread::sleep(Duration::from_millis(300));
        c
    }

    /// Run an iperf3 client to completion and return its JSON.
    pub fn iperf_client(&self, port: u16, secs: u32, extra: &[&str]) -> serde_json::Value {
        let out = Command::new("ip")
            .args([
                "netns",
                "exec",
                &self.snd,
                "iperf3",
                "-c",
                &self.rcv_ip,
                "-p",
                &port.to_string(),
                "-t",
                &secs.to_string(),
                "-J",
            ])
            .args(extra)
            .output()
            .expect("run iperf3 client");
        serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("iperf3 JSON: {e}: {}", String::from_utf8_lossy(&out.stderr)))
    }
}

impl Drop for Pair {
    fn drop(&mut self) {
        // Processes a test left inside (a server never waited for) would keep the namespace and its
        // connections alive after `ip netns del`, for the next tests' daemons to see.
        for ns in [&self.snd, &self.rcv] {
            let _ = sh_ok(&format!("ip netns pids {ns} | xargs -r kill -9; ip netns del {ns}"));
        }
    }
}

/// `tcpvigil record` in the background; `finish` waits and returns the recording path.
pub struct Recorder {
    pub child: Child,
    pub out: PathBuf,
}

impl Recorder {
    pub fn start(args: &[&str], duration_s: u32) -> Recorder {
        let out = std::env::temp_dir().join(format!("tvt-rec-{}-{}.jsonl", std::process::id(), rand_suffix()));
        let ready = out.with_extension("ready");
        let child = Command::new(env!("CARGO_BIN_EXE_tcpvigil"))
            .arg("record")
            .arg("--out")
            .arg(&out)
            .arg("--duration")
            .arg(duration_s.to_string())
            .arg("--ready-file")
            .arg(&ready)
            .args(args)
            .stderr(Stdio::piped())
            .spawn()
            .expect("start tcpvigil record");
        // Trial loads and attaching take a moment: wait until the probes run.
        for _ in 0..300 {
            if ready.exists() {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        assert!(ready.exists(), "tcpvigil record did not become ready within 15 s");
        let _ = std::fs::remove_file(&ready);
        Recorder { child, out }
    }

    /// Ends the recording now (SIGTERM, as systemd or Ctrl-C would), rather than at its duration,
    /// which is then only a cap: for tests whose traffic takes as long as the host lets it.
    pub fn stop(self) -> (tcpvigil::recording::Recording, String) {
        let _ = Command::new("kill").args(["-TERM", &self.child.id().to_string()]).status();
        self.finish()
    }

    pub fn finish(self) -> (tcpvigil::recording::Recording, String) {
        let out = self.child.wait_with_output().expect("wait for record");
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(out.status.success(), "record failed: {err}");
        let f = std::fs::File::open(&self.out).expect("open recording");
        let rec = tcpvigil::recording::read(std::io::BufReader::new(f)).expect("read recording");
        let _ = std::fs::remove_file(&self.out);
        (rec, err)
    }
}

fn rand_suffix() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.subsec_nanos() as u64).unwrap_or(0)
}
