//! Path properties per direction on the router, for IPv4 and IPv6 alike: delay line and policer, tbf shaping, random loss, outages, targeted drops.
use crate::bpf::{self, RetxDrop, RetxStats};
use crate::cmd;
use crate::delay::{DelayLine, DelayStats, Policer};
use crate::error::{LabError, Result};
use crate::topo::Topology;
use serde::{Deserialize, Serialize};
use std::net::IpAddr;
use std::path::Path;
use std::time::Duration;

/// A direction through the router.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Dir {
    /// Sender -> receiver (data).
    Forward,
    /// Receiver -> sender (ACKs).
    Reverse,
}

impl Dir {
    /// nft / iptables input-interface patterns on the router for packets going this way.
    fn iif_nft(self) -> &'static str {
        match self {
            Dir::Forward => "s*",
            Dir::Reverse => "r*",
        }
    }
    fn iif_ipt(self) -> &'static str {
        match self {
            Dir::Forward => "s+",
            Dir::Reverse => "r+",
        }
    }
    fn queue(self) -> u16 {
        match self {
            Dir::Forward => 1,
            Dir::Reverse => 2,
        }
    }
}

/// A policing router: a token bucket of `burst_bytes` filled at `rate_mbit`; packets finding too
/// few tokens are dropped. Applied by the delay line on arrival (see README: nft's byte-mode
/// `limit ... burst` adds one second of rate to the bucket, and this kernel has no act_police).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Police {
    /// Policed rate, Mbit/s.
    pub rate_mbit: f64,
    /// Token bucket depth, bytes.
    pub burst_bytes: u64,
}

/// tbf shaping on the router's egress for one direction (drop-tail queue of `limit_bytes`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Shape {
    /// Rate, Mbit/s.
    pub rate_mbit: f64,
    /// Bucket size in bytes (tbf `burst`); None = 4 ms at the rate, at least 3000. tbf refills
    /// only as full as its bucket: a dequeue timer fired late by more than the bucket's time loses
    /// the rest, and on a VM with stolen time 1 ms of bucket shaped 100 Mbit/s to 83-95.
    pub burst_bytes: Option<u64>,
    /// Queue limit in bytes (tbf `limit`); None = 20 ms at the rate, at least 30000.
    pub limit_bytes: Option<u64>,
}

impl Shape {
    fn bytes_per_s(&self) -> f64 {
        self.rate_mbit * 1e6 / 8.0
    }
    /// Effective tbf burst.
    pub fn burst(&self) -> u64 {
        self.burst_bytes.unwrap_or(((self.bytes_per_s() * 0.004) as u64).max(3000))
    }
    /// Effective tbf limit.
    pub fn limit(&self) -> u64 {
        self.limit_bytes.unwrap_or(((self.bytes_per_s() * 0.020) as u64).max(30_000))
    }
}

/// Everything applied to one direction.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct DirConfig {
    /// One-way delay added by the NFQUEUE delay line, milliseconds (0 = none).
    pub delay_ms: f64,
    /// tbf shaper on the router egress.
    pub shape: Option<Shape>,
    /// nft policer.
    pub police: Option<Police>,
    /// Random loss in parts per million (nft numgen random).
    pub loss_ppm: u32,
}

/// Both directions plus the targeted-drop program (forward direction only).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PathConfig {
    /// Sender -> receiver.
    pub forward: DirConfig,
    /// Receiver -> sender.
    pub reverse: DirConfig,
    /// Drop retransmissions of chosen segments on the way to the receivers.
    pub retx_drop: Option<RetxDrop>,
    /// Random loss on one sender's link only (a flaky member of a LAG or ECMP group).
    #[serde(default)]
    pub lossy_sender: Option<LossySender>,
    /// Random loss on one connection only (its 5-tuple hashed onto a flaky member).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lossy_lane: Option<LossyLane>,
    /// The receivers' links on the router at a smaller MTU from the start (before any traffic).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_mtu: Option<MtuDrop>,
}

/// Random forward loss on the packets of one connection: those whose TCP source or destination
/// port is `port`, a client port the lab binds (iperf3 --cport, the socket pair's and curl's local
/// port). Stands for one flow that an ECMP or LAG hash put on a member with errors.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct LossyLane {
    pub port: u16,
    /// Loss in parts per million.
    pub loss_ppm: u32,
}

