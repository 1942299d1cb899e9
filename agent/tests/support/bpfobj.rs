//! tcpvigil's BPF objects in the kernel (bpftool) and which of them nothing holds any more: an
//! object no process has an fd of, no live link or program uses, and no pin keeps is left behind.
use std::collections::{BTreeSet, HashSet};
use std::process::Command;

use serde_json::Value;

fn bpftool(what: &[&str]) -> Vec<Value> {
    let out = Command::new("bpftool").arg("-j").args(what).output().expect("run bpftool");
    serde_json::from_slice::<Value>(&out.stdout).ok().and_then(|v| v.as_array().cloned()).unwrap_or_default()
}

/// IDs (prog, map, link) that processes hold fds of, from /proc/*/fdinfo.
fn held() -> (HashSet<u64>, HashSet<u64>, HashSet<u64>) {
    let (mut p, mut m, mut l) = (HashSet::new(), HashSet::new(), HashSet::new());
    for pid in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(fds) = std::fs::read_dir(pid.path().join("fdinfo")) else { continue };
        for fd in fds.flatten() {
            let Ok(text) = std::fs::read_to_string(fd.path()) else { continue };
            let (mut is_link, mut prog, mut link) = (false, None, None);
            for line in text.lines() {
                let mut kv = line.splitn(2, ':');
                let (k, v) = (kv.next().unwrap_or(""), kv.next().unwrap_or("").trim());
                match k {
                    "prog_id" => prog = v.parse().ok(),
                    "map_id" => {
                        if let Ok(id) = v.parse() {
                            m.insert(id);
                        }
                    }
                    "link_id" => {
                        is_link = true;
                        link = v.parse().ok()
                    }
                    _ => {}
                }
            }
            if let Some(id) = link {
                l.insert(id);
            }
            if let Some(id) = prog {
                p.insert(id);
            }
            let _ = is_link;
        }
    }
    (p, m, l)
}

fn is_ours(name: &str) -> bool {
    name.starts_with("tv_") || name.starts_with("tcpvigi")
}

/// tcpvigil's objects ("prog 12 tv_tcp_probe", "map 7 tv_events", "link 3 prog 12") that nothing holds.
pub fn orphans() -> BTreeSet<String> {
    let progs = bpftool(&["prog", "show"]);
    let maps = bpftool(&["map", "show"]);
    let links = bpftool(&["link", "show"]);
    let (held_p, held_m, held_l) = held();
    // What lives: links with an fd, programs with an fd or a live link, maps of live programs.
    let live_links: Vec<&Value> =
        links.iter().filter(|l| l["id"].as_u64().is_some_and(|id| held_l.contains(&id))).collect();
    let mut live_p: HashSet<u64> = held_p.clone();
    live_p.extend(live_links.iter().filter_map(|l| l["prog_id"].as_u64()));
    let mut live_m: HashSet<u64> = held_m.clone();
    for p in &progs {
        if p["id"].as_u64().is_some_and(|id| live_p.contains(&id)) {
            live_m.extend(p["map_ids"].as_array().into_iter().flatten().filter_map(Value::as_u64));
        }
    }
    let name_of = |id: u64| {
        progs.iter().find(|p| p["id"].as_u64() == Some(id)).and_then(|p| p["name"].as_str()).unwrap_or("").to_string()
    };
    let mut out = BTreeSet::new();
    for p in &progs {
        let (id, name) = (p["id"].as_u64().unwrap_or(0), p["name"].as_str().unwrap_or(""));
        if is_ours(name) && !live_p.contains(&id) {
            out.insert(format!("prog {id} {name}"));
        }
    }
    for m in &maps {
        let (id, name) = (m["id"].as_u64().unwrap_or(0), m["name"].as_str().unwrap_or(""));
        if is_ours(name) && !live_m.contains(&id) {
            out.insert(format!("map {id} {name}"));
        }
    }
    for l in &links {
        let (id, prog) = (l["id"].as_u64().unwrap_or(0), l["prog_id"].as_u64().unwrap_or(0));
        if is_ours(&name_of(prog)) && !held_l.contains(&id) {
            out.insert(format!("link {id} prog {prog} {}", name_of(prog)));
        }
    }
    // A sockops program attached to the cgroup root without a link is held by the cgroup alone.
    for c in bpftool(&["cgroup", "show", "/sys/fs/cgroup/unified"]).iter().chain(&bpftool(&[
        "cgroup",
        "show",
        "/sys/fs/cgroup",
    ])) {
        let id = c["id"].as_u64().unwrap_or(0);
        if is_ours(c["name"].as_str().unwrap_or("")) && !live_p.contains(&id) {
            out.insert(format!("cgroup attachment prog {id}"));
        }
    }
    out.extend(pins());
    out
}

/// Anything of ours pinned in bpffs.
fn pins() -> Vec<String> {
    let mut v = Vec::new();
    for e in std::fs::read_dir("/sys/fs/bpf").into_iter().flatten().flatten() {
        let n = e.file_name().to_string_lossy().into_owned();
        if n.contains("tcpvigil") || n.starts_with("tv_") {
            v.push(format!("pin /sys/fs/bpf/{n}"));
        }
    }
    v
}

/// Orphans that appeared since `before`, after giving the kernel up to 3 s to release them
/// (objects of a killed process go away asynchronously).
pub fn new_orphans(before: &BTreeSet<String>) -> BTreeSet<String> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(3);
    loop {
        let now: BTreeSet<String> = orphans().difference(before).cloned().collect();
        if now.is_empty() || std::time::Instant::now() > deadline {
            return now;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}
