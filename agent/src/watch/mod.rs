//! `tcpvigil watch --conn FILTER`: one connection (or a group) live in the terminal, or JSON lines;
//! `tcpvigil watch`: the host view, every bulk connection, and one of them opened with Enter.
//!
//! The caller (main) selects the matching connections in the kernel and feeds their events,
//! the detectors' findings and ticks into `run`; `state` folds them (`host` for the host view),
//! `render` draws, `input` maps keys, `term` owns the terminal. `--replay FILE` (hidden) feeds a
//! recording at real speed instead.
pub mod conn;
pub mod host;
pub mod input;
pub mod lines;
pub mod reasons;
pub mod render;
pub mod replay;
pub mod ring;
pub mod state;
pub mod term;
pub mod text;
mod tui;
pub mod views;

use std::fmt;
use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::time::Duration;

use serde::Serialize;
use tokio::sync::mpsc;

use crate::model::Filter;
pub use state::{ConnSummary, WatchInput, WatchState};

fn parse_speed(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if (0.01..=1000.0).contains(&v) => Ok(v),
        _ => Err("the replay speed is a factor from 0.01 to 1000".into()),
    }
}

/// Options of `tcpvigil watch`.
#[derive(Debug, Clone, clap::Args)]
pub struct WatchOpts {
    /// Which connections: ADDR:PORT, :PORT, ADDR, [V6ADDR]:PORT, a socket cookie (sk:HEX as
    /// `ss -e` prints it, 0xHEX or decimal), or LADDR:LPORT-RADDR:RPORT. Without it: the host
    /// view, every bulk connection by goodput (Enter opens one, Esc goes back).
    #[arg(long, value_name = "FILTER")]
    pub conn: Option<Filter>,
    /// Exit after this many seconds.
    #[arg(long, value_name = "S", value_parser = clap::value_parser!(u64).range(1..=604_800))]
    pub duration: Option<u64>,
    /// Print JSON lines instead of the terminal view (the default when stdout is not a terminal):
    /// with --conn one per event or finding (the model's form); without, the host view once a
    /// second (`{"ts_ns", "conns": [...]}`, busiest first).
    #[arg(long)]
    pub json: bool,
    /// Show every matching connection side by side, with fairness figures (a parallel transfer).
    #[arg(long, requires = "conn")]
    pub all: bool,
    /// Time window of the charts, seconds (+/- change it).
    #[arg(long, value_name = "S", default_value_t = 30, value_parser = clap::value_parser!(u32).range(1..=120))]
    pub window: u32,
    /// Screen refreshes per second.
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..=60))]
    pub fps: u32,
    /// Feed this recording instead of the kernel, at real speed (demos and tests).
    #[arg(long, value_name = "RECORDING", hide = true)]
    pub replay: Option<PathBuf>,
    /// Findings (JSON lines) to replay with the recording; default: RECORDING's `.findings.jsonl`.
    #[arg(long, value_name = "FILE", hide = true, requires = "replay")]
    pub replay_findings: Option<PathBuf>,
    /// Replay speed factor.
    #[arg(long, default_value_t = 1.0, hide = true, value_parser = parse_speed)]
    pub replay_speed: f64,
}

impl WatchOpts {
    /// Options with defaults for `conn`, as the command line would give them.
    pub fn new(conn: Filter) -> Self {
        WatchOpts { conn: Some(conn), ..WatchOpts::host() }
    }

    /// Options of the host view (no `--conn`), with defaults.
    pub fn host() -> Self {
        WatchOpts {
            conn: None,
            duration: None,
            json: false,
            all: false,
            window: 30,
            fps: 20,
            replay: None,
            replay_findings: None,
            replay_speed: 1.0,
        }
    }
}

/// Why the view ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum EndReason {
    /// The watched connection (with --all, every one) closed.
    Closed,
    /// The user pressed q, Esc or Ctrl-C.
    Quit,
    /// --duration elapsed.
    Duration,
    /// The input channel closed (replay over, daemon gone, stdout closed).
    InputEnded,
}

