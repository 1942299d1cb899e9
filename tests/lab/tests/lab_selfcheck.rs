//! Root tests of the lab itself: RTT, shaped rate, random loss, outage, targeted drops and zero window match their settings.
mod common;

use std::time::{Duration, Instant};
use tcpvigil_lab::observe;
use tcpvigil_lab::path::{PathConfig, Shape};
use tcpvigil_lab::{Knobs, Lab, LabConfig, RunOptions, Scenario};

fn lab_with(path: PathConfig, test: &str) -> Lab {
    let cfg = LabConfig { path, trim_delay: true, ..LabConfig::default() };
    match Lab::up(&cfg, &common::scratch(test)) {
        Ok(l) => l,
        Err(e) => panic!("{test}: lab up failed: {e}"),
    }
}

fn iperf_json(lab: &Lab, args: &[&str]) -> serde_json::Value {
    try_iperf_json(lab, args).unwrap_or_else(|e| panic!("{e}"))
}

/// An iperf3 server for one test on the first receiver, listening; and the address to reach it.
fn iperf_server(lab: &Lab) -> (std::process::Child, String) {
    let r = &lab.receivers()[0];
    let srv = lab
        .command(&r.netns, &["iperf3", "-s", "-1", "-p", "5290"])
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("iperf3 server: {e}"));
    tcpvigil_lab::traffic::wait_listening(&r.netns, 5290).unwrap_or_else(|e| panic!("{e}"));
    (srv, r.addr.to_string())
}

/// iperf3's JSON, or the error it reported. Its control connection crosses the lab's path too:
/// with 2 % loss a delayed control message makes iperf3 3.12 give up ("unable to read from stream
/// socket: Resource temporarily unavailable", seen in CI), which says nothing about the lab.
fn try_iperf_json(lab: &Lab, args: &[&str]) -> Result<serde_json::Value, String> {
    let (mut srv, dst) = iperf_server(lab);
    let mut full = vec!["iperf3", "-c", dst.as_str(), "-p", "5290", "-J"];
    full.extend_from_slice(args);
    let out = lab.exec(&lab.senders()[0].netns, &full);
    let _ = srv.kill();
    let _ = srv.wait();
    let out = out.map_err(|e| format!("iperf3 client: {e}"))?;
    let v: serde_json::Value = serde_json::from_str(&out).map_err(|e| format!("iperf3 JSON: {e}"))?;
    match v["error"].as_str() {
        Some(err) => Err(format!("iperf3 reported an error: {err}")),
        None => Ok(v),
    }
}

#[test]
fn idle_rtt_through_delay_line_is_within_5_percent_of_setting() {
    let _g = common::serial();
    if !common::can_run("idle_rtt") {
        return;
    }
    for rtt in [10.0, 50.0] {
        let lab = lab_with(PathConfig::with_rtt(rtt), "idle_rtt");
        let p = lab.ping(0, 0, 50, 0.02).unwrap_or_else(|e| panic!("ping: {e}"));
        eprintln!("rtt set {rtt} ms: measured avg {:.3} min {:.3} max {:.3}", p.avg_ms, p.min_ms, p.max_ms);
        assert_eq!(p.received, p.sent, "lost pings on a clean path");
        assert!((p.avg_ms - rtt).abs() <= rtt * 0.05, "avg RTT {:.3} ms not within 5 % of {rtt} ms", p.avg_ms);
    }
}

/// CPU time the hypervisor gave to others (steal, all CPUs), in ms since boot.
fn steal_ms() -> u64 {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let f: Vec<u64> =
        stat.lines().next().unwrap_or("").split_whitespace().skip(1).filter_map(|x| x.parse().ok()).collect();
    f.get(7).copied().unwrap_or(0) * 10 // USER_HZ = 100
}

