//! The terminal loop of `watch`: keys, the feed and frames, until the user quits, the watched
//! connection closes (`--conn`), `--duration` passes or the input ends.
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::mpsc;

use super::render::{self, Hud, Scratch};
use super::views::{KeyOutcome, Views};
use super::{deadline, input, term, EndReason, Select, WatchInput, WatchOpts, WatchSummary};

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

pub(super) async fn run(
    opts: &WatchOpts,
    mut events: mpsc::Receiver<WatchInput>,
    mut select: Select,
) -> anyhow::Result<WatchSummary> {
    let mut v = Views::new(opts);
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
                match k.map(|a| v.key(a)) {
                    Some(KeyOutcome::Quit) => break EndReason::Quit,
                    Some(KeyOutcome::Select(c)) => select(c),
                    Some(KeyOutcome::None) | None => {}
                }
                redraw = true;
            }
            // Time moves with the feed's ticks ("every record up to T was read"), never with
            // the wall clock: a bin closed before its samples were read would show a dip and
            // then a spike. Those ticks keep the charts moving while a connection is silent.
            _ = frame.tick() => {
                redraw = !v.paused() || closing_since.is_some();
            }
            i = events.recv(), if input_open => match i {
                Some(i) => {
                    v.apply(&i);
                    // Drain what is already queued without yielding per item.
                    for _ in 0..4096 {
                        match events.try_recv() {
                            Ok(i) => v.apply(&i),
                            Err(_) => break,
                        }
                    }
                }
                None => {
                    input_open = false;
                    v.source_ended();
                }
            },
        }
        if closing_since.is_none() && (v.finished() || !input_open) {
            closing_since = Some(Instant::now());
            redraw = true;
        }
        if redraw {
            let hud = Hud { fps: frames.fps, closing: closing_since.is_some(), back: v.host.is_some() };
            let t = Instant::now();
            guard.term.draw(|f| match (&v.single, &v.host) {
                (Some(st), _) => render::draw(f, st, &hud, &mut scratch),
                (None, Some(h)) => render::draw_host(f, h, &hud),
                (None, None) => {}
            })?;
            frames.drew(t.elapsed());
        }
        if let Some(since) = closing_since {
            if since.elapsed() >= Duration::from_secs(2) {
                break if v.finished() { EndReason::Closed } else { EndReason::InputEnded };
            }
        }
    };
    stop_keys.store(true, Ordering::Relaxed);
    drop(guard);
    let secs = frames.started.elapsed().as_secs_f64().max(1e-9);
    let (conns, events, findings) = match (&v.host, &v.single) {
        (Some(h), _) => (Vec::new(), h.events, h.findings),
        (None, Some(st)) => (st.summary(), st.events, st.findings),
        (None, None) => (Vec::new(), 0, 0),
    };
    Ok(WatchSummary {
        ended,
        conns,
        events,
        findings,
        host_conns: v.host.as_ref().map(|h| h.seen),
        frames: frames.count,
        fps: frames.count as f64 / secs,
        draw_ms_mean: if frames.count == 0 { 0.0 } else { frames.draw_total.as_secs_f64() * 1e3 / frames.count as f64 },
        draw_ms_max: frames.draw_max.as_secs_f64() * 1e3,
    })
}
