//! Shell-free plumbing: run commands, kernel release, enter a network namespace, MIB counters.
use std::collections::HashMap;
use std::fs::File;
use std::process::{Command, Stdio};

use anyhow::{bail, Context, Result};
use nix::sched::{setns, CloneFlags};

/// Run a command, fail with its stderr when it exits non-zero; return stdout.
pub fn run(prog: &str, args: &[&str]) -> Result<String> {
    let out = Command::new(prog).args(args).stdin(Stdio::null()).output().with_context(|| format!("running {prog}"))?;
    if !out.status.success() {
        bail!("`{prog} {}` failed ({}): {}", args.join(" "), out.status, String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Like `run`, ignoring the outcome (cleanup).
pub fn run_quiet(prog: &str, args: &[&str]) -> bool {
    Command::new(prog)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
}

/// (major, minor) of the running kernel.
pub fn kernel_version() -> (u32, u32) {
    let r = nix::sys::utsname::uname().map(|u| u.release().to_string_lossy().into_owned()).unwrap_or_default();
    let mut it = r.split(|c: char| !c.is_ascii_digit()).filter_map(|x| x.parse::<u32>().ok());
    (it.next().unwrap_or(0), it.next().unwrap_or(0))
}

pub fn kernel_release() -> String {
    nix::sys::utsname::uname().map(|u| u.release().to_string_lossy().into_owned()).unwrap_or_default()
}

/// Move the calling thread into the named network namespace (/run/netns/NAME).
pub fn enter_netns(name: &str) -> Result<()> {
    let f = File::open(format!("/run/netns/{name}")).with_context(|| format!("opening netns {name}"))?;
    setns(f, CloneFlags::CLONE_NEWNET).with_context(|| format!("setns into {name}"))?;
    Ok(())
}

/// The namespace's inode number: what the agent reports as `conn.netns`.
pub fn netns_inode(name: &str) -> Result<u64> {
    use std::os::unix::fs::MetadataExt;
    Ok(std::fs::metadata(format!("/run/netns/{name}"))?.ino())
}

/// Parse `/proc/net/snmp`-style text: header/value line pairs with a common `Prefix:`.
pub fn parse_mib(text: &str, prefix: &str, out: &mut HashMap<String, i64>) {
    let want = format!("{prefix}:");
    let lines: Vec<&str> = text.lines().collect();
    for w in lines.windows(2) {
        let (h, v) = (w[0], w[1]);
        if !h.starts_with(&want) || !v.starts_with(&want) {
            continue;
        }
        // The header line has names, the value line numbers.
        if h.split_whitespace().nth(1).map(|x| x.parse::<i64>().is_ok()).unwrap_or(true) {
            continue;
        }
        for (k, val) in h.split_whitespace().skip(1).zip(v.split_whitespace().skip(1)) {
            if let Ok(n) = val.parse() {
                out.insert(format!("{prefix}{k}"), n);
            }
        }
    }
}

/// TCP MIB counters of a namespace, read from inside it (a thread setns'd there reads
/// /proc/thread-self/net: /proc/self/net would show the main thread's namespace).
pub fn mib(ns: &str) -> Result<HashMap<String, i64>> {
    let ns = ns.to_string();
    std::thread::spawn(move || -> Result<HashMap<String, i64>> {
        enter_netns(&ns)?;
        let mut out = HashMap::new();
        parse_mib(&std::fs::read_to_string("/proc/thread-self/net/snmp")?, "Tcp", &mut out);
        parse_mib(&std::fs::read_to_string("/proc/thread-self/net/netstat")?, "TcpExt", &mut out);
        Ok(out)
    })
    .join()
    .map_err(|_| anyhow::anyhow!("MIB reader thread panicked"))?
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_mib_reads_named_counters_and_skips_other_tables() {
        let text = "Ip: Forwarding DefaultTTL\nIp: 1 64\nTcp: RtoAlgorithm RetransSegs\nTcp: 1 42\n";
        let mut m = HashMap::new();
        parse_mib(text, "Tcp", &mut m);
        assert_eq!(m.get("TcpRetransSegs"), Some(&42));
        assert_eq!(m.get("TcpRtoAlgorithm"), Some(&1));
        assert!(!m.contains_key("TcpForwarding"));
    }
}