/// The router's links towards the receivers at `mtu` (a tunnel's or a misconfigured next link),
/// with the router's ICMP "fragmentation needed" (IPv4) and "packet too big" (IPv6) dropped when
/// `filter_icmp`: full-size segments vanish without a word, a path MTU black hole. Without the
/// filter path MTU discovery works and the sender shrinks its segments.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct MtuDrop {
    pub mtu: u32,
    pub filter_icmp: bool,
}

/// Random forward loss on the link of one sender.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct LossySender {
    /// Sender index (0-based).
    pub sender: usize,
    /// Loss in parts per million.
    pub loss_ppm: u32,
}

impl PathConfig {
    /// A symmetric path with round-trip time `rtt_ms` (half each way).
    pub fn with_rtt(rtt_ms: f64) -> Self {
        let mut p = PathConfig::default();
        p.forward.delay_ms = rtt_ms / 2.0;
        p.reverse.delay_ms = rtt_ms / 2.0;
        p
    }
    /// Configured round-trip delay in ms (excluding queueing).
    pub fn rtt_ms(&self) -> f64 {
        self.forward.delay_ms + self.reverse.delay_ms
    }
    /// Checks values are in range.
    pub fn validate(&self) -> Result<()> {
        for (n, d) in [("forward", &self.forward), ("reverse", &self.reverse)] {
            if !(0.0..=2000.0).contains(&d.delay_ms) {
                return Err(LabError::Invalid(format!("{n} delay {} ms not in 0..=2000", d.delay_ms)));
            }
            if d.loss_ppm > 1_000_000 {
                return Err(LabError::Invalid(format!("{n} loss {} ppm above 1000000", d.loss_ppm)));
            }
            if let Some(s) = d.shape {
                if !(0.01..=100_000.0).contains(&s.rate_mbit) {
                    return Err(LabError::Invalid(format!("{n} shaping rate {} Mbit/s out of range", s.rate_mbit)));
                }
            }
            if let Some(p) = d.police {
                if !(0.01..=100_000.0).contains(&p.rate_mbit) || p.burst_bytes == 0 || p.burst_bytes > u32::MAX as u64 {
                    return Err(LabError::Invalid(format!("{n} policer {p:?} out of range")));
                }
            }
        }
        if let Some(l) = self.lossy_lane {
            if l.port == 0 || l.loss_ppm > 1_000_000 {
                return Err(LabError::Invalid(format!("lossy lane {l:?} out of range")));
            }
        }
        if let Some(m) = self.next_mtu {
            check_mtu(m.mtu)?;
        }
        Ok(())
    }
}

/// An MTU the router's links can take (IPv4's 576 to the lab's 9000).
pub fn check_mtu(mtu: u32) -> Result<()> {
    if (576..=9000).contains(&mtu) {
        Ok(())
    } else {
        Err(LabError::Invalid(format!("MTU {mtu} not in 576..=9000")))
    }
}

/// The path as applied; holds the delay lines. Dropping it stops them.
pub struct AppliedPath {
    router: String,
    fwd_ifs: Vec<String>,
    delays: Vec<(Dir, DelayLine)>,
    retx: bool,
    /// The links' MTU before a drop (restored by `mtu_restore`).
    link_mtu: u32,
    /// The ICMP filter of an MTU black hole is in place.
    icmp_filtered: std::sync::atomic::AtomicBool,
}

/// One `inet` table: its rules see IPv4 and IPv6 packets alike.
const TABLE: &str = "inet tvl";
/// Loss and outages (priority -10, before the delay line).
const CHAIN: &str = "path";
/// The delay line's `-j NFQUEUE` rules go in the FORWARD chain of both: this kernel has no nft
/// `queue` expression (CONFIG_NFT_QUEUE unset), only the xtables NFQUEUE target.
const QUEUE_TOOLS: [&str; 2] = ["iptables", "ip6tables"];

fn nft(ns: &str, rule: &str) -> Result<String> {
    cmd::run_in(ns, &["nft", "--echo", "--handle", rule])
}