/// One try of the 500 Mbit/s RTT check on a fresh lab: Ok or what was wrong, with what it measured.
fn rtt_at_500_try() -> (std::result::Result<(), String>, String) {
    let mut lab = lab_with(PathConfig::with_rtt(10.0), "rtt_at_500");
    let dst = lab.receivers()[0].addr.to_string();
    let steal0 = steal_ms();
    let pinger = lab
        .command(&lab.senders()[0].netns, &["ping", "-n", "-i", "0.05", "-c", "70", &dst])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("ping: {e}"));
    let v = iperf_json(&lab, &["-b", "500M", "-t", "4"]);
    let p =
        observe::parse_ping(&String::from_utf8_lossy(&pinger.wait_with_output().map(|o| o.stdout).unwrap_or_default()))
            .unwrap_or_else(|e| panic!("ping parse: {e}"));
    let steal = steal_ms() - steal0;
    let gbps = v["end"]["sum_received"]["bits_per_second"].as_f64().unwrap_or(0.0) / 1e6;
    let median = p.median_ms().unwrap_or(0.0);
    let off: Vec<f64> = p.rtts_ms.iter().copied().filter(|r| (r - 10.0).abs() > 0.5).collect();
    let line: Vec<_> = lab.path_mut().stop_delay().iter().map(|d| (d.packets, d.mean_late_us, d.max_late_us)).collect();
    let what = format!(
        "goodput {gbps:.1} Mbit/s, ping median {median:.3} avg {:.3} max {:.3} ms, {} of {} off by more than 5 %: {off:?}; the line's (packets, mean late, max late µs): {line:?}; CPU stolen by the hypervisor {steal} ms",
        p.avg_ms, p.max_ms, off.len(), p.rtts_ms.len()
    );
    let verdict = if gbps < 450.0 {
        Err(format!("goodput {gbps:.1} Mbit/s: the delay line cannot carry 500 Mbit/s"))
    } else if p.rtts_ms.len() as u32 != p.received || p.received == 0 {
        Err(format!("{} reply times parsed of {} replies", p.rtts_ms.len(), p.received))
    } else if (median - 10.0).abs() > 0.5 {
        Err(format!("RTT under load (median) {median:.3} ms not within 5 % of 10 ms"))
    } else if off.len() * 10 > p.rtts_ms.len() {
        // iperf3, the delay line and the softirqs that carry its packets share 2 CPUs: a probe now
        // and then waits for one (a CI run saw one at 20 ms, which made the mean 10.59 ms).
        Err(format!("{} of {} probes off by more than 5 %", off.len(), p.rtts_ms.len()))
    } else {
        Ok(())
    };
    (verdict, what)
}

#[test]
fn rtt_stays_within_5_percent_while_carrying_500_mbit() {
    let _g = common::serial();
    if !common::can_run("rtt_at_500") {
        return;
    }
    // The RTT is the median of 70 probes; at most 1 in 10 may be off by more than 5 %. A try during
    // which the VM itself stalls says nothing about the line (a CI run: the line's real-time thread
    // woke up to 23 ms late, 38 probes off), so it is repeated, up to 3 tries; a line that cannot
    // hold the RTT fails all three.
    let mut fails = Vec::new();
    for attempt in 1..=3 {
        let (verdict, what) = rtt_at_500_try();
        eprintln!("500 Mbit/s through a 10 ms delay line, try {attempt}: {what}");
        match verdict {
            Ok(()) => return,
            Err(e) => fails.push(format!("try {attempt}: {e} ({what})")),
        }
    }
    panic!("the delay line did not hold 10 ms at 500 Mbit/s in 3 tries:\n{}", fails.join("\n"));
}

/// The tbf's own count of bytes sent and datagrams dropped, summed over the router's interfaces.
fn tbf_counters(lab: &Lab) -> (f64, f64) {
    let mut out = (0.0, 0.0);
    for (_, v) in lab.path().qdisc_stats() {
        for q in v.as_array().into_iter().flatten().filter(|q| q["kind"] == "tbf") {
            out.0 += q["bytes"].as_f64().unwrap_or(0.0);
            out.1 += q["drops"].as_f64().unwrap_or(0.0);
        }
    }
    out
}

