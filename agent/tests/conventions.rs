//! What the tools beside tcpvigil lead an operator to expect, without root: shipped texts that
//! speak for themselves, `--help` and man pages with the environment, signals and requirements.
#![allow(clippy::unwrap_used, clippy::expect_used)]
mod support;

use std::path::PathBuf;
use std::process::Command;

fn tcpvigil(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_tcpvigil")).args(args).output().expect("run tcpvigil");
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (out.status.code().unwrap_or(-1), text(&out.stdout), text(&out.stderr))
}

fn tmp(tag: &str) -> PathBuf {
    std::env::temp_dir().join(format!("tv-conv-{tag}-{}", std::process::id()))
}

const SUBCOMMANDS: [&str; 6] = ["check", "record", "run", "analyze", "watch", "plot"];

/// Every man page `gen-docs` writes: (file name, roff text).
fn man_pages(tag: &str) -> Vec<(String, String)> {
    let dir = tmp(&format!("man-{tag}"));
    let _ = std::fs::remove_dir_all(&dir);
    let (code, _, err) = tcpvigil(&["gen-docs", dir.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    let mut v: Vec<(String, String)> = std::fs::read_dir(dir.join("man"))
        .unwrap()
        .map(|e| {
            let p = e.unwrap().path();
            (p.file_name().unwrap().to_string_lossy().into_owned(), std::fs::read_to_string(&p).unwrap())
        })
        .collect();
    v.sort();
    std::fs::remove_dir_all(&dir).unwrap();
    v
}

/// What a user reads that cites the research behind tcpvigil by a number or a file outside the repo.
fn private_citations(text: &str) -> Vec<String> {
    let low = text.to_lowercase();
    let mut hits = Vec::new();
    for pat in ["paper 0", "paper-0", "papers 0", "seeds.md", "seeds/", "(000)", "(001)", "(002)", "(003)", "(004)"] {
        if let Some(i) = low.find(pat) {
            let from = low[..i].char_indices().rev().nth(40).map_or(0, |(j, _)| j);
            hits.push(format!("{pat:?} in …{}…", &text[from..(i + pat.len() + 20).min(text.len())]));
        }
    }
    hits
}

#[test]
fn help_man_pages_metric_help_and_advice_cite_no_paper_numbers_or_seeds() {
    let mut texts: Vec<(String, String)> = Vec::new();
    texts.push(("--help".into(), tcpvigil(&["--help"]).1));
    for s in SUBCOMMANDS {
        texts.push((format!("{s} --help"), tcpvigil(&[s, "--help"]).1));
    }
    texts.extend(man_pages("cite"));
    // Metric help texts, as /metrics serves them.
    let (_m, reg) = tcpvigil::export::Metrics::new_registered(&Default::default());
    let mut exposition = String::new();
    prometheus_client::encoding::text::encode(&mut exposition, &reg).unwrap();
    let mut help: String = exposition.lines().filter(|l| l.starts_with("# HELP")).map(|l| format!("{l}\n")).collect();
    // Families without a series yet are not in the exposition: their declarations are.
    use tcpvigil::export::families::{ConnFamilies, FindingFamilies, HealthFamilies};
    for (name, h) in FindingFamilies::HELP.iter().chain(ConnFamilies::HELP).chain(HealthFamilies::HELP) {
        help.push_str(&format!("{name}: {h}\n"));
    }
    assert!(help.lines().count() > 60, "{help}");
    texts.push(("metric help".into(), help));
    // Findings' advice and remedies, from every recorded fixture.
    let cfg = tmp("lab.toml");
    std::fs::write(&cfg, support::judge::LAB_CONFIG).unwrap();
    let fixtures = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures");
    let mut advice = 0;
    for e in std::fs::read_dir(&fixtures).unwrap() {
        let p = e.unwrap().path();
        if !p.to_string_lossy().ends_with(".jsonl.gz") {
            continue;
        }
        let (code, out, err) = tcpvigil(&["analyze", "--all", "--config", cfg.to_str().unwrap(), p.to_str().unwrap()]);
        assert_eq!(code, 0, "{err}");
        advice += out.matches("\"advice\"").count() + out.matches("\"remedy\"").count();
        texts.push((format!("analyze {}", p.display()), format!("{out}{err}")));
    }
    std::fs::remove_file(&cfg).unwrap();
    assert!(advice >= 3, "the fixtures gave only {advice} advice/remedy texts");
    let bad: Vec<String> = texts
        .iter()
        .flat_map(|(what, t)| private_citations(t).into_iter().map(move |h| format!("{what}: {h}")))
        .collect();
    assert!(bad.is_empty(), "shipped texts cite papers by number or files outside the repo:\n{}", bad.join("\n"));
}

#[test]
fn help_and_man_pages_name_the_log_variable_the_signals_and_the_minimum_kernel() {
    let (_, top, _) = tcpvigil(&["--help"]);
    assert!(top.contains("TCPVIGIL_LOG") && top.contains("Linux 5.15") && top.contains("BTF"), "{top}");
    let (_, run, _) = tcpvigil(&["run", "--help"]);
    for w in ["SIGHUP", "SIGTERM", "TCPVIGIL_LOG", "systemctl reload"] {
        assert!(run.contains(w), "run --help lacks {w}:\n{run}");
    }
    let pages = man_pages("sections");
    let page = |n: &str| pages.iter().find(|(f, _)| f == n).map(|(_, t)| t.as_str()).unwrap_or_else(|| panic!("{n}"));
    let top = page("tcpvigil.1");
    for s in [".SH REQUIREMENTS", ".SH ENVIRONMENT", ".SH SIGNALS", "TCPVIGIL_LOG", "SIGHUP", "Linux 5.15", "6.18"] {
        assert!(top.contains(s), "tcpvigil.1 lacks {s}");
    }
    assert!(top.contains("tcpvigil check"), "tcpvigil.1 does not point to `tcpvigil check`");
    let run = page("tcpvigil-run.1");
    assert!(run.contains(".SH SIGNALS") && run.contains("SIGHUP") && run.contains(".SH ENVIRONMENT"), "{run}");
    assert!(!pages.iter().any(|(_, t)| t.contains(".SH EXTRA")), "the extra help is repeated as EXTRA");
}

#[test]
fn listen_accepts_port_only_host_names_and_bracketed_v6_as_exporters_do() {
    let dumps = tmp("listen-dumps");
    let d = dumps.to_str().unwrap();
    for l in [":9977", "localhost:9977", "[::]:9977", "127.0.0.1:9977", "[::1]:0"] {
        let (code, out, err) = tcpvigil(&["run", "--check-config", "--dump-dir", d, "--listen", l]);
        assert_eq!(code, 0, "--listen {l}: {err}");
        assert!(out.contains("configuration OK"), "{out}");
        let cfg = tmp("listen.toml");
        std::fs::write(&cfg, format!("[export]\nlisten = \"{l}\"\n")).unwrap();
        let (code, _, err) = tcpvigil(&["run", "--check-config", "--dump-dir", d, "--config", cfg.to_str().unwrap()]);
        assert_eq!(code, 0, "export.listen = {l}: {err}");
        std::fs::remove_file(&cfg).unwrap();
    }
    for bad in ["9977", "fd00::1:9977", "host name:1"] {
        let (code, _, err) = tcpvigil(&["run", "--check-config", "--dump-dir", d, "--listen", bad]);
        assert_eq!(code, 2, "--listen {bad}: {err}");
        assert!(err.contains("bad listen address"), "{err}");
    }
    let _ = std::fs::remove_dir_all(&dumps);
}

/// The outage fixture's connection: cookie 4887 = 0x1317.
fn outage() -> String {
    concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/fixtures/outage.jsonl.gz").to_string()
}

#[test]
fn cookies_read_as_ss_prints_them_and_every_conn_filter_takes_sk_hex_0x_and_decimal() {
    // analyze's summary names the connection as `ss -e` does; the JSON keeps the number.
    let (code, out, err) = tcpvigil(&["analyze", &outage()]);
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("sk:1317 ") && !err.contains("4887"), "{err}");
    assert!(out.contains("\"cookie\":4887"), "{out}");
    // watch --conn (replayed, JSON lines) selects the same connection by each form.
    for form in ["sk:1317", "0x1317", "4887", "SK:1317"] {
        let (code, out, err) =
            tcpvigil(&["watch", "--json", "--conn", form, "--replay", &outage(), "--replay-speed", "1000"]);
        assert_eq!(code, 0, "--conn {form}: {err}");
        let n = out.lines().filter(|l| l.contains("\"cookie\":4887")).count();
        assert!(n > 100, "--conn {form} selected {n} events");
    }
    // record --conn takes them too (the filter is checked before the output path).
    for form in ["sk:1f3a", "0x1f3a"] {
        let (code, _, err) = tcpvigil(&["record", "--out", "/nonexistent-dir/x.jsonl", "--conn", form]);
        assert_eq!(code, 2, "{err}");
        assert!(err.contains("does not exist") && !err.contains("bad connection filter"), "{form}: {err}");
    }
    let (code, _, err) = tcpvigil(&["record", "--out", "/tmp/x.jsonl", "--conn", "sk:xyz"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("sk:HEX"), "{err}");
}
