//! Process-wide list of live lab namespaces, so Drop, panics and Ctrl-C all remove them; plus the leftover sweep.
use crate::cmd;
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, MutexGuard};

/// Every lab namespace name starts with this.
pub const PREFIX: &str = "tvl";

static LIVE: Mutex<BTreeSet<String>> = Mutex::new(BTreeSet::new());
static RUN_COUNTER: AtomicU32 = AtomicU32::new(0);

fn live() -> MutexGuard<'static, BTreeSet<String>> {
    match LIVE.lock() {
        Ok(g) => g,
        Err(poisoned) => poisoned.into_inner(),
    }
}

/// A fresh, process-unique name prefix: `tvl<pid>-<n>`.
pub fn new_prefix() -> String {
    let n = RUN_COUNTER.fetch_add(1, Ordering::Relaxed);
    format!("{PREFIX}{}-{n}", std::process::id())
}

/// Records a namespace as owned by this process.
pub fn register(ns: &str) {
    live().insert(ns.to_string());
}

/// Kills every process inside `ns`, then deletes it. Errors are ignored (teardown must go on).
pub fn delete_netns(ns: &str) {
    if let Ok(pids) = cmd::run(&["ip", "netns", "pids", ns]) {
        for p in pids.split_whitespace().filter_map(|p| p.parse::<i32>().ok()) {
            let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(p), nix::sys::signal::Signal::SIGKILL);
        }
    }
    let _ = cmd::run(&["ip", "netns", "del", ns]);
    live().remove(ns);
}

/// Deletes every namespace this process still owns (Ctrl-C handler, last resort).
pub fn cleanup_all() {
    let names: Vec<String> = live().iter().cloned().collect();
    for ns in names {
        delete_netns(&ns);
    }
}

/// All lab namespaces currently present (`ip netns list` filtered by prefix).
pub fn list_lab_netns() -> Vec<String> {
    let out = cmd::run(&["ip", "netns", "list"]).unwrap_or_default();
    out.lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|n| n.starts_with(PREFIX))
        .map(str::to_string)
        .collect()
}

/// The pid encoded in a lab namespace name (`tvl<pid>-...`).
pub fn owner_pid(ns: &str) -> Option<i32> {
    let rest = ns.strip_prefix(PREFIX)?;
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

fn pid_alive(pid: i32) -> bool {
    pid == std::process::id() as i32 || nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None).is_ok()
}

/// Removes lab namespaces whose owning process is gone (or all of them with `all`). Returns what was removed.
pub fn sweep_leftovers(all: bool) -> Vec<String> {
    let mut removed = Vec::new();
    for ns in list_lab_netns() {
        let dead = match owner_pid(&ns) {
            Some(pid) => !pid_alive(pid),
            None => true,
        };
        if all || dead {
            delete_netns(&ns);
            removed.push(ns);
        }
    }
    removed
}