/// One try: UDP offered above the rate for 5 s; the shaper's output rate is read from its own byte
/// counter between 1.5 s and 4.5 s, while it is saturated. Returns (offered, shaped, delivered) in
/// Mbit/s and whether the shaper dropped during the window (saturated).
fn tbf_try(lab: &Lab) -> (f64, f64, f64, bool) {
    let (mut srv, dst) = iperf_server(lab);
    let args = ["iperf3", "-c", dst.as_str(), "-p", "5290", "-J", "-u", "-b", "130M", "-l", "1400", "-t", "5"];
    let client = lab
        .command(&lab.senders()[0].netns, &args)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("iperf3 client: {e}"));
    std::thread::sleep(Duration::from_millis(1500));
    let (b0, d0, t0) = {
        let (b, d) = tbf_counters(lab);
        (b, d, Instant::now())
    };
    std::thread::sleep(Duration::from_millis(3000));
    let (b1, d1, t1) = {
        let (b, d) = tbf_counters(lab);
        (b, d, Instant::now())
    };
    let out = client.wait_with_output().unwrap_or_else(|e| panic!("iperf3 client: {e}"));
    let _ = srv.kill();
    let _ = srv.wait();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("iperf3 JSON: {e}"));
    if let Some(err) = v["error"].as_str() {
        panic!("iperf3 reported an error: {err}");
    }
    let sum = if v["end"]["sum_received"].is_object() { &v["end"]["sum_received"] } else { &v["end"]["sum"] };
    let (pk, lost, secs) = (
        sum["packets"].as_f64().unwrap_or(0.0),
        sum["lost_packets"].as_f64().unwrap_or(0.0),
        sum["seconds"].as_f64().unwrap_or(5.0),
    );
    // Every datagram is one 1442-byte frame on the wire (1400 + UDP 8 + IP 20 + Ethernet 14), and
    // tbf counts frames the same way.
    let offered = pk * 1442.0 * 8.0 / secs / 1e6;
    let delivered = (pk - lost) * 1442.0 * 8.0 / secs / 1e6;
    let shaped = (b1 - b0) * 8.0 / (t1 - t0).as_secs_f64() / 1e6;
    (offered, shaped, delivered, d1 > d0)
}

#[test]
fn tbf_shaped_rate_is_within_5_percent_of_setting() {
    let _g = common::serial();
    if !common::can_run("tbf_rate") {
        return;
    }
    let mut path = PathConfig::with_rtt(10.0);
    // A 1 MB queue absorbs the bursts of a UDP sender that is descheduled now and then.
    path.forward.shape = Some(Shape { rate_mbit: 100.0, burst_bytes: None, limit_bytes: Some(1_000_000) });
    let lab = lab_with(path, "tbf_rate");
    // The shaper is judged by its own byte counter while it drops (saturated), not by what iperf3
    // received: a CI run counted 87.4 Mbit/s received, and received also loses what a descheduled
    // receiver's socket buffer drops after the shaper. A try where the sender could not offer more
    // than the rate, or where the VM itself stalled, says nothing about the shaper: up to 3 tries,
    // and a shaper that cannot hold its rate fails all three.
    let mut tries = Vec::new();
    for attempt in 1..=3 {
        let (offered, shaped, delivered, saturated) = tbf_try(&lab);
        let what = format!(
            "offered {offered:.1} Mbit/s, the shaper sent {shaped:.2} Mbit/s while {}, the receiver got {delivered:.2}",
            if saturated { "dropping" } else { "not dropping" }
        );
        eprintln!("tbf 100 Mbit/s, try {attempt}: {what}");
        if offered >= 110.0 && saturated && (shaped - 100.0).abs() <= 5.0 {
            return;
        }
        tries.push(format!("try {attempt}: {what}"));
    }
    panic!("the shaper did not hold 100 Mbit/s within 5 % while saturated, in 3 tries:\n{}", tries.join("\n"));
}

