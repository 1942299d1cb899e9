//! Bad input to the command line: a clear message and exit code 2, before anything is loaded.
#![allow(clippy::unwrap_used, clippy::expect_used)]
use std::process::Command;

fn tcpvigil(args: &[&str]) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_tcpvigil")).args(args).output().expect("run tcpvigil");
    (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stderr).into_owned())
}

#[test]
fn record_rejects_a_nonsense_filter_with_exit_2() {
    let (code, err) = tcpvigil(&["record", "--out", "/tmp/x.jsonl", "--conn", "not-a-filter"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("bad connection filter"), "{err}");
}

#[test]
fn record_rejects_an_output_in_a_missing_directory_with_exit_2() {
    let (code, err) = tcpvigil(&["record", "--out", "/nonexistent-dir/x.jsonl"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("does not exist"), "{err}");
}

#[test]
fn record_rejects_a_zero_duration_with_exit_2() {
    let (code, err) = tcpvigil(&["record", "--out", "/tmp/x.jsonl", "--duration", "0"]);
    assert_eq!(code, 2, "{err}");
}

#[test]
fn analyze_refuses_empty_foreign_and_missing_files_with_exit_2() {
    let dir = std::env::temp_dir();
    let empty = dir.join(format!("tv-empty-{}.jsonl", std::process::id()));
    let foreign = dir.join(format!("tv-foreign-{}.jsonl", std::process::id()));
    std::fs::write(&empty, b"").unwrap();
    std::fs::write(&foreign, b"{\"hello\": 1}\n").unwrap();
    for (f, says) in [(&empty, "empty"), (&foreign, "not a tcpvigil recording")] {
        let (code, err) = tcpvigil(&["analyze", f.to_str().unwrap()]);
        assert_eq!(code, 2, "{err}");
        assert!(err.contains(says), "{err}");
    }
    let (code, err) = tcpvigil(&["analyze", "/nonexistent/rec.jsonl"]);
    assert_eq!(code, 2, "{err}");
    let _ = std::fs::remove_file(empty);
    let _ = std::fs::remove_file(foreign);
}

#[test]
fn analyze_reads_a_gzip_recording_and_refuses_a_truncated_one_with_exit_2() {
    let fixture = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/fixtures/outage.jsonl.gz");
    let out = Command::new(env!("CARGO_BIN_EXE_tcpvigil")).args(["analyze", fixture]).output().expect("run");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains("path_silent"));
    let bytes = std::fs::read(fixture).unwrap();
    let cut = std::env::temp_dir().join(format!("tv-cut-{}.jsonl.gz", std::process::id()));
    std::fs::write(&cut, &bytes[..bytes.len() / 2]).unwrap();
    let (code, err) = tcpvigil(&["analyze", cut.to_str().unwrap()]);
    let _ = std::fs::remove_file(&cut);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("reading the recording"), "{err}");
}

#[test]
fn run_check_config_rejects_an_unknown_key_with_exit_2() {
    let bad = std::env::temp_dir().join(format!("tv-bad-{}.toml", std::process::id()));
    std::fs::write(&bad, "[detect.stop]\nfloor_mss = 3\n").unwrap();
    let (code, err) = tcpvigil(&["run", "--check-config", "--config", bad.to_str().unwrap()]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("floor_mss"), "{err}");
    let _ = std::fs::remove_file(bad);
}

#[test]
fn run_refuses_a_dump_dir_it_cannot_create_with_exit_2_before_loading() {
    let (code, err) = tcpvigil(&["run", "--listen", "127.0.0.1:0", "--dump-dir", "/proc/tcpvigil-no/dumps"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("/proc/tcpvigil-no/dumps") && err.contains("recorder.dir"), "{err}");
    let bad = std::env::temp_dir().join(format!("tv-bad-rec-{}.toml", std::process::id()));
    std::fs::write(&bad, "[recorder]\nmax_disk_mib = 0\n").unwrap();
    let (code, err) = tcpvigil(&["run", "--check-config", "--config", bad.to_str().unwrap()]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("recorder.max_disk_mib"), "{err}");
    let _ = std::fs::remove_file(bad);
}
