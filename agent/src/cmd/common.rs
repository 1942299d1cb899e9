//! Helpers shared by subcommands: input validation, clocks, privileges, process limits, Ctrl-C.
use std::path::Path;
use std::process::ExitCode;

use tcpvigil::clock::mono_to_unix_ns;
use tcpvigil::model::Filter;
use tcpvigil::recording::{Header, Recording, FORMAT_VERSION};

/// A usage error: printed, exit code 2, nothing loaded.
pub fn usage(msg: impl std::fmt::Display) -> ExitCode {
    eprintln!("tcpvigil: {msg}");
    ExitCode::from(2)
}

pub fn parse_filters(v: &[String]) -> Result<Vec<Filter>, String> {
    v.iter().map(|s| s.parse::<Filter>().map_err(|e| e.to_string())).collect()
}

/// An output path we can create: its directory exists and it is not a directory itself.
pub fn check_out_path(p: &Path) -> Result<(), String> {
    if p.as_os_str().is_empty() {
        return Err("the output path is empty".into());
    }
    if p.is_dir() {
        return Err(format!("{} is a directory; give a file name", p.display()));
    }
    let dir = p.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    if !dir.is_dir() {
        return Err(format!("the directory {} does not exist", dir.display()));
    }
    Ok(())
}

/// A recording named on the command line; a file that cannot be opened or is not a recording is
/// a usage error (printed, exit code 2). A cut-off last line is said and ignored.
pub fn read_recording(path: &Path) -> Result<(Recording, Option<tcpvigil::recording::Cut>), ExitCode> {
    // A regular file only (a FIFO would hang the reader); one too large to hold is read up to the
    // cut, which the caller reports last (exit 2).
    let (rec, cut) = tcpvigil::recording::open_prefix(path).map_err(|e| usage(format!("{}: {e}", path.display())))?;
    if rec.truncated_tail {
        eprintln!("tcpvigil: the last line of {} was cut off (recorder stopped mid-write); ignored", path.display());
    }
    Ok((rec, cut))
}

/// The header of a recording made on this host now (by `record`, or the daemon's dumps).
pub fn recording_header(variants: &tcpvigil::bpf::variants::Variants, filters: Vec<String>) -> Header {
    Header {
        tcpvigil_recording: FORMAT_VERSION,
        agent_version: env!("CARGO_PKG_VERSION").into(),
        kernel: kernel_release(),
        hostname: hostname(),
        mono_to_unix_ns: mono_to_unix_ns(),
        variants: variants.pairs(),
        filters,
    }
}

pub fn kernel_release() -> String {
    nix::sys::utsname::uname().map(|u| u.release().to_string_lossy().into_owned()).unwrap_or_default()
}

pub fn hostname() -> String {
    tcpvigil::export::events::host_name()
}

/// Refuse early, naming what is missing and how to grant it, when BPF cannot be loaded at all;
/// warn about the capabilities whose absence leaves part of the agent out.
pub fn require_privileges() -> Result<(), String> {
    // By the effective set, for root too: root in a container may hold only some capabilities.
    let m = tcpvigil::caps::missing();
    if !m.required.is_empty() {
        let who = if nix::unistd::geteuid().is_root() { "root without them" } else { "not root" };
        let each: Vec<String> = m.required.iter().map(|c| format!("{} to {}", c.name(), c.why())).collect();
        return Err(format!(
            "missing {} ({who}): tcpvigil needs {}. To grant them: {}",
            tcpvigil::caps::names(&m.required),
            each.join(" and "),
            tcpvigil::caps::FIX
        ));
    }
    for c in &m.optional {
        tracing::warn!("{} is missing: no {}; {}", c.name(), c.why(), tcpvigil::caps::FIX);
    }
    if !Path::new("/sys/kernel/btf/vmlinux").exists() {
        return Err(
            "this kernel has no BTF (/sys/kernel/btf/vmlinux); tcpvigil's CO-RE programs need CONFIG_DEBUG_INFO_BTF=y"
                .into(),
        );
    }
    Ok(())
}

/// A tokio signal future that resolves on Ctrl-C or SIGTERM.
pub async fn interrupted() {
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term => {}
    }
}

/// Before loading (after `require_privileges`): each hook need's variant by trial load. `Err` is
/// the exit code after the message was printed (1: an essential need has no variant).
pub fn prepare_bpf() -> Result<tcpvigil::bpf::variants::Variants, ExitCode> {
    tcpvigil::bpf::variants::capture_libbpf_log();
    let variants = tcpvigil::bpf::variants::choose();
    if let Some(m) = variants.missing_essential().first() {
        eprintln!("tcpvigil: no working variant for `{}` ({}); the kernel refused:", m.need, m.what);
        for (cand, why) in &m.refused {
            eprintln!("tcpvigil:   {cand}: {why} ({})", super::refusal::likely_reason(cand, why));
        }
        eprintln!("tcpvigil: run `tcpvigil check` for every need");
        return Err(ExitCode::from(1));
    }
    Ok(variants)
}

/// Raise the soft open-file limit towards `want` (within the hard limit): the web endpoint alone
/// may hold MAX_CONNS sockets, beyond the usual soft limit of 1024 with the daemon's own files.
pub fn raise_nofile(want: u64) {
    let mut l = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit/setrlimit with a pointer to a live, initialised rlimit.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut l) == 0 && l.rlim_cur < want {
            l.rlim_cur = want.min(l.rlim_max);
            if libc::setrlimit(libc::RLIMIT_NOFILE, &l) != 0 {
                tracing::warn!("could not raise the open-file limit to {want}");
            }
        }
    }
}
