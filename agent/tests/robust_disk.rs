//! A full disk under the events file and the dump directory (a small tmpfs, filled): the daemon keeps running,
//! counts every failed write, keeps counting findings, recovers when space frees, reopens a rotated
//! events file on SIGHUP; the files it creates are not world-readable. And no line is ever left
//! half-written: on a 1 MiB tmpfs filled up, the write that crosses the last free byte used to
//! leave part of a finding that the next one, after space was freed, was appended to
//! (`..."ongoing":false,"owne{"cause":"zero_window",...`).
mod support;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use support::daemon::{series, Daemon};
use support::*;

/// Sum of every sample of a metric family whose line starts with `prefix`.
fn sum(text: &str, prefix: &str) -> f64 {
    series(text)
        .into_iter()
        .filter(|l| l.starts_with(prefix))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

struct Tmpfs(PathBuf);
impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = sh_ok(&format!("umount -l {}", self.0.display()));
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// One transfer with a 2 s outage in it: a stop, hence findings and a dump. (Outages of an
/// application-limited sender, `-b 50M`, are proven in app_limited_outage.rs.)
fn stop_once(p: &Pair, port: u16) {
    let mut srv = p.iperf_server(port);
    let outage = p.outage_after(Duration::from_millis(1200), Duration::from_millis(2000));
    p.iperf_client(port, 5, &[]);
    let _ = outage.join();
    let _ = srv.wait();
}

fn wait_for(d: &Daemon, what: &str, limit: Duration, ok: impl Fn(&str) -> bool) -> String {
    let t = Instant::now();
    loop {
        let m = d.scrape().expect("the daemon answers /metrics");
        if ok(&m) {
            return m;
        }
        if t.elapsed() >= limit {
            let seen: Vec<&str> = series(&m)
                .into_iter()
                .filter(|l| {
                    ["tcpvigil_events_write", "tcpvigil_stops", "tcpvigil_recorder_dumps"]
                        .iter()
                        .any(|p| l.starts_with(p))
                })
                .collect();
            panic!("{what} within {limit:?}; the daemon's counters then:\n{}", seen.join("\n"));
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}

fn mode(p: &Path) -> u32 {
    std::fs::metadata(p).map(|m| m.permissions().mode() & 0o777).unwrap_or(0)
}

#[test]
fn full_disk_is_counted_survived_and_recovered_and_sighup_reopens_a_rotated_events_file() {
    if !require_root("full_disk_is_counted_survived_and_recovered_and_sighup_reopens_a_rotated_events_file") {
        return;
    }
    let dir = std::env::temp_dir().join(format!("tv-full-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("mkdir");
    sh(&format!("mount -t tmpfs -o size=4m tvfull {}", dir.display()));
    let _fs = Tmpfs(dir.clone());
    let (events, dumps) = (dir.join("events.jsonl"), dir.join("dumps"));
    // Dumps written 2 s after a stop ends (default 10 s) keep the test short.
    let d = Daemon::start_at("full", "[recorder]\nseconds_after = 2.0\n", events.clone(), dumps.clone());
    // Fill what is left (the daemon has created its files by now).
    let _ = sh_ok(&format!("dd if=/dev/zero of={}/fill bs=4k", dir.display()));
    assert!(sh_ok(&format!("! dd if=/dev/zero of={}/probe bs=1 count=1", dir.display())), "the tmpfs is not full");

    let p = Pair::new("f");
    p.shape(100, 0);
    stop_once(&p, 6001);
    // A stop ends when the first retry after the outage gets through (up to a backed-off RTO later);
    // on a loaded CI machine that and the write took more than 10 s once.
    let m = wait_for(&d, "a failed events write and the ended stop counted", Duration::from_secs(30), |m| {
        sum(m, "tcpvigil_events_write_errors_total") >= 1.0 && sum(m, "tcpvigil_stops_total") >= 1.0
    });
    let failed_writes = sum(&m, "tcpvigil_events_write_errors_total");
    let stops_full = sum(&m, "tcpvigil_stops_total");
    let m = wait_for(&d, "a failed dump counted", Duration::from_secs(40), |m| {
        sum(m, "tcpvigil_recorder_dumps_total{outcome=\"failed\"") >= 1.0
    });
    println!(
        "disk full: {failed_writes} failed events writes, {} failed dumps, {stops_full} stops counted, events file {} bytes",
        sum(&m, "tcpvigil_recorder_dumps_total{outcome=\"failed\""),
        std::fs::metadata(&events).map(|m| m.len()).unwrap_or(0)
    );
    assert!(stops_full >= 1.0, "the stop was not counted while the disk was full");

    // Space again: the next findings are written, the next dump too.
    std::fs::remove_file(dir.join("fill")).expect("free the space");
    stop_once(&p, 6002);
    let m = wait_for(&d, "a dump written and the stop counted after space freed", Duration::from_secs(40), |m| {
        sum(m, "tcpvigil_recorder_dumps_total{outcome=\"written\"") >= 1.0
            && sum(m, "tcpvigil_stops_total") > stops_full
    });
    let lines = std::fs::read_to_string(&events).unwrap_or_default();
    assert!(!lines.is_empty(), "no finding written after space was freed");
    for l in lines.lines() {
        serde_json::from_str::<serde_json::Value>(l).unwrap_or_else(|e| panic!("not a JSON line ({e}): {l}"));
    }
    assert!(sum(&m, "tcpvigil_stops_total") > stops_full, "stops stopped being counted");

    // Rotation: the file is moved away; SIGHUP makes the daemon write a new one.
    let rotated = dir.join("events.jsonl.1");
    std::fs::rename(&events, &rotated).expect("rotate");
    sh(&format!("kill -HUP {}", d.pid().expect("pid")));
    std::thread::sleep(Duration::from_millis(300));
    stop_once(&p, 6003);
    let t = Instant::now();
    while std::fs::metadata(&events).map(|m| m.len()).unwrap_or(0) == 0 && t.elapsed() < Duration::from_secs(30) {
        std::thread::sleep(Duration::from_millis(200));
    }
    let fresh = std::fs::read_to_string(&events).unwrap_or_default();
    let old_len = std::fs::read_to_string(&rotated).unwrap_or_default().lines().count();
    println!("after SIGHUP: {} lines in the new file, {old_len} in the rotated one", fresh.lines().count());
    // (A CI run once wrote nothing within 10 s here; the counters tell a missing stop from a failed write.)
    let counters: Vec<String> = series(&d.scrape().unwrap_or_default())
        .into_iter()
        .filter(|l| l.starts_with("tcpvigil_events_write") || l.starts_with("tcpvigil_stops"))
        .map(str::to_string)
        .collect();
    assert!(!fresh.is_empty(), "SIGHUP did not reopen the rotated events file; counters: {counters:?}");
    assert_eq!(old_len, lines.lines().count(), "lines went to the rotated file after SIGHUP");

    // Not world-readable: the events file 0640, every dump directory 0750.
    assert_eq!(mode(&events) & 0o007, 0, "events file mode {:o}", mode(&events));
    assert_eq!(mode(&dumps) & 0o007, 0, "dump dir mode {:o}", mode(&dumps));
    for e in std::fs::read_dir(&dumps).expect("dumps").flatten() {
        assert_eq!(mode(&e.path()) & 0o007, 0, "{} mode {:o}", e.path().display(), mode(&e.path()));
    }
    assert!(d.scrape().is_ok(), "the daemon stopped answering");
    d.stop();
}

/// A finding about one connection, as the events file gets them.
fn finding(i: u64) -> tcpvigil::model::Finding {
    serde_json::from_value(serde_json::json!({
        "ts_ns": 5_000_000_000u64 + i,
        "kind": "stop",
        "conn": {"cookie": 4886 + i, "netns": 4026531840u64, "local": "10.0.0.1:40000", "remote": "10.0.0.2:5201"},
        "group": null,
        "start_ns": 3_500_000_000u64,
        "duration_s": 1.5,
        "ongoing": false,
        "cause": "zero_window",
        "evidence": {"rtos": i, "note": "x".repeat((i % 7) as usize * 40)},
    }))
    .expect("a finding")
}

#[test]
fn a_full_disk_leaves_no_half_written_line_in_the_events_file() {
    if !require_root("a_full_disk_leaves_no_half_written_line_in_the_events_file") {
        return;
    }
    let dir = std::env::temp_dir().join(format!("tv-torn-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("mkdir");
    sh(&format!("mount -t tmpfs -o size=1m tvtorn {}", dir.display()));
    let _fs = Tmpfs(dir.clone());
    let path = dir.join("events.jsonl");
    let mut w = tcpvigil::export::EventsWriter::open(tcpvigil::export::EventsTarget::File(path.clone()), 0)
        .expect("open the events file");
    for i in 0..5 {
        w.write(&finding(i), None);
    }
    // Fill every free page: what is left is the rest of the events file's last page, so that a
    // finding is cut where that page ends.
    let _ = sh_ok(&format!("dd if=/dev/zero of={}/fill bs=4k", dir.display()));
    let (mut i, mut failed) = (5, 0);
    while failed < 3 && i < 1000 {
        let before = w.errors();
        w.write(&finding(i), None);
        failed += (w.errors() > before) as u32;
        i += 1;
    }
    let full_len = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
    assert!(failed >= 3, "the disk never filled up ({i} findings written)");
    std::fs::remove_file(dir.join("fill")).expect("free the space");
    for k in 0..5 {
        w.write(&finding(i + k), None);
    }
    let text = std::fs::read_to_string(&path).expect("read the events file");
    println!(
        "1 MiB tmpfs: {} findings written, {} failed (counted), {} torn; {full_len} bytes when full; {} lines after space was freed",
        w.written(),
        w.errors(),
        w.torn(),
        text.lines().count()
    );
    assert!(text.ends_with('\n'), "the file ends in part of a line");
    for (n, l) in text.lines().enumerate() {
        serde_json::from_str::<serde_json::Value>(l)
            .unwrap_or_else(|e| panic!("line {} is not JSON ({e}): {}", n + 1, &l[..l.len().min(300)]));
    }
    assert_eq!(text.lines().count() as u64, w.written(), "every line written is there, and nothing else");
    assert_eq!(w.torn(), 0, "a file can always be cut back to its last whole line");
}
