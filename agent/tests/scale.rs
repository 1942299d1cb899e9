//! Cost follows what is watched: an idle socket costs no record per look, one that moves is looked
//! at every period, a namespace made after start (by any user) adds nothing to a pass, and a
//! client's close still carries its local port. Counted, not timed, but for the one delay the stop
//! detector rests on: a look asked for comes within the wait it is given. (The figures at 100,000
//! sockets: scripts/bench-scale.sh.)
mod support;

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use support::*;
use tcpvigil::bpf::agent::{Agent, Msg, KERNEL_STAT_NAMES};
use tcpvigil::bpf::load::Settings;
use tcpvigil::bpf::variants;
use tcpvigil::model::{Body, Event};

fn start(snapshot_interval_ms: u64) -> Agent {
    variants::capture_libbpf_log();
    let v = variants::choose();
    assert!(v.missing_essential().is_empty(), "{:?}", v.missing_essential().first().map(|c| &c.refused));
    Agent::start(Settings { snapshot_interval_ms, ..Default::default() }, v, 1 << 16, false).expect("agent")
}

/// Every event for `d`, handed to `each` as it comes.
fn collect(agent: &mut Agent, d: Duration, mut each: impl FnMut(&Event)) {
    let t = Instant::now();
    while t.elapsed() < d {
        match agent.events.blocking_recv() {
            Some(Msg::Event(ev)) => each(&ev),
            Some(Msg::Drained(_)) => {}
            None => break,
        }
    }
}

fn kernel_stat(agent: &Agent, name: &str) -> u64 {
    let i = KERNEL_STAT_NAMES.iter().position(|n| *n == name).expect("stat");
    agent.counters.kernel.lock().unwrap().get(i).copied().unwrap_or(0)
}

/// A connected pair on loopback: (client, server side).
fn pair(l: &TcpListener) -> (TcpStream, TcpStream) {
    let c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
    let (s, _) = l.accept().unwrap();
    (c, s)
}

fn ports(s: &TcpStream) -> (u16, u16) {
    (s.local_addr().unwrap().port(), s.peer_addr().unwrap().port())
}

#[test]
fn an_idle_socket_costs_no_record_per_look_and_a_moving_one_is_looked_at_every_period() {
    if !require_root("an_idle_socket_costs_no_record_per_look_and_a_moving_one_is_looked_at_every_period") {
        return;
    }
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let old = pair(&l); // older than the agent
    let mut agent = start(100);
    // 200 idle connections newer than the agent: neither end may join the live set (an accepted
    // socket's Open -> Open congestion state once did, and was looked at for 5 s).
    let news: Vec<(TcpStream, TcpStream)> = (0..200).map(|_| pair(&l)).collect();
    let new = &news[0];
    let (mut mc, mut ms) = pair(&l);
    let lp = l.local_addr().unwrap().port();
    // Which socket an event is about, by its ports: (old|new|moving, client|server).
    let mut who: HashMap<(u16, u16), &str> = HashMap::new();
    for (name, c) in [("old", &old.0), ("new", &new.0), ("moving", &mc)] {
        let (cp, _) = ports(c);
        who.insert((cp, lp), name);
        who.insert((lp, cp), name);
    }
    let mut snaps: HashMap<&str, u64> = HashMap::new();
    let mut found: HashMap<&str, u64> = HashMap::new();
    let passes0 = agent.counters.passes.load(Ordering::Relaxed);
    let looked0 = kernel_stat(&agent, "looked");
    let stop = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            let mut buf = [0u8; 100];
            while !stop.load(Ordering::Relaxed) {
                mc.write_all(&[1u8; 100]).unwrap();
                ms.read_exact(&mut buf).unwrap();
                std::thread::sleep(Duration::from_millis(50));
            }
        });
        collect(&mut agent, Duration::from_secs(3), |ev| {
            let key = (ev.conn.tuple.local.port(), ev.conn.tuple.remote.port());
            let Some(name) = who.get(&key).copied() else { return };
            match &ev.body {
                Body::Snapshot(_) => *snaps.entry(name).or_default() += 1,
                Body::State(st) if st.old == st.new => *found.entry(name).or_default() += 1,
                _ => {}
            }
        });
        stop.store(true, Ordering::Relaxed);
    });
    let passes = agent.counters.passes.load(Ordering::Relaxed) - passes0;
    let looked = kernel_stat(&agent, "looked") - looked0;
    println!(
        "{passes} looks in 3 s: snapshots {snaps:?}, found by the start pass {found:?}, sockets looked at {looked}, namespaces walked by the last pass {}",
        agent.counters.netns.load(Ordering::Relaxed)
    );
    assert!(passes >= 15, "only {passes} looks in 3 s at a 100 ms period");
    assert_eq!(snaps.get("old"), None, "an idle socket older than the agent was reported");
    assert_eq!(snaps.get("new"), None, "an idle socket newer than the agent was reported");
    assert!(snaps.get("moving").copied().unwrap_or(0) >= 2 * 10, "the moving pair at (nearly) every look: {snaps:?}");
    assert_eq!(found.get("old"), Some(&2), "both ends of the older pair found once, by the start pass");
    assert_eq!(agent.counters.netns.load(Ordering::Relaxed), 0, "a look walks no namespace");
    // What a look visits is the live set (the moving pair, and whatever else moved on this host),
    // not every socket: the 200 idle pairs are never among them.
    assert!(looked < passes * 100, "{looked} sockets looked at in {passes} looks: idle ones among them");
    drop((old, news));
}

