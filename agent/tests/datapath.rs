//! The data path against the kernel's own truth: MIB counters, a packet capture, `check`.
mod support;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::process::Command;
use std::time::Duration;

use support::*;
use tcpvigil::model::Body;

fn netns_inode(ns: &str) -> u32 {
    sh(&format!("stat -L -c %i /run/netns/{ns}")).trim().parse().expect("netns inode")
}

struct Counts {
    retrans_segs: i64,
    /// Of those, attempts that failed in the host (sockops RETRANS_CB).
    failed_segs: i64,
    lost_retrans: i64,
    rtos: i64,
    /// Retransmissions in flight at the RTOs: the timeout may mark them lost and a cumulative ACK
    /// cover them before any resend, which the fallback (which sees resends) cannot count.
    rto_retrans_out: i64,
}

fn exact_lost(rec: &tcpvigil::recording::Recording) -> bool {
    rec.header.variants.iter().any(|(n, v)| n == "lost_retrans" && v.starts_with("fentry"))
}

fn counts(rec: &tcpvigil::recording::Recording, netns: u32) -> Counts {
    let exact = exact_lost(rec);
    let mut c = Counts { retrans_segs: 0, failed_segs: 0, lost_retrans: 0, rtos: 0, rto_retrans_out: 0 };
    for e in rec.events.iter().filter(|e| e.conn.netns == netns) {
        match &e.body {
            Body::Retrans(r) => {
                c.retrans_segs += r.segs as i64;
                if r.failed {
                    c.failed_segs += r.segs as i64;
                }
                if r.lost_retrans && !exact {
                    c.lost_retrans += r.segs as i64;
                }
            }
            Body::LostRetrans(r) if exact => c.lost_retrans += r.segs as i64,
            Body::Rto(r) => {
                c.rtos += 1;
                c.rto_retrans_out += r.retrans_out as i64;
            }
            _ => {}
        }
    }
    c
}

fn delta(before: &HashMap<String, i64>, after: &HashMap<String, i64>, k: &str) -> i64 {
    after.get(k).copied().unwrap_or(0) - before.get(k).copied().unwrap_or(0)
}

