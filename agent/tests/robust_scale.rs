//! Churn and scale (a bench, not CI: `cargo test --release --test robust_scale -- --ignored`,
//! run by scripts/bench-robust.sh): 100,000 short connections a few hundred at a time, then
//! up to 20,000 idle established ones (both ends in this process: as many as its open-file limit
//! allows; scripts/bench-scale.sh holds 100,000 sockets in several processes). Prints the daemon's
//! RSS, /metrics series, scrape time, CPU, tracked connections, snapshot time and pressure
//! counters before, at peak and after, and checks them against the budget in docs/robustness.md.
mod support;

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use support::churn::{self, Churn};
use support::daemon::{series, Daemon};
use support::*;

#[derive(Debug, Clone, Copy, Default)]
struct Sample {
    rss_kib: u64,
    series: usize,
    scrape_ms: f64,
    cpu_s: f64,
    tracked: f64,
    snapshot_ms: f64,
    dropped: f64,
    bpf_errors: f64,
}

fn sum(text: &str, prefix: &str) -> f64 {
    series(text)
        .into_iter()
        .filter(|l| l.starts_with(prefix))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

fn sample(d: &Daemon) -> Sample {
    let pid = d.pid().expect("pid");
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let rss_kib = status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        .unwrap_or(0);
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let f: Vec<&str> = stat.rsplit(')').next().unwrap_or("").split_whitespace().collect();
    let ticks = f.get(11).and_then(|x| x.parse::<f64>().ok()).unwrap_or(0.0)
        + f.get(12).and_then(|x| x.parse::<f64>().ok()).unwrap_or(0.0);
    let t = Instant::now();
    let m = d.scrape().unwrap_or_default();
    let scrape_ms = t.elapsed().as_secs_f64() * 1000.0;
    Sample {
        rss_kib,
        series: series(&m).len(),
        scrape_ms,
        cpu_s: ticks / 100.0,
        tracked: sum(&m, "tcpvigil_tracked_connections"),
        snapshot_ms: sum(&m, "tcpvigil_snapshot_duration_seconds") * 1000.0,
        dropped: sum(&m, "tcpvigil_dropped_records_total"),
        bpf_errors: sum(&m, "tcpvigil_bpf_errors_total"),
    }
}

fn show(label: &str, s: &Sample) {
    println!(
        "  {label:<22} RSS {:>6.1} MiB  series {:>5}  scrape {:>6.1} ms  CPU {:>6.1} s  tracked {:>6}  snapshot {:>6.1} ms  dropped {}  bpf_errors {}",
        s.rss_kib as f64 / 1024.0,
        s.series,
        s.scrape_ms,
        s.cpu_s,
        s.tracked,
        s.snapshot_ms,
        s.dropped,
        s.bpf_errors
    );
}

/// Sample every 500 ms until `stop`; keep the largest of each figure.
fn peak_sampler(d: &Daemon, stop: &AtomicBool, peak: &Mutex<Sample>) {
    while !stop.load(Ordering::Relaxed) {
        let s = sample(d);
        let mut p = peak.lock().unwrap();
        p.rss_kib = p.rss_kib.max(s.rss_kib);
        p.series = p.series.max(s.series);
        p.scrape_ms = p.scrape_ms.max(s.scrape_ms);
        p.tracked = p.tracked.max(s.tracked);
        p.snapshot_ms = p.snapshot_ms.max(s.snapshot_ms);
        (p.cpu_s, p.dropped, p.bpf_errors) = (s.cpu_s, s.dropped, s.bpf_errors);
        drop(p);
        std::thread::sleep(Duration::from_millis(500));
    }
}

fn raise_nofile() {
    let l = libc::rlimit { rlim_cur: 200_000, rlim_max: 200_000 };
    // SAFETY: setrlimit with a pointer to a live rlimit.
    unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &l) };
}

