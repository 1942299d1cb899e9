//! `watch --replay RECORDING`: feeds a recording (and its findings) into `run` at real speed.
use std::fs::File;
use std::io::BufReader;
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
    let mut items: Vec<WatchInput> =
        events.into_iter().map(WatchInput::Event).chain(findings.into_iter().map(WatchInput::Finding)).collect();
    items.sort_by_key(ts);
    let Some(first) = items.first().map(ts) else { return items };
    let last = items.last().map(ts).unwrap_or(first);
    let mut out = Vec::with_capacity(items.len() + ((last - first) / TICK_NS) as usize + 2);
    let mut next_tick = first;
    for it in items {
        while next_tick <= ts(&it) {
            out.push(WatchInput::Tick(next_tick));
            next_tick += TICK_NS;
        }
        out.push(it);
    }
    out.push(WatchInput::Tick(last));
    out
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
    let file = File::open(path).with_context(|| format!("cannot open the recording {}", path.display()))?;
    let rec = recording::read(BufReader::new(file)).with_context(|| format!("{}", path.display()))?;
    let sibling = recording::findings_path_for(path);
    let findings = match findings {
        Some(p) => recording::read_findings(p)?,
        None if sibling.exists() => recording::read_findings(&sibling)?,
        None => Vec::new(),
    };
    let items = schedule(rec.events, findings);
    let (tx, rx) = mpsc::channel(8192);
    tokio::spawn(feed(items, tx, speed));
    Ok(rx)
}

async fn feed(items: Vec<WatchInput>, tx: mpsc::Sender<WatchInput>, speed: f64) {
    let Some(t0) = items.first().map(ts) else { return };
    let start = Instant::now();
    for it in items {
        let due = start + Duration::from_secs_f64((ts(&it) - t0) as f64 / 1e9 / speed);
        if due > Instant::now() + Duration::from_millis(1) {
            tokio::time::sleep_until(due).await;
        }
        if tx.send(it).await.is_err() {
            return;
        }
    }
}
