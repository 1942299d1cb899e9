//! The daemon's own log on stderr: colour only on a terminal, `<N>` priorities for journald, or JSON.
//!
//! `auto` (the default) writes `<N>`-prefixed lines without timestamps when stderr is the
//! journal (systemd sets JOURNAL_STREAM to stderr's `device:inode`; journald reads the prefix as
//! the priority, SyslogLevelPrefix=yes is its default), plain text with ANSI colour when stderr is
//! a terminal (and NO_COLOR is unset), and plain text without colour otherwise (a file, a pipe).
use std::fmt;

use serde_json::{Map, Value};
use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

/// `--log-format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum LogFormat {
    /// journal when stderr is the journal, text (coloured on a terminal) otherwise.
    #[default]
    Auto,
    /// Human text with a timestamp; colour only on a terminal.
    Text,
    /// One JSON object per line: ts, level, target, message and the event's fields.
    Json,
    /// `<N>` syslog priority prefix, no timestamp (journald adds its own).
    Journal,
}

/// What is written, once the environment is known.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Style {
    Text { ansi: bool },
    Json,
    Journal,
}

/// What the process knows about its stderr.
#[derive(Debug, Clone, Default)]
pub struct Env {
    pub stderr_is_tty: bool,
    /// `NO_COLOR` is set (https://no-color.org).
    pub no_color: bool,
    /// JOURNAL_STREAM as systemd set it, `DEVICE:INODE`.
    pub journal_stream: Option<String>,
    /// stderr's (st_dev, st_ino).
    pub stderr_id: Option<(u64, u64)>,
}

impl Env {
    /// Reads the environment and fstat(2) of stderr.
    pub fn current() -> Env {
        use std::io::IsTerminal;
        use std::os::unix::fs::MetadataExt;
        let stderr_id = std::fs::metadata("/proc/self/fd/2").ok().map(|m| (m.dev(), m.ino()));
        Env {
            stderr_is_tty: std::io::stderr().is_terminal(),
            no_color: std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty()),
            journal_stream: std::env::var("JOURNAL_STREAM").ok(),
            stderr_id,
        }
    }

    /// stderr is the stream systemd connected to the journal (not a descendant's redirect).
    pub fn stderr_is_journal(&self) -> bool {
        let Some(js) = &self.journal_stream else { return false };
        let Some((dev, ino)) = js.split_once(':') else { return false };
        match (dev.parse::<u64>(), ino.parse::<u64>(), self.stderr_id) {
            (Ok(d), Ok(i), Some(id)) => (d, i) == id,
            _ => false,
        }
    }
}

/// The style for `format` in `env`.
pub fn choose(format: LogFormat, env: &Env) -> Style {
    let text = Style::Text { ansi: env.stderr_is_tty && !env.no_color };
    match format {
        LogFormat::Auto if env.stderr_is_journal() => Style::Journal,
        LogFormat::Auto | LogFormat::Text => text,
        LogFormat::Json => Style::Json,
        LogFormat::Journal => Style::Journal,
    }
}

/// syslog(3) priority of a level, as journald reads it from a `<N>` prefix.
pub fn syslog_priority(level: &Level) -> u8 {
    match *level {
        Level::ERROR => 3,
        Level::WARN => 4,
        Level::INFO => 6,
        Level::DEBUG | Level::TRACE => 7,
    }
}

/// Collects an event's fields as JSON values.
#[derive(Default)]
struct Fields(Map<String, Value>);

impl Visit for Fields {
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.0.insert(field.name().into(), Value::String(format!("{value:?}")));
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().into(), Value::String(value.into()));
    }
    fn record_i64(&mut self, field: &Field, value: i64) {
        self.0.insert(field.name().into(), value.into());
    }
    fn record_u64(&mut self, field: &Field, value: u64) {
        self.0.insert(field.name().into(), value.into());
    }
    fn record_f64(&mut self, field: &Field, value: f64) {
        self.0.insert(field.name().into(), value.into());
    }
    fn record_bool(&mut self, field: &Field, value: bool) {
        self.0.insert(field.name().into(), value.into());
    }
}

