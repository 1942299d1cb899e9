//! Observations of the running lab: ping RTT, nstat counters, `ss -tin` samples (parsed), tcpdump capture.
use crate::clock::Stamp;
use crate::cmd;
use crate::error::{LabError, Result};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::Path;
use std::process::Child;

/// Result of a ping series.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct PingStats {
    pub sent: u32,
    pub received: u32,
    pub min_ms: f64,
    pub avg_ms: f64,
    pub max_ms: f64,
    pub mdev_ms: f64,
    /// Each reply's RTT in order (only when ping ran without `-q`).
    #[serde(default)]
    pub rtts_ms: Vec<f64>,
}

impl PingStats {
    /// The median of the replies' RTTs (None with `-q` output).
    pub fn median_ms(&self) -> Option<f64> {
        let mut v = self.rtts_ms.clone();
        v.sort_by(f64::total_cmp);
        (!v.is_empty()).then(|| {
            if v.len() % 2 == 1 {
                v[v.len() / 2]
            } else {
                (v[v.len() / 2 - 1] + v[v.len() / 2]) / 2.0
            }
        })
    }
}

/// Parses ping's summary lines and, without `-q`, each reply's `time=`.
pub fn parse_ping(out: &str) -> Result<PingStats> {
    let mut st = PingStats::default();
    for line in out.lines() {
        if let Some(t) = line.split(" time=").nth(1).and_then(|r| r.split(" ms").next()?.trim().parse().ok()) {
            st.rtts_ms.push(t);
        }
        if line.contains("packets transmitted") {
            let nums: Vec<u32> = line.split(|c: char| !c.is_ascii_digit()).filter_map(|w| w.parse().ok()).collect();
            if nums.len() >= 2 {
                st.sent = nums[0];
                st.received = nums[1];
            }
        }
        if let Some(rest) =
            line.split(" = ").nth(1).filter(|_| line.starts_with("rtt") || line.starts_with("round-trip"))
        {
            // "a/b/c/d ms" possibly followed by ", pipe N" when probes overlap.
            let nums = rest.split(" ms").next().unwrap_or(rest);
            let v: Vec<f64> = nums.split('/').filter_map(|x| x.trim().parse().ok()).collect();
            if v.len() == 4 {
                (st.min_ms, st.avg_ms, st.max_ms, st.mdev_ms) = (v[0], v[1], v[2], v[3]);
            }
        }
    }
    if st.sent == 0 {
        return Err(LabError::Parse { what: "ping output".into(), detail: out.chars().take(300).collect() });
    }
    Ok(st)
}

/// Pings `dst` from namespace `ns`: `count` probes every `interval_s` (waits at most 1 s per probe).
pub fn ping(ns: &str, dst: &str, count: u32, interval_s: f64) -> Result<PingStats> {
    let c = count.to_string();
    let i = format!("{interval_s}");
    let out = cmd::command_in(ns, &["ping", "-n", "-q", "-W", "1", "-c", &c, "-i", &i, dst])
        .output()
        .map_err(|e| LabError::Command { cmd: "ping".into(), detail: e.to_string() })?;
    parse_ping(&String::from_utf8_lossy(&out.stdout))
}

/// Absolute nstat counters of namespace `ns` (`nstat -asz`, history untouched).
pub fn nstat(ns: &str) -> Result<BTreeMap<String, u64>> {
    let out = cmd::run_in(ns, &["nstat", "-asz"])?;
    Ok(parse_nstat(&out))
}

/// Parses `nstat` text output into name -> value.
pub fn parse_nstat(out: &str) -> BTreeMap<String, u64> {
    out.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            Some((w.next()?.to_string(), w.next()?.parse().ok()?))
        })
        .collect()
}

/// after - before for every counter that changed.
pub fn nstat_delta(before: &BTreeMap<String, u64>, after: &BTreeMap<String, u64>) -> BTreeMap<String, i64> {
    after
        .iter()
        .filter_map(|(k, &a)| {
            let d = a as i64 - before.get(k).copied().unwrap_or(0) as i64;
            (d != 0).then(|| (k.clone(), d))
        })
        .collect()
}

