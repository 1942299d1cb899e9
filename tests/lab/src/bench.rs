//! Delay-line benchmark: sustainable packets/s (UDP sweep) and RTT accuracy while carrying a TCP flow at a set rate.
use crate::cmd;
use crate::delay::DelayStats;
use crate::error::{LabError, Result};
use crate::lab::{Lab, LabConfig};
use crate::netns;
use crate::observe::{self, PingStats};
use crate::path::PathConfig;
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// One UDP step of the packet-rate sweep.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RateStep {
    pub offered_pps: f64,
    pub delivered_pps: f64,
    pub loss_pct: f64,
    pub ping: PingStats,
    pub delay: Vec<DelayStats>,
    /// Loss < 1 % and ping average within 5 % of the set RTT.
    pub ok: bool,
}

/// One TCP run at a target rate with pings alongside.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TcpStep {
    pub target_mbit: f64,
    pub goodput_mbit: f64,
    pub ping: PingStats,
    pub rtt_error_pct: f64,
    pub delay: Vec<DelayStats>,
}

/// The benchmark's findings.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BenchReport {
    pub rtt_ms: f64,
    pub idle_ping: Option<PingStats>,
    pub sweep: Vec<RateStep>,
    /// Highest delivered packet rate of a step that passed (`ok`).
    pub sustainable_pps: f64,
    pub tcp: Option<TcpStep>,
}

fn bench_lab(rtt_ms: f64, work: &std::path::Path) -> Result<Lab> {
    let cfg = LabConfig { path: PathConfig::with_rtt(rtt_ms), trim_delay: true, ..LabConfig::default() };
    Lab::up(&cfg, work)
}

fn with_server<T>(lab: &Lab, f: impl FnOnce(&str) -> Result<T>) -> Result<T> {
    let r = &lab.receivers()[0];
    let mut srv = cmd::spawn_in(&r.netns, &["iperf3", "-s", "-1", "-p", "5299"])?;
    std::thread::sleep(Duration::from_millis(300));
    let out = f(&r.addr.to_string());
    cmd::interrupt_and_wait(&mut srv, Duration::from_secs(2));
    out
}

fn ping_alongside(lab: &Lab, seconds: f64) -> Result<std::process::Child> {
    let dst = lab.receivers()[0].addr.to_string();
    let n = ((seconds - 0.5) * 10.0).max(5.0) as u32;
    lab.command(&lab.senders()[0].netns, &["ping", "-n", "-q", "-W", "1", "-i", "0.1", "-c", &n.to_string(), &dst])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .map_err(|e| LabError::Command { cmd: "ping".into(), detail: e.to_string() })
}

fn finish_ping(child: std::process::Child) -> Result<PingStats> {
    let out = child.wait_with_output().map_err(|e| LabError::io("ping output", e))?;
    observe::parse_ping(&String::from_utf8_lossy(&out.stdout))
}

fn json(out: &str) -> Result<serde_json::Value> {
    serde_json::from_str(out).map_err(|e| LabError::Parse { what: "iperf3 -J".into(), detail: e.to_string() })
}

/// Sends `pps` 100-byte UDP datagrams per second (bursts every ms) from sender 0 to receiver 0
/// for `seconds`; returns (sent, received). Both ends are threads of this process inside the namespaces.
fn blast(lab: &Lab, pps: f64, seconds: f64) -> Result<(u64, u64)> {
    use std::net::{SocketAddr, UdpSocket};
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    let (s, r) = lab.pair(0, 0)?;
    let addr = SocketAddr::from((r.addr, 5399));
    let done = Arc::new(AtomicBool::new(false));
    let (tx_ready, rx_ready) = std::sync::mpsc::channel::<()>();
    let done_r = done.clone();
    let rx = netns::spawn_in(&r.netns, "blast-rx", move || {
        let sock = UdpSocket::bind(addr).map_err(|e| LabError::io("bind blast receiver", e))?;
        let big: libc::c_int = 32 << 20;
        // SAFETY: big outlives the call; the length matches its type. Failure only means a smaller buffer.
        unsafe {
            libc::setsockopt(
                std::os::fd::AsRawFd::as_raw_fd(&sock),
                libc::SOL_SOCKET,
                libc::SO_RCVBUFFORCE,
                &big as *const _ as *const libc::c_void,
                4,
            );
        }
        sock.set_read_timeout(Some(Duration::from_millis(100))).map_err(|e| LabError::io("read timeout", e))?;
        let _ = tx_ready.send(());
        let (mut n, mut buf) = (0u64, [0u8; 2048]);
        loop {
            match sock.recv(&mut buf) {
                Ok(_) => n += 1,
                Err(_) if done_r.load(Ordering::Relaxed) => return Ok(n),
                Err(_) => {}
            }
        }
    })?;
    rx_ready.recv().map_err(|_| LabError::Missing("blast receiver died".into()))?;
    let tx = netns::spawn_in(&s.netns, "blast-tx", move || {
        let sock = UdpSocket::bind("0.0.0.0:0").map_err(|e| LabError::io("bind blast sender", e))?;
        sock.connect(addr).map_err(|e| LabError::io("connect blast", e))?;
        let payload = [0x42u8; 100];
        let start = std::time::Instant::now();
        let mut sent = 0u64;
        while start.elapsed().as_secs_f64() < seconds {
            let due = (start.elapsed().as_secs_f64() * pps) as u64;
            while sent < due {
                if sock.send(&payload).is_ok() {
                    sent += 1;
                } else {
                    break;
                }
            }
            std::thread::sleep(Duration::from_micros(500));
        }
        Ok(sent)
    })?;
    let sent = tx.join().map_err(|_| LabError::Missing("blast sender panicked".into()))??;
    // Let the delay line drain, then stop the receiver.
    std::thread::sleep(Duration::from_millis(300));
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    let got = rx.join().map_err(|_| LabError::Missing("blast receiver panicked".into()))??;
    Ok((sent, got))
}

