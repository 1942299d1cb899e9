//! Test (b): data-path agreement. A bulk transfer through delay, random loss and an outage while
//! `tcpvigil record` runs; the recording's retransmitted segments, lost retransmissions and RTOs
//! must equal the MIB deltas of each namespace, and the SACK samples must match a capture.
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use crate::net::{Impair, Path, Shape};
use crate::recorder::{Recorder, Recording};
use crate::report::{note, Report};
use crate::sys::{mib, netns_inode};
use crate::{capture, traffic, Expect};

#[derive(Debug, Clone, clap::Args)]
pub struct Opts {
    /// Seconds of bulk transfer.
    #[arg(long, default_value_t = 6)]
    pub secs: u64,
    /// Random loss of data segments, percent.
    #[arg(long, default_value_t = 1.5)]
    pub loss: f64,
    /// One-way delay on the data path, ms (netem only).
    #[arg(long, default_value_t = 10)]
    pub delay_ms: u32,
    #[arg(long, default_value_t = 20)]
    pub rate_mbit: u32,
    /// Outage (100% loss) start after the transfer starts, ms.
    #[arg(long, default_value_t = 2000)]
    pub outage_at_ms: u64,
    /// Outage length, ms: long enough for at least one RTO (min RTO 200 ms).
    #[arg(long, default_value_t = 600)]
    pub outage_ms: u64,
    #[arg(long, value_enum, default_value_t = Impair::Auto)]
    pub impair: Impair,
    /// How long `record` may take to attach (trial loads are slow under TCG).
    #[arg(long, default_value_t = 120)]
    pub ready_timeout_s: u64,
}

/// Not iperf3's 5201: on a shared host other tests use that.
const PORT: u16 = 5399;

#[derive(Debug, Default, PartialEq)]
struct Counts {
    retrans_segs: i64,
    lost_retrans: i64,
    rtos: i64,
    /// Retransmissions in flight at the RTOs (the 0x10-bit fallback cannot see those the timeout
    /// marks lost and a cumulative ACK then covers).
    rto_retrans_out: i64,
}

/// What the recording says happened in one namespace. `exact`: the lost_retrans need used
/// fentry/tcp_mark_skb_lost (events of their own) rather than the 0x10 bit on retrans events.
fn counts(rec: &Recording, netns: u64, exact: bool) -> Counts {
    let mut c = Counts::default();
    for e in rec.of_netns(netns) {
        let segs = e["segs"].as_i64().unwrap_or(0);
        match e["type"].as_str() {
            Some("retrans") => {
                c.retrans_segs += segs;
                if !exact && e["lost_retrans"] == true {
                    c.lost_retrans += segs;
                }
            }
            Some("lost_retrans") if exact => c.lost_retrans += segs,
            Some("rto") => {
                c.rtos += 1;
                c.rto_retrans_out += e["retrans_out"].as_i64().unwrap_or(0);
            }
            _ => {}
        }
    }
    c
}

fn delta(b: &HashMap<String, i64>, a: &HashMap<String, i64>, k: &str) -> i64 {
    a.get(k).copied().unwrap_or(0) - b.get(k).copied().unwrap_or(0)
}

fn sleep_until(t: Instant) {
    let now = Instant::now();
    if t > now {
        std::thread::sleep(t - now);
    }
}

/// seq a is before b, modulo 2^32.
fn before(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) < 0
}