/// What `run` returns (and prints after the terminal view).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WatchSummary {
    pub ended: EndReason,
    pub conns: Vec<ConnSummary>,
    pub events: u64,
    pub findings: u64,
    /// The host view: how many connections moved data while it was open.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host_conns: Option<u64>,
    /// Frames drawn (0 in JSON mode).
    pub frames: u64,
    /// Frames per second achieved over the run.
    pub fps: f64,
    /// Mean and worst time to build and flush one frame, milliseconds.
    pub draw_ms_mean: f64,
    pub draw_ms_max: f64,
}

impl fmt::Display for WatchSummary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use crate::model::units::{human_bps, human_bytes};
        if let Some(n) = self.host_conns {
            writeln!(f, "{n} connections moved data on this host ({} findings)", self.findings)?;
        } else if self.conns.is_empty() {
            writeln!(f, "no matching connection was seen ({} findings)", self.findings)?;
        }
        for c in &self.conns {
            let comm = c.comm.as_deref().unwrap_or("?");
            let state = if c.closed { "closed" } else { "still open" };
            writeln!(f, "{} ({comm}, {}, {state})", c.tuple, crate::model::Sk(c.cookie))?;
            writeln!(
                f,
                "  {} in {:.1} s: mean goodput {}, {:.0} % of the max delivery rate {}",
                human_bytes(c.bytes_acked),
                c.watched_s,
                human_bps(c.mean_goodput_bps),
                100.0 * c.efficiency,
                human_bps(c.max_delivery_rate_bps)
            )?;
            write!(
                f,
                "  retransmitted {} seg, {} lost again, {} RTOs, {} stops",
                c.retrans_segs, c.lost_retrans, c.rtos, c.stops
            )?;
            if !c.stop_causes.is_empty() {
                let causes: Vec<&str> = c.stop_causes.iter().map(|x| x.as_str()).collect();
                write!(f, " ({})", causes.join(", "))?;
            }
            writeln!(f)?;
        }
        if self.frames > 0 {
            writeln!(
                f,
                "{} frames, {:.1} frames/s, {:.2} ms per frame (worst {:.2} ms)",
                self.frames, self.fps, self.draw_ms_mean, self.draw_ms_max
            )?;
        }
        Ok(())
    }
}

/// Told which connection the host view opened (None: back to the list), so that the feed can
/// select it for per-ACK samples.
pub type Select = Box<dyn FnMut(Option<u64>) + Send>;

/// Watch until the connection closes, the user quits, `--duration` passes or the input ends.
/// With `--json` or a stdout that is not a terminal, prints JSON lines and no terminal view.
/// Errors (a bad `--replay` file, no terminal) come before the terminal is touched.
pub async fn run(opts: WatchOpts, events: mpsc::Receiver<WatchInput>, select: Select) -> anyhow::Result<WatchSummary> {
    let events = match &opts.replay {
        Some(p) => replay::start(p, opts.replay_findings.as_deref(), opts.replay_speed)?,
        None => events,
    };
    if opts.json || !std::io::stdout().is_terminal() {
        // Never blocked by a reader that does not keep up: lines are dropped and counted instead.
        let mut out = lines::NonBlockingLines::new(std::io::stdout(), 8192)?;
        let s = run_json(&opts, events, &mut out).await;
        let (written, dropped) = out.finish(Duration::from_secs(2));
        if dropped > 0 {
            eprintln!(
                "tcpvigil: {dropped} of {} JSON lines dropped: stdout was not read fast enough",
                written + dropped
            );
        }
        return s;
    }
    let summary = tui::run(&opts, events, select).await?;
    print!("{summary}");
    Ok(summary)
}

pub(crate) fn deadline(opts: &WatchOpts) -> tokio::time::Instant {
    let d = opts.duration.map_or(Duration::from_secs(100 * 365 * 86400), Duration::from_secs);
    tokio::time::Instant::now() + d
}