#[test]
#[ignore = "bench: minutes of churn; run by scripts/bench-robust.sh"]
fn churn_of_100k_connections_and_20k_idle_ones_stay_within_the_budget() {
    if !require_root("churn_of_100k_connections_and_20k_idle_ones_stay_within_the_budget") {
        return;
    }
    raise_nofile();
    let total: usize = std::env::var("TV_CHURN_TOTAL").ok().and_then(|s| s.parse().ok()).unwrap_or(100_000);
    let idle: usize = std::env::var("TV_IDLE_CONNS").ok().and_then(|s| s.parse().ok()).unwrap_or(20_000);
    let pair = Pair::new("sc");
    let _ = sh_ok(&format!(
        "ip netns exec {} sysctl -qw net.ipv4.ip_local_port_range='1024 65000' net.ipv4.tcp_tw_reuse=1",
        pair.snd
    ));
    let d = Daemon::start("scale", "");
    std::thread::sleep(Duration::from_secs(3));
    let before = sample(&d);
    println!("churn: {total} short connections; then {idle} idle established ones");
    show("before", &before);

    let (stop, peak) = (Arc::new(AtomicBool::new(false)), Arc::new(Mutex::new(Sample::default())));
    let t = Instant::now();
    let stats = std::thread::scope(|s| {
        s.spawn(|| peak_sampler(&d, &stop, &peak));
        // ~1000 connections/s, each open 300 ms: a few hundred at a time.
        let r = churn::run(
            &pair,
            Churn {
                port: 6201,
                total,
                over: Duration::from_secs((total / 1000).max(1) as u64),
                hold: Duration::from_millis(300),
                bytes: 2000,
            },
        );
        stop.store(true, Ordering::Relaxed);
        r
    })
    .expect("churn");
    println!(
        "  churn: {} opened, {} failed, at most {} open at once, {:.0} s",
        stats.opened,
        stats.failed,
        stats.max_open,
        t.elapsed().as_secs_f64()
    );
    show("peak during churn", &peak.lock().unwrap());
    // The table forgets closed connections after 10 s.
    std::thread::sleep(Duration::from_secs(15));
    let after = sample(&d);
    show("15 s after the churn", &after);

    // Idle established connections: a listener in rcv, clients from snd, all held open.
    let addr: SocketAddr = format!("{}:6202", pair.rcv_ip).parse().unwrap();
    let (conns, accepted) = std::thread::scope(|s| {
        let rcv = pair.rcv.clone();
        let server = s.spawn(move || {
            tcpvigil_lab::netns::enter(&rcv).expect("enter rcv");
            let l = TcpListener::bind(addr).expect("bind");
            // std listens with a backlog of 128: connections beyond it time out. Ask for more.
            // SAFETY: listen() on a socket this thread owns.
            unsafe { libc::listen(std::os::fd::AsRawFd::as_raw_fd(&l), 65535) };
            let mut held = Vec::with_capacity(idle);
            while held.len() < idle {
                match l.accept() {
                    Ok((c, _)) => held.push(c),
                    Err(_) => break,
                }
            }
            held
        });
        std::thread::sleep(Duration::from_millis(300));
        let snd = pair.snd.clone();
        let client = s.spawn(move || {
            tcpvigil_lab::netns::enter(&snd).expect("enter snd");
            (0..idle).filter_map(|_| TcpStream::connect_timeout(&addr, Duration::from_secs(3)).ok()).collect::<Vec<_>>()
        });
        let c = client.join().expect("clients");
        let a = server.join().expect("server");
        (c, a)
    });
    std::thread::sleep(Duration::from_secs(4)); // a few snapshot passes
    let mut held = sample(&d);
    for _ in 0..4 {
        std::thread::sleep(Duration::from_millis(1100));
        let s = sample(&d);
        held.snapshot_ms = held.snapshot_ms.max(s.snapshot_ms);
        held.scrape_ms = held.scrape_ms.max(s.scrape_ms);
    }
    let held_n = conns.len();
    show(&format!("{held_n} idle held"), &held);
    drop(conns);
    drop(accepted);
    std::thread::sleep(Duration::from_secs(15));
    let end = sample(&d);
    show("15 s after closing", &end);
    d.stop();

    let p = *peak.lock().unwrap();
    let tracked_k = (p.tracked.max(held.tracked) / 1000.0).round();
    println!(
        "budget: RSS <= 64 MiB (peak {:.1}), snapshot pass <= 15 ms with {} sockets held (worst {:.1}), RSS back within 16 MiB of the start ({:.1} -> {:.1}); tracked at most {tracked_k}k",
        p.rss_kib.max(held.rss_kib) as f64 / 1024.0,
        2 * held_n,
        held.snapshot_ms,
        before.rss_kib as f64 / 1024.0,
        end.rss_kib as f64 / 1024.0
    );
    assert!(stats.failed * 100 <= total, "more than 1 % of the churn's connections failed");
    assert!(p.rss_kib.max(held.rss_kib) <= 64 * 1024, "RSS over 64 MiB");
    assert!(held.snapshot_ms <= 15.0, "a pass with {} sockets held took {:.1} ms", 2 * held_n, held.snapshot_ms);
    assert!(end.rss_kib <= before.rss_kib + 16 * 1024, "RSS did not come back");
    assert!(end.series <= before.series + 20, "series did not come back: {} -> {}", before.series, end.series);
}