pub fn run(r: &mut Report, tcpvigil: &str, expect: Expect, o: &Opts) -> Result<()> {
    let path = Path::new(o.impair, Shape { delay_ms: o.delay_ms, rate_mbit: o.rate_mbit }, PORT)?;
    r.info(&format!(
        "datapath impairment {:?}: delay {} ms, rate {} Mbit/s, loss {}%, outage {} ms at +{} ms, {} s transfer",
        path.impair, o.delay_ms, o.rate_mbit, o.loss, o.outage_ms, o.outage_at_ms, o.secs
    ));
    let (sns, rns) = (netns_inode(&path.snd)?, netns_inode(&path.rcv)?);
    let mut rec =
        Recorder::start(tcpvigil, &format!("{}:{PORT}", path.rcv_ip), Duration::from_secs(o.ready_timeout_s))?;
    r.info(&format!("record ready after {:.1}s", rec.ready_after.as_secs_f64()));
    let to: SocketAddr = format!("{}:{PORT}", path.rcv_ip).parse()?;
    let rx = traffic::receiver(&path.rcv, to)?;
    let (b_snd, b_rcv) = (mib(&path.snd)?, mib(&path.rcv)?);
    let cap = capture::start(&path.snd, &path.snd_if, PORT)?;
    // Connect on a clean path: a lost SYN is a timeout of a socket the filter may not know yet.
    let tx = traffic::sender(&path.snd, to)?;
    let t0 = Instant::now();
    path.set_loss(o.loss)?;
    sleep_until(t0 + Duration::from_millis(o.outage_at_ms));
    path.outage(true, o.loss)?;
    std::thread::sleep(Duration::from_millis(o.outage_ms));
    path.outage(false, o.loss)?;
    sleep_until(t0 + Duration::from_secs(o.secs));
    // A clean ending: the FIN exchange and the last ACKs are not lost.
    path.set_loss(0.0)?;
    tx.stop();
    let sent = tx.join().context("sender")?;
    let got = rx.join().context("receiver")?;
    note(&format!("transfer done after {:.1}s: {sent} bytes sent, {got} received", t0.elapsed().as_secs_f64()));
    // Let the last ACKs and the FIN handshake settle before reading the counters.
    std::thread::sleep(Duration::from_millis(1000));
    let (a_snd, a_rcv) = (mib(&path.snd)?, mib(&path.rcv)?);
    let wire = cap.finish()?;
    let rec = rec.finish()?;
    for l in rec.log.lines().filter(|l| l.contains("recorded") || l.contains("lost:") || l.contains("account:")) {
        r.info(&format!("record: {}", l.trim_start_matches("tcpvigil: ")));
    }
    r.check("datapath-transfer", sent > 0 && sent == got, &format!("{sent} bytes sent, {got} received"));

    let exact = rec.variant("lost_retrans").starts_with("fentry");
    // With the 6.17+ tracepoint (sk, skb, err) the kernel's count is now and then 1-3 segments
    // higher than the tracepoint reported (host 6.18: 154 vs 155 in one CI run; no recursion miss,
    // no ring loss): the same 3 % (at least 2) below as the host's own data-path test allows.
    let retrans_slack =
        |kernel: i64| if rec.variant("retrans").contains("err") { (kernel * 3 / 100).max(2) } else { 0 };
    let mut sender_counts = Counts::default();
    for (side, ns, b, a) in [("sender", sns, &b_snd, &a_snd), ("receiver", rns, &b_rcv, &a_rcv)] {
        let c = counts(&rec, ns, exact);
        let m = Counts {
            retrans_segs: delta(b, a, "TcpRetransSegs"),
            lost_retrans: delta(b, a, "TcpExtTCPLostRetransmit"),
            rtos: delta(b, a, "TcpExtTCPTimeouts"),
            rto_retrans_out: 0,
        };
        for (what, agent, kernel) in [
            ("retrans", c.retrans_segs, m.retrans_segs),
            ("lost-retrans", c.lost_retrans, m.lost_retrans),
            ("rto", c.rtos, m.rtos),
        ] {
            let mut detail = format!("agent={agent} mib={kernel}");
            let fail = delta(b, a, "TcpExtTCPRetransFail");
            if what == "retrans" && fail > 0 {
                // Attempts the qdisc refused count in TcpRetransSegs but were never sent.
                detail.push_str(&format!(" (TCPRetransFail {fail}: local drops; the path's queue is too short)"));
            }
            // The fallback sees lost retransmissions when they are resent: it may trail the MIB
            // by what the RTOs marked lost (plus 3 % for RACK doing the same), never exceed it.
            let ok = if what == "lost-retrans" && !exact {
                detail.push_str(&format!(" ({} in flight at RTOs)", c.rto_retrans_out));
                agent <= kernel && kernel - agent <= c.rto_retrans_out + kernel * 3 / 100
            } else if what == "retrans" && retrans_slack(kernel) > 0 {
                detail.push_str(&format!(" (at most {} below with the 6.17+ tracepoint)", retrans_slack(kernel)));
                agent <= kernel && kernel - agent <= retrans_slack(kernel)
            } else {
                agent == kernel
            };
            r.check(&format!("datapath-{what}-{side}"), ok, &detail);
        }
        r.info(&format!(
            "mib {side}: RetransSegs {} TCPRetransFail {} TCPLossProbes {} TCPLostRetransmit {} TCPTimeouts {} OutSegs {} TCPBacklogCoalesce {} TCPBacklogDrop {}",
            m.retrans_segs,
            delta(b, a, "TcpExtTCPRetransFail"),
            delta(b, a, "TcpExtTCPLossProbes"),
            m.lost_retrans,
            m.rtos,
            delta(b, a, "TcpOutSegs"),
            delta(b, a, "TcpExtTCPBacklogCoalesce"),
            delta(b, a, "TcpExtTCPBacklogDrop")
        ));
        if side == "sender" {
            sender_counts = c;
        }
    }
    let c = &sender_counts;
    r.check(
        "datapath-exercised",
        c.retrans_segs >= 10 && c.rtos >= 1 && c.lost_retrans >= 1,
        &format!(
            "sender: {} retransmitted segments, {} RTOs, {} lost retransmissions ({} variant)",
            c.retrans_segs,
            c.rtos,
            c.lost_retrans,
            if exact { "exact" } else { "0x10-bit" }
        ),
    );
    samples(r, &rec, sns, expect, &wire);
    Ok(())
}