/// Applies `cfg` on the router of `topo`. `work_dir` receives the compiled bpf object.
pub fn apply(topo: &Topology, cfg: &PathConfig, work_dir: &Path) -> Result<AppliedPath> {
    cfg.validate()?;
    let r = topo.router.clone();
    let fwd_ifs: Vec<String> = topo.receivers.iter().map(|h| h.router_ifname.clone()).collect();
    let rev_ifs: Vec<String> = topo.senders.iter().map(|h| h.router_ifname.clone()).collect();
    let mut applied = AppliedPath {
        router: r.clone(),
        fwd_ifs: fwd_ifs.clone(),
        delays: Vec::new(),
        retx: false,
        link_mtu: topo.mtu,
        icmp_filtered: Default::default(),
    };
    cmd::run_in(&r, &["nft", &format!("add table {TABLE}")])?;
    cmd::run_in(
        &r,
        &["nft", &format!("add chain {TABLE} {CHAIN} {{ type filter hook forward priority -10; policy accept; }}")],
    )?;
    for (dir, d, ifs) in [(Dir::Forward, &cfg.forward, &fwd_ifs), (Dir::Reverse, &cfg.reverse, &rev_ifs)] {
        let iif = dir.iif_nft();
        let name = format!("{dir:?}").to_lowercase();
        if d.loss_ppm > 0 {
            nft(&r, &format!(
                "add rule {TABLE} {CHAIN} iifname \"{iif}\" numgen random mod 1000000 < {} counter drop comment \"loss-{name}\"",
                d.loss_ppm
            ))?;
        }
        if let Some(s) = d.shape {
            let rate = format!("{}bit", (s.rate_mbit * 1e6) as u64);
            let (burst, limit) = (s.burst().to_string(), s.limit().to_string());
            for dev in ifs.iter() {
                cmd::run_in(
                    &r,
                    &[
                        "tc", "qdisc", "replace", "dev", dev, "root", "tbf", "rate", &rate, "burst", &burst, "limit",
                        &limit,
                    ],
                )?;
            }
        }
        if d.delay_ms > 0.0 || d.police.is_some() {
            let police = d
                .police
                .map(|p| Policer { rate_bytes_per_s: p.rate_mbit * 1e6 / 8.0, burst_bytes: p.burst_bytes as f64 });
            let line = DelayLine::start(&r, dir.queue(), Duration::from_secs_f64(d.delay_ms / 1000.0), police)?;
            applied.delays.push((dir, line));
            let q = dir.queue().to_string();
            for tool in QUEUE_TOOLS {
                cmd::run_in(&r, &[tool, "-A", "FORWARD", "-i", dir.iif_ipt(), "-j", "NFQUEUE", "--queue-num", &q])?;
            }
        }
    }
    if let Some(l) = cfg.lossy_sender {
        let h = topo.senders.get(l.sender).ok_or_else(|| {
            LabError::Invalid(format!("lossy sender {} but the lab has {} senders", l.sender, topo.senders.len()))
        })?;
        nft(&r, &format!(
            "add rule {TABLE} {CHAIN} iifname \"{}\" numgen random mod 1000000 < {} counter drop comment \"loss-sender{}\"",
            h.router_ifname, l.loss_ppm, l.sender
        ))?;
    }
    if let Some(l) = cfg.lossy_lane {
        for side in ["sport", "dport"] {
            nft(&r, &format!(
                "add rule {TABLE} {CHAIN} iifname \"s*\" tcp {side} {} numgen random mod 1000000 < {} counter drop comment \"loss-lane\"",
                l.port, l.loss_ppm
            ))?;
        }
    }
    if let Some(m) = cfg.next_mtu {
        applied.mtu_drop(m)?;
    }
    if let Some(rd) = cfg.retx_drop {
        let obj = bpf::compile(&rd, work_dir)?;
        for dev in &fwd_ifs {
            bpf::attach(&r, dev, &obj)?;
        }
        applied.retx = true;
    }
    Ok(applied)
}

/// The drop rules of an outage in place; remove them with [`AppliedPath::outage_end`].
#[derive(Debug, Clone)]
pub struct OutageHandle(Vec<u64>);

