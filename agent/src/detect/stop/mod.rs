//! Communication stops: data outstanding, almost nothing delivered for many RTTs, and whose they are.
//!
//! `conn` keeps, per connection, delivery progress against its last healthy point and the last
//! look at what the sender holds; `judge` decides at each tick when a stop starts, whose it is,
//! why, and when it ends; `idle` when its clock starts after an idle; `resume` when delivery has
//! resumed for good; `mtu` names a path MTU black hole behind a network stop; `evidence` is what
//! its finding carries; `config` the thresholds.
mod config;
mod conn;
mod evidence;
mod idle;
mod judge;
mod mtu;
mod resume;
#[cfg(test)]
mod tests;

use std::collections::HashMap;

pub use config::StopConfig;
use conn::Conn;

use crate::model::{Body, Event, Finding};

pub struct StopDetector {
    cfg: StopConfig,
    conns: HashMap<u64, Conn>,
    want_snapshot: bool,
    /// The earliest `Conn::next_due` at the last tick.
    due: Option<u64>,
}

impl StopDetector {
    pub fn new(cfg: StopConfig) -> Self {
        StopDetector { cfg, conns: HashMap::new(), want_snapshot: false, due: None }
    }

    /// New thresholds from the next event or tick on (a reload); what is in progress stays.
    pub fn set_config(&mut self, cfg: StopConfig) {
        self.cfg = cfg;
    }

    pub fn observe(&mut self, ev: &Event, out: &mut Vec<Finding>) {
        // Nothing is kept for a connection whose first records are its state, process or close
        // (most never move data): its samples or snapshots open it here.
        if matches!(ev.body, Body::State(_) | Body::Process(_) | Body::Close(_))
            && !self.conns.contains_key(&ev.conn.cookie)
        {
            return;
        }
        let c = self.conns.entry(ev.conn.cookie).or_insert_with(|| Conn::new(ev.conn, ev.ts_ns));
        tracing::trace!(target: "tcpvigil::stop", conn = %c.id.tuple, ts = ev.ts_ns, body = %trace_body(&ev.body),
            active = ?c.active, anchor = ?c.anchor, acked = c.acked, healthy = c.seen_healthy, "observe");
        c.observe(&self.cfg, ev, out);
    }

    /// Whether a stop candidate waits for a fresh look at its sender: the caller should take a
    /// snapshot now (its records come back through `observe`). Cleared by the call.
    pub fn wants_snapshot(&mut self) -> bool {
        std::mem::take(&mut self.want_snapshot)
    }

    /// Time passes: stops start, sharpen and end here.
    pub fn tick(&mut self, now: u64, out: &mut Vec<Finding>) {
        self.answer_black_holes();
        self.conns.retain(|_, c| !c.closed);
        let mut due = None;
        for c in self.conns.values_mut() {
            self.want_snapshot |= c.tick(&self.cfg, now, out);
            if let Some(d) = c.next_due(&self.cfg, now) {
                due = Some(due.map_or(d, |e: u64| e.min(d)));
            }
        }
        self.due = due;
    }

    /// When time alone can next change a decision, as of the last tick (and the records before
    /// it): none while only a record can.
    pub fn next_due(&self) -> Option<u64> {
        self.due
    }

    /// Stops that look like a path MTU black hole but lack the proof that the path still
    /// answers: another connection of the namespace to the same address that delivered smaller
    /// segments since the stop began gives it; one that delivered segments as large as the stuck
    /// ones takes it away (the path carries them: not a black hole). Closed connections count
    /// until this tick (a control connection's closing exchange). Rare: only such stops look.
    fn answer_black_holes(&mut self) {
        let wanted: Vec<(u64, mtu::Wanted)> =
            self.conns.values().filter_map(|c| c.wants_answer().map(|w| (c.id.cookie, w))).collect();
        for (cookie, w) in wanted {
            let mut small: Option<conn::Answer> = None;
            let mut large = false;
            for o in self.conns.values().filter(|o| o.id.cookie != cookie && o.same_path(&w)) {
                match o.answered {
                    Some((ts, largest)) if ts >= w.since && largest >= w.stuck => large = true,
                    Some((ts, largest)) if ts >= w.since && small.is_none_or(|a| a.largest < largest) => {
                        small = Some(conn::Answer { largest, by: Some(o.id.tuple) })
                    }
                    _ => {}
                }
            }
            if let Some(c) = self.conns.get_mut(&cookie) {
                if large {
                    c.path_answer = None;
                } else if small.is_some() {
                    c.path_answer = small;
                }
            }
        }
    }
}

/// One record as the detector's trace shows it (`TCPVIGIL_LOG=tcpvigil::stop=trace`).
fn trace_body(b: &Body) -> String {
    match b {
        Body::Sample(s) => format!(
            "sample acked={} packets_out={} unsent={} wnd={} cwnd={} ca={} srtt_us={} drained={}",
            s.bytes_acked,
            s.packets_out,
            s.write_queue.saturating_sub(s.snd_nxt.wrapping_sub(s.snd_una)),
            s.snd_wnd,
            s.cwnd,
            s.ca_state,
            s.srtt_us,
            s.drained
        ),
        Body::Snapshot(s) => format!(
            "snapshot acked={} packets_out={} unsent={} ack_age_us={}",
            s.bytes_acked, s.packets_out, s.unsent, s.last_ack_age_us
        ),
        Body::Retrans(r) => format!("retrans segs={} packets_out={} ca={}", r.segs, r.packets_out, r.ca_state),
        Body::Rto(r) => format!("rto rto_us={} packets_out={}", r.rto_us, r.packets_out),
        Body::CaState(c) => format!("ca_state {}", c.new),
        other => format!("{other:?}").chars().take(60).collect(),
    }
}