/// The stop detector waits for a fresh look it asked for at least a quarter of its shortest
/// threshold plus 40 ms (77 ms) when only silence says the network stopped. The streams of one
/// transfer stall together and ask one after another, so a look asked for right after another's
/// must come within that too (CI, lab fuzz seed 2026 run 5: with extra looks 100 ms apart, one
/// stream of three judged a receiver's pause from the look before its ask and blamed the network).
#[test]
fn a_look_asked_for_right_after_another_comes_within_the_stop_detectors_wait() {
    if !require_root("a_look_asked_for_right_after_another_comes_within_the_stop_detectors_wait") {
        return;
    }
    let agent = start(60_000);
    let passes = || agent.counters.passes.load(Ordering::Relaxed);
    // The start pass first, then asks back to back: each one right after the last look.
    let t = Instant::now();
    while passes() == 0 && t.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(1));
    }
    let mut waits = Vec::new();
    for _ in 0..9 {
        let p0 = passes();
        let t = Instant::now();
        agent.snapshot_soon();
        while passes() == p0 && t.elapsed() < Duration::from_secs(2) {
            std::thread::sleep(Duration::from_micros(500));
        }
        waits.push(t.elapsed().as_secs_f64() * 1e3);
    }
    let mut sorted = waits.clone();
    sorted.sort_by(f64::total_cmp);
    println!("ask to look, ms: {waits:.1?}");
    assert!(sorted[sorted.len() / 2] < 77.0, "a look asked for right after another came late: {waits:.1?} ms");
}

#[test]
fn namespaces_made_after_start_by_an_unprivileged_user_add_nothing_to_a_look() {
    if !require_root("namespaces_made_after_start_by_an_unprivileged_user_add_nothing_to_a_look") {
        return;
    }
    let mut agent = start(100);
    collect(&mut agent, Duration::from_millis(500), |_| {});
    let reads = |a: &Agent| (a.counters.passes.load(Ordering::Relaxed), a.counters.snapshots.load(Ordering::Relaxed));
    let (p0, r0) = reads(&agent);
    collect(&mut agent, Duration::from_secs(1), |_| {});
    let (p1, r1) = reads(&agent);
    // 50 empty namespaces, each held by a process of user nobody (`unshare -Urn`, no privilege).
    let mut held: Vec<std::process::Child> = (0..50)
        .map(|_| {
            std::process::Command::new("setpriv")
                .args(["--reuid=65534", "--regid=65534", "--clear-groups", "unshare", "-Urn", "sleep", "30"])
                .spawn()
                .expect("unshare as nobody")
        })
        .collect();
    std::thread::sleep(Duration::from_millis(500));
    let made = held.iter().filter(|c| std::fs::read_link(format!("/proc/{}/ns/net", c.id())).is_ok()).count();
    collect(&mut agent, Duration::from_secs(1), |_| {});
    let (p2, r2) = reads(&agent);
    let walked = agent.counters.netns.load(Ordering::Relaxed);
    for c in held.iter_mut() {
        let _ = c.kill();
        let _ = c.wait();
    }
    let (before, after) = ((r1 - r0) as f64 / (p1 - p0) as f64, (r2 - r1) as f64 / (p2 - p1) as f64);
    println!("{made} namespaces made: iterator reads per pass {before:.2} before, {after:.2} after; namespaces walked by the last pass {walked}");
    assert!(made >= 40, "only {made} of 50 namespaces were made");
    assert!(p1 - p0 >= 5 && p2 - p1 >= 5, "too few passes: {} and {}", p1 - p0, p2 - p1);
    assert_eq!(before, 1.0, "one read per look");
    assert_eq!(after, 1.0, "one read per look, whatever the namespaces");
    assert_eq!(walked, 0, "a look walks no namespace");
}