/// One connection from `ss -tin`, with the fields the agent cares about parsed.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct SsConn {
    pub state: String,
    pub local: String,
    pub peer: String,
    pub recv_q: u64,
    pub send_q: u64,
    pub cc: Option<String>,
    pub cwnd: Option<u64>,
    pub ssthresh: Option<u64>,
    pub rtt_ms: Option<f64>,
    pub rttvar_ms: Option<f64>,
    pub rto_ms: Option<f64>,
    pub mss: Option<u64>,
    pub bytes_acked: Option<u64>,
    pub bytes_received: Option<u64>,
    pub unacked: Option<u64>,
    pub retrans_now: Option<u64>,
    pub retrans_total: Option<u64>,
    pub lost: Option<u64>,
    pub sacked: Option<u64>,
    pub snd_wnd: Option<u64>,
    pub wscale: Option<String>,
    pub sack: bool,
    pub ts: bool,
    pub delivery_rate_bps: Option<f64>,
    /// Every other `key:value` token, verbatim.
    pub other: BTreeMap<String, String>,
}

fn rate_bps(v: &str) -> Option<f64> {
    let (num, mult) = if let Some(n) = v.strip_suffix("Gbps") {
        (n, 1e9)
    } else if let Some(n) = v.strip_suffix("Mbps") {
        (n, 1e6)
    } else if let Some(n) = v.strip_suffix("Kbps") {
        (n, 1e3)
    } else {
        (v.strip_suffix("bps")?, 1.0)
    };
    num.parse::<f64>().ok().map(|x| x * mult)
}

fn parse_info(c: &mut SsConn, info: &str) {
    let toks: Vec<&str> = info.split_whitespace().collect();
    let mut i = 0;
    while i < toks.len() {
        let t = toks[i];
        match t {
            "sack" => c.sack = true,
            "ts" => c.ts = true,
            "send" | "pacing_rate" | "delivery_rate" if i + 1 < toks.len() => {
                if t == "delivery_rate" {
                    c.delivery_rate_bps = rate_bps(toks[i + 1]);
                }
                c.other.insert(t.to_string(), toks[i + 1].to_string());
                i += 1;
            }
            _ => match t.split_once(':') {
                Some((k, v)) => {
                    let n = v.parse::<u64>().ok();
                    match k {
                        "cwnd" => c.cwnd = n,
                        "ssthresh" => c.ssthresh = n,
                        "mss" => c.mss = n,
                        "bytes_acked" => c.bytes_acked = n,
                        "bytes_received" => c.bytes_received = n,
                        "unacked" => c.unacked = n,
                        "lost" => c.lost = n,
                        "sacked" => c.sacked = n,
                        "snd_wnd" => c.snd_wnd = n,
                        "rto" => c.rto_ms = v.parse().ok(),
                        "wscale" => c.wscale = Some(v.to_string()),
                        "rtt" => {
                            let mut p = v.split('/');
                            c.rtt_ms = p.next().and_then(|x| x.parse().ok());
                            c.rttvar_ms = p.next().and_then(|x| x.parse().ok());
                        }
                        "retrans" => {
                            let mut p = v.split('/');
                            c.retrans_now = p.next().and_then(|x| x.parse().ok());
                            c.retrans_total = p.next().and_then(|x| x.parse().ok());
                        }
                        _ => {
                            c.other.insert(k.to_string(), v.to_string());
                        }
                    }
                }
                None if i == 0 && t.chars().all(|ch| ch.is_ascii_alphanumeric() || ch == '_') => {
                    c.cc = Some(t.to_string())
                }
                None => {}
            },
        }
        i += 1;
    }
}

/// Parses `ss -tinH` output (a header line per socket, then an indented info line).
pub fn parse_ss(out: &str) -> Vec<SsConn> {
    let mut conns: Vec<SsConn> = Vec::new();
    for line in out.lines() {
        if line.trim().is_empty() {
            continue;
        }
        if line.starts_with(char::is_whitespace) {
            if let Some(c) = conns.last_mut() {
                parse_info(c, line);
            }
            continue;
        }
        let mut w: Vec<&str> = line.split_whitespace().collect();
        // With a single-state filter ss leaves the State column out.
        if w.first().is_some_and(|t| t.parse::<u64>().is_ok()) {
            w.insert(0, "ESTAB");
        }
        if w.len() >= 5 {
            conns.push(SsConn {
                state: w[0].to_string(),
                recv_q: w[1].parse().unwrap_or(0),
                send_q: w[2].parse().unwrap_or(0),
                local: w[3].to_string(),
                peer: w[4].to_string(),
                ..Default::default()
            });
        }
    }
    conns
}

/// One `ss` sample of one namespace.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SsSample {
    pub at: Stamp,
    /// Namespace role: `s0`, `r0`, ...
    pub host: String,
    pub conns: Vec<SsConn>,
}