#[test]
fn random_loss_rate_is_close_to_setting() {
    let _g = common::serial();
    if !common::can_run("random_loss") {
        return;
    }
    let mut path = PathConfig::with_rtt(10.0);
    path.forward.loss_ppm = 20_000; // 2 %
    let lab = lab_with(path, "random_loss");
    let dropped_so_far = |lab: &Lab| {
        let nft = lab.path().nft_counters().unwrap_or_default();
        nft.iter().find(|(n, _, _)| n == "loss-forward").map_or(0, |c| c.1) as f64
    };
    // Up to three tries when iperf3 itself gives up; the drops of a failed try are not counted.
    let mut tries = Vec::new();
    let (v, before) = loop {
        let before = dropped_so_far(&lab);
        match try_iperf_json(&lab, &["-u", "-b", "32M", "-l", "1000", "-t", "5"]) {
            Ok(v) => break (v, before),
            Err(e) if tries.len() < 2 => tries.push(e),
            Err(e) => panic!("iperf3 failed three times: {tries:?}, {e}"),
        }
    };
    if !tries.is_empty() {
        eprintln!("iperf3 failed before: {tries:?}");
    }
    let sent = v["end"]["sum_sent"]["packets"].as_f64().or_else(|| v["end"]["sum"]["packets"].as_f64()).unwrap_or(0.0);
    let sum = if v["end"]["sum_received"].is_object() { &v["end"]["sum_received"] } else { &v["end"]["sum"] };
    let lost = sum["lost_packets"].as_f64().unwrap_or(0.0);
    let dropped = dropped_so_far(&lab) - before;
    // The injected rate is what the lab dropped of what was sent; iperf3's own loss also counts
    // drops elsewhere (e.g. a receiver descheduled long enough to overflow its socket buffer).
    let pct = dropped / sent.max(1.0) * 100.0;
    eprintln!("2 % loss: lab dropped {dropped} of {sent} datagrams ({pct:.3} %); iperf3 saw {lost} lost");
    assert!(sent > 15_000.0, "too few packets ({sent}) to judge");
    assert!((pct - 2.0).abs() <= 0.3, "injected loss {pct:.3} % not within 0.3 points of 2 %");
    // The rule also drops iperf3's control-connection segments (all protocols pass it), and a
    // datagram dropped after the last one received is invisible to iperf3's sequence-gap count:
    // a CI run saw 429 lost of 432 dropped. Allow 2 % of the drops, at least 3.
    let slack = (dropped * 0.02).max(3.0);
    assert!(lost + slack >= dropped, "iperf3 saw fewer losses ({lost}) than the lab dropped ({dropped})");
}

#[test]
fn outage_silences_the_path_for_its_window() {
    let _g = common::serial();
    if !common::can_run("outage_silence") {
        return;
    }
    let lab = lab_with(PathConfig::with_rtt(10.0), "outage_silence");
    let dst = lab.receivers()[0].addr.to_string();
    let pinger = lab
        .command(&lab.senders()[0].netns, &["ping", "-n", "-D", "-i", "0.01", "-c", "300", "-W", "1", &dst])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("ping: {e}"));
    std::thread::sleep(Duration::from_millis(1000));
    let h = lab.path().outage_begin(None, None).unwrap_or_else(|e| panic!("outage begin: {e}"));
    let start = tcpvigil_lab::clock::Stamp::now();
    let t = Instant::now();
    std::thread::sleep(Duration::from_millis(1000));
    // The rule is certainly in force from insert's return until delete is called.
    let end = tcpvigil_lab::clock::Stamp::now();
    lab.path().outage_end(h).unwrap_or_else(|e| panic!("outage end: {e}"));
    eprintln!("outage lasted {:.3} s", t.elapsed().as_secs_f64());
    let out = String::from_utf8_lossy(&pinger.wait_with_output().map(|o| o.stdout).unwrap_or_default()).into_owned();
    let replies: Vec<f64> = out
        .lines()
        .filter(|l| l.contains("bytes from"))
        .filter_map(|l| l.strip_prefix('[')?.split(']').next()?.parse().ok())
        .collect();
    let (s, e) = (start.unix_ns as f64 / 1e9, end.unix_ns as f64 / 1e9);
    // Packets already inside the delay line when the rule went in still arrive (one RTT, plus a
    // scheduling hiccup of the delay line): allow 50 ms; the silence check below is the strict one.
    let inside: Vec<f64> = replies.iter().filter(|&&r| r > s + 0.05 && r < e).map(|r| r - s).collect();
    eprintln!("{} replies, {} inside the outage window", replies.len(), inside.len());
    assert!(inside.is_empty(), "replies arrived during the outage, at {inside:?} s after its start");
    let gap = replies.windows(2).map(|w| w[1] - w[0]).fold(0.0, f64::max);
    eprintln!("longest silence between replies {gap:.3} s");
    assert!(
        replies.first().is_some_and(|&r| r < s) && replies.last().is_some_and(|&r| r > e),
        "replies must exist before and after"
    );
    assert!((0.95..=1.1).contains(&gap), "longest silence {gap:.3} s should match the 1 s outage");
}