/// Samples by source, their internal consistency, and their SACK blocks against the capture.
fn samples(r: &mut Report, rec: &Recording, sns: u64, expect: Expect, wire: &capture::Captured) {
    let mut by_src: BTreeMap<String, u64> = BTreeMap::new();
    let mut blocks = BTreeSet::new();
    let mut bad = Vec::new();
    let mut checked = 0u64;
    for e in rec.of_netns(sns).filter(|e| e["type"] == "sample") {
        let src = e["src"].as_str().unwrap_or("?").to_string();
        *by_src.entry(src.clone()).or_default() += 1;
        let sack: Vec<(u32, u32)> = e["sack"]
            .as_array()
            .map(|a| a.iter().map(|p| (p[0].as_u64().unwrap_or(0) as u32, p[1].as_u64().unwrap_or(0) as u32)).collect())
            .unwrap_or_default();
        blocks.extend(sack.iter().copied());
        if src != "sacktag" {
            continue;
        }
        checked += 1;
        let g = |k: &str| e[k].as_u64().unwrap_or(0) as u32;
        // Blocks are judged against the ACK's own ack_seq, not snd_una: an ACK that arrives
        // after a newer one (veth can reorder across CPUs) is tagged on tcp_ack's old_ack path.
        let (ack, nxt, pkts) = (g("ack_seq"), g("snd_nxt"), g("packets_out"));
        let mut why = Vec::new();
        if sack.is_empty() {
            why.push("no SACK block at the exit of tcp_sacktag_write_queue".to_string());
        }
        for k in ["sacked_out", "lost_out", "retrans_out"] {
            if g(k) > pkts {
                why.push(format!("{k} {} > packets_out {pkts}", g(k)));
            }
        }
        let skip = usize::from(e["dsack"] == true);
        for &(s, end) in sack.iter().skip(skip) {
            if !before(s, end) || before(nxt, end) || !before(ack, end) {
                why.push(format!("block {s}-{end} outside ack_seq {ack} .. snd_nxt {nxt}"));
            }
        }
        if !why.is_empty() && bad.len() < 3 {
            bad.push(format!("ts {}: {}", e["ts_ns"], why.join(", ")));
        }
    }
    r.info(&format!("samples in the sender's namespace by source: {by_src:?}"));
    let n = |s: &str| by_src.get(s).copied().unwrap_or(0);
    let fexit = rec.variant("sack").starts_with("fexit");
    if expect == Expect::Fentry && !fexit {
        r.fail("datapath-sack-variant", &format!("the recording used `{}`, not fexit", rec.variant("sack")));
    }
    if expect == Expect::Fallback && fexit {
        r.fail("datapath-sack-variant", "the recording used fexit where the fallback was expected");
    }
    if fexit {
        r.check("datapath-samples-sacktag", n("sacktag") > 0, &format!("{} sacktag samples", n("sacktag")));
    } else {
        r.check(
            "datapath-samples-probe",
            n("probe") > 0 && n("sacktag") == 0,
            &format!("{} probe samples, {} sacktag", n("probe"), n("sacktag")),
        );
    }
    if checked > 0 {
        r.check(
            "datapath-sacktag-consistent",
            bad.is_empty(),
            &format!(
                "{checked} sacktag samples checked{}",
                if bad.is_empty() { String::new() } else { format!(": {}", bad.join("; ")) }
            ),
        );
    }
    let missing: Vec<_> = wire.blocks.difference(&blocks).collect();
    let invented: Vec<_> = blocks.difference(&wire.blocks).collect();
    let detail = format!(
        "{} blocks on the wire ({} ACKs with SACK, {} capture drops), {} in samples, {} missed, {} not on the wire{}",
        wire.blocks.len(),
        wire.acks_with_sack,
        wire.dropped,
        blocks.len(),
        missing.len(),
        invented.len(),
        if invented.is_empty() && missing.is_empty() {
            String::new()
        } else {
            format!(
                " (e.g. missed {:?}, invented {:?})",
                &missing[..missing.len().min(3)],
                &invented[..invented.len().min(3)]
            )
        }
    );
    r.check(
        "datapath-sack-vs-capture",
        wire.blocks.len() >= 5 && invented.len() as u64 <= wire.dropped && missing.len() * 100 <= wire.blocks.len(),
        &detail,
    );
}