/// Takes one `ss -tinH` sample of established connections in `ns`.
pub fn ss_sample(ns: &str, host: &str) -> Result<SsSample> {
    let out = cmd::run_in(ns, &["ss", "-tinH", "state", "established"])?;
    Ok(SsSample { at: Stamp::now(), host: host.to_string(), conns: parse_ss(&out) })
}

/// Like [`ss_sample`] but for a thread already inside the namespace (see `netns::enter`): runs `ss`
/// directly, which costs far less than `ip netns exec`. The stamp is taken just before `ss` reads.
pub fn ss_sample_here(host: &str) -> Result<SsSample> {
    let at = Stamp::now();
    let out = cmd::run(&["ss", "-tinH", "state", "established"])?;
    Ok(SsSample { at, host: host.to_string(), conns: parse_ss(&out) })
}

/// Starts tcpdump on `dev` in `ns`, writing headers (first 128 bytes) of TCP packets to `file`.
pub fn start_capture(ns: &str, dev: &str, file: &Path) -> Result<Child> {
    let f = file.to_string_lossy();
    // tcpdump's own report ("N packets dropped by kernel") goes next to the capture.
    let log = std::fs::File::create(file.with_extension("log"))
        .map_err(|e| LabError::io(format!("create {}", file.with_extension("log").display()), e))?;
    let child = cmd::command_in(ns, &["tcpdump", "-i", dev, "-n", "-s", "128", "-B", "32768", "-w", &f, "tcp"])
        .stdout(std::process::Stdio::null())
        .stderr(log)
        .spawn()
        .map_err(|e| LabError::Command { cmd: "tcpdump".into(), detail: e.to_string() })?;
    // tcpdump needs a moment to open the interface before traffic starts.
    std::thread::sleep(std::time::Duration::from_millis(300));
    Ok(child)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ss_info_line_fields_are_parsed() {
        let out = "ESTAB 0 12345 10.71.1.2:40000 10.72.1.2:5201\n\t cubic wscale:9,9 rto:210 rtt:10.5/0.25 ato:40 mss:1448 cwnd:87 ssthresh:60 bytes_acked:1000 unacked:12 retrans:1/7 lost:2 sacked:3 sack ts send 96Mbps delivery_rate 95.5Mbps\n";
        let c = parse_ss(out);
        assert_eq!(c.len(), 1);
        let c = &c[0];
        assert_eq!(c.send_q, 12345);
        assert_eq!(c.cc.as_deref(), Some("cubic"));
        assert_eq!(c.cwnd, Some(87));
        assert_eq!(c.ssthresh, Some(60));
        assert_eq!(c.rtt_ms, Some(10.5));
        assert_eq!(c.retrans_total, Some(7));
        assert_eq!(c.wscale.as_deref(), Some("9,9"));
        assert!(c.sack && c.ts);
        assert_eq!(c.delivery_rate_bps, Some(95.5e6));
        let no_state = parse_ss("0 0 10.71.1.2:1 10.72.1.2:2\n\t cubic cwnd:5\n");
        assert_eq!((no_state[0].state.as_str(), no_state[0].cwnd), ("ESTAB", Some(5)));
    }

    #[test]
    fn ping_summary_and_nstat_are_parsed() {
        let p = parse_ping("20 packets transmitted, 19 received, 5% packet loss, time 963ms\nrtt min/avg/max/mdev = 10.366/10.552/11.929/0.333 ms, pipe 2\n")
            .unwrap_or_default();
        assert_eq!((p.sent, p.received), (20, 19));
        assert!((p.avg_ms - 10.552).abs() < 1e-9);
        assert_eq!(p.median_ms(), None);
        let r = parse_ping("64 bytes from 10.72.1.2: icmp_seq=1 ttl=63 time=10.4 ms\n64 bytes from 10.72.1.2: icmp_seq=2 ttl=63 time=20.1 ms\n64 bytes from 10.72.1.2: icmp_seq=3 ttl=63 time=10.2 ms\n3 packets transmitted, 3 received, 0% packet loss, time 100ms\n")
            .unwrap_or_default();
        assert_eq!(r.rtts_ms, vec![10.4, 20.1, 10.2]);
        assert_eq!(r.median_ms(), Some(10.4));
        let a = parse_nstat("#kernel\nTcpRetransSegs 5 0.0\nIpInReceives 10 0.0\n");
        let b = parse_nstat("#kernel\nTcpRetransSegs 9 0.0\nIpInReceives 10 0.0\n");
        let d = nstat_delta(&a, &b);
        assert_eq!(d.get("TcpRetransSegs"), Some(&4));
        assert!(!d.contains_key("IpInReceives"));
    }
}