#[test]
fn retransmissions_lost_retransmissions_and_rtos_equal_the_namespace_mib() {
    if !require_root("retransmissions_lost_retransmissions_and_rtos_equal_the_namespace_mib") {
        return;
    }
    let p = Pair::new("m");
    let port = 5301;
    p.shape(200, 0);
    // 4% of data segments dropped (SYNs spared: a lost SYN is a timeout no socket callback sees).
    sh(&format!(
        "ip netns exec {} nft -f - <<'EOF'\ntable inet tvt {{\n chain in {{ type filter hook input priority 0; policy accept;\n  tcp dport {port} tcp flags & syn == 0 numgen random mod 1000 < 40 counter drop\n }}\n}}\nEOF",
        p.rcv
    ));
    let (sns, rns) = (netns_inode(&p.snd), netns_inode(&p.rcv));
    let _srv = p.iperf_server(port);
    let rec = Recorder::start(&["--conn", &format!(":{port}")], 9);
    let (b_snd, b_rcv) = (p.mib(&p.snd), p.mib(&p.rcv));
    let outage = p.outage_after(Duration::from_millis(1500), Duration::from_millis(1200));
    let j = p.iperf_client(port, 5, &[]);
    let _ = outage.join();
    // The recording lasts 9 s: every socket must be done before the counters are read.
    assert!(p.wait_settled(&p.snd, Duration::from_millis(2500)), "the sender's connections did not close in time");
    // The receiver too: its FIN is resent when the sender's ACK of it is dropped (4 % of segments to
    // the receiver), which once came after the counters were read (agent 1, TcpRetransSegs 0).
    assert!(p.wait_settled(&p.rcv, Duration::from_millis(2500)), "the receiver's connections did not close in time");
    let (a_snd, a_rcv) = (p.mib(&p.snd), p.mib(&p.rcv));
    let (rec, log) = rec.finish();
    eprintln!("{log}");
    assert!(j["end"]["sum_sent"]["bytes"].as_f64().unwrap_or(0.0) > 1e6, "the transfer moved data");
    for (name, ns, b, a) in [("sender", sns, &b_snd, &a_snd), ("receiver", rns, &b_rcv, &a_rcv)] {
        let c = counts(&rec, ns);
        // The tracepoint reports the retransmissions sent, sockops RETRANS_CB the attempts that failed
        // in this host: together what TcpRetransSegs counts. Equal on Debian 6.1/6.12 (VM matrix) and
        // mostly here; on 6.18 the kernel's count is sometimes up to 3.2 % higher (2.4 % with both
        // cores busy, 3.2 % in CI while the fresh Debian root's builds ran beside the suite; 0-0.5 % on
        // an idle machine) with no ring-buffer
        // loss, no failed attempt and no recursion miss reported: the tracepoint did not run for those
        // (the agent's per-socket counter, checked below, agrees with its events).
        let fail = delta(b, a, "TcpExtTCPRetransFail");
        let (mr, ml, mt) =
            (delta(b, a, "TcpRetransSegs"), delta(b, a, "TcpExtTCPLostRetransmit"), delta(b, a, "TcpExtTCPTimeouts"));
        eprintln!(
            "{name}: retrans segs agent {} ({} failed locally) mib {mr} ({fail} TCPRetransFail); lost retrans agent {} mib {ml}; RTOs agent {} mib {mt} ({} retransmissions in flight at them)",
            c.retrans_segs, c.failed_segs, c.lost_retrans, c.rtos, c.rto_retrans_out
        );
        let tol = (mr * 5 / 100).max(2);
        assert!(
            c.retrans_segs <= mr && mr - c.retrans_segs <= tol,
            "{name}: retransmitted segments {} vs TcpRetransSegs {mr} (never above, at most {tol} below)",
            c.retrans_segs
        );
        assert_eq!(c.rtos, mt, "{name}: RTOs vs TcpExtTCPTimeouts");
        if exact_lost(&rec) {
            assert_eq!(c.lost_retrans, ml, "{name}: lost retransmissions vs TcpExtTCPLostRetransmit");
        } else {
            // The fallback sees a lost retransmission when the segment is resent. One the kernel
            // marks lost that a cumulative ACK covers before its resend is in the MIB only: an RTO
            // marks every retransmission in flight lost, and after an outage the first resend's ACK
            // may cover the rest (a CI run: 80 seen, 105 in the MIB, with 5 RTOs). RACK can do the
            // same outside an RTO, rarely: 3 % of the MIB is allowed for it.
            let slack = c.rto_retrans_out + ml * 3 / 100;
            assert!(
                c.lost_retrans <= ml && ml - c.lost_retrans <= slack,
                "{name}: lost retransmissions {} vs {ml} (at most {slack} below: {} in flight at RTOs)",
                c.lost_retrans,
                c.rto_retrans_out
            );
        }
    }
    // Nothing lost between the kernel and the recording: each connection's per-socket counter (in
    // its close snapshot) equals the retransmissions its events reported.
    for e in rec.events.iter().filter(|e| e.conn.netns == sns) {
        if let Body::Close(s) = &e.body {
            let events: u64 = rec
                .events
                .iter()
                .filter(|x| x.conn.cookie == e.conn.cookie)
                .map(|x| if let Body::Retrans(r) = &x.body { r.segs as u64 } else { 0 })
                .sum();
            eprintln!(
                "{}: per-socket {} events {events} kernel total_retrans {}",
                e.conn.tuple, s.retrans_segs, s.total_retrans
            );
            assert_eq!(s.retrans_segs as u64, events, "{}: per-socket counter vs events", e.conn.tuple);
        }
    }
    let c = counts(&rec, sns);
    assert!(c.retrans_segs > 50, "loss was injected: {} retransmitted segments", c.retrans_segs);
    assert!(c.rtos >= 1, "the outage forced at least one RTO");
    assert!(c.lost_retrans >= 1, "retransmissions were lost again");
}

/// SACK blocks as `tcpdump -tt -S` prints them (`1763900000.123456 IP ... sack 2 {a:b}{c:d}`),
/// each with the time (Unix seconds) of the first ACK that carried it.
fn capture_blocks(text: &str) -> BTreeMap<(u32, u32), f64> {
    let mut out = BTreeMap::new();
    for line in text.lines() {
        let Some(i) = line.find("sack ") else { continue };
        let t: f64 = line.split_whitespace().next().and_then(|t| t.parse().ok()).unwrap_or(f64::MAX);
        for part in line[i..].split('{').skip(1) {
            let Some(body) = part.split('}').next() else { continue };
            if let Some((a, b)) = body.split_once(':') {
                if let (Ok(a), Ok(b)) = (a.parse(), b.parse()) {
                    out.entry((a, b)).or_insert(t);
                }
            }
        }
    }
    out
}