/// JSON lines into `out`: every matching event and finding in the model's serde form; without a
/// filter, the host view once a second of the feed's time.
pub async fn run_json<W: Write>(
    opts: &WatchOpts,
    events: mpsc::Receiver<WatchInput>,
    out: W,
) -> anyhow::Result<WatchSummary> {
    match &opts.conn {
        Some(filter) => run_json_conn(opts, filter, events, out).await,
        None => run_json_host(opts, events, out).await,
    }
}

fn summary(ended: EndReason, conns: Vec<ConnSummary>, events: u64, findings: u64) -> WatchSummary {
    WatchSummary {
        ended,
        conns,
        events,
        findings,
        host_conns: None,
        frames: 0,
        fps: 0.0,
        draw_ms_mean: 0.0,
        draw_ms_max: 0.0,
    }
}

async fn run_json_host<W: Write>(
    opts: &WatchOpts,
    mut events: mpsc::Receiver<WatchInput>,
    out: W,
) -> anyhow::Result<WatchSummary> {
    let mut hs = host::HostState::default();
    let mut out = std::io::BufWriter::new(out);
    let until = tokio::time::sleep_until(deadline(opts));
    tokio::pin!(until);
    let ctrl_c = tokio::signal::ctrl_c();
    tokio::pin!(ctrl_c);
    let mut next_line = 0;
    let ended = loop {
        let input = tokio::select! {
            _ = &mut until => break EndReason::Duration,
            _ = &mut ctrl_c => break EndReason::Quit,
            i = events.recv() => i,
        };
        let Some(input) = input else { break EndReason::InputEnded };
        hs.apply(&input);
        let WatchInput::Tick(t) = input else { continue };
        if next_line == 0 {
            next_line = t + 1_000_000_000;
        }
        if t < next_line {
            continue;
        }
        next_line += 1_000_000_000 * ((t - next_line) / 1_000_000_000 + 1);
        let written = serde_json::to_writer(&mut out, &hs.line())
            .map_err(std::io::Error::from)
            .and_then(|_| out.write_all(b"\n"))
            .and_then(|_| out.flush());
        if written.is_err() {
            break EndReason::InputEnded; // stdout closed
        }
    };
    let _ = out.flush();
    Ok(WatchSummary { host_conns: Some(hs.seen), ..summary(ended, Vec::new(), hs.events, hs.findings) })
}

async fn run_json_conn<W: Write>(
    opts: &WatchOpts,
    filter: &Filter,
    mut events: mpsc::Receiver<WatchInput>,
    out: W,
) -> anyhow::Result<WatchSummary> {
    let mut st = WatchState::new(filter.clone(), true, opts.window);
    let mut out = std::io::BufWriter::new(out);
    let until = tokio::time::sleep_until(deadline(opts));
    tokio::pin!(until);
    let ctrl_c = tokio::signal::ctrl_c();
    tokio::pin!(ctrl_c);
    let ended = loop {
        let input = tokio::select! {
            _ = &mut until => break EndReason::Duration,
            _ = &mut ctrl_c => break EndReason::Quit,
            i = events.recv() => i,
        };
        let Some(input) = input else { break EndReason::InputEnded };
        let written = match &input {
            WatchInput::Event(e) if filter.matches(&e.conn) => {
                serde_json::to_writer(&mut out, e).map_err(std::io::Error::from).and_then(|_| out.write_all(b"\n"))
            }
            WatchInput::Finding(f) if f.conn.is_none_or(|c| filter.matches(&c)) => {
                serde_json::to_writer(&mut out, f).map_err(std::io::Error::from).and_then(|_| out.write_all(b"\n"))
            }
            _ => Ok(()),
        };
        st.apply(&input);
        let flushed = if events.is_empty() { out.flush() } else { Ok(()) };
        if written.is_err() || flushed.is_err() {
            break EndReason::InputEnded; // stdout closed (e.g. `| head`)
        }
        if st.finished() {
            break EndReason::Closed;
        }
    };
    let _ = out.flush();
    Ok(summary(ended, st.summary(), st.events, st.findings))
}

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_host;
#[cfg(test)]
mod tests_select;
