//! `tcpvigil run`'s own log as a file or the journal sees it: no ANSI escapes off a terminal,
//! `<N>` priorities when stderr is the journal's stream, JSON with --log-format json, and the
//! start-up line that says where dumps, events and metrics go.
#![allow(clippy::unwrap_used, clippy::expect_used)]
mod support;

use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use support::require_root;

/// Runs the daemon until it is ready, stops it with SIGINT and returns its stderr.
fn daemon_log(tag: &str, extra: &[&str], journal: bool) -> String {
    let base = std::env::temp_dir().join(format!("tvlog-{tag}-{}", std::process::id()));
    let (log, ready, dumps): (PathBuf, PathBuf, PathBuf) =
        (base.with_extension("log"), base.with_extension("ready"), base.with_extension("dumps"));
    let _ = std::fs::remove_file(&ready);
    let file = std::fs::File::create(&log).unwrap();
    let meta = file.metadata().unwrap();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_tcpvigil"));
    cmd.args(["run", "--listen", "127.0.0.1:0", "--ready-file"])
        .arg(&ready)
        .arg("--dump-dir")
        .arg(&dumps)
        .args(extra)
        .env_remove("JOURNAL_STREAM")
        .env_remove("NO_COLOR")
        .env_remove("TCPVIGIL_LOG")
        .stdout(Stdio::null())
        .stderr(file);
    if journal {
        cmd.env("JOURNAL_STREAM", format!("{}:{}", meta.dev(), meta.ino()));
    }
    let mut child = cmd.spawn().unwrap();
    let t = Instant::now();
    while !ready.exists() {
        assert!(t.elapsed() < Duration::from_secs(30), "not ready: {}", std::fs::read_to_string(&log).unwrap());
        assert!(child.try_wait().unwrap().is_none(), "exited: {}", std::fs::read_to_string(&log).unwrap());
        std::thread::sleep(Duration::from_millis(50));
    }
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), nix::sys::signal::Signal::SIGINT).unwrap();
    assert!(child.wait().unwrap().success());
    let text = std::fs::read_to_string(&log).unwrap();
    for p in [&log, &ready] {
        let _ = std::fs::remove_file(p);
    }
    let _ = std::fs::remove_dir_all(&dumps);
    assert!(!text.is_empty(), "the daemon logged nothing");
    text
}

#[test]
fn the_daemons_log_has_no_colour_in_a_file_priorities_for_the_journal_and_json_on_request() {
    if !require_root("logging_live") {
        return;
    }
    // A file: plain text, no escape sequences, the start-up line names the dump directory.
    let text = daemon_log("text", &[], false);
    assert!(!text.contains('\u{1b}'), "ANSI escapes in a file:\n{text}");
    let start = text.lines().find(|l| l.contains("where tcpvigil writes")).unwrap_or_else(|| panic!("{text}"));
    assert!(start.contains("tvlog-text-") && start.contains(".dumps") && start.contains("events=\"off"), "{start}");
    assert!(start.contains("config=\"none (built-in defaults)\""), "{start}");
    // logfmt: a value with a space is quoted, so a parser reads every word after `variant=` as
    // the variant (`variant="tp_btf/tcp_probe, SACK blocks parsed ..."`), not as keys of their own.
    let hooks: Vec<&str> = text.lines().filter(|l| l.contains("variant=")).collect();
    assert!(hooks.len() >= 8, "{text}");
    for l in &hooks {
        let rest = l.split_once("variant=").unwrap().1;
        if !rest.starts_with('"') {
            let after = rest.split_once(' ').map_or("", |(_, r)| r);
            assert!(
                after.is_empty() || after.split(' ').next().unwrap().contains('='),
                "unquoted value with spaces: {l}"
            );
        }
    }
    assert!(hooks.iter().any(|l| l.contains("variant=\"")), "no variant has a space? {hooks:?}");

    // The journal's stream: every line starts with a syslog priority, no timestamp, no escapes.
    let text = daemon_log("journal", &[], true);
    assert!(!text.contains('\u{1b}'), "{text}");
    for l in text.lines() {
        let p = l.strip_prefix('<').and_then(|r| r.split_once('>')).map(|(n, _)| n);
        assert!(matches!(p, Some("3" | "4" | "6" | "7")), "no priority prefix: {l}");
    }
    assert!(text.lines().any(|l| l.starts_with("<6>") && l.contains("where tcpvigil writes")), "{text}");

    // --log-format json: one object per line with level and message.
    let text = daemon_log("json", &["--log-format", "json"], true);
    for l in text.lines() {
        let v: serde_json::Value = serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}"));
        assert!(v["level"].is_string() && v["message"].is_string(), "{l}");
    }
    assert!(text.contains("\"dumps\":"), "{text}");
}

#[test]
fn a_bad_log_format_is_a_usage_error() {
    let out = Command::new(env!("CARGO_BIN_EXE_tcpvigil")).args(["check", "--log-format", "xml"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("xml"));
}