#[test]
fn sack_blocks_in_samples_match_a_packet_capture_of_the_same_acks() {
    if !require_root("sack_blocks_in_samples_match_a_packet_capture_of_the_same_acks") {
        return;
    }
    let p = Pair::new("c");
    let port = 5302;
    p.shape(100, 0);
    p.random_loss(port, 4);
    let _srv = p.iperf_server(port);
    let pcap = std::env::temp_dir().join(format!("tvt-{}.pcap", std::process::id()));
    let mut dump = Command::new("ip")
        .args(["netns", "exec", &p.snd, "tcpdump", "-i", &format!("v{}", p.snd), "-w"])
        .arg(&pcap)
        .args(["-s", "128", "-B", "16384", "-U", &format!("tcp src port {port}")])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("tcpdump");
    // tcpdump says "listening on ..." once its socket is bound.
    let mut dump_err = dump.stderr.take().map(std::io::BufReader::new);
    if let Some(err) = dump_err.as_mut() {
        use std::io::BufRead;
        let mut line = String::new();
        let _ = err.read_line(&mut line);
    }
    let rec = Recorder::start(&["--conn", &format!(":{port}")], 6);
    let mib_before = p.mib(&p.snd);
    let j = p.iperf_client(port, 3, &["-C", "cubic"]);
    eprintln!("iperf3 moved {} bytes", j["end"]["sum_sent"]["bytes"]);
    std::thread::sleep(Duration::from_millis(1000));
    let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(dump.id() as i32), nix::sys::signal::Signal::SIGINT);
    let _ = dump.wait();
    let mut stats = String::new();
    if let Some(mut err) = dump_err {
        let _ = std::io::Read::read_to_string(&mut err, &mut stats);
    }
    // ACKs the capture missed but the agent saw: "dropped by kernel", plus packets "received by
    // filter" that tcpdump never wrote (still buffered when it was stopped).
    let stat = |what: &str| -> usize {
        stats.lines().find(|l| l.contains(what)).and_then(|l| l.split_whitespace().next()?.parse().ok()).unwrap_or(0)
    };
    let cap_dropped = stat("dropped by kernel") + stat("received by filter").saturating_sub(stat("packets captured"));
    let (rec, log) = rec.finish();
    eprintln!("{log}");
    let mib_after = p.mib(&p.snd);
    eprintln!(
        "sender: TcpInSegs {} TCPBacklogCoalesce {} TCPBacklogDrop {}",
        delta(&mib_before, &mib_after, "TcpInSegs"),
        delta(&mib_before, &mib_after, "TcpExtTCPBacklogCoalesce"),
        delta(&mib_before, &mib_after, "TcpExtTCPBacklogDrop")
    );
    let text = sh(&format!("tcpdump -tt -S -n -r {} 2>/dev/null", pcap.display()));
    eprintln!("{}", text.lines().filter(|l| l.contains("sack")).take(3).collect::<Vec<_>>().join("\n"));
    let _ = std::fs::remove_file(&pcap);
    let sns = netns_inode(&p.snd);
    // tcp_probe fires only in ESTABLISHED: the ACKs that arrive after the sender's data socket left
    // it (CLOSE_WAIT when iperf3's receiver closes first, FIN_WAIT1 when the sender does; the last
    // send buffer may still be in recovery) are not sampled, so the blocks that must all be in
    // samples are those of the ACKs captured before that.
    let closed_ns = rec
        .events
        .iter()
        .filter(|e| e.conn.netns == sns && matches!(&e.body, Body::State(s) if s.old == 1 && s.new != 1))
        .map(|e| e.ts_ns as i64 + rec.header.mono_to_unix_ns)
        .min();
    let cut = closed_ns.map_or(f64::MAX, |ns| ns as f64 / 1e9);
    let wire = capture_blocks(&text);
    let on_wire: BTreeSet<(u32, u32)> = wire.keys().copied().collect();
    let before_fin: BTreeSet<(u32, u32)> = wire.iter().filter(|(_, t)| **t < cut).map(|(b, _)| *b).collect();
    let last_ack = text.lines().filter_map(|l| l.split_whitespace().next()?.parse::<f64>().ok()).fold(0.0, f64::max);
    eprintln!("sender's first socket left ESTABLISHED at {cut:.6}, last ACK captured at {last_ack:.6}");
    let mut in_samples = BTreeSet::new();
    for e in rec.events.iter().filter(|e| e.conn.netns == sns) {
        if let Body::Sample(s) = &e.body {
            in_samples.extend(s.sack.iter().copied());
        }
    }
    assert!(on_wire.len() > 20, "the capture saw SACK blocks: {}", on_wire.len());
    let missing: Vec<_> = before_fin.difference(&in_samples).collect();
    let invented: Vec<_> = in_samples.difference(&on_wire).collect();
    eprintln!(
        "SACK blocks: {} on the wire ({} before the sender left ESTABLISHED), {} in samples, {} missed, {} not on the wire",
        on_wire.len(),
        before_fin.len(),
        in_samples.len(),
        missing.len(),
        invented.len()
    );
    eprintln!("tcpdump: {}", stats.replace('\n', "; "));
    for b in &missing {
        let line = text.lines().find(|l| l.contains(&format!("{{{}:{}}}", b.0, b.1))).unwrap_or("");
        eprintln!("missed {b:?}, first on the wire {:.6} s before the sender left ESTABLISHED: {line}", cut - wire[*b]);
        if std::env::var_os("TV_DEBUG_MISSED").is_some() {
            let mut lines: Vec<(f64, String)> = Vec::new();
            for e in rec.events.iter().filter(|e| e.conn.netns == sns) {
                let t = (e.ts_ns as i64 + rec.header.mono_to_unix_ns) as f64 / 1e9;
                if t - wire[*b] > -0.3 && t - wire[*b] < 0.005 {
                    let what = match &e.body {
                        Body::Sample(x) => format!(
                            "sample {:?} ack {} ca {} sacked {} sack {:?}",
                            x.src, x.ack_seq, x.ca_state, x.sacked_out, x.sack
                        ),
                        Body::CaState(x) => format!("ca {} -> {}", x.old, x.new),
                        Body::Retrans(x) => format!("retrans {} ca {}", x.seq, x.ca_state),
                        other => format!("{other:?}").chars().take(100).collect(),
                    };
                    lines.push((t, format!("  ev {t:.6} {} {what}", e.conn.cookie)));
                }
            }
            for l in text.lines() {
                let t: f64 = l.split_whitespace().next().and_then(|t| t.parse().ok()).unwrap_or(0.0);
                if t - wire[*b] > -0.3 && t - wire[*b] < 0.005 {
                    lines.push((t, format!("  wire {}", &l[..l.len().min(200)])));
                }
            }
            lines.sort_by(|a, b| a.0.total_cmp(&b.0));
            for (_, l) in lines {
                eprintln!("{l}");
            }
        }
    }
    assert!(
        invented.len() <= cap_dropped,
        "samples carry blocks no ACK had: {:?} (wire sample {:?})",
        &invented[..invented.len().min(5)],
        on_wire.iter().take(5).collect::<Vec<_>>()
    );
    // Before the close every block must be in a sample. Seen in about one run in ten here: a gap of
    // a few consecutive ACKs (0.9-3 ms) with neither a sample nor a congestion-state record, while
    // the kernel reports no recursion miss and the ring buffer no loss (TV_DEBUG_MISSED=1 prints
    // the records and the capture around each missed block); 2 blocks each time. 4 (or 1 %) are
    // allowed for it.
    assert!(
        missing.len() <= 4 || missing.len() * 100 <= before_fin.len(),
        "blocks captured before the sender left ESTABLISHED missing from samples (block, s before that): {:?}",
        missing.iter().take(10).map(|b| (b, cut - wire[b])).collect::<Vec<_>>()
    );
}

#[test]
fn check_reports_the_fallbacks_this_kernel_needs() {
    if !require_root("check_reports_the_fallbacks_this_kernel_needs") {
        return;
    }
    let out = Command::new(env!("CARGO_BIN_EXE_tcpvigil")).args(["check", "--json"]).output().expect("run check");
    assert!(out.status.success(), "check failed: {}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("check --json");
    assert_eq!(v["ok"], true);
    let needs = v["needs"].as_array().expect("needs");
    let get = |n: &str| needs.iter().find(|x| x["need"] == n).cloned().unwrap_or_default();
    for essential in ["ack", "retrans", "rto", "lifecycle", "snapshot"] {
        assert!(get(essential)["prog"].is_string(), "{essential} has a program: {}", get(essential));
    }
    let sack = get("sack");
    if sack["preferred"] == false {
        let refused = sack["refused"].to_string();
        assert!(refused.contains("fexit/tcp_sacktag_write_queue"), "the refusal is reported: {refused}");
        assert_eq!(get("ack")["variant"], "tp_btf/tcp_probe");
    } else {
        assert_eq!(sack["variant"], "fexit/tcp_sacktag_write_queue");
    }
}
