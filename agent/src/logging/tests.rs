//! Tests of the log styles: the choice from the environment, and the lines each style writes.
use std::sync::{Arc, Mutex};

use super::*;

fn env(tty: bool, no_color: bool, js: Option<&str>, id: Option<(u64, u64)>) -> Env {
    Env { stderr_is_tty: tty, no_color, journal_stream: js.map(String::from), stderr_id: id }
}

#[test]
fn colour_only_on_a_terminal_without_no_color() {
    assert_eq!(choose(LogFormat::Auto, &env(true, false, None, None)), Style::Text { ansi: true });
    assert_eq!(choose(LogFormat::Auto, &env(false, false, None, None)), Style::Text { ansi: false });
    assert_eq!(choose(LogFormat::Auto, &env(true, true, None, None)), Style::Text { ansi: false });
    assert_eq!(choose(LogFormat::Text, &env(false, false, None, None)), Style::Text { ansi: false });
    assert_eq!(choose(LogFormat::Json, &env(true, false, None, None)), Style::Json);
}

#[test]
fn journal_style_when_journal_stream_names_stderr_only() {
    let id = Some((64769, 12345));
    assert_eq!(choose(LogFormat::Auto, &env(false, false, Some("64769:12345"), id)), Style::Journal);
    // A child whose stderr was redirected inherits JOURNAL_STREAM: it names another file then.
    assert_eq!(choose(LogFormat::Auto, &env(false, false, Some("64769:999"), id)), Style::Text { ansi: false });
    assert_eq!(choose(LogFormat::Auto, &env(false, false, Some("garbage"), id)), Style::Text { ansi: false });
    assert_eq!(choose(LogFormat::Journal, &env(true, false, None, None)), Style::Journal);
    assert_eq!(choose(LogFormat::Json, &env(false, false, Some("64769:12345"), id)), Style::Json);
}

#[test]
fn syslog_priorities_are_the_ones_journald_maps_to_levels() {
    assert_eq!(syslog_priority(&Level::ERROR), 3);
    assert_eq!(syslog_priority(&Level::WARN), 4);
    assert_eq!(syslog_priority(&Level::INFO), 6);
    assert_eq!(syslog_priority(&Level::DEBUG), 7);
}

#[derive(Clone, Default)]
struct Buf(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Buf {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn logged(style: Style) -> String {
    let buf = Buf::default();
    let w = buf.clone();
    let b = tracing_subscriber::fmt().with_writer(move || w.clone()).with_max_level(Level::INFO).fmt_fields(Logfmt);
    let emit = || {
        tracing::info!(dir = "/var/lib/tcpvigil/dumps", n = 3u64, "flight recorder on");
        let variant = "tp_btf/tcp_probe, SACK blocks parsed";
        tracing::info!(need = "sack", variant = %variant, quote = %"a \"b\"", empty = %"", "hook");
        tracing::warn!("ring buffer full");
        tracing::debug!("not shown");
    };
    match style {
        Style::Text { ansi } => tracing::subscriber::with_default(b.with_ansi(ansi).finish(), emit),
        Style::Json => tracing::subscriber::with_default(b.with_ansi(false).event_format(JsonFormat).finish(), emit),
        Style::Journal => {
            tracing::subscriber::with_default(b.with_ansi(false).event_format(JournalFormat).finish(), emit)
        }
    }
    let out = String::from_utf8(buf.0.lock().unwrap().clone()).unwrap();
    out
}

#[test]
fn plain_text_has_no_escape_and_terminal_text_has() {
    let plain = logged(Style::Text { ansi: false });
    assert!(!plain.contains('\u{1b}'), "{plain:?}");
    assert!(plain.contains("flight recorder on") && plain.contains("dir=\"/var/lib/tcpvigil/dumps\""), "{plain}");
    assert!(logged(Style::Text { ansi: true }).contains('\u{1b}'));
}

#[test]
fn journal_lines_start_with_the_priority_and_carry_no_timestamp_or_escape() {
    let out = logged(Style::Journal);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 3, "{out}");
    assert!(lines[0].starts_with("<6>") && lines[0].contains("flight recorder on"), "{out}");
    assert!(lines[0].contains("n=3"), "{out}");
    assert!(lines[2].starts_with("<4>") && lines[2].contains("ring buffer full"), "{out}");
    assert!(!out.contains('\u{1b}') && !out.contains("Z "), "{out}");
}

#[test]
fn json_lines_carry_ts_level_message_and_typed_fields() {
    let out = logged(Style::Json);
    let v: Vec<Value> = out.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(v.len(), 3, "{out}");
    assert_eq!(v[0]["level"], "info");
    assert_eq!(v[0]["message"], "flight recorder on");
    assert_eq!(v[0]["dir"], "/var/lib/tcpvigil/dumps");
    assert_eq!(v[0]["n"], 3);
    assert!(v[0]["ts"].as_str().unwrap().ends_with('Z'));
    assert_eq!(v[1]["variant"], "tp_btf/tcp_probe, SACK blocks parsed");
    assert_eq!(v[2]["level"], "warn");
}

/// Splits a logfmt line the way logfmt parsers do: `key=value` or `key="quoted value"`.
fn parse_logfmt(line: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut it = line.chars().peekable();
    loop {
        while it.peek() == Some(&' ') {
            it.next();
        }
        let key: String = std::iter::from_fn(|| it.next_if(|c| *c != '=' && *c != ' ')).collect();
        if key.is_empty() {
            return out;
        }
        if it.next_if_eq(&'=').is_none() {
            continue;
        }
        let mut val = String::new();
        if it.next_if_eq(&'"').is_some() {
            while let Some(c) = it.next() {
                match c {
                    '\\' => val.push(it.next().unwrap_or('\\')),
                    '"' => break,
                    c => val.push(c),
                }
            }
        } else {
            val = std::iter::from_fn(|| it.next_if(|c| *c != ' ')).collect();
        }
        out.push((key, val));
    }
}

#[test]
fn text_and_journal_fields_with_spaces_or_quotes_are_quoted_for_logfmt_parsers() {
    for style in [Style::Text { ansi: false }, Style::Journal] {
        let out = logged(style);
        let line = out.lines().find(|l| l.contains("hook")).unwrap_or_else(|| panic!("{out}"));
        let kv = parse_logfmt(line);
        let get = |k: &str| kv.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
        assert_eq!(get("variant"), Some("tp_btf/tcp_probe, SACK blocks parsed"), "{line}");
        assert_eq!(get("need"), Some("sack"), "{line}");
        assert_eq!(get("quote"), Some("a \"b\""), "{line}");
        assert_eq!(get("empty"), Some(""), "{line}");
        let rec = out.lines().find(|l| l.contains("flight recorder on")).unwrap();
        let kv = parse_logfmt(rec);
        assert!(kv.contains(&("n".into(), "3".into())), "{rec}");
    }
    assert_eq!(logfmt_value("a=b", false), "\"a=b\"");
    assert_eq!(logfmt_value("plain", false), "plain");
    assert_eq!(logfmt_value("tab\there", false), "\"tab\\there\"");
}
