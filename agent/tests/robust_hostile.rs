//! Hostile paths and inputs the fuzz does not reach, each found on the release build and each
//! refused or survived before anything is loaded (no root needed): outputs that are symlinks
//! (the events file used to be chmod-ed and appended to through one, as root), a directory
//! others can write to, FIFOs given as config or recording (the open hung), an events path that
//! cannot be opened (`--check-config` said OK, `run` exited 1 printing it twice), a megabyte of
//! bad input (quoted back whole, twice), filters that match nothing (port 0, cookie 0, odd
//! brackets), files another daemon holds, timestamps near the end of the clock (a false "out of
//! order"), a recording stepping back 60 s (`plot` aborted allocating 633 GB) and a gzip that
//! unpacks to 4 M identical lines (`analyze` took 1.57 GB).
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("tvh-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("mkdir");
    std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    d
}

/// The binary under test; TV_BIN=path runs another (e.g. an older build, to see a test fail).
fn bin() -> String {
    std::env::var("TV_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_tcpvigil").to_string())
}

/// Run tcpvigil with `args`; it must finish within `limit`.
fn tv(args: &[&str], limit: Duration) -> Output {
    let t = Instant::now();
    let mut child = Command::new(bin())
        .args(args)
        .env("TCPVIGIL_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn tcpvigil");
    while child.try_wait().expect("wait").is_none() {
        if t.elapsed() > limit {
            let _ = child.kill();
            panic!("tcpvigil {args:?} did not finish within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().expect("output")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Exit 2 with `want` in the message (and no panic).
fn refused(args: &[&str], want: &str) -> String {
    let o = tv(args, Duration::from_secs(20));
    let err = stderr(&o);
    println!(
        "tcpvigil {}: exit {:?}: {}",
        args.join(" ").chars().take(120).collect::<String>(),
        o.status.code(),
        err.trim().chars().take(300).collect::<String>()
    );
    assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
    assert!(!err.contains("panicked"), "{args:?}: {err}");
    assert!(err.contains(want), "{args:?}: message lacks {want:?}: {err}");
    err
}

fn s(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

fn fixture_text(name: &str) -> String {
    let gz =
        std::fs::read(Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures").join(name)).expect("fixture");
    let mut out = String::new();
    std::io::Read::read_to_string(&mut flate2::read::GzDecoder::new(&gz[..]), &mut out).expect("gunzip");
    out
}

#[test]
fn outputs_are_never_opened_through_a_symlink_nor_in_a_directory_others_can_write() {
    let d = tmp("symlink");
    let victim = d.join("victim");
    std::fs::write(&victim, "precious\n").expect("write");
    std::fs::set_permissions(&victim, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    let link = d.join("events.jsonl");
    std::os::unix::fs::symlink(&victim, &link).expect("symlink");
    let dumps = d.join("dumps");
    let listen = ["--listen", "127.0.0.1:0"];
    refused(&[&["run", "--events", s(&link), "--dump-dir", s(&dumps)][..], &listen].concat(), "symbolic link");
    refused(&["run", "--check-config", "--events", s(&link)], "symbolic link");
    // The dump directory as a symlink to a directory.
    let elsewhere = d.join("elsewhere");
    std::fs::create_dir(&elsewhere).expect("mkdir");
    let dlink = d.join("dumplink");
    std::os::unix::fs::symlink(&elsewhere, &dlink).expect("symlink");
    refused(
        &[&["run", "--events", s(&d.join("ok.jsonl")), "--dump-dir", s(&dlink)][..], &listen].concat(),
        "symbolic link",
    );
    // A recording's output as a symlink (record refuses before loading anything).
    refused(&["record", "--out", s(&link), "--duration", "1"], "symbolic link");
    // A directory every user can write to, not sticky.
    let shared = d.join("shared");
    std::fs::create_dir(&shared).expect("mkdir");
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o777)).expect("chmod");
    refused(&["run", "--check-config", "--events", s(&shared.join("events.jsonl"))], "can be written by other users");
    refused(&["run", "--check-config", "--dump-dir", s(&shared.join("dumps"))], "can be written by other users");
    assert_eq!(std::fs::read_to_string(&victim).expect("read"), "precious\n", "the symlink's target was written");
    let mode = std::fs::metadata(&victim).expect("stat").permissions().mode() & 0o777;
    assert_eq!(mode, 0o644, "the symlink's target was chmod-ed");
    assert!(!elsewhere.join(".tcpvigil.lock").exists(), "a file was created through the dump-dir symlink");
    std::fs::remove_dir_all(&d).expect("cleanup");
}

#[test]
fn check_config_fails_on_an_events_path_it_cannot_open_and_run_says_it_once_with_exit_2() {
    let d = tmp("events-path");
    let missing = d.join("no-such-dir/events.jsonl");
    refused(&["run", "--check-config", "--events", s(&missing)], "cannot open events file");
    refused(&["run", "--check-config", "--events", s(&d)], "directory");
    let err = refused(&["run", "--events", s(&missing), "--listen", "127.0.0.1:0"], "cannot open events file");
    assert_eq!(err.matches("No such file or directory").count(), 1, "printed more than once: {err}");
    let dumps_file = d.join("a-file");
    std::fs::write(&dumps_file, "").expect("write");
    refused(&["run", "--check-config", "--dump-dir", s(&dumps_file.join("dumps"))], "dump");
    let o = tv(
        &["run", "--check-config", "--events", s(&d.join("events.jsonl")), "--dump-dir", s(&d.join("dumps"))],
        Duration::from_secs(10),
    );
    assert!(o.status.success(), "a good config was refused: {}", stderr(&o));
    assert!(!d.join("events.jsonl").exists() && !d.join("dumps").exists(), "--check-config created files");
    std::fs::remove_dir_all(&d).expect("cleanup");
}

#[test]
fn a_fifo_given_as_config_web_config_recording_or_findings_is_refused_at_once() {
    let d = tmp("fifo");
    let fifo = d.join("fifo");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).expect("mkfifo");
    let web = d.join("web.toml");
    std::fs::write(&web, format!("[export]\nweb_config = \"{}\"\n", fifo.display())).expect("write");
    let rec = d.join("rec.jsonl");
    std::fs::write(&rec, fixture_text("outage.jsonl.gz")).expect("write");
    refused(&["run", "--check-config", "--config", s(&fifo)], "FIFO");
    refused(&["run", "--check-config", "--config", s(&web)], "FIFO");
    refused(&["analyze", s(&fifo)], "FIFO");
    refused(&["analyze", "--config", s(&fifo), s(&rec)], "FIFO");
    refused(&["plot", s(&fifo), "--out", s(&d.join("out"))], "FIFO");
    let o = tv(&["plot", s(&rec), "--out", s(&d.join("out")), "--findings", s(&fifo)], Duration::from_secs(60));
    assert!(!o.status.success() && stderr(&o).contains("FIFO"), "{}", stderr(&o));
    let o = tv(&["watch", "--conn", ":5201", "--json", "--replay", s(&fifo)], Duration::from_secs(20));
    assert!(!o.status.success() && stderr(&o).contains("FIFO"), "{}", stderr(&o));
    std::fs::remove_dir_all(&d).expect("cleanup");
}

#[test]
fn a_megabyte_of_bad_input_is_quoted_in_a_few_hundred_bytes() {
    let d = tmp("quote");
    // A megabyte, as the config reader takes files of up to 1 MiB.
    let long = "a".repeat(1_000_000);
    let cases: Vec<(&str, String)> = vec![
        ("events.toml", format!("[export]\nevents = \"{long}\n")),
        ("type.toml", format!("[export]\ntop_k = \"{long}\"\n")),
        ("transfer.toml", format!("[[export.transfers]]\nname = \"{long}\"\nfilter = \":1\"\n")),
    ];
    for (name, text) in &cases {
        let p = d.join(name);
        std::fs::write(&p, text).expect("write");
        let err = refused(&["run", "--check-config", "--config", s(&p)], name);
        assert!(err.len() < 2000, "{name}: {} bytes of stderr", err.len());
    }
    let yml = d.join("web.yml");
    std::fs::write(&yml, format!("basic_auth_users:\n  {long}: x\n")).expect("write");
    let toml = d.join("web.toml");
    std::fs::write(&toml, format!("[export]\nweb_config = \"{}\"\n", yml.display())).expect("write");
    let err = refused(&["run", "--check-config", "--config", s(&toml)], "web.yml");
    assert!(err.len() < 2000, "web config: {} bytes of stderr", err.len());
    // (One command-line argument may be at most 128 KiB.)
    let err = refused(
        &["record", "--out", s(&d.join("r.jsonl")), "--conn", &format!("{}x", &long[..100_000])],
        "bad connection filter",
    );
    assert!(err.len() < 2000, "filter: {} bytes of stderr", err.len());
    // A recording line with a megabyte-long event type.
    let mut text = fixture_text("outage.jsonl.gz");
    let second = text.lines().nth(1).expect("an event").to_string();
    let bad = second.replacen("\"type\":\"", &format!("\"type\":\"{}", &long[..900_000]), 1);
    text = text.replacen(&second, &bad, 1);
    let rec = d.join("bad.jsonl");
    std::fs::write(&rec, text).expect("write");
    let err = refused(&["analyze", s(&rec)], "line 2");
    assert!(err.len() < 2000, "recording: {} bytes of stderr", err.len());
    std::fs::remove_dir_all(&d).expect("cleanup");
}

#[test]
fn filters_that_could_match_no_connection_are_refused() {
    let d = tmp("filters");
    let out = d.join("r.jsonl");
    for (f, why) in [
        ("0", "never 0"),
        ("10.0.0.1:0", "port 0"),
        ("10.0.0.1:40000-10.0.0.2:0", "port 0"),
        ("[10.0.0.1]", "IPv6"),
        ("[[fd00::1]]", "IPv6"),
        ("[fd00::1", "pair up"),
    ] {
        refused(&["record", "--out", s(&out), "--conn", f], why);
        let o = tv(&["watch", "--conn", f, "--json", "--duration", "1"], Duration::from_secs(10));
        assert_eq!(o.status.code(), Some(2), "watch --conn {f}: {}", stderr(&o));
    }
    std::fs::remove_dir_all(&d).expect("cleanup");
}

#[test]
fn an_events_file_or_dump_directory_in_use_is_refused_naming_the_holder() {
    let d = tmp("locks");
    let events = d.join("events.jsonl");
    let held = tcpvigil::export::EventsWriter::open(tcpvigil::export::EventsTarget::File(events.clone()), 0)
        .expect("hold the events file");
    let me = format!("(pid {})", std::process::id());
    let listen = ["--listen", "127.0.0.1:0"];
    let err = refused(
        &[&["run", "--events", s(&events), "--dump-dir", s(&d.join("dumps"))][..], &listen].concat(),
        "in use by",
    );
    assert!(err.contains(&me), "{err}");
    drop(held);
    let dumps = d.join("dumps2");
    let lock = tcpvigil::export::recorder::sink::DumpSink::prepare_dir(&dumps).expect("hold the dump directory");
    let err = refused(
        &[&["run", "--events", s(&d.join("e2.jsonl")), "--dump-dir", s(&dumps)][..], &listen].concat(),
        "in use by",
    );
    assert!(err.contains(&me) && err.contains("give each daemon its own"), "{err}");
    // --check-config beside a running daemon checks, it does not compete.
    let o = tv(&["run", "--check-config", "--dump-dir", s(&dumps)], Duration::from_secs(10));
    assert!(o.status.success(), "{}", stderr(&o));
    drop(lock);
    std::fs::remove_dir_all(&d).expect("cleanup");
}

/// The outage fixture with every event's time passed through `f` (line index, time).
fn retimed(f: impl Fn(usize, u64) -> u64) -> String {
    let text = fixture_text("outage.jsonl.gz");
    let mut out = String::new();
    for (i, l) in text.lines().enumerate() {
        if i == 0 {
            out.push_str(l);
        } else {
            let mut v: serde_json::Value = serde_json::from_str(l).expect("event");
            let ts = v["ts_ns"].as_u64().expect("ts");
            v["ts_ns"] = f(i, ts).into();
            out.push_str(&v.to_string());
        }
        out.push('\n');
    }
    out
}

#[test]
fn timestamps_near_the_end_of_the_clock_are_read_or_refused_clearly() {
    let d = tmp("clock");
    let first = fixture_text("outage.jsonl.gz")
        .lines()
        .nth(1)
        .map(|l| serde_json::from_str::<serde_json::Value>(l).expect("event")["ts_ns"].as_u64().expect("ts"));
    let first = first.expect("an event");
    // The last seconds of the kernel's clock (ktime_t is signed 64-bit): read and analysed.
    let top = d.join("top.jsonl");
    let shift = |base: u64| move |_, ts: u64| (ts as i128 - first as i128 + base as i128) as u64;
    std::fs::write(&top, retimed(shift(i64::MAX as u64 - 100_000_000_000))).expect("write");
    let o = tv(&["analyze", s(&top)], Duration::from_secs(60));
    assert!(o.status.success(), "analyze near the end of the clock: {}", stderr(&o));
    let o = tv(&["plot", s(&top), "--out", s(&d.join("out"))], Duration::from_secs(120));
    assert!(o.status.success(), "plot near the end of the clock: {}", stderr(&o));
    // Near u64::MAX: no clock gives that; said so, not "out of order".
    let past = d.join("past.jsonl");
    std::fs::write(&past, retimed(shift(u64::MAX - 100_000_000_000))).expect("write");
    let err = refused(&["analyze", s(&past)], "beyond any kernel clock");
    assert!(!err.contains("out of order"), "{err}");
    std::fs::remove_dir_all(&d).expect("cleanup");
}

#[test]
fn plot_draws_a_recording_whose_events_step_back_as_far_as_the_reader_allows() {
    let d = tmp("backstep");
    let rec = d.join("back.jsonl");
    // Every third event 60 s back (the reader allows 65 s): analyze read it, plot aborted.
    std::fs::write(&rec, retimed(|i, ts| if i % 3 == 0 { ts - 60_000_000_000 } else { ts })).expect("write");
    let o = tv(&["analyze", s(&rec)], Duration::from_secs(60));
    assert!(o.status.success(), "analyze: {}", stderr(&o));
    let out = d.join("out");
    let o = tv(&["plot", s(&rec), "--out", s(&out)], Duration::from_secs(120));
    assert!(o.status.success(), "plot exit {:?}: {}", o.status.code(), stderr(&o));
    let pictures = std::fs::read_dir(&out).map(|r| r.count()).unwrap_or(0);
    assert!(pictures >= 2, "{pictures} pictures");
    std::fs::remove_dir_all(&d).expect("cleanup");
}

/// Peak RSS (VmHWM) of a command, KiB, and its output.
fn peak_rss(args: &[&str], limit: Duration) -> (u64, Output) {
    let t = Instant::now();
    let mut child = Command::new(bin()).args(args).stdout(Stdio::null()).stderr(Stdio::piped()).spawn().expect("spawn");
    let mut peak = 0;
    while child.try_wait().expect("wait").is_none() {
        if let Ok(st) = std::fs::read_to_string(format!("/proc/{}/status", child.id())) {
            if let Some(v) = st.lines().find_map(|l| l.strip_prefix("VmHWM:")) {
                peak = peak.max(v.trim().trim_end_matches(" kB").trim().parse().unwrap_or(0));
            }
        }
        assert!(t.elapsed() < limit, "tcpvigil {args:?} did not finish within {limit:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
    (peak, child.wait_with_output().expect("output"))
}

#[test]
fn a_gzip_of_4m_identical_lines_is_read_to_a_bound_and_the_error_says_what_was_dropped() {
    let d = tmp("bomb");
    let text = fixture_text("outage.jsonl.gz");
    let mut lines = text.lines();
    let (header, event) = (lines.next().expect("header"), lines.nth(10).expect("event"));
    let gz = d.join("bomb.jsonl.gz");
    let head = d.join("head.jsonl");
    std::fs::write(&head, format!("{header}\n")).expect("write");
    let mut sh = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "(cat {h}; yes '{event}' | head -n 4000000) | gzip -1 > {g}",
            h = head.display(),
            g = gz.display()
        ))
        .spawn()
        .expect("sh");
    assert!(sh.wait().expect("gzip").success());
    println!("{} bytes of gzip for 4,000,001 lines", std::fs::metadata(&gz).expect("stat").len());
    let limit = Duration::from_secs(600);
    for args in [
        vec!["analyze", s(&gz)],
        vec!["plot", s(&gz), "--out", s(&d.join("out"))],
        vec!["watch", "--conn", ":5201", "--json", "--replay", s(&gz), "--replay-speed", "1000"],
    ] {
        let t = Instant::now();
        let (kib, o) = peak_rss(&args, limit);
        let err = stderr(&o);
        println!(
            "{}: peak RSS {} MiB in {:.1} s, exit {:?}: {}",
            args[0],
            kib >> 10,
            t.elapsed().as_secs_f64(),
            o.status.code(),
            err.lines().last().unwrap_or("")
        );
        assert!(err.contains("more than 500000 events of connection"), "{}: {err}", args[0]);
        assert!(err.contains("line 500002 and everything after it dropped"), "{}: {err}", args[0]);
        assert!(kib < 600 << 10, "{}: peak RSS {} MiB", args[0], kib >> 10);
        if args[0] != "watch" {
            assert_eq!(o.status.code(), Some(2), "{}: {err}", args[0]);
        }
    }
    let _ = std::io::stdout().flush();
    std::fs::remove_dir_all(&d).expect("cleanup");
}
