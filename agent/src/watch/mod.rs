//! `tcpvigil watch --conn FILTER`: one connection (or a group) live in the terminal, or JSON lines.
//!
//! The caller (main) selects the matching connections in the kernel and feeds their events,
//! the detectors' findings and ticks into `run`; `state` folds them, `render` draws, `input` maps
//! keys, `term` owns the terminal. `--replay FILE` (hidden) feeds a recording at real speed instead.
pub mod conn;
pub mod input;
pub mod lines;
pub mod reasons;
pub mod render;
pub mod replay;
pub mod ring;
pub mod state;
pub mod term;

use std::fmt;
use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde::Serialize;
use tokio::sync::mpsc;

use crate::model::Filter;
use input::Action;
use render::{Hud, Scratch};
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
    /// `ss -e` prints it, 0xHEX or decimal), or LADDR:LPORT-RADDR:RPORT.
    #[arg(long, value_name = "FILTER")]
    pub conn: Filter,
    /// Exit after this many seconds.
    #[arg(long, value_name = "S", value_parser = clap::value_parser!(u64).range(1..=604_800))]
    pub duration: Option<u64>,
    /// Print JSON lines (one per event or finding, the model's form) instead of the terminal
    /// view; the default when stdout is not a terminal.
    #[arg(long)]
    pub json: bool,
    /// Show every matching connection side by side, with fairness figures (a parallel transfer).
    #[arg(long)]
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
        WatchOpts {
            conn,
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
        if self.conns.is_empty() {
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

/// Watch until the connection closes, the user quits, `--duration` passes or the input ends.
/// With `--json` or a stdout that is not a terminal, prints JSON lines and no terminal view.
/// Errors (a bad `--replay` file, no terminal) come before the terminal is touched.
pub async fn run(opts: WatchOpts, events: mpsc::Receiver<WatchInput>) -> anyhow::Result<WatchSummary> {
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
    let summary = run_tui(&opts, events).await?;
    print!("{summary}");
    Ok(summary)
}

fn deadline(opts: &WatchOpts) -> tokio::time::Instant {
    let d = opts.duration.map_or(Duration::from_secs(100 * 365 * 86400), Duration::from_secs);
    tokio::time::Instant::now() + d
}

/// JSON lines into `out`: every matching event and finding in the model's serde form.
pub async fn run_json<W: Write>(
    opts: &WatchOpts,
    mut events: mpsc::Receiver<WatchInput>,
    out: W,
) -> anyhow::Result<WatchSummary> {
    let mut st = WatchState::new(opts.conn.clone(), true, opts.window);
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
            WatchInput::Event(e) if opts.conn.matches(&e.conn) => {
                serde_json::to_writer(&mut out, e).map_err(std::io::Error::from).and_then(|_| out.write_all(b"\n"))
            }
            WatchInput::Finding(f) if f.conn.is_none_or(|c| opts.conn.matches(&c)) => {
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
    Ok(WatchSummary {
        ended,
        conns: st.summary(),
        events: st.events,
        findings: st.findings,
        frames: 0,
        fps: 0.0,
        draw_ms_mean: 0.0,
        draw_ms_max: 0.0,
    })
}

/// Frame timing, for the status line and the summary.
#[derive(Debug)]
struct Frames {
    started: Instant,
    count: u64,
    draw_total: Duration,
    draw_max: Duration,
    recent: Instant,
    recent_count: u64,
    fps: f64,
}

impl Frames {
    fn new() -> Self {
        let now = Instant::now();
        Frames {
            started: now,
            count: 0,
            draw_total: Duration::ZERO,
            draw_max: Duration::ZERO,
            recent: now,
            recent_count: 0,
            fps: 0.0,
        }
    }
    fn drew(&mut self, took: Duration) {
        self.count += 1;
        self.recent_count += 1;
        self.draw_total += took;
        self.draw_max = self.draw_max.max(took);
        let since = self.recent.elapsed();
        if since >= Duration::from_secs(1) {
            self.fps = self.recent_count as f64 / since.as_secs_f64();
            self.recent = Instant::now();
            self.recent_count = 0;
        }
    }
}

async fn run_tui(opts: &WatchOpts, mut events: mpsc::Receiver<WatchInput>) -> anyhow::Result<WatchSummary> {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    let mut st = WatchState::new(opts.conn.clone(), opts.all, opts.window);
    let mut guard =
        term::TermGuard::new().map_err(|e| anyhow::anyhow!("cannot set up the terminal: {e}; try --json"))?;
    let stop_keys = Arc::new(AtomicBool::new(false));
    let mut keys = input::spawn_reader(stop_keys.clone());
    let mut frame = tokio::time::interval(Duration::from_micros(1_000_000 / opts.fps.max(1) as u64));
    frame.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let until = tokio::time::sleep_until(deadline(opts));
    tokio::pin!(until);
    let mut scratch = Scratch::default();
    let mut frames = Frames::new();
    let mut input_open = true;
    let mut closing_since: Option<Instant> = None;
    let ended = loop {
        let mut redraw = false;
        tokio::select! {
            biased;
            _ = &mut until => break EndReason::Duration,
            k = keys.recv() => {
                match k {
                    Some(Action::Quit) => break EndReason::Quit,
                    Some(Action::Pause) => st.toggle_pause(),
                    Some(Action::Wider) => st.zoom(true),
                    Some(Action::Narrower) => st.zoom(false),
                    Some(Action::Prev) => st.pick(false),
                    Some(Action::Next) => st.pick(true),
                    Some(Action::Redraw) | None => {}
                }
                redraw = true;
            }
            // Time moves with the feed's ticks ("every record up to T was read"), never with
            // the wall clock: a bin closed before its samples were read would show a dip and
            // then a spike. Those ticks keep the charts moving while a connection is silent.
            _ = frame.tick() => {
                redraw = st.paused_at.is_none() || closing_since.is_some();
            }
            i = events.recv(), if input_open => match i {
                Some(i) => {
                    st.apply(&i);
                    // Drain what is already queued without yielding per item.
                    for _ in 0..4096 {
                        match events.try_recv() {
                            Ok(i) => st.apply(&i),
                            Err(_) => break,
                        }
                    }
                }
                None => {
                    input_open = false;
                    st.source_ended = true;
                }
            },
        }
        if closing_since.is_none() && (st.finished() || !input_open) {
            closing_since = Some(Instant::now());
            redraw = true;
        }
        if redraw {
            let hud = Hud { fps: frames.fps, closing: closing_since.is_some() };
            let t = Instant::now();
            guard.term.draw(|f| render::draw(f, &st, &hud, &mut scratch))?;
            frames.drew(t.elapsed());
        }
        if let Some(since) = closing_since {
            if since.elapsed() >= Duration::from_secs(2) {
                break if st.finished() { EndReason::Closed } else { EndReason::InputEnded };
            }
        }
    };
    stop_keys.store(true, Ordering::Relaxed);
    drop(guard);
    let secs = frames.started.elapsed().as_secs_f64().max(1e-9);
    Ok(WatchSummary {
        ended,
        conns: st.summary(),
        events: st.events,
        findings: st.findings,
        frames: frames.count,
        fps: frames.count as f64 / secs,
        draw_ms_mean: if frames.count == 0 { 0.0 } else { frames.draw_total.as_secs_f64() * 1e3 / frames.count as f64 },
        draw_ms_max: frames.draw_max.as_secs_f64() * 1e3,
    })
}

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_select;