#[test]
fn a_clients_close_records_carry_its_local_port() {
    if !require_root("a_clients_close_records_carry_its_local_port") {
        return;
    }
    let mut agent = start(100);
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let (mut c, mut s) = pair(&l);
    let (cp, lp) = ports(&c);
    c.write_all(&[7u8; 1000]).unwrap();
    let mut buf = [0u8; 1000];
    s.read_exact(&mut buf).unwrap();
    let cookie = std::cell::Cell::new(0u64);
    collect(&mut agent, Duration::from_millis(300), |ev| {
        if ev.conn.tuple.local.port() == cp && ev.conn.tuple.remote.port() == lp {
            cookie.set(ev.conn.cookie);
        }
    });
    drop(c); // the client closes first: FIN_WAIT, then TIME_WAIT, and its port is released
    drop(s);
    let mut closes = Vec::new();
    collect(&mut agent, Duration::from_millis(800), |ev| {
        let close = matches!(&ev.body, Body::State(st) if st.new == 7) || matches!(ev.body, Body::Close(_));
        if close && ev.conn.tuple.remote.port() == lp && ev.conn.tuple.local.ip().is_loopback() {
            closes.push((ev.conn.cookie, ev.conn.tuple.local.port()));
        }
    });
    println!("client {cp} (cookie {}): close records (cookie, local port) {closes:?}", cookie.get());
    let mine: Vec<u16> = closes.iter().filter(|(k, _)| *k == cookie.get()).map(|(_, p)| *p).collect();
    assert!(cookie.get() != 0, "the client's connection was never reported");
    assert!(mine.len() >= 2, "the state change to CLOSE and the close record: {closes:?}");
    assert!(mine.iter().all(|p| *p == cp), "local port {cp} expected in every close record: {mine:?}");
}

/// Python holding `n` loopback connections (both ends) in namespace `ns` until its stdin closes;
/// several processes, as the open-file limit (20,000 here, and no raising it) needs.
fn hold(ns: &str, n: usize) -> Vec<std::process::Child> {
    const PER: usize = 9000;
    const HOLDER: &str = r#"
import socket, sys
n, base = int(sys.argv[1]), int(sys.argv[2])
ls = []
for p in (base, base + 1):
    l = socket.socket(); l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    l.bind(("127.0.0.1", p)); l.listen(4096); l.setblocking(False); ls.append(l)
held = []
def take():
    for l in ls:
        while True:
            try:
                held.append(l.accept()[0])
            except BlockingIOError:
                break
for i in range(n):
    c = socket.socket(); c.connect(("127.0.0.1", base + i % 2)); held.append(c)
    if i % 1000 == 999:
        take()
take()
print(len(held), flush=True)
sys.stdin.read()
"#;
    let mut out = Vec::new();
    for i in 0..n.div_ceil(PER) {
        let k = PER.min(n - i * PER);
        out.push(
            std::process::Command::new("ip")
                .args(["netns", "exec", ns, "python3", "-c", HOLDER, &k.to_string(), &(7001 + 2 * i).to_string()])
                .stdin(std::process::Stdio::piped())
                .stdout(std::process::Stdio::piped())
                .spawn()
                .expect("python3"),
        );
    }
    for c in out.iter_mut() {
        let mut line = String::new();
        let r = std::io::BufRead::read_line(&mut std::io::BufReader::new(c.stdout.as_mut().unwrap()), &mut line);
        assert!(r.is_ok() && line.trim().parse::<usize>().is_ok(), "a socket holder failed: {line:?}");
    }
    out
}

