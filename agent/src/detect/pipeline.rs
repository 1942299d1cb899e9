//! The one pipeline: kernel events and time in; the connection table and findings out. The daemon,
//! `watch`, `analyze` and the tests all drive this type, so the live and the offline paths cannot
//! drift apart.
use std::collections::HashSet;

use super::{DetectConfig, Detectors};
use crate::clock::next_tick;
use crate::model::{Body, ConnId, ConnTable, Event, Finding, Process};

/// How long a replay goes on ticking after the last recorded event: findings still in progress
/// are reported as such.
const TAIL_NS: u64 = 500_000_000;

/// What drives the pipeline.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Input<'a> {
    /// One kernel event.
    Event(&'a Event),
    /// Every kernel event up to this CLOCK_MONOTONIC time was read: time passes for the detectors.
    Time(u64),
}

/// The process that owns a socket older than the daemon (its connect or listen came before the
/// programs were attached), looked up once for a connection new to the table.
pub type ProcessLookup = Box<dyn FnMut(&ConnId) -> Option<Process>>;

pub struct Pipeline {
    table: ConnTable,
    detectors: Detectors,
    lookup: Option<ProcessLookup>,
    found: Vec<Finding>,
}

impl Pipeline {
    /// `exact_lost_retrans`: lost retransmissions come from the exact (fentry) variant.
    pub fn new(cfg: &DetectConfig, exact_lost_retrans: bool) -> Self {
        Pipeline {
            table: ConnTable::new(exact_lost_retrans),
            detectors: Detectors::new(cfg),
            lookup: None,
            found: Vec::new(),
        }
    }

    /// Ask `lookup` for the process of each connection new to the table (a kernel event naming
    /// its process, if one follows, wins).
    pub fn with_process_lookup(mut self, lookup: ProcessLookup) -> Self {
        self.lookup = Some(lookup);
        self
    }

    /// New detector settings from the next input on (the daemon's reload); the table and what
    /// the detectors have in progress stay.
    pub fn reconfigure(&mut self, cfg: &DetectConfig) {
        self.detectors.reconfigure(cfg);
    }

    /// One input; `each` sees every kernel event once the table holds it.
    pub fn feed(&mut self, input: Input<'_>, each: impl FnMut(&Event)) {
        match input {
            Input::Event(ev) => self.event(ev, each),
            Input::Time(t) => self.tick(t),
        }
    }

    /// One kernel event: folded into the table, then shown to the detectors. `each` sees it (after
    /// the process event the lookup made for a connection new to the table).
    fn event(&mut self, ev: &Event, mut each: impl FnMut(&Event)) {
        let new = self.table.get(ev.conn.cookie).is_none() && !matches!(ev.body, Body::Process(_));
        let made = match self.lookup.as_mut() {
            Some(lookup) if new => {
                lookup(&ev.conn).map(|o| Event { ts_ns: ev.ts_ns, conn: ev.conn, body: Body::Process(o) })
            }
            _ => None,
        };
        for e in made.iter().chain(std::iter::once(ev)) {
            self.table.apply(e);
            self.detectors.observe(e, &self.table, &mut self.found);
            each(e);
        }
    }

    /// Time passes: stops are found here, while nothing arrives.
    fn tick(&mut self, now_ns: u64) {
        self.detectors.tick(now_ns, &self.table, &mut self.found);
    }

    /// The findings made since the last call, in order.
    pub fn findings(&mut self) -> Vec<Finding> {
        std::mem::take(&mut self.found)
    }

    pub fn table(&self) -> &ConnTable {
        &self.table
    }

    /// Forget connections closed before `before_ns` (and long silent ones); returns how many went.
    pub fn reap(&mut self, before_ns: u64) -> usize {
        self.table.reap(before_ns).len()
    }

    /// When time should next pass (CLOCK_MONOTONIC ns), as of the last tick: before then only a
    /// kernel record can change a finding.
    pub fn next_due(&self) -> u64 {
        self.detectors.next_due()
    }

    /// A stop candidate needs a fresh look at its sender: take a snapshot soon. Cleared by the call.
    pub fn wants_snapshot(&mut self) -> bool {
        self.detectors.wants_snapshot()
    }

    /// The streams whose rounds the kernel should report (the send phase), when they changed, and
    /// the shortest srtt (µs) whose rounds are worth it.
    pub fn phase_members(&mut self) -> Option<(HashSet<u64>, u32)> {
        let min_srtt_us = self.detectors.phase_min_srtt_us();
        self.detectors.phase_members().map(|m| (m, min_srtt_us))
    }

    /// The shortest srtt (µs) whose rounds are reported (`detect.fairness.phase_min_rtt_ms`).
    pub fn phase_min_srtt_us(&self) -> u32 {
        self.detectors.phase_min_srtt_us()
    }
}