fn run_short(name: &str, knobs: Knobs, test: &str) -> tcpvigil_lab::Truth {
    let mut sc = Scenario::by_name(name).unwrap_or_else(|e| panic!("{e}"));
    sc.apply_knobs(&knobs).unwrap_or_else(|e| panic!("{e}"));
    let opts = RunOptions { out_dir: common::scratch(test), ..RunOptions::default() };
    sc.run(&opts).unwrap_or_else(|e| panic!("{name}: {e}"))
}

#[test]
fn targeted_drop_hits_only_retransmissions_and_counts_exactly() {
    let _g = common::serial();
    if !common::can_run("targeted_drop") {
        return;
    }
    let t = run_short("lost-retransmit", Knobs { duration: Some(8), ..Knobs::default() }, "targeted_drop");
    let r = t.retx_drop.clone().unwrap_or_else(|| panic!("no retx_drop counters in truth"));
    let retrans = t.sender_counter("TcpRetransSegs") as u64;
    let lost_retx = t.sender_counter("TcpExtTCPLostRetransmit");
    eprintln!("retx-drop {r:?}; sender TcpRetransSegs {retrans}, TCPLostRetransmit {lost_retx}");
    assert_eq!(r.errors, 0);
    assert_eq!(r.targets, 20, "the program should target exactly 20 segments");
    assert_eq!(r.dropped, r.targets, "one drop per target (drops_per_segment = 1)");
    assert!(r.dropped <= r.retransmissions, "dropped more than it saw retransmitted");
    assert!(
        r.retransmissions <= retrans + retrans / 10 + 5,
        "program saw {} retransmissions, sender sent {retrans}",
        r.retransmissions
    );
    assert!(r.data_segments > r.retransmissions * 10, "most segments must be new data");
    assert!(
        lost_retx >= (r.dropped / 2) as i64 && lost_retx > 0,
        "TcpExtTCPLostRetransmit {lost_retx} for {} dropped retransmissions",
        r.dropped
    );
}

#[test]
fn zero_window_receiver_really_closes_the_window() {
    let _g = common::serial();
    if !common::can_run("zero_window") {
        return;
    }
    let t = run_short(
        "zero-window",
        Knobs { duration: Some(6), pause_at: Some(1.5), pause_for: Some(2.5), ..Knobs::default() },
        "zero_window",
    );
    let p = t.plain.clone().unwrap_or_else(|| panic!("no plain result"));
    let (ps, pe) = (
        p.pause_start.unwrap_or_else(|| panic!("no pause start")),
        p.pause_end.unwrap_or_else(|| panic!("no pause end")),
    );
    let len = pe.secs_since(&ps);
    assert!((len - 2.5).abs() < 0.1, "pause lasted {len:.3} s");
    assert!(
        t.receiver_counter("TcpExtTCPToZeroWindowAdv") >= 1,
        "receiver never advertised a zero window: {:?}",
        t.nstat.get("r0")
    );
    assert!(t.sender_counter("TcpExtTCPWinProbe") >= 1, "sender sent no window probes");
    // Inside the pause (after 0.5 s to fill the buffer) nothing new is acknowledged.
    let acked: Vec<u64> = t
        .ss_samples
        .iter()
        .filter(|s| s.at.mono_ns > ps.mono_ns + 500_000_000 && s.at.mono_ns < pe.mono_ns)
        .filter_map(|s| s.conns.iter().filter_map(|c| c.bytes_acked).max())
        .collect();
    assert!(acked.len() >= 10, "too few ss samples in the pause");
    assert_eq!(acked.first(), acked.last(), "bytes_acked moved during the zero window");
    assert_eq!(p.bytes_received, p.bytes_sent, "the pair lost data");
}
