//! kill -9 at random moments of start-up and steady state leaves no BPF program, map, link, pin or
//! sockops cgroup attachment behind, and the next start is clean; two daemons at once both work,
//! a second one on a taken address refuses clearly and leaves nothing behind, and one on another's
//! events file or dump directory is refused with the holder named.
mod support;

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use support::bpfobj::{new_orphans, orphans};
use support::daemon::Daemon;
use support::*;

/// A small deterministic generator (xorshift), seeded from the clock and printed for reruns.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

fn tmp(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("tvk-{}-{name}", std::process::id()))
}

fn spawn(ready: &PathBuf, listen: &str) -> std::process::Child {
    let _ = std::fs::remove_file(ready);
    Command::new(env!("CARGO_BIN_EXE_tcpvigil"))
        .args(["run", "--listen", listen, "--ready-file"])
        .arg(ready)
        .arg("--events")
        .arg(tmp("events.jsonl"))
        .arg("--dump-dir")
        .arg(tmp("dumps"))
        .env("TCPVIGIL_LOG", "error")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start tcpvigil run")
}

#[test]
fn kill_9_at_random_moments_leaves_no_bpf_object_and_the_next_start_is_clean() {
    if !require_root("kill_9_at_random_moments_leaves_no_bpf_object_and_the_next_start_is_clean") {
        return;
    }
    let rounds: u32 = std::env::var("TV_KILL_ROUNDS").ok().and_then(|s| s.parse().ok()).unwrap_or(100);
    let seed =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(1)
            | 1;
    let mut rng = Rng(seed);
    let before = orphans();
    if !before.is_empty() {
        eprintln!("already orphaned before the test (not ours, ignored): {before:?}");
    }
    let ready = tmp("ready");
    let t0 = Instant::now();
    let (mut in_startup, mut in_steady) = (0, 0);
    // Traffic during steady-state rounds, so kills also land while records flow.
    let pair = Pair::new("k");
    let _srv = Command::new("ip")
        .args(["netns", "exec", &pair.rcv, "iperf3", "-s", "-p", "5901"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("iperf3 -s");
    let mut cli = Command::new("ip")
        .args(["netns", "exec", &pair.snd, "iperf3", "-c", &pair.rcv_ip, "-p", "5901", "-t", "600", "-b", "50M"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("iperf3 -c");
    for _ in 0..rounds {
        let mut child = spawn(&ready, "127.0.0.1:0");
        // Half the rounds: any moment of start-up (trial loads, attach); half: after ready.
        if rng.next() % 2 == 0 {
            std::thread::sleep(Duration::from_millis(rng.next() % 400));
        } else {
            let deadline = Instant::now() + Duration::from_secs(15);
            while !ready.exists() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(10));
            }
            assert!(ready.exists(), "the daemon did not get ready within 15 s");
            std::thread::sleep(Duration::from_millis(rng.next() % 300));
        }
        if ready.exists() {
            in_steady += 1;
        } else {
            in_startup += 1;
        }
        let _ = child.kill(); // SIGKILL
        let _ = child.wait();
    }
    let _ = cli.kill();
    let _ = cli.wait();
    let left = new_orphans(&before);
    println!(
        "kill -9: {rounds} rounds ({in_startup} during start-up, {in_steady} when ready) in {:.1} s, seed {seed}; left behind: {}",
        t0.elapsed().as_secs_f64(),
        left.len()
    );
    assert!(left.is_empty(), "BPF objects left behind after kill -9: {left:?}");
    // The next start is clean: ready, serving, and stops with exit 0.
    let d = Daemon::start("after-kill", "");
    assert!(d.scrape().is_ok_and(|m| m.contains("tcpvigil_build_info")), "the next start does not serve metrics");
    d.stop();
    let left = new_orphans(&before);
    assert!(left.is_empty(), "left behind after a clean stop: {left:?}");
    let _ = std::fs::remove_dir_all(tmp("dumps"));
    let _ = std::fs::remove_file(tmp("events.jsonl"));
}

#[test]
fn two_daemons_at_once_both_work_and_a_second_on_a_taken_address_refuses_cleanly() {
    if !require_root("two_daemons_at_once_both_work_and_a_second_on_a_taken_address_refuses_cleanly") {
        return;
    }
    let before = orphans();
    let a = Daemon::start("two-a", "");
    let b = Daemon::start("two-b", "");
    // Both see the same new connection.
    let pair = Pair::new("t");
    let mut srv = pair.iperf_server(5902);
    pair.iperf_client(5902, 1, &["-b", "20M"]);
    let _ = srv.wait();
    std::thread::sleep(Duration::from_millis(1500));
    for (n, d) in [("a", &a), ("b", &b)] {
        let m = d.scrape().expect("scrape");
        let events: f64 = support::daemon::series(&m)
            .into_iter()
            .filter(|l| l.starts_with("tcpvigil_kernel_records_total"))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum();
        assert!(events > 0.0, "daemon {n} saw no kernel records while the other ran");
    }
    // A third on a's address: refused with a message naming the address, nothing left loaded.
    let out = Command::new(env!("CARGO_BIN_EXE_tcpvigil"))
        .args(["run", "--listen", &a.addr.to_string()])
        .env("TCPVIGIL_LOG", "error")
        .output()
        .expect("run a third daemon");
    let err = String::from_utf8_lossy(&out.stderr);
    println!("third daemon on {}: exit {:?}: {}", a.addr, out.status.code(), err.trim());
    assert!(!out.status.success(), "a daemon on a taken address did not fail");
    assert!(err.contains(&a.addr.to_string()), "the message does not name the address: {err}");
    assert!(a.scrape().is_ok() && b.scrape().is_ok(), "the running daemons were disturbed");
    // Two daemons on one events file or one dump directory: refused, naming the one holding it
    // (they used to run side by side, interleaving lines and pruning each other's dumps).
    let pid = a.pid().expect("pid");
    let (own_events, own_dumps) = (tmp("third.jsonl"), tmp("third-dumps"));
    for (events, dumps, what) in [(&a.events, &own_dumps, "events file"), (&own_events, &a.dumps, "dump directory")] {
        let out = Command::new(env!("CARGO_BIN_EXE_tcpvigil"))
            .args(["run", "--listen", "127.0.0.1:0", "--events"])
            .arg(events)
            .arg("--dump-dir")
            .arg(dumps)
            .env("TCPVIGIL_LOG", "error")
            .output()
            .expect("run a daemon on a taken path");
        let err = String::from_utf8_lossy(&out.stderr);
        println!("a daemon on the first one's {what}: exit {:?}: {}", out.status.code(), err.trim());
        assert_eq!(out.status.code(), Some(2), "a daemon sharing the {what} was not refused: {err}");
        assert!(err.contains(&format!("in use by tcpvigil (pid {pid})")), "the holder is not named: {err}");
    }
    let _ = std::fs::remove_file(&own_events);
    let _ = std::fs::remove_dir_all(&own_dumps);
    assert!(a.scrape().is_ok(), "the running daemon was disturbed");
    a.stop();
    b.stop();
    let left = new_orphans(&before);
    assert!(left.is_empty(), "left behind: {left:?}");
}

#[test]
fn the_orphan_check_sees_a_map_kept_by_a_pin_after_kill_9() {
    if !require_root("the_orphan_check_sees_a_map_kept_by_a_pin_after_kill_9") {
        return;
    }
    let before = orphans();
    let ready = tmp("pin.ready");
    let mut child = spawn(&ready, "127.0.0.1:0");
    let deadline = Instant::now() + Duration::from_secs(15);
    while !ready.exists() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    // Pin the daemon's ring buffer (found through its fds), then kill it: the pin keeps the map.
    let pid = child.id();
    let id = std::fs::read_dir(format!("/proc/{pid}/fdinfo"))
        .expect("fdinfo")
        .flatten()
        .filter_map(|f| std::fs::read_to_string(f.path()).ok())
        .filter(|t| t.contains("map_type:\t27")) // BPF_MAP_TYPE_RINGBUF
        .find_map(|t| t.lines().find_map(|l| l.strip_prefix("map_id:")?.trim().parse::<u64>().ok()))
        .expect("the daemon holds a ring buffer");
    let pin = format!("/sys/fs/bpf/tv_orphan_check_{pid}");
    sh(&format!("bpftool map pin id {id} {pin}"));
    let _ = child.kill();
    let _ = child.wait();
    let left = new_orphans(&before);
    let _ = std::fs::remove_file(&pin);
    assert!(
        left.iter().any(|o| o.starts_with(&format!("map {id} "))),
        "the pinned map {id} was not reported: {left:?}"
    );
    assert!(new_orphans(&before).is_empty(), "still left after unpinning");
}