/// The outage and the zero-window scenarios, judged as in tests/scenarios.rs, while 100,000 idle
/// sockets are held: found in time with the same diagnosis, nothing dropped.
#[test]
#[ignore = "bench: 100,000 sockets (release: cargo test --release --test scale -- --ignored)"]
fn outage_and_zero_window_are_diagnosed_in_time_beside_100k_idle_sockets() {
    use support::daemon::{series, Daemon};
    use support::judge;
    use tcpvigil_lab::{Lab, RunOptions, Scenario};
    if !require_root("outage_and_zero_window_are_diagnosed_in_time_beside_100k_idle_sockets") {
        return;
    }
    let n: usize = std::env::var("TV_IDLE_SOCKETS").ok().and_then(|s| s.parse().ok()).unwrap_or(100_000);
    let ns = format!("tvsc{}", std::process::id());
    sh(&format!("ip netns add {ns} && ip -n {ns} link set lo up"));
    sh(&format!("ip netns exec {ns} sysctl -qw net.ipv4.ip_local_port_range='10000 65000'"));
    let held = hold(&ns, n / 2);
    let metric = |m: &str, name: &str| -> f64 {
        series(m).iter().filter(|l| l.starts_with(name)).filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok()).sum()
    };
    let mut rows = Vec::new();
    for name in ["outage", "zero-window"] {
        let sc = Scenario::by_name(name).expect("scenario");
        let out = std::env::temp_dir().join(format!("tvsc-runs-{}", std::process::id()));
        let opts = RunOptions { out_dir: out, progress: false, ..Default::default() };
        let (truth, (all, m)) = sc
            .run_with(
                &opts,
                |_lab: &Lab| Ok(Daemon::start(name, judge::LAB_CONFIG)),
                |d, _lab, _truth| {
                    std::thread::sleep(Duration::from_millis(1500));
                    let m = d.scrape().unwrap_or_default();
                    let dumps = d.dumps.clone();
                    let all = d.stop();
                    let _ = std::fs::remove_dir_all(dumps);
                    Ok((all, m))
                },
            )
            .expect("scenario ran");
        let f = judge::sender_findings(&all, &truth);
        let row = judge::check(name, &truth, &f);
        let (tracked, dropped) =
            (metric(&m, "tcpvigil_tracked_connections"), metric(&m, "tcpvigil_dropped_records_total"));
        let pass_ms = metric(&m, "tcpvigil_snapshot_duration_seconds") * 1000.0;
        println!("{row}  (tracked {tracked}, dropped {dropped}, last pass {pass_ms:.2} ms)");
        assert!(tracked >= n as f64 * 0.95, "the daemon tracked {tracked} of the {n} idle sockets");
        assert_eq!(dropped, 0.0, "records dropped at {n} sockets");
        rows.push(row);
    }
    for mut c in held {
        drop(c.stdin.take());
        let _ = c.wait();
    }
    let _ = sh_ok(&format!("ip netns del {ns}"));
}

/// The /proc owner scan the daemon runs at start-up, alone, with 100,000 sockets held and 1,000
/// more processes: its time and the memory it keeps (printed; the target is at most 1 s).
#[test]
#[ignore = "bench: 100,000 sockets (release)"]
fn the_owner_scan_at_100k_sockets_and_1000_processes() {
    if !require_root("the_owner_scan_at_100k_sockets_and_1000_processes") {
        return;
    }
    let ns = format!("tvso{}", std::process::id());
    sh(&format!("ip netns add {ns} && ip -n {ns} link set lo up"));
    sh(&format!("ip netns exec {ns} sysctl -qw net.ipv4.ip_local_port_range='10000 65000'"));
    let held = hold(&ns, 50_000);
    let mut sleepers: Vec<std::process::Child> =
        (0..1000).map(|_| std::process::Command::new("sleep").arg("600").spawn().expect("sleep")).collect();
    let rss = || {
        std::fs::read_to_string("/proc/self/status")
            .unwrap_or_default()
            .lines()
            .find(|l| l.starts_with("VmRSS:"))
            .and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
            .unwrap_or(0)
    };
    for round in 0..3 {
        let before = rss();
        let t = Instant::now();
        let p = tcpvigil::bpf::preowners::PreOwners::scan(std::path::Path::new("/proc"));
        let ms = t.elapsed().as_secs_f64() * 1000.0;
        println!(
            "scan {round}: {:?} (connections, listeners) in {ms:.0} ms; RSS {} -> {} KiB while held",
            p.counts(),
            before,
            rss()
        );
        assert!(p.counts().0 >= 100_000, "the held connections were not all found: {:?}", p.counts());
    }
    for c in sleepers.iter_mut() {
        let _ = c.kill();
        let _ = c.wait();
    }
    for mut c in held {
        drop(c.stdin.take());
        let _ = c.wait();
    }
    let _ = sh_ok(&format!("ip netns del {ns}"));
}
