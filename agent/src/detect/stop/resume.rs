//! When a stop's delivery has resumed for good: the window it must hold for, the stalls inside
//! that window that keep the stop going, and what a resumption that fell through delivered.
use super::config::StopConfig;
use super::conn::Conn;

impl Conn {
    /// How long delivery must stay healthy before a stop counts as over: max(2 srtt, 100 ms).
    pub fn resume_window(&self) -> u64 {
        (2 * self.srtt_us as u64 * 1000).max(100_000_000)
    }

    /// Whether delivery went on after the advance at `resumed` that began a resumption, that
    /// advance left out: the rate from it to the last point within the window `w` after it (or,
    /// with none inside, to the first point after it) is more than almost nothing. A backed-off
    /// retransmission acknowledged together with all the receiver held is one large jump; two RTTs
    /// of hole repair after it are the stop going on, as the capture's truth has it (lab fuzz
    /// seed 61 run 15).
    pub(super) fn held_after(&self, cfg: &StopConfig, resumed: u64, w: u64) -> bool {
        let Some(&(_, base, _)) = self.hist.iter().rev().find(|(t, ..)| *t <= resumed) else { return true };
        let inside = self.hist.iter().rev().find(|(t, ..)| *t > resumed && *t <= resumed + w);
        let Some(&(t, a, _)) = inside.or_else(|| self.hist.iter().find(|(t, ..)| *t > resumed)) else { return true };
        a.saturating_sub(base) as f64 / ((t - resumed) as f64 / 1e9) > self.slow_rate(cfg)
    }

    /// Where the resumption that began at `resumed` stands at `now`: the advance it holds from,
    /// and whether that is known yet. A stall with data in flight that begins within the resume
    /// window is the stop going on: the resumption moves to the advance that ended it. A stall
    /// here is half the threshold without an advance (a little under what counts as a stall by
    /// itself: the srtt after an outage is noisy, and one stop too long by a window is a smaller
    /// error than one ended early), and never under two of the kernel's 50 ms bulk samples, whose
    /// spacing alone says nothing. It is known once an advance past the window has come, or with
    /// none, once no stall can have begun unseen.
    pub fn resumption(&self, cfg: &StopConfig, resumed: u64, now: u64) -> (u64, bool) {
        let w = self.resume_window();
        let stall = (cfg.threshold_ns(self.srtt_us) / 2).max(100_000_000);
        let mut from = resumed;
        // Where a stall would begin: the last advance, or the first look with data in flight
        // after an advance that left none (data sent after an idle).
        let mut last: Option<(u64, u64, bool)> = None;
        for &(t, a, flight) in self.hist.iter().filter(|p| p.0 >= resumed) {
            match last {
                Some((lt, la, lf)) if a > la => {
                    if lf && lt < from + w && t - lt > stall {
                        from = t;
                    }
                    last = Some((t, a, flight));
                }
                Some((_, la, false)) if flight => last = Some((t, la, true)),
                // A look that finds nothing in flight, nothing delivered since: no stall can run
                // in the network (data waiting behind a closed window is the receiver's).
                Some((lt, la, true)) if !flight => last = Some((lt, la, false)),
                Some(_) => {}
                None => last = Some((t, a, flight)),
            }
        }
        let known = match last {
            Some((t, ..)) if t >= from + w => true,
            // A stall open since t, inside the window: the stop goes on.
            Some((t, _, true)) if now >= t + stall => false,
            _ => now >= from + w + stall,
        };
        (from, known)
    }

    /// Where a stop whose connection was aborted at `ts` ends when delivery never began to resume:
    /// at the last advance of the cumulative ACK during it, unless something was resent after that
    /// advance and the wait since lasted the threshold (then the stop went on until the abort).
    /// What waits behind an abort without a resend is the abandoned transfer's, not the path's, as
    /// with a resumption (lab fuzz seed 139 run 0: one jump after a 10 s outage, then nothing sent
    /// again until the reset 4 s later).
    pub(super) fn aborted_end(&self, cfg: &StopConfig, start: u64, ts: u64) -> u64 {
        let last = self.last_advance();
        let went_on = self.ev.last_loss_ns > last && ts.saturating_sub(last) >= cfg.threshold_ns(self.srtt_us);
        if last > start && !went_on {
            last
        } else {
            ts
        }
    }

    /// When delivery last advanced.
    pub fn last_advance(&self) -> u64 {
        let Some(&(t, a, _)) = self.hist.back() else { return self.anchor.0 };
        self.hist.iter().rev().take_while(|p| p.1 == a).last().map_or(t, |p| p.0)
    }

    /// `bytes` delivered by one observation without ending the stop: its evidence, or the pending
    /// resumption's while one runs (after the stop's end if it holds).
    pub(super) fn delivered_during(&mut self, bytes: u64) {
        let (acks, delivered) = match self.resume {
            Some(_) => (&mut self.resumed_delivery.0, &mut self.resumed_delivery.1),
            None => (&mut self.ev.acks, &mut self.ev.delivered),
        };
        *acks += 1;
        *delivered += bytes;
    }

    /// Delivery fell back to almost nothing before a resumption lasted its window: what it
    /// delivered was delivered during the stop.
    pub(super) fn resume_failed(&mut self) {
        if self.resume.take().is_some() {
            let (acks, bytes) = std::mem::take(&mut self.resumed_delivery);
            self.ev.acks += acks;
            self.ev.delivered += bytes;
        }
    }
}
