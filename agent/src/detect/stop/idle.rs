//! When the stop clock starts after an idle: a look that showed nothing to send, nothing in
//! flight behind a closed window, or nothing in flight at all, and the data that left after it.
use super::config::StopConfig;
use super::conn::Conn;
use crate::detect::owner::{Hold, StopOwner};

impl Conn {
    /// The latest look at what the sender holds, `hold`, taken after the last one: data in flight
    /// after a look that showed none behind a closed window left once the window opened, which
    /// no record tells (lab fuzz seed 2026 run 6: the first record after a 0.18 s zero window was
    /// the refilling burst's fast retransmission, and the clock ran from the window's closing).
    pub(super) fn take_hold(&mut self, hold: Hold) {
        let prev = std::mem::replace(&mut self.hold, hold);
        self.after_idle(prev, hold.ts_ns);
    }

    /// A look at `ts` after `prev`: when `prev` was an exact look showing nothing to send, no stop
    /// could run then, however late the next tick comes (a starved daemon, an idle shorter than the
    /// tick). The data this look reports was written after `prev` and sent one srtt before `ts` at
    /// the latest, so the stop clock restarts there. The same holds after a look that showed
    /// nothing in flight behind a closed window: data went out only once the window opened, which
    /// the daemon does not see. Only a look that shows data in flight ends such a wait: one still
    /// showing the window closed is the receiver's stall going on, whose clock runs from its start.
    /// And after an exact look that found everything sent acknowledged, data waiting and the window
    /// open: the kernel sends at once, so what is in flight now left then, and the network held
    /// nothing before (a congestion control holding its window at a few segments, as BBR does to
    /// probe the path's RTT: each small flight acknowledged in full, then a large one).
    fn after_idle(&mut self, prev: Hold, ts: u64) {
        let at_once = prev.exact && prev.owner() == StopOwner::Undetermined && self.hold.in_flight > 0;
        let sent_since = match prev.decided_owner() {
            Some(StopOwner::Application) => true,
            Some(StopOwner::Receiver) => self.hold.in_flight > 0,
            _ => at_once,
        };
        if self.active.is_some() || prev.in_flight > 0 || !sent_since || prev.ts_ns == 0 {
            return;
        }
        let sent_by = if at_once { prev.ts_ns } else { ts.saturating_sub(self.srtt_us as u64 * 1000).max(prev.ts_ns) };
        self.sending_since = sent_by;
        if sent_by > self.anchor.0 {
            self.restart(sent_by);
        }
    }

    /// After a look (and the progress it showed, from `acked_before`): an exact look with nothing
    /// to send starts an idle; delivery after it ends it.
    pub(super) fn note_idle(&mut self, ts: u64, acked_before: u64) {
        if self.hold.exact && !self.hold.outstanding() {
            self.idle_at = Some(ts);
        } else if self.acked > acked_before {
            self.idle_at = None;
        }
    }

    /// A resend or timeout at `ts` of data sent after an idle, at least `armed_ns` after that data
    /// left: no ACK told the daemon it left (it learns of it from a later look, or from this), so
    /// the stop clock runs from that send, not from the daemon's tick. Each such record bounds the
    /// send from above; the earliest bound holds. A connection not bulk is not sampled: its clock
    /// follows the ticks until loss records tell the same (data out since `armed_ns` before each,
    /// after its last delivery); so does a closing one, which is not sampled either.
    pub(super) fn sent_after_idle(&mut self, cfg: &StopConfig, ts: u64, armed_ns: u64) {
        if self.active.is_some() {
            return;
        }
        let idle = match self.idle_at {
            Some(idle) => idle,
            None if !self.bulk(cfg) || self.closing => self.hist.back().map_or(0, |&(t, ..)| t),
            None => return,
        };
        let sent = ts.saturating_sub(armed_ns).max(idle);
        if sent < self.anchor.0 {
            self.anchor = (sent, self.acked);
        }
    }
}
