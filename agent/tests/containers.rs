//! Connections named by what an operator searches by: a transfer from a Podman container and one
//! from a systemd unit, each stalled by its receiver (it stops reading: a zero-window stop). The
//! daemon's events, its dumps and metrics, and `watch --json`'s host view must name the
//! container (id and name) and the unit.
//!
//! The container is busybox's `nc` in a root file system made here (no image, no registry),
//! run by Podman with runc on the host's network, sending zeros to a listener of this test on
//! 127.0.0.1. The unit is a `systemd-run --scope`; where systemd is not running (CI containers),
//! the same cgroup systemd-run would make is made by hand and the sender moved into it.
#![allow(clippy::unwrap_used, clippy::expect_used)]
mod support;

use std::io::Read;
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use support::daemon::Daemon;
use support::require_root;

/// Under CI=true a missing tool is a failure; elsewhere the test skips loudly.
fn require_tool(test: &str, tool: &str, arg: &str) -> bool {
    if Command::new(tool).arg(arg).output().is_ok_and(|o| o.status.success()) {
        return true;
    }
    let msg = format!("SKIPPED {test}: `{tool}` is not installed (scripts/install-deps.sh installs it)");
    assert!(std::env::var("CI").as_deref() != Ok("true"), "{msg}; under CI=true a skip is a failure");
    eprintln!("{msg}");
    false
}

fn busybox() -> PathBuf {
    let out = Command::new("sh").args(["-c", "command -v busybox"]).output().expect("sh");
    PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
}

/// A root file system with busybox alone (a static binary), for `podman run --rootfs`.
struct Rootfs(PathBuf);

impl Rootfs {
    fn new(tag: &str) -> Rootfs {
        let d = std::env::temp_dir().join(format!("tv-rootfs-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(d.join("bin")).unwrap();
        std::fs::copy(busybox(), d.join("bin/busybox")).unwrap();
        for tool in ["sh", "nc", "cat"] {
            std::os::unix::fs::symlink("busybox", d.join("bin").join(tool)).unwrap();
        }
        Rootfs(d)
    }
}

impl Drop for Rootfs {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A Podman container, removed on drop.
struct Container {
    name: String,
    id: String,
}

impl Container {
    /// `nc 127.0.0.1 PORT < /dev/zero` in a container on the host's network.
    fn sender(name: &str, rootfs: &Path, port: u16) -> Container {
        let _ = Command::new("podman").args(["rm", "-f", "-t", "0", name]).output();
        // runc: crun refuses hybrid cgroup layouts; rlimits no higher than ours (ci-image.sh).
        let out = Command::new("podman")
            .args(["run", "-d", "--runtime", "runc", "--ulimit", "nofile=1024:1024", "--ulimit", "nproc=4096:4096"])
            .args(["--network", "host", "--name", name, "--rootfs"])
            .arg(rootfs)
            .args(["/bin/sh", "-c", &format!("exec nc 127.0.0.1 {port} < /dev/zero")])
            .output()
            .expect("podman run");
        assert!(out.status.success(), "podman run: {}", String::from_utf8_lossy(&out.stderr));
        let id = String::from_utf8_lossy(&out.stdout).trim().to_string();
        assert_eq!(id.len(), 64, "podman printed no container id: {id:?}");
        Container { name: name.into(), id }
    }
}

impl Drop for Container {
    fn drop(&mut self) {
        let _ = Command::new("podman").args(["rm", "-f", "-t", "0", &self.name]).output();
    }
}

/// A sender in a systemd unit (a transient scope), or in the cgroup systemd-run would make.
struct UnitSender {
    child: Child,
    unit: String,
    /// The cgroup made by hand (no systemd), removed on drop.
    made: Vec<PathBuf>,
}

impl UnitSender {
    fn start(unit: &str, port: u16) -> UnitSender {
        let nc = format!("exec {} nc 127.0.0.1 {port} < /dev/zero", busybox().display());
        let scope = format!("{unit}.scope");
        if Path::new("/run/systemd/system").exists() {
            let child = Command::new("systemd-run")
                .args(["--scope", "--quiet", "--slice", "tcpvigil-test", "--unit", unit, "sh", "-c", &nc])
                .stdout(Stdio::null())
                .spawn()
                .expect("systemd-run");
            return UnitSender { child, unit: scope, made: Vec::new() };
        }
        // What systemd-run --slice tcpvigil-test --unit UNIT --scope makes: the slice
        // `tcpvigil-test.slice` nests under `tcpvigil.slice`.
        let root = tcpvigil::bpf::load::cgroup2_root().expect("a cgroup2 file system");
        let slice = root.join("tcpvigil.slice");
        let made = vec![slice.join("tcpvigil-test.slice").join(&scope), slice.join("tcpvigil-test.slice"), slice];
        std::fs::create_dir_all(&made[0]).expect("make the unit's cgroup");
        let procs = made[0].join("cgroup.procs");
        let child =
            Command::new("sh").args(["-c", &format!("echo $$ > {} && {nc}", procs.display())]).spawn().expect("sh");
        UnitSender { child, unit: scope, made }
    }
}

impl Drop for UnitSender {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        for d in &self.made {
            let _ = std::fs::remove_dir(d);
        }
    }
}

/// Accepts one connection and reads it: at up to 256 MB/s for 1.5 s (healthy delivery: loopback's
/// 64 kB segments at 2 ms make anything below about 60 MB/s "almost nothing"), not at all for 3 s
/// (its window closes: the sender stops), again for 1.5 s, then closes it.
fn stalling_receiver(l: TcpListener) -> std::thread::JoinHandle<u64> {
    std::thread::spawn(move || {
        let (mut s, _): (TcpStream, _) = l.accept().expect("accept");
        let mut buf = vec![0u8; 256 << 10];
        let mut total = 0u64;
        let mut read_for = |s: &mut TcpStream, d: Duration| {
            let t = Instant::now();
            while t.elapsed() < d {
                match s.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => total += n as u64,
                }
                std::thread::sleep(Duration::from_millis(1));
            }
        };
        read_for(&mut s, Duration::from_millis(1500));
        std::thread::sleep(Duration::from_secs(3));
        read_for(&mut s, Duration::from_millis(1500));
        total
    })
}

fn listener() -> (TcpListener, u16) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    (l, port)
}

