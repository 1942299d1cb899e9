//! Bad input to the command line: a clear message and exit code 2, before anything is loaded.
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