/// One JSON object per event.
pub struct JsonFormat;

impl<S, N> FormatEvent<S, N> for JsonFormat
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(&self, _ctx: &FmtContext<'_, S, N>, mut w: Writer<'_>, event: &Event<'_>) -> fmt::Result {
        let mut f = Fields::default();
        event.record(&mut f);
        let meta = event.metadata();
        let mut m = Map::new();
        m.insert("ts".into(), Value::String(crate::clock::rfc3339_now_millis()));
        m.insert("level".into(), Value::String(meta.level().as_str().to_ascii_lowercase()));
        m.insert("target".into(), Value::String(meta.target().into()));
        if let Some(msg) = f.0.remove("message") {
            m.insert("message".into(), msg);
        }
        m.extend(f.0);
        writeln!(w, "{}", Value::Object(m))
    }
}

/// `<N>` priority, target, message and `key=value` fields; no timestamp, no colour.
pub struct JournalFormat;

impl<S, N> FormatEvent<S, N> for JournalFormat
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(&self, ctx: &FmtContext<'_, S, N>, mut w: Writer<'_>, event: &Event<'_>) -> fmt::Result {
        let meta = event.metadata();
        write!(w, "<{}>{}: ", syslog_priority(meta.level()), meta.target())?;
        ctx.field_format().format_fields(w.by_ref(), event)?;
        writeln!(w)
    }
}

/// `key=value` fields as logfmt parsers read them: the message first, then each field; a value
/// with a space, a quote, an `=` or nothing in it is quoted (`variant="tp_btf/tcp_probe, SACK
/// blocks parsed"`), strings always are (as tracing writes them).
pub struct Logfmt;

/// Writes one event's fields in logfmt.
struct LogfmtVisitor<'a> {
    w: Writer<'a>,
    first: bool,
    result: fmt::Result,
}

/// `v` as a logfmt value: bare when it needs no quotes, else quoted with `"`, `\` and control
/// characters escaped.
pub fn logfmt_value(v: &str, always_quote: bool) -> String {
    let bare = !always_quote
        && !v.is_empty()
        && !v.chars().any(|c| c.is_whitespace() || c.is_control() || c == '"' || c == '=' || c == '\\');
    if bare {
        return v.to_string();
    }
    let mut out = String::with_capacity(v.len() + 2);
    out.push('"');
    for c in v.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() => out.push_str(&format!("\\u{{{:x}}}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

impl LogfmtVisitor<'_> {
    fn put(&mut self, field: &Field, value: &str, always_quote: bool) {
        if self.result.is_err() {
            return;
        }
        let sep = if self.first { "" } else { " " };
        self.first = false;
        self.result = if field.name() == "message" {
            write!(self.w, "{sep}{value}")
        } else {
            write!(self.w, "{sep}{}={}", field.name(), logfmt_value(value, always_quote))
        };
    }
}

impl Visit for LogfmtVisitor<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.put(field, &format!("{value:?}"), false);
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        let quote = field.name() != "message";
        self.put(field, value, quote);
    }
}

impl<'w> FormatFields<'w> for Logfmt {
    fn format_fields<R: tracing_subscriber::field::RecordFields>(&self, w: Writer<'w>, fields: R) -> fmt::Result {
        let mut v = LogfmtVisitor { w, first: true, result: Ok(()) };
        fields.record(&mut v);
        v.result
    }
}

/// Installs the global subscriber writing to stderr (level filter from TCPVIGIL_LOG, default info).
pub fn init(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("TCPVIGIL_LOG").unwrap_or_else(|_| "info".into());
    let b = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).fmt_fields(Logfmt);
    match choose(format, &Env::current()) {
        Style::Text { ansi } => b.with_ansi(ansi).init(),
        Style::Json => b.with_ansi(false).event_format(JsonFormat).init(),
        Style::Journal => b.with_ansi(false).event_format(JournalFormat).init(),
    }
}

#[cfg(test)]
mod tests;
