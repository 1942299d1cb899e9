//! Loading without /boot/config-* or /proc/config.gz (a private mount namespace hides them): every
//! program still loads, CONFIG_HZ is measured, and a refusal names libbpf's reason.
mod support;

use std::process::Command;

use support::*;

/// Run `script` in a private mount namespace where /boot is an empty tmpfs and /proc/config.gz
/// (if any) reads empty, so libbpf could find no Kconfig file there.
fn without_kconfig_files(script: &str) -> std::process::Output {
    let empty = std::env::temp_dir().join(format!("tv-empty-{}", std::process::id()));
    std::fs::write(&empty, b"").expect("write an empty file");
    let hide = format!(
        "mount -t tmpfs none /boot && {{ [ ! -e /proc/config.gz ] || mount --bind {} /proc/config.gz; }} && \
         [ -z \"$(ls -A /boot)\" ] && [ ! -s /proc/config.gz ] && {script}",
        empty.display()
    );
    let out = Command::new("unshare")
        .args(["-m", "--propagation", "private", "sh", "-c", &hide])
        .env("TCPVIGIL_LOG", "warn")
        .output()
        .expect("run unshare (util-linux)");
    let _ = std::fs::remove_file(&empty);
    out
}

#[test]
fn loads_every_program_without_kernel_config_files_and_measures_hz() {
    if !require_root("loads_every_program_without_kernel_config_files_and_measures_hz") {
        return;
    }
    let bin = env!("CARGO_BIN_EXE_tcpvigil");
    let out = without_kconfig_files(&format!("{bin} check --json"));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "check failed without config files: {text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_str(&text).expect("check --json prints JSON");
    assert_eq!(v["ok"], true, "{text}");
    let hz = &v["hz"];
    assert!(hz["source"].as_str().unwrap_or("").starts_with("measured"), "HZ was not measured: {hz}");
    // The measurement agrees with the kernel's own config when this host has one.
    if let Ok(cfg) = std::fs::read("/proc/config.gz") {
        let mut s = String::new();
        std::io::Read::read_to_string(&mut flate2::read::GzDecoder::new(&cfg[..]), &mut s).expect("gunzip config");
        let want = tcpvigil::bpf::kconfig::hz_from_config(&s).expect("CONFIG_HZ in /proc/config.gz");
        assert_eq!(hz["hz"].as_u64(), Some(want as u64), "measured HZ differs from the kernel config");
    }
    println!("without config files: CONFIG_HZ={} ({})", hz["hz"], hz["source"]);
}

#[test]
fn daemon_starts_and_serves_without_kernel_config_files() {
    if !require_root("daemon_starts_and_serves_without_kernel_config_files") {
        return;
    }
    let bin = env!("CARGO_BIN_EXE_tcpvigil");
    let ready = std::env::temp_dir().join(format!("tv-nokc-{}.ready", std::process::id()));
    let _ = std::fs::remove_file(&ready);
    // Start, wait for the ready file (probes attached), scrape once, stop with SIGINT.
    let script = format!(
        "{bin} run --listen 127.0.0.1:0 --ready-file {r} & p=$!; for i in $(seq 150); do [ -s {r} ] && break; sleep 0.1; done; \
         [ -s {r} ] || {{ kill $p; echo never ready >&2; exit 1; }}; \
         curl -sf http://$(cat {r})/metrics | grep -c '^tcpvigil_' ; kill -INT $p; wait $p",
        r = ready.display()
    );
    let out = without_kconfig_files(&script);
    let _ = std::fs::remove_file(&ready);
    assert!(
        out.status.success(),
        "the daemon did not run without config files: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let n: u32 = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap_or(0);
    assert!(n > 0, "no tcpvigil_ series scraped");
}