fn udp_step(rtt_ms: f64, pps: f64, seconds: f64, work: &std::path::Path) -> Result<RateStep> {
    let mut lab = bench_lab(rtt_ms, work)?;
    let pinger = ping_alongside(&lab, seconds)?;
    let (sent, got) = blast(&lab, pps, seconds)?;
    let ping = finish_ping(pinger)?;
    let delay = lab.path_mut().stop_delay();
    let loss_pct = if sent > 0 { (sent.saturating_sub(got)) as f64 / sent as f64 * 100.0 } else { 100.0 };
    let delivered_pps = got as f64 / seconds;
    // The sender may fall short of the offered rate (its syscalls carry the whole forwarding path on
    // 2 cores): the step is judged on loss and RTT, and the rate credited is what was delivered.
    let ok = loss_pct < 1.0 && ping.received > 0 && (ping.avg_ms - rtt_ms).abs() <= rtt_ms * 0.05;
    Ok(RateStep { offered_pps: pps, delivered_pps, loss_pct, ping, delay, ok })
}

fn tcp_step(rtt_ms: f64, rate_mbit: f64, seconds: f64, work: &std::path::Path) -> Result<TcpStep> {
    let mut lab = bench_lab(rtt_ms, work)?;
    let sender = lab.senders()[0].netns.clone();
    let b = format!("{}M", rate_mbit);
    let secs = format!("{seconds}");
    let (v, ping) = with_server(&lab, |dst| {
        let pinger = ping_alongside(&lab, seconds)?;
        let out = cmd::run_in(&sender, &["iperf3", "-c", dst, "-p", "5299", "-b", &b, "-t", &secs, "-J"]);
        let ping = finish_ping(pinger)?;
        Ok((json(&out?)?, ping))
    })?;
    let delay = lab.path_mut().stop_delay();
    let goodput = v["end"]["sum_received"]["bits_per_second"].as_f64().unwrap_or(0.0) / 1e6;
    Ok(TcpStep {
        target_mbit: rate_mbit,
        goodput_mbit: goodput,
        rtt_error_pct: (ping.avg_ms - rtt_ms) / rtt_ms * 100.0,
        ping,
        delay,
    })
}

/// Runs the sweep (25k..300k packets/s of 100-byte UDP from the lab's own blaster) and the TCP accuracy test.
pub fn run(rtt_ms: f64, rate_mbit: f64, seconds: f64) -> Result<BenchReport> {
    let work = std::env::temp_dir().join(format!("tvl-bench-{}", std::process::id()));
    let idle_ping = {
        let lab = bench_lab(rtt_ms, &work)?;
        lab.ping(0, 0, 20, 0.05).ok()
    };
    let mut sweep = Vec::new();
    let mut fails = 0;
    for pps in [25_000.0, 50_000.0, 75_000.0, 100_000.0, 150_000.0, 200_000.0, 300_000.0] {
        eprintln!("[bench] UDP {pps} packets/s for {seconds} s");
        let step = udp_step(rtt_ms, pps, seconds, &work)?;
        fails += usize::from(!step.ok);
        sweep.push(step);
        if fails >= 2 {
            break;
        }
    }
    let sustainable_pps = sweep.iter().filter(|s| s.ok).map(|s| s.delivered_pps).fold(0.0, f64::max);
    eprintln!("[bench] TCP at {rate_mbit} Mbit/s for {seconds} s");
    let tcp = Some(tcp_step(rtt_ms, rate_mbit, seconds, &work)?);
    let _ = std::fs::remove_dir_all(&work);
    Ok(BenchReport { rtt_ms, idle_ping, sweep, sustainable_pps, tcp })
}

/// Prints the report as a table.
pub fn print(r: &BenchReport) {
    println!("delay line benchmark, RTT set to {} ms", r.rtt_ms);
    if let Some(p) = &r.idle_ping {
        println!("idle ping: avg {:.3} ms (min {:.3}, max {:.3})", p.avg_ms, p.min_ms, p.max_ms);
    }
    println!(
        "{:>10} {:>12} {:>7} {:>10} {:>12} {:>12} ok",
        "offered/s", "delivered/s", "loss%", "ping ms", "late avg us", "late max us"
    );
    for s in &r.sweep {
        let fwd = s.delay.first();
        println!(
            "{:>10.0} {:>12.0} {:>7.2} {:>10.3} {:>12.1} {:>12.1} {}",
            s.offered_pps,
            s.delivered_pps,
            s.loss_pct,
            s.ping.avg_ms,
            fwd.map_or(0.0, |d| d.mean_late_us),
            fwd.map_or(0.0, |d| d.max_late_us),
            if s.ok { "yes" } else { "no" }
        );
    }
    println!(
        "sustainable: {:.0} packets/s delivered through one delay line (loss < 1 %, RTT within 5 %)",
        r.sustainable_pps
    );
    if let Some(t) = &r.tcp {
        println!(
            "TCP at {:.0} Mbit/s: goodput {:.1} Mbit/s, ping avg {:.3} ms (min {:.3}, max {:.3}), RTT error {:+.2} %",
            t.target_mbit, t.goodput_mbit, t.ping.avg_ms, t.ping.min_ms, t.ping.max_ms, t.rtt_error_pct
        );
    }
}
