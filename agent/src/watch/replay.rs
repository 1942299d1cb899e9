//! `watch --replay RECORDING`: feeds a recording (and its findings) into `run` at real speed.
use std::path::Path;
use std::time::Duration;

use anyhow::Context;
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::state::WatchInput;
use crate::model::Finding;
use crate::recording;

/// Recording time between two ticks.
pub const TICK_NS: u64 = 50_000_000;

/// Everything to replay, in time order, with ticks every `TICK_NS` of recording time.
pub fn schedule(events: Vec<crate::model::Event>, findings: Vec<Finding>) -> Vec<WatchInput> {
    Schedule::new(events, findings).collect()
}

/// `schedule` made lazily: ticks are generated as the replay reaches them, so a recording that
/// spans days costs no memory for its ticks (a 370-byte input per 50 ms otherwise).
pub struct Schedule {
    items: std::vec::IntoIter<WatchInput>,
    next: Option<WatchInput>,
    next_tick: u64,
    last: u64,
    done: bool,
}

impl Schedule {
    pub fn new(events: Vec<crate::model::Event>, findings: Vec<Finding>) -> Self {
        let mut items: Vec<WatchInput> =
            events.into_iter().map(WatchInput::Event).chain(findings.into_iter().map(WatchInput::Finding)).collect();
        items.sort_by_key(ts);
        let first = items.first().map(ts);
        let last = items.last().map(ts).unwrap_or(0);
        let mut items = items.into_iter();
        let next = items.next();
        Schedule { items, next, next_tick: first.unwrap_or(0), last, done: first.is_none() }
    }
}

impl Iterator for Schedule {
    type Item = WatchInput;

    fn next(&mut self) -> Option<WatchInput> {
        if self.done {
            return None;
        }
        match self.next.take() {
            Some(it) if self.next_tick <= ts(&it) => {
                let t = self.next_tick;
                self.next_tick = t.saturating_add(TICK_NS);
                self.next = Some(it);
                Some(WatchInput::Tick(t))
            }
            Some(it) => {
                self.next = self.items.next();
                Some(it)
            }
            None => {
                self.done = true;
                Some(WatchInput::Tick(self.last))
            }
        }
    }
}

fn ts(i: &WatchInput) -> u64 {
    match i {
        WatchInput::Event(e) => e.ts_ns,
        WatchInput::Finding(f) => f.ts_ns,
        WatchInput::Tick(t) => *t,
    }
}

/// Read the recording (and findings: `findings`, else the recording's `.findings.jsonl` sibling if
/// present) now, then feed them from a task; the channel closes at the end.
pub fn start(path: &Path, findings: Option<&Path>, speed: f64) -> anyhow::Result<mpsc::Receiver<WatchInput>> {
    let (rec, cut) = recording::open_prefix(path).with_context(|| format!("{}", path.display()))?;
    if let Some(c) = cut {
        eprintln!("tcpvigil: {}: too large to hold in memory: {c}; replaying what was kept", path.display());
    }
    let sibling = recording::findings_path_for(path);
    let findings = match findings {
        Some(p) => recording::read_findings(p)?,
        None if sibling.exists() => recording::read_findings(&sibling)?,
        None => Vec::new(),
    };
    let items = Schedule::new(rec.events, findings);
    let (tx, rx) = mpsc::channel(8192);
    tokio::spawn(feed(items, tx, speed));
    Ok(rx)
}

async fn feed(items: Schedule, tx: mpsc::Sender<WatchInput>, speed: f64) {
    let mut items = items.peekable();
    let Some(t0) = items.peek().map(ts) else { return };
    let start = Instant::now();
    for it in items {
        let due = start + Duration::from_secs_f64(ts(&it).saturating_sub(t0) as f64 / 1e9 / speed);
        if due > Instant::now() + Duration::from_millis(1) {
            tokio::time::sleep_until(due).await;
        }
        if tx.send(it).await.is_err() {
            return;
        }
    }
}
