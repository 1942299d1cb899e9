//! What `--help` and the man pages say beyond the options: environment, signals, requirements.

/// The environment variables tcpvigil reads: (name, what it does).
pub const ENVIRONMENT: &[(&str, &str)] = &[
    (
        "TCPVIGIL_LOG",
        "Which log lines are written to stderr, as a level (error, warn, info, debug, trace) or \
         per module (e.g. `info,tcpvigil::bpf=debug`). Default: info.",
    ),
    ("NO_COLOR", "Set and not empty: no colour in the log, even on a terminal."),
    (
        "JOURNAL_STREAM",
        "Set by systemd. When it names stderr, `--log-format auto` writes `<N>` syslog priorities \
         for the journal instead of timestamps.",
    ),
];

/// The signals `tcpvigil run` handles: (signal, what it does).
pub const SIGNALS: &[(&str, &str)] = &[
    (
        "SIGHUP",
        "Re-read the configuration file (`systemctl reload tcpvigil`). Detector thresholds, the \
         metrics settings (top_k, series_cap, max_groups, bulk_min_bytes, transfers), the events \
         file, the web config, the listen address and the flight recorder's limits change at once; \
         [bpf] settings and recorder.enabled/recorder.dir keep their running values until a restart, \
         and the log line says which. A file that does not parse or validate is refused with a \
         warning and the running configuration kept. The events file is reopened (log rotation) \
         and the web config re-read (new certificates, users) either way.",
    ),
    ("SIGTERM, SIGINT", "Detach the hooks, drain the ring buffer, write the open flight-recorder dumps and exit 0."),
];

/// The kernel tcpvigil needs.
pub const KERNEL: &str = "Linux 5.15 or later built with BTF (/sys/kernel/btf/vmlinux); tested on 6.1, 6.12 and \
                          6.18; `tcpvigil check` shows which program serves each need on this kernel.";

/// The privileges the hooks need.
pub const PRIVILEGES: &str = "root, or the capabilities CAP_BPF and CAP_PERFMON (load and attach), CAP_NET_ADMIN \
                              (the sockops fallback), CAP_SYS_ADMIN (snapshots of other network namespaces, \
                              program run-time statistics) and CAP_SYS_PTRACE (the processes and namespaces of \
                              other users' sockets). The daemon drops each one once it no longer needs it.";

fn section(title: &str, rows: &[(&str, &str)]) -> String {
    let mut s = format!("{title}:\n");
    for (k, v) in rows {
        s.push_str(&format!("  {k}\n      {v}\n"));
    }
    s
}

/// `tcpvigil --help`'s closing text.
pub fn top() -> String {
    format!("{}\nRequirements:\n  {KERNEL}\n  Privileges: {PRIVILEGES}\n", section("Environment", ENVIRONMENT))
}

/// `tcpvigil run --help`'s closing text.
pub fn run() -> String {
    format!("{}\n{}", section("Signals", SIGNALS), section("Environment", ENVIRONMENT))
}

/// `tcpvigil check --help`'s closing text.
pub fn check() -> String {
    format!("Requirements:\n  {KERNEL}\n  Privileges: {PRIVILEGES}\n")
}

/// Extra man-page sections of the page `name` (tcpvigil, tcpvigil-run, ...): (title, rows).
pub fn man_sections(name: &str) -> Vec<(&'static str, Vec<(&'static str, &'static str)>)> {
    let req = vec![("Kernel", KERNEL), ("Privileges", PRIVILEGES)];
    match name {
        "tcpvigil" => vec![("REQUIREMENTS", req), ("ENVIRONMENT", ENVIRONMENT.to_vec()), ("SIGNALS", SIGNALS.to_vec())],
        "tcpvigil-run" => {
            vec![("SIGNALS", SIGNALS.to_vec()), ("ENVIRONMENT", ENVIRONMENT.to_vec()), ("REQUIREMENTS", req)]
        }
        "tcpvigil-check" | "tcpvigil-record" | "tcpvigil-watch" => {
            vec![("REQUIREMENTS", req), ("ENVIRONMENT", ENVIRONMENT.to_vec())]
        }
        _ => vec![("ENVIRONMENT", ENVIRONMENT.to_vec())],
    }
}
