//! Running the external tools the lab drives (ip, tc, nft, ip(6)tables, iperf3, ss, nstat) with errors that say what failed.
use crate::error::{LabError, Result};
use std::process::{Child, Command, Stdio};

fn describe(args: &[&str]) -> String {
    args.join(" ")
}

/// Runs `args[0] args[1..]`, returns stdout; a non-zero exit becomes an error carrying stderr.
pub fn run(args: &[&str]) -> Result<String> {
    let (prog, rest) = args.split_first().ok_or_else(|| LabError::Invalid("empty command".into()))?;
    let out = Command::new(prog)
        .args(rest)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| LabError::Command { cmd: describe(args), detail: e.to_string() })?;
    if !out.status.success() {
        return Err(LabError::Command {
            cmd: describe(args),
            detail: format!("{}: {}", out.status, String::from_utf8_lossy(&out.stderr).trim()),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Runs a command inside network namespace `ns` (via `ip netns exec`).
pub fn run_in(ns: &str, args: &[&str]) -> Result<String> {
    let mut full = vec!["ip", "netns", "exec", ns];
    full.extend_from_slice(args);
    run(&full)
}

/// Like [`run_in`] but ignores failure (used during teardown).
pub fn run_in_quiet(ns: &str, args: &[&str]) {
    let _ = run_in(ns, args);
}

/// Builds a `Command` that runs `args` inside `ns`; the caller sets stdio and spawns it.
pub fn command_in(ns: &str, args: &[&str]) -> Command {
    let mut c = Command::new("ip");
    c.args(["netns", "exec", ns]).args(args).stdin(Stdio::null());
    unblock_signals(&mut c);
    c
}

/// The `lab` binary blocks SIGINT and SIGTERM in its threads (a signal thread waits for them) and
/// a child inherits the mask: without this, the SIGINT that asks tcpdump to stop never arrived, it
/// was killed 3 s later and its last buffer of packets was lost (the end of every capture of
/// `lab run` and `lab fuzz`: a black hole's last retransmissions, the transfer's close).
pub fn unblock_signals(c: &mut Command) {
    // SAFETY: between fork and exec only sigprocmask runs, which is async-signal-safe.
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(c, || {
            nix::sys::signal::SigSet::empty().thread_set_mask().map_err(std::io::Error::from)
        });
    }
}

/// Spawns `args` inside `ns` with stdout piped and stderr discarded.
pub fn spawn_in(ns: &str, args: &[&str]) -> Result<Child> {
    command_in(ns, args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| LabError::Command { cmd: format!("ip netns exec {ns} {}", describe(args)), detail: e.to_string() })
}

/// True when `tool` is found on PATH.
pub fn have_tool(tool: &str) -> bool {
    std::env::var_os("PATH").map(|p| std::env::split_paths(&p).any(|d| d.join(tool).is_file())).unwrap_or(false)
}

/// Sends SIGINT to a child (so iperf3/tcpdump flush their output) and waits up to `grace`.
pub fn interrupt_and_wait(child: &mut Child, grace: std::time::Duration) -> Option<std::process::ExitStatus> {
    if let Ok(pid) = i32::try_from(child.id()) {
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGINT);
    }
    let deadline = std::time::Instant::now() + grace;
    while std::time::Instant::now() < deadline {
        if let Ok(Some(st)) = child.try_wait() {
            return Some(st);
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let _ = child.kill();
    child.wait().ok()
}