/// The nft matches of an outage: every forwarded packet of `dir` (None = both), or with `only`
/// the packets to (forward) and from (reverse) that address alone, one rule per direction (`ip`
/// or `ip6` after the address's family: in an inet table each matches its own family only).
fn outage_matches(dir: Option<Dir>, only: Option<IpAddr>) -> Vec<String> {
    let iif = |d: Dir| format!("iifname \"{}\" ", d.iif_nft());
    match (dir, only) {
        (None, None) => vec![String::new()],
        (Some(d), None) => vec![iif(d)],
        (d, Some(a)) => {
            let fam = if a.is_ipv6() { "ip6" } else { "ip" };
            [Dir::Forward, Dir::Reverse]
                .into_iter()
                .filter(|x| d.is_none_or(|d| d == *x))
                .map(|x| format!("{}{fam} {} {a} ", iif(x), if x == Dir::Forward { "daddr" } else { "saddr" }))
                .collect()
        }
    }
}

impl AppliedPath {
    /// Starts an outage: inserts nft rules dropping every forwarded packet of `dir` (None = both
    /// directions), or with `only` just those to and from that address.
    pub fn outage_begin(&self, dir: Option<Dir>, only: Option<IpAddr>) -> Result<OutageHandle> {
        let mut handles = Vec::new();
        for m in outage_matches(dir, only) {
            let out = nft(&self.router, &format!("insert rule {TABLE} {CHAIN} {m}counter drop comment \"outage\""))?;
            let h = out.split_whitespace().skip_while(|w| *w != "handle").nth(1).and_then(|h| h.parse().ok());
            handles.push(h.ok_or_else(|| LabError::Parse { what: "nft --echo --handle".into(), detail: out.clone() })?);
        }
        Ok(OutageHandle(handles))
    }

    /// Ends an outage.
    pub fn outage_end(&self, h: OutageHandle) -> Result<()> {
        for handle in h.0 {
            cmd::run_in(&self.router, &["nft", &format!("delete rule {TABLE} {CHAIN} handle {handle}")])?;
        }
        Ok(())
    }

    /// Sets the receivers' links to `m.mtu`, first putting the ICMP filter in place if asked (it
    /// stays until the lab is removed: nothing else makes the router send those messages).
    pub fn mtu_drop(&self, m: MtuDrop) -> Result<()> {
        check_mtu(m.mtu)?;
        if m.filter_icmp && !self.icmp_filtered.swap(true, std::sync::atomic::Ordering::SeqCst) {
            // The router's own messages leave through the output hook, not forward.
            cmd::run_in(
                &self.router,
                &["nft", &format!("add chain {TABLE} out {{ type filter hook output priority 0; policy accept; }}")],
            )?;
            for rule in [
                "icmp type destination-unreachable icmp code frag-needed counter drop comment \"icmp-frag-needed\"",
                "icmpv6 type packet-too-big counter drop comment \"icmp6-too-big\"",
            ] {
                nft(&self.router, &format!("add rule {TABLE} out {rule}"))?;
            }
        }
        self.set_mtu(m.mtu)
    }

    /// Gives the receivers' links their MTU back.
    pub fn mtu_restore(&self) -> Result<()> {
        self.set_mtu(self.link_mtu)
    }

    fn set_mtu(&self, mtu: u32) -> Result<()> {
        for dev in &self.fwd_ifs {
            cmd::run_in(&self.router, &["ip", "link", "set", "dev", dev, "mtu", &mtu.to_string()])?;
        }
        Ok(())
    }

    /// nft rule counters by comment (`police-forward`, `loss-reverse`, `outage`, ...): (packets, bytes) dropped.
    pub fn nft_counters(&self) -> Result<Vec<(String, u64, u64)>> {
        let out = cmd::run_in(&self.router, &["nft", "-j", "list", "table", "inet", "tvl"])?;
        let v: serde_json::Value =
            serde_json::from_str(&out).map_err(|e| LabError::Parse { what: "nft -j".into(), detail: e.to_string() })?;
        let mut res = Vec::new();
        for item in v["nftables"].as_array().into_iter().flatten() {
            let rule = &item["rule"];
            let Some(comment) = rule["comment"].as_str() else { continue };
            let counter = rule["expr"].as_array().into_iter().flatten().find_map(|e| e.get("counter"));
            if let Some(c) = counter {
                res.push((comment.to_string(), c["packets"].as_u64().unwrap_or(0), c["bytes"].as_u64().unwrap_or(0)));
            }
        }
        Ok(res)
    }