/// Replay recorded events through `pipe` as the daemon sees them: in time order, with time passing
/// when the detectors are next due (`clock::next_tick`, as the daemon reads its ring buffer), and
/// for `TAIL_NS` past the last event. `feed` hands one input to the pipeline (the daemon's outputs
/// step it, or nothing else does).
pub fn replay(events: &[Event], pipe: &mut Pipeline, feed: impl FnMut(&mut Pipeline, Input<'_>)) {
    replay_ticking(events, pipe, |tick, pipe| next_tick(tick, pipe.next_due()), feed);
}

/// `replay` with the tick after `tick` chosen by `next` (the first one `clock::TICK_MIN` after the
/// first event).
fn replay_ticking(
    events: &[Event],
    pipe: &mut Pipeline,
    next: impl Fn(u64, &Pipeline) -> u64,
    mut feed: impl FnMut(&mut Pipeline, Input<'_>),
) {
    let mut sorted: Vec<&Event> = events.iter().collect();
    sorted.sort_by_key(|e| e.ts_ns);
    let (Some(first), Some(last)) = (sorted.first().map(|e| e.ts_ns), sorted.last().map(|e| e.ts_ns)) else { return };
    let end = last + TAIL_NS;
    let mut tick = next_tick(first, 0);
    let mut events = sorted.into_iter().peekable();
    loop {
        while let Some(ev) = events.next_if(|e| e.ts_ns < tick) {
            feed(pipe, Input::Event(ev));
        }
        feed(pipe, Input::Time(tick));
        if tick >= end {
            return;
        }
        tick = next(tick, pipe);
    }
}

/// Replay a recording offline (`tcpvigil analyze`): every finding as it was made.
pub fn analyze(events: &[Event], cfg: &DetectConfig) -> Vec<Finding> {
    // A recording made with the exact variant holds its lost-retransmission events.
    let exact = events.iter().any(|e| matches!(e.body, Body::LostRetrans(_)));
    let mut p = Pipeline::new(cfg, exact);
    replay(events, &mut p, |p, input| p.feed(input, |_| {}));
    p.findings()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::FindingKind;

    fn stops(p: &mut Pipeline, events: &[Event]) -> usize {
        replay(events, p, |p, input| p.feed(input, |_| {}));
        p.findings().iter().filter(|f| f.kind() == FindingKind::Stop).count()
    }

    /// Every recorded fixture, replayed with ticks only when the detectors are due (as the daemon
    /// reads its ring buffer) and with a tick every 20 ms: the same findings, of the same
    /// connections and groups, with the same causes, starting within a tick of each other.
    #[test]
    fn ticks_only_when_due_find_what_ticks_every_20_ms_find() {
        let dir = std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/fixtures"));
        let mut files: Vec<_> = std::fs::read_dir(dir)
            .unwrap()
            .filter_map(|e| Some(e.ok()?.path()))
            .filter(|p| p.to_string_lossy().ends_with(".jsonl.gz"))
            .collect();
        files.sort();
        assert!(files.len() >= 8, "the fixtures: {files:?}");
        let cfg = DetectConfig::default();
        let key = |f: &Finding| (f.kind(), f.conn.map(|c| c.cookie), f.group.clone(), f.cause, f.ongoing);
        let (mut ticks_due, mut ticks_fine) = (0, 0);
        for file in files {
            let rec = crate::recording::open(&file).unwrap();
            let mut p = Pipeline::new(&cfg, false);
            replay(&rec.events, &mut p, |p, input| {
                ticks_due += usize::from(matches!(input, Input::Time(_)));
                p.feed(input, |_| {})
            });
            let paced = crate::detect::final_findings(&p.findings());
            let mut p = Pipeline::new(&cfg, false);
            let every_20_ms = |tick, _: &Pipeline| tick + crate::clock::TICK_MIN.as_nanos() as u64;
            replay_ticking(&rec.events, &mut p, every_20_ms, |p, input| {
                ticks_fine += usize::from(matches!(input, Input::Time(_)));
                p.feed(input, |_| {})
            });
            let fine = crate::detect::final_findings(&p.findings());
            let name = file.display();
            assert_eq!(paced.iter().map(key).collect::<Vec<_>>(), fine.iter().map(key).collect::<Vec<_>>(), "{name}");
            for (a, b) in paced.iter().zip(&fine) {
                assert!(a.start_ns.abs_diff(b.start_ns) <= 20_000_000, "{name}: {a:?}\n{b:?}");
            }
        }
        assert!(ticks_due * 2 < ticks_fine, "ticks when due {ticks_due}, every 20 ms {ticks_fine}");
    }

    #[test]
    fn a_reconfigured_pipeline_judges_with_the_new_settings() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/fixtures/outage.jsonl.gz");
        let rec = crate::recording::open(std::path::Path::new(path)).unwrap();
        let mut cfg = DetectConfig::default();
        assert!(stops(&mut Pipeline::new(&cfg, false), &rec.events) > 0, "the outage is a stop by default");
        let mut p = Pipeline::new(&cfg, false);
        cfg.stop.floor_ms = 3_600_000;
        cfg.fairness.phase_min_rtt_ms = 0.0;
        p.reconfigure(&cfg);
        assert_eq!(stops(&mut p, &rec.events), 0, "no stop lasts an hour");
        assert_eq!(p.phase_min_srtt_us(), 0);
        assert_eq!(p.phase_members().map(|(m, _)| m.len()), Some(0), "the kernel is told to stop reporting rounds");
    }
}
