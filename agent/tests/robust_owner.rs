//! Process attribution without a send hook: both ends of a transfer are attributed to the process
//! that connected or listened, once per connection, and no tcpvigil program runs per send.
mod support;

use std::collections::HashMap;

use support::*;
use tcpvigil::model::Body;

#[test]
fn owner_is_tagged_once_per_connection_at_connect_and_accept_with_no_per_send_program() {
    if !require_root("owner_is_tagged_once_per_connection_at_connect_and_accept_with_no_per_send_program") {
        return;
    }
    let pair = Pair::new("ow");
    let rec = Recorder::start(&["--snapshot-interval", "1"], 5);
    // None of this recorder's programs (found through its fds) hooks the send path.
    let pid = rec.child.id();
    let ids: Vec<u64> = std::fs::read_dir(format!("/proc/{pid}/fdinfo"))
        .expect("fdinfo")
        .flatten()
        .filter_map(|f| std::fs::read_to_string(f.path()).ok())
        .filter_map(|t| t.lines().find_map(|l| l.strip_prefix("prog_id:")?.trim().parse().ok()))
        .collect();
    let all: serde_json::Value = serde_json::from_str(&sh("bpftool -j prog show")).expect("bpftool json");
    let names: Vec<String> = all
        .as_array()
        .into_iter()
        .flatten()
        .filter(|p| p["id"].as_u64().is_some_and(|id| ids.contains(&id)))
        .filter_map(|p| p["name"].as_str().map(String::from))
        .collect();
    assert!(names.iter().any(|n| n == "tv_set_state"), "the recorder's programs were not found: {names:?}");
    for n in &names {
        assert!(!n.starts_with("tv_send"), "{n} is loaded: attribution still runs per send");
    }
    let mut srv = pair.iperf_server(5701);
    let out = pair.iperf_client(5701, 2, &[]);
    let _ = srv.wait();
    assert!(out["end"]["sum_received"]["bytes"].as_f64().unwrap_or(0.0) > 0.0, "no transfer");
    let (rec, _) = rec.finish();

    let snd_ns: u32 = sh(&format!("stat -L -c %i /run/netns/{}", pair.snd)).trim().parse().expect("netns inode");
    let rcv_ns: u32 = sh(&format!("stat -L -c %i /run/netns/{}", pair.rcv)).trim().parse().expect("netns inode");
    // Connections of the transfer (both namespaces): established ones, and owner records per cookie.
    let mut established: Vec<u64> = Vec::new();
    let mut owners: HashMap<u64, Vec<String>> = HashMap::new();
    for e in &rec.events {
        if e.conn.netns != snd_ns && e.conn.netns != rcv_ns {
            continue;
        }
        match &e.body {
            Body::State(s) if s.new == 1 => established.push(e.conn.cookie),
            Body::Process(o) => owners.entry(e.conn.cookie).or_default().push(o.comm.clone()),
            _ => {}
        }
    }
    established.sort_unstable();
    established.dedup();
    // iperf3: a control and a data connection, each seen from both ends.
    assert!(established.len() >= 4, "expected >= 4 established sockets, saw {}", established.len());
    for c in &established {
        let o = owners.get(c).unwrap_or_else(|| panic!("connection {c} has no owner record"));
        assert_eq!(o.len(), 1, "connection {c} was attributed {} times", o.len());
        assert_eq!(o[0], "iperf3", "connection {c} attributed to {:?}", o[0]);
    }
    println!("{} sockets attributed once each, to iperf3", established.len());
}

/// `iperf3 -s` in the receiver namespace, left running (serves one client after another).
fn server(pair: &Pair, port: u16) -> std::process::Child {
    std::process::Command::new("ip")
        .args(["netns", "exec", &pair.rcv, "iperf3", "-s", "-p", &port.to_string()])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("start iperf3 -s")
}

/// An iperf3 client in the sender namespace, the server sending (-R) at 50 Mbit/s.
fn client(pair: &Pair, port: u16, secs: u32) -> std::process::Child {
    std::process::Command::new("ip")
        .args(["netns", "exec", &pair.snd, "iperf3", "-c", &pair.rcv_ip, "-p", &port.to_string()])
        .args(["-t", &secs.to_string(), "-R", "-b", "50M"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("start iperf3 -c")
}

#[test]
fn sockets_and_listeners_older_than_the_daemon_are_attributed_from_proc() {
    if !require_root("sockets_and_listeners_older_than_the_daemon_are_attributed_from_proc") {
        return;
    }
    let pair = Pair::new("po");
    // Both servers listen before the daemon starts; transfer A is under way before it too.
    let mut servers = [server(&pair, 5711), server(&pair, 5712)];
    std::thread::sleep(std::time::Duration::from_millis(500));
    let mut a = client(&pair, 5711, 9);
    std::thread::sleep(std::time::Duration::from_secs(1));
    let d = support::daemon::Daemon::start("preowner", "");
    // Transfer B connects after the daemon started, to a listener older than it.
    let mut b = client(&pair, 5712, 5);
    std::thread::sleep(std::time::Duration::from_secs(3));
    let m = d.scrape().expect("scrape");
    let _ = (a.wait(), b.wait());
    for s in servers.iter_mut() {
        let _ = s.kill();
        let _ = s.wait();
    }
    // The servers' sending sockets (local port 5711 / 5712): A's predates the daemon, B's was
    // accepted after it by a listener that predates it. Neither has a kernel owner record.
    let comm_of = |port: u16| -> Vec<String> {
        support::daemon::series(&m)
            .into_iter()
            .filter(|l| l.starts_with("tcpvigil_conn_cwnd") && l.contains(&format!("conn=\"{}:{port}>", pair.rcv_ip)))
            .filter_map(|l| l.split("comm=\"").nth(1)?.split('"').next().map(String::from))
            .collect()
    };
    let (old, accepted) = (comm_of(5711), comm_of(5712));
    println!("server sockets' comm: older than the daemon {old:?}, accepted by an older listener {accepted:?}");
    assert!(!old.is_empty() && !accepted.is_empty(), "both transfers' server sockets are exported:\n{m}");
    assert!(old.iter().all(|c| c == "iperf3"), "a socket older than the daemon: {old:?}");
    assert!(accepted.iter().all(|c| c == "iperf3"), "accepted by a listener older than the daemon: {accepted:?}");
}