/// The remote port of a finding's or a host-view row's connection.
fn remote_port(conn: &Value) -> Option<u16> {
    conn["remote"].as_str()?.rsplit(':').next()?.parse().ok()
}

/// Every `recording.jsonl` under the dump directory.
fn recordings(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(recordings(&p));
        } else if p.file_name().is_some_and(|n| n == "recording.jsonl") {
            out.push(p);
        }
    }
    out
}

#[test]
fn a_podman_container_and_a_systemd_unit_are_named_in_events_dumps_metrics_and_watch() {
    let name = "containers";
    if !require_root(name) || !require_tool(name, "podman", "--version") || !require_tool(name, "runc", "--version") {
        return;
    }
    assert!(busybox().exists(), "busybox is needed for the container's sender (scripts/install-deps.sh)");
    let tag = std::process::id();
    let rootfs = Rootfs::new("ctr");
    let d = Daemon::start("containers", "[recorder]\nseconds_after = 2.0\n");
    let watch_out = std::env::temp_dir().join(format!("tv-containers-watch-{tag}.jsonl"));
    let watch = Command::new(env!("CARGO_BIN_EXE_tcpvigil"))
        .args(["watch", "--json", "--duration", "12"])
        .stdout(std::fs::File::create(&watch_out).unwrap())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("watch --json");
    std::thread::sleep(Duration::from_secs(2)); // watch attached

    let ((lc, pc), (lu, pu)) = (listener(), listener());
    let (rc, ru) = (stalling_receiver(lc), stalling_receiver(lu));
    let ctr_name = format!("tvtest-{tag}");
    let ctr = Container::sender(&ctr_name, &rootfs.0, pc);
    let unit = UnitSender::start(&format!("tvtest-{tag}"), pu);
    eprintln!("container {} ({}), unit {}; ports {pc} and {pu}", ctr.id, ctr.name, unit.unit);

    // Mid-transfer: the per-connection series carry the container and the unit.
    std::thread::sleep(Duration::from_millis(1200));
    let metrics = d.scrape().expect("scrape");
    let series = |port: u16| -> Option<String> {
        metrics
            .lines()
            .find(|l| l.starts_with("tcpvigil_conn_goodput") && l.contains(&format!(">127.0.0.1:{port}\"")))
            .map(str::to_string)
    };
    let (sc, su) = (series(pc), series(pu));
    let (got_c, got_u) = (rc.join().expect("receiver"), ru.join().expect("receiver"));
    eprintln!("received {got_c} B from the container, {got_u} B from the unit");
    eprintln!("series: {sc:?}\n        {su:?}");
    assert!(got_c > 10_000_000 && got_u > 10_000_000, "the transfers did not run");
    let sc = sc.expect("a series for the container's connection");
    assert!(sc.contains(&format!("container=\"{ctr_name}\"")), "{sc}");
    let su = su.expect("a series for the unit's connection");
    assert!(su.contains(&format!("unit=\"{}\"", unit.unit)) && su.contains("container=\"\""), "{su}");

    // The stops, as the events file has them.
    let t = Instant::now();
    // The receiver's stop; on a busy machine loopback may also show a short one of its own before.
    let stop_of = |f: &[Value], port: u16| {
        let ended = |v: &&Value| v["kind"] == "stop" && v["ongoing"] == false && remote_port(&v["conn"]) == Some(port);
        f.iter().filter(ended).find(|v| v["cause"] == "zero_window").cloned()
    };
    let mut findings = d.findings();
    while (stop_of(&findings, pc).is_none() || stop_of(&findings, pu).is_none())
        && t.elapsed() < Duration::from_secs(20)
    {
        std::thread::sleep(Duration::from_millis(250));
        findings = d.findings();
    }
    let ctr_id = ctr.id.clone();
    drop(ctr);
    drop(unit);
    let Some(c) = stop_of(&findings, pc) else { panic!("no stop of the container's connection: {findings:#?}") };
    eprintln!("container's stop: {c}");
    let conn = &c["conn"];
    assert_eq!(conn["container"], ctr_id.as_str(), "{c}");
    assert_eq!(conn["container_name"], ctr_name.as_str(), "{c}");
    assert!(conn["cgroup"].as_str().is_some_and(|p| p.contains(conn["container"].as_str().unwrap())), "{c}");
    assert_eq!(conn["comm"], "nc", "{c}");
    let Some(u) = stop_of(&findings, pu) else { panic!("no stop of the unit's connection: {findings:#?}") };
    eprintln!("unit's stop: {u}");
    assert_eq!(u["conn"]["unit"], format!("tvtest-{tag}.scope"), "{u}");
    assert!(u["conn"].get("container").is_none(), "{u}");
    // Every line about either connection names the same (stops and limits, ongoing or ended).
    for v in findings.iter().filter(|v| remote_port(&v["conn"]) == Some(pc)) {
        assert_eq!(
            (&v["conn"]["container"], &v["conn"]["container_name"]),
            (&conn["container"], &conn["container_name"]),
            "{v}"
        );
    }
    for v in findings.iter().filter(|v| remote_port(&v["conn"]) == Some(pu)) {
        assert_eq!(v["conn"]["unit"], u["conn"]["unit"], "{v}");
    }

    // The host view named both while they ran.
    let _ = wait_exit(watch, Duration::from_secs(20));
    let lines: Vec<Value> = std::fs::read_to_string(&watch_out)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    let _ = std::fs::remove_file(&watch_out);
    let row = |port: u16| {
        lines
            .iter()
            .flat_map(|l| l["conns"].as_array().cloned().unwrap_or_default())
            .find(|r| remote_port(r) == Some(port))
    };
    let wc = row(pc)
        .unwrap_or_else(|| panic!("the host view never listed the container's connection ({} lines)", lines.len()));
    let cg = &wc["process"]["cgroup"];
    assert_eq!(
        (&cg["container"], &cg["container_name"]),
        (&conn["container"], &Value::from(ctr_name.as_str())),
        "{wc}"
    );
    assert_eq!(cg["runtime"], "podman", "{wc}");
    let wu = row(pu).expect("the host view listed the unit's connection");
    assert_eq!(wu["process"]["cgroup"]["unit"], format!("tvtest-{tag}.scope"), "{wu}");

    // The dump of the container's stop: its snapshots carry the process with its cgroup.
    let dumps = d.dumps.clone();
    let t = Instant::now();
    let id = conn["container"].as_str().unwrap().to_string();
    let in_dump = |p: &PathBuf| std::fs::read_to_string(p).is_ok_and(|s| s.contains(&id) && s.contains(&ctr_name));
    while !recordings(&dumps).iter().any(in_dump) && t.elapsed() < Duration::from_secs(20) {
        std::thread::sleep(Duration::from_millis(250));
    }
    let found = recordings(&dumps).into_iter().find(in_dump);
    assert!(found.is_some(), "no dump names the container ({} dumps)", recordings(&dumps).len());
    let rec = tcpvigil::recording::open(&found.unwrap()).expect("the dump reads back");
    let named = rec.events.iter().any(|e| match &e.body {
        tcpvigil::model::Body::Snapshot(s) | tcpvigil::model::Body::Close(s) => {
            s.process.cgroup.as_ref().is_some_and(|c| c.container.as_deref() == Some(id.as_str()))
        }
        tcpvigil::model::Body::Process(p) => p.cgroup.as_ref().is_some_and(|c| c.container.as_deref() == Some(&id)),
        _ => false,
    });
    assert!(named, "the dump's events do not carry the container");
    d.stop();
    let _ = std::fs::remove_dir_all(&dumps);
}

fn wait_exit(mut c: Child, limit: Duration) -> Option<std::process::ExitStatus> {
    let t = Instant::now();
    while t.elapsed() < limit {
        if let Ok(Some(s)) = c.try_wait() {
            return Some(s);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let _ = c.kill();
    c.wait().ok()
}
