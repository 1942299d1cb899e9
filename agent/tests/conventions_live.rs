//! The conventions of issue 20 on a live daemon (root): recordings on stdout and 0640, SIGHUP
//! reloads, capabilities dropped after start-up, privileges checked first, process metrics.
#![allow(clippy::unwrap_used, clippy::expect_used)]
mod support;

use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use support::require_root;

fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_tcpvigil")
}

fn tmp(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("tv-live-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn record_out_dash_writes_the_recording_to_stdout_and_a_file_is_0640() {
    if !require_root("record_out_dash") {
        return;
    }
    let dir = tmp("record");
    let out = Command::new(bin()).args(["record", "--out", "-", "--duration", "1"]).current_dir(&dir).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    let header: serde_json::Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
    assert_eq!(header["tcpvigil_recording"], 1, "{text}");
    assert!(!dir.join("-").exists(), "a file named - was created");
    // A file: 0640, even when an older file of that name was world-readable.
    let file = dir.join("rec.jsonl");
    std::fs::write(&file, b"old").unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
    let st = Command::new(bin())
        .args(["record", "--duration", "1", "--out"])
        .arg(&file)
        .stderr(Stdio::null())
        .status()
        .unwrap();
    assert!(st.success());
    let mode = std::fs::metadata(&file).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o640, "{mode:o}");
    assert!(std::fs::read_to_string(&file).unwrap().starts_with("{\"tcpvigil_recording\""));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `tcpvigil run` with its log in a file, a config the test edits, and the address from its ready file.
struct Live {
    child: std::process::Child,
    dir: PathBuf,
    config: PathBuf,
    ready: PathBuf,
    log: PathBuf,
}

impl Live {
    fn start(tag: &str, config: &str) -> Live {
        let dir = tmp(tag);
        let (cfg, ready, log) = (dir.join("tcpvigil.toml"), dir.join("ready"), dir.join("log"));
        std::fs::write(&cfg, config).unwrap();
        let child = Command::new(bin())
            .args(["run", "--config"])
            .arg(&cfg)
            .arg("--ready-file")
            .arg(&ready)
            .arg("--dump-dir")
            .arg(dir.join("dumps"))
            .env("TCPVIGIL_LOG", "info")
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        let mut l = Live { child, dir, config: cfg, ready, log };
        l.wait(|l| l.addr().is_some(), "ready");
        l
    }

    fn addr(&self) -> Option<std::net::SocketAddr> {
        let a: std::net::SocketAddr = std::fs::read_to_string(&self.ready).ok()?.trim().parse().ok()?;
        // `:PORT` binds [::]: reach it on IPv4 loopback.
        Some(if a.ip().is_unspecified() { ([127, 0, 0, 1], a.port()).into() } else { a })
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn wait(&mut self, ok: impl Fn(&Live) -> bool, what: &str) {
        let t = Instant::now();
        while !ok(self) {
            assert!(self.child.try_wait().unwrap().is_none(), "the daemon exited waiting for {what}:\n{}", self.log());
            assert!(t.elapsed() < Duration::from_secs(30), "no {what} within 30 s:\n{}", self.log());
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn scrape(&self) -> String {
        self.addr().and_then(|a| support::http::get(a, "/metrics").ok()).map(|(_, b)| b).unwrap_or_default()
    }

    fn signal(&self, s: nix::sys::signal::Signal) {
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(self.child.id() as i32), s).unwrap();
    }

    fn stop(mut self) -> String {
        self.signal(nix::sys::signal::Signal::SIGINT);
        assert!(self.child.wait().unwrap().success(), "{}", self.log());
        let log = self.log();
        std::fs::remove_dir_all(&self.dir).unwrap();
        log
    }
}

impl Drop for Live {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `n` connections on loopback that each moved 2 MiB (bulk) and stay open; the server's port.
fn bulk_loopback(n: usize) -> (u16, Vec<std::net::TcpStream>) {
    use std::io::{Read, Write};
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for s in l.incoming().take(n) {
            let mut s = s.unwrap();
            std::thread::spawn(move || {
                let mut buf = vec![0u8; 1 << 16];
                while s.read(&mut buf).is_ok_and(|k| k > 0) {}
            });
        }
    });
    let conns = (0..n)
        .map(|_| {
            let mut c = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
            c.write_all(&vec![7u8; 2 << 20]).unwrap();
            c
        })
        .collect();
    (port, conns)
}

/// Per-connection series of the connections to `port` on loopback.
fn shown(text: &str, port: u16) -> usize {
    let want = format!(">127.0.0.1:{port}\"");
    text.lines().filter(|l| l.starts_with("tcpvigil_conn_cwnd_segments{") && l.contains(&want)).count()
}

#[test]
fn sighup_applies_what_can_change_live_names_what_cannot_and_refuses_a_bad_file() {
    if !require_root("sighup_reload") {
        return;
    }
    let first = "[export]\nlisten = \"localhost:0\"\ntop_k = 1\nevents = \"EV/a.jsonl\"\n[detect.stop]\nfloor_ms = 150\n[bpf]\nringbuf_mib = 8\n";
    let dir = tmp("hup-events");
    let cfg = first.replace("EV", dir.to_str().unwrap());
    let mut d = Live::start("hup", &cfg);
    let before = d.addr().unwrap();
    assert!(before.ip().is_loopback(), "localhost:0 bound {before}");
    let (port, _conns) = bulk_loopback(3);
    d.wait(
        |d| support::daemon::value(&d.scrape(), "tcpvigil_bulk_connections").is_some_and(|v| v >= 3.0),
        "3 bulk connections",
    );
    assert!(shown(&d.scrape(), port) <= 1, "top_k = 1 shows at most one:\n{}", d.scrape());

    // Edit: live keys, a kernel key that needs a restart, a new events file and address.
    let new_port = support::http::free_port();
    let edited = cfg
        .replace("top_k = 1", "top_k = 50")
        .replace("a.jsonl", "b.jsonl")
        .replace("floor_ms = 150", "floor_ms = 300")
        .replace("ringbuf_mib = 8", "ringbuf_mib = 16")
        .replace("localhost:0", &format!(":{new_port}"));
    std::fs::write(&d.config, edited).unwrap();
    d.signal(nix::sys::signal::Signal::SIGHUP);
    d.wait(|d| d.addr().is_some_and(|a| a.port() == new_port), "the new address in the ready file");
    d.wait(|d| shown(&d.scrape(), port) == 3, "top_k = 50 showing the 3 connections");
    assert!(dir.join("b.jsonl").exists(), "the new events file was not opened");
    assert!(support::http::get(before, "/metrics").is_err(), "the old address still serves");
    let log = d.log();
    let line = log.lines().find(|l| l.contains("configuration reloaded")).unwrap_or_else(|| panic!("{log}"));
    for key in ["detect.stop.floor_ms", "export.events", "export.listen", "export.top_k"] {
        assert!(line.split("restart_needed=").next().unwrap().contains(key), "{key} not applied: {line}");
    }
    assert!(line.contains("restart_needed=\"bpf.ringbuf_mib = 16 (running 8)\""), "{line}");

    // A bad file: refused, the running configuration kept (still top_k = 50 on the new address).
    std::fs::write(&d.config, "[export]\ntop_k = \"many\"\n").unwrap();
    d.signal(nix::sys::signal::Signal::SIGHUP);
    d.wait(|d| d.log().contains("configuration not reloaded"), "the refusal");
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(shown(&d.scrape(), port), 3, "the running top_k changed");
    assert_eq!(d.addr().unwrap().port(), new_port);

    // Process metrics and build info on the same scrape.
    let text = d.scrape();
    for name in [
        "process_cpu_seconds_total ",
        "process_resident_memory_bytes ",
        "process_virtual_memory_bytes ",
        "process_open_fds ",
        "process_max_fds ",
        "process_start_time_seconds ",
    ] {
        assert!(text.lines().any(|l| l.starts_with(name)), "{name} missing");
    }
    let info = text.lines().find(|l| l.starts_with("tcpvigil_build_info{")).unwrap();
    // "preferred/all" over the needs of this build (every need counted, each at most once).
    let hooks = info.split("hooks_preferred=\"").nth(1).and_then(|r| r.split('"').next()).unwrap_or("");
    let (served, all) = hooks.split_once('/').unwrap_or_else(|| panic!("{info}"));
    let (served, all): (usize, usize) = (served.parse().unwrap(), all.parse().unwrap());
    assert!(all >= 10 && served <= all, "{info}");
    let rev =
        Command::new("git").args(["rev-parse", "--short", "HEAD"]).current_dir(env!("CARGO_MANIFEST_DIR")).output();
    if let Some(rev) = rev.ok().filter(|o| o.status.success()) {
        let rev = String::from_utf8_lossy(&rev.stdout).trim().to_string();
        assert!(info.contains(&format!("revision=\"{rev}\"")), "{info} is not built from {rev}");
    }
    let log = d.stop();
    for l in log.lines().filter(|l| l.contains("reload")) {
        assert!(!l.contains("Some(") && !l.contains("None"), "Rust debug formatting in the log: {l}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The five capabilities' bits: CAP_NET_ADMIN 12, CAP_SYS_PTRACE 19, CAP_SYS_ADMIN 21,
/// CAP_PERFMON 38, CAP_BPF 39.
const FIVE: [(u32, &str); 5] =
    [(12, "CAP_NET_ADMIN"), (19, "CAP_SYS_PTRACE"), (21, "CAP_SYS_ADMIN"), (38, "CAP_PERFMON"), (39, "CAP_BPF")];

/// Each thread's (comm, held of the five in CapEff, held in CapPrm).
fn thread_caps(pid: u32) -> Vec<(String, Vec<&'static str>, Vec<&'static str>)> {
    let mut out = Vec::new();
    for t in std::fs::read_dir(format!("/proc/{pid}/task")).unwrap() {
        let t = t.unwrap().path();
        let comm = std::fs::read_to_string(t.join("comm")).unwrap_or_default().trim().to_string();
        let status = std::fs::read_to_string(t.join("status")).unwrap_or_default();
        let set = |key: &str| {
            let v =
                status.lines().find_map(|l| l.strip_prefix(key)).map(|v| u64::from_str_radix(v.trim(), 16).unwrap());
            FIVE.iter().filter(|(b, _)| v.unwrap_or(0) >> b & 1 == 1).map(|(_, n)| *n).collect::<Vec<_>>()
        };
        out.push((comm, set("CapEff:"), set("CapPrm:")));
    }
    out
}

#[test]
fn after_start_up_only_the_bpf_thread_holds_capabilities_and_only_those_its_loop_needs() {
    if !require_root("capabilities_dropped") {
        return;
    }
    let mut d = Live::start("caps", "[export]\nlisten = \"127.0.0.1:0\"\n");
    let pid = d.child.id();
    // The main thread (the one /proc/PID/status shows) first.
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let eff = status.lines().find_map(|l| l.strip_prefix("CapEff:")).unwrap().trim().to_string();
    let eff = u64::from_str_radix(&eff, 16).unwrap();
    assert!(FIVE.iter().all(|(b, _)| eff >> b & 1 == 0), "the main thread holds some of the five: {eff:x}");
    let threads = thread_caps(pid);
    assert!(threads.len() >= 4, "{threads:?}");
    for (comm, eff, prm) in &threads {
        if comm == "tcpvigil-bpf" {
            for gone in ["CAP_NET_ADMIN", "CAP_PERFMON"] {
                assert!(!eff.contains(&gone) && !prm.contains(&gone), "the BPF thread kept {gone}: {eff:?}");
            }
            assert!(eff.contains(&"CAP_SYS_ADMIN") && eff.contains(&"CAP_SYS_PTRACE"), "{eff:?}");
        } else {
            assert!(eff.is_empty() && prm.is_empty(), "thread {comm} holds {eff:?} / {prm:?}");
        }
    }
    let kept = threads.iter().find(|t| t.0 == "tcpvigil-bpf").map(|t| t.1.clone()).unwrap_or_default();
    eprintln!("the BPF thread keeps {kept:?} on {}", support::sh("uname -r").trim());
    // The loop still works without them: a connection moves, the counters and snapshots follow.
    let records =
        |d: &Live| support::daemon::value(&d.scrape(), "tcpvigil_kernel_records_total{kind=\"sample\"}").unwrap_or(0.0);
    let (r0, (_port, _c)) = (records(&d), bulk_loopback(2));
    d.wait(|d| records(d) > r0, "kernel records after the drop");
    d.wait(
        |d| support::daemon::value(&d.scrape(), "tcpvigil_snapshot_duration_seconds").is_some_and(|v| v > 0.0),
        "a snapshot pass",
    );
    d.stop();
}

#[test]
fn snapshots_of_other_network_namespaces_still_come_after_the_bpf_thread_dropped_its_start_up_capabilities() {
    if !require_root("caps_netns_snapshots") {
        return;
    }
    let pair = std::sync::Arc::new(support::Pair::new("cap"));
    let mut server = pair.iperf_server(5299);
    let p2 = pair.clone();
    let client = std::thread::spawn(move || p2.iperf_client(5299, 6, &["-b", "50M"]));
    std::thread::sleep(Duration::from_millis(500));
    let out =
        Command::new(bin()).args(["record", "--out", "-", "--duration", "3", "--conn", ":5299"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let ns =
        std::fs::metadata(format!("/run/netns/{}", pair.snd)).map(|m| std::os::unix::fs::MetadataExt::ino(&m)).unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let snaps =
        text.lines().filter(|l| l.contains("\"type\":\"snapshot\"") && l.contains(&format!("\"netns\":{ns}"))).count();
    assert!(
        snaps >= 2,
        "no snapshots from the sender's namespace {ns} after the drop:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let _ = client.join();
    let _ = server.kill();
    let _ = server.wait();
}

#[test]
fn without_privileges_run_record_and_check_name_the_missing_capabilities_before_creating_anything() {
    if !require_root("privileges_first") {
        return;
    }
    // A directory of nobody's own, where a run as nobody could create its dumps.
    let dir = tmp("priv");
    let own = dir.join("own");
    std::fs::create_dir(&own).unwrap();
    support::sh(&format!("chown nobody:nogroup {}", own.display()));
    let dumps = own.join("dumps");
    let as_nobody = |args: &[&str]| {
        Command::new("setpriv")
            .args(["--reuid=nobody", "--regid=nogroup", "--clear-groups", "--inh-caps=-all", bin()])
            .args(args)
            .output()
            .unwrap()
    };
    let out = as_nobody(&["run", "--listen", "127.0.0.1:0", "--dump-dir", dumps.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("missing CAP_BPF, CAP_PERFMON (not root)") && err.contains("setcap"), "{err}");
    assert!(!dumps.exists(), "the dump directory was created by a run that cannot load");
    for args in [vec!["record", "--out", "-"], vec!["check"], vec!["watch", "--conn", ":1"]] {
        let out = as_nobody(&args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains("missing CAP_BPF"), "{args:?}: {err}");
    }
    // Root without them (a container that did not grant them).
    let out = Command::new("setpriv")
        .args(["--bounding-set=-bpf,-perfmon,-sys_admin", "--inh-caps=-all", bin(), "run", "--listen", "127.0.0.1:0"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("missing CAP_BPF, CAP_PERFMON (root without them)"), "{err}");
    // --check-config (the unit's ExecStartPre) refuses a dump directory this user cannot write.
    let out = as_nobody(&["run", "--check-config", "--dump-dir", "/var/lib/tcpvigil-test-unwritable/dumps"]);
    assert_eq!(out.status.code(), Some(2), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--dump-dir"), "{}", String::from_utf8_lossy(&out.stderr));
    let ro = dir.join("ro");
    std::fs::create_dir(&ro).unwrap();
    let out = as_nobody(&["run", "--check-config", "--dump-dir", ro.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2), "a root-owned 0755 directory passed for nobody");
    let ok = own.join("nobody-dumps");
    let out = as_nobody(&["run", "--check-config", "--dump-dir", ok.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn check_ends_with_one_line_saying_whether_this_host_is_fine() {
    if !require_root("check_verdict") {
        return;
    }
    let out = Command::new(bin()).arg("check").output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let last = text.lines().last().unwrap_or("");
    match out.status.code() {
        Some(0) => assert!(last.starts_with("OK: "), "{text}"),
        Some(1) => assert!(last.starts_with("NOT OK: "), "{text}"),
        c => panic!("exit {c:?}: {text}"),
    }
    // Every need the line names as a fallback is one in the table, with the reason it got.
    if let Some(list) = last.split_once(" on a fallback: ").map(|(_, l)| l) {
        for need in list.split("), ").map(|n| n.split(' ').next().unwrap()) {
            let row =
                text.lines().find(|l| l.starts_with(&format!("{need} "))).unwrap_or_else(|| panic!("{need}: {text}"));
            assert!(row.ends_with("[fallback]"), "{row}");
        }
        assert!(list.contains("refused: "), "{last}");
    }
    let json: serde_json::Value =
        serde_json::from_slice(&Command::new(bin()).args(["check", "--json"]).output().unwrap().stdout).unwrap();
    assert!(json["verdict"].as_str().is_some_and(|v| v.starts_with("OK") || v.starts_with("NOT OK")), "{json}");
}