    /// tbf statistics per router interface: (dev, json of `tc -s -j qdisc show`).
    pub fn qdisc_stats(&self) -> Vec<(String, serde_json::Value)> {
        let devs = cmd::run_in(&self.router, &["ip", "-o", "link", "show"]).unwrap_or_default();
        let names: Vec<String> = devs
            .lines()
            .filter_map(|l| l.split(':').nth(1).map(|n| n.trim().split('@').next().unwrap_or("").to_string()))
            .filter(|n| n != "lo" && !n.is_empty())
            .collect();
        names
            .into_iter()
            .filter_map(|d| {
                let out = cmd::run_in(&self.router, &["tc", "-s", "-j", "qdisc", "show", "dev", &d]).ok()?;
                Some((d, serde_json::from_str(&out).ok()?))
            })
            .collect()
    }

    /// Counters of the targeted-drop program, summed over the receiver-facing interfaces.
    pub fn retx_stats(&self) -> Result<Option<RetxStats>> {
        if !self.retx {
            return Ok(None);
        }
        let mut sum = RetxStats::default();
        for dev in &self.fwd_ifs {
            let s = bpf::read_stats(&self.router, dev)?;
            sum.data_segments += s.data_segments;
            sum.retransmissions += s.retransmissions;
            sum.dropped += s.dropped;
            sum.targets += s.targets;
            sum.passed_retransmissions += s.passed_retransmissions;
            sum.errors += s.errors;
        }
        Ok(Some(sum))
    }

    /// Shortens every delay line by `excess_ms` in total, shared in proportion to the configured
    /// delays (so a measured RTT that overshoots by the lab's own overhead lands on the setting).
    /// Returns the trim applied per direction in ms.
    pub fn trim_delay(&self, cfg: &PathConfig, excess_ms: f64) -> Vec<(Dir, f64)> {
        let total = cfg.rtt_ms();
        let mut out = Vec::new();
        if total <= 0.0 {
            return out;
        }
        for (dir, line) in &self.delays {
            let set = match dir {
                Dir::Forward => cfg.forward.delay_ms,
                Dir::Reverse => cfg.reverse.delay_ms,
            };
            let trim = (excess_ms * set / total).clamp(0.0, set * 0.5);
            line.set_delay(Duration::from_secs_f64((set - trim) / 1000.0));
            out.push((*dir, trim));
        }
        out
    }

    /// Removes the queue rules and stops the delay lines, returning their statistics.
    pub fn stop_delay(&mut self) -> Vec<DelayStats> {
        for tool in QUEUE_TOOLS {
            cmd::run_in_quiet(&self.router, &[tool, "-F", "FORWARD"]);
        }
        self.delays.drain(..).filter_map(|(_, d)| d.stop().ok()).collect()
    }
}

impl Drop for AppliedPath {
    fn drop(&mut self) {
        let _ = self.stop_delay();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_outage_of_one_host_drops_what_goes_to_it_and_what_comes_from_it() {
        assert_eq!(outage_matches(None, None), vec![String::new()]);
        assert_eq!(outage_matches(Some(Dir::Reverse), None), vec!["iifname \"r*\" ".to_string()]);
        let a: IpAddr = "10.72.1.2".parse().unwrap();
        assert_eq!(
            outage_matches(None, Some(a)),
            vec!["iifname \"s*\" ip daddr 10.72.1.2 ".to_string(), "iifname \"r*\" ip saddr 10.72.1.2 ".to_string()]
        );
        assert_eq!(outage_matches(Some(Dir::Forward), Some(a)), vec!["iifname \"s*\" ip daddr 10.72.1.2 ".to_string()]);
        let b: IpAddr = "fd00:72:1::2".parse().unwrap();
        assert_eq!(
            outage_matches(Some(Dir::Reverse), Some(b)),
            vec!["iifname \"r*\" ip6 saddr fd00:72:1::2 ".to_string()]
        );
    }
}
