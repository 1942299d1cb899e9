//! Judging, at each tick: when a stop starts, whose it is and why, when its verdict sharpens and
//! when it ends, and the finding that says so.
use super::config::StopConfig;
use super::conn::Conn;
use super::evidence::Evidence;
use crate::detect::owner::StopOwner;
use crate::model::event::{CA_LOSS, CA_RECOVERY};
use crate::model::{Finding, Mechanism, PathTag, StopCause};

/// How long past the threshold a stop in doubt waits for the fresh look it asked for.
const LOOK_WAIT_NS: u64 = 40_000_000;

/// Timeouts in a row, nothing acknowledged between them, that make a stop of a connection not
/// bulk: one is the ordinary repair of a short exchange's lost tail.
const NOT_BULK_RTOS: u32 = 2;

impl Conn {
    /// Time passes at `now`. Returns whether a fresh look at the sender is wanted (a snapshot).
    pub fn tick(&mut self, cfg: &StopConfig, now: u64, out: &mut Vec<Finding>) -> bool {
        match self.active {
            Some(start) => {
                self.tick_stopped(cfg, now, start, out);
                // The kernel samples only bulk connections, and none past ESTABLISHED: a stop of
                // one that is not, or of one closing, ends when a look sees its delivery, and the
                // periodic look comes a second apart (a black hole from the first segment lifted:
                // 1.2 s reported past healthy delivery). So does one whose last word is an
                // emptying ACK's that left data waiting behind an open window (below).
                self.active.is_some() && (!self.bulk(cfg) || self.closing || self.hold_is_stale_ack())
            }
            None => self.tick_candidate(cfg, now, out),
        }
    }

    /// When time alone can next change what `tick` decides, so that the daemon need not read the
    /// ring buffer before then: `now` while a stop runs, waits for a look, or timeouts decide
    /// (tick by tick); three quarters of the threshold past the last healthy delivery for a bulk
    /// connection with data outstanding (its ask); none while only a record can start its clock.
    pub fn next_due(&self, cfg: &StopConfig, now: u64) -> Option<u64> {
        if self.active.is_some() || self.asked.is_some() {
            return Some(now);
        }
        if !self.hold.outstanding() {
            return None;
        }
        if self.closing || !self.bulk(cfg) {
            return self.ev.resent().then_some(now);
        }
        Some(self.anchor.0 + (cfg.threshold_ns(self.srtt_us) * 3).div_ceil(4))
    }

    /// The clock of a connection with nothing outstanding, or of one that is not bulk (or closing)
    /// and resent nothing, restarts at every tick; ticks come only when one is due (`next_due`),
    /// so the first resend restarts it where a tick just before it would have, whenever the last
    /// tick came. What the resend says of when the data left moves it back from there.
    pub(super) fn restart_before_resend(&mut self, cfg: &StopConfig, ts: u64) {
        let ticks_restart = !self.hold.outstanding() || ((self.closing || !self.bulk(cfg)) && !self.ev.resent());
        if self.active.is_none() && ticks_restart && ts > self.anchor.0 {
            self.restart(ts);
        }
    }

    /// A stop runs since `start`: it ends, or its verdict sharpens.
    fn tick_stopped(&mut self, cfg: &StopConfig, now: u64, start: u64, out: &mut Vec<Finding>) {
        let h = self.hold;
        if self.owner_so_far() == StopOwner::Network
            && h.exact
            && h.in_flight == 0
            && h.ts_ns > self.ev.last_loss_ns.max(start)
        {
            // Everything sent was delivered after the last loss: the network holds nothing back,
            // whatever waits behind the window now. It ended when delivery resumed, unless the
            // data waiting stalls once sent within the resume window (then it goes on); a
            // receiver's stall after it is a stop of its own.
            let resumed = self.resume.unwrap_or_else(|| self.last_advance());
            let (from, known) = self.resumption(cfg, resumed, now);
            if known || !h.outstanding() {
                let end = from.max(start);
                self.last_stop = Some((start, end, StopOwner::Network));
                self.end(cfg, now, start, end, out);
                self.anchor = (self.last_advance(), self.acked);
            }
            return;
        }
        let room = h.usable_wnd >= u64::from(h.mss.max(1));
        if self.owner_so_far() == StopOwner::Receiver && h.in_flight == 0 && !room {
            // Closed again with nothing in flight: an opening seen before did not hold (the
            // sender filled a window smaller than a segment, and the receiver closed it again).
            self.emptied = true;
            self.opened = None;
        }
        if self.owner_so_far() == StopOwner::Receiver && h.in_flight > 0 && (room || self.emptied) {
            // The receiver's window is open again and data is in flight (with room left, or sent
            // since a look found the window closed and nothing out: the burst that refilled it
            // may use it all). If nothing at all is delivered then for a stall's length, SACKed
            // segments included, the receiver's stall ended when its window opened and the
            // silence is a stall of its own, judged afresh from the last delivery since: a
            // receiver acknowledges what fits its window whether it reads or not. Holes in the
            // burst that refilled the window, repaired while SACKs arrive, are the receiver's
            // stop winding down.
            let opened = *self.opened.get_or_insert(h.ts_ns);
            let since = self.last_advance().max(opened).max(self.delivered_ts);
            if now >= since + cfg.threshold_ns(self.srtt_us) * 3 / 5 {
                let end = opened.max(start);
                self.last_stop = Some((start, end, StopOwner::Receiver));
                self.end(cfg, now, start, end, out);
                self.anchor = (since, self.acked);
                return;
            }
        }
        if let Some(resumed) = self.resume {
            // Delivery resumed and a later exact look shows nothing left to send: the window that
            // would confirm it never comes (the sender went idle), so the stop ended when delivery
            // resumed, or after the last stall of its own that delivery showed since.
            if h.exact && !h.outstanding() && h.ts_ns >= resumed {
                let end = self.resumption(cfg, resumed, now).0.max(start);
                self.last_stop = Some((start, end, self.owner_so_far()));
                self.end(cfg, now, start, end, out);
                self.anchor = (now, self.acked);
            }
            return;
        }
        if self.hold_is_stale_ack() {
            // The verdict waits for the look this asks for.
            return;
        }
        let mut v = self.judge(cfg, false);
        if self.was_receivers && v.0 == StopOwner::Network && self.ev.rtos == 0 {
            // The window opened and data is in flight again: the receiver's stop winds down. The
            // burst that refills the window may lose a few segments at the bottleneck, repaired by
            // fast retransmits; that is not what stopped the transfer. Only a timeout makes it the
            // network's, also when a stale look made it undetermined meanwhile.
            v = (StopOwner::Receiver, StopCause::ZeroWindow);
        }
        if v.0 == StopOwner::Application && h.ts_ns > start {
            // Everything sent was delivered and nothing waits: the sender has nothing to send,
            // which is no stop (the end of a transfer, an application pause).
            let end = h.ts_ns.max(start);
            self.end(cfg, now, start, end, out);
            self.anchor = (now, self.acked);
            return;
        }
        let named = self.mechanism();
        if (self.verdict != Some(v) || self.named != named) && v.0 != StopOwner::Application {
            // The owner, cause or mechanism became clearer (a fresh look, timeouts, another
            // connection's delivery): say so now.
            self.verdict = Some(v);
            self.was_receivers |= v.0 == StopOwner::Receiver;
            out.push(self.finding(now, start, None, v));
        }
    }

    /// No stop runs: one starts when almost nothing was delivered for the threshold and its owner
    /// can be told. Returns whether a fresh look is wanted first.
    fn tick_candidate(&mut self, cfg: &StopConfig, now: u64, out: &mut Vec<Finding>) -> bool {
        if !self.hold.outstanding() {
            // Nothing to send is not a stop: an idle connection starts afresh.
            self.restart(now);
            return false;
        }
        if self.closing {
            return self.tick_closing(cfg, now, out);
        }
        if !self.bulk(cfg) {
            return self.tick_not_bulk(cfg, now, out);
        }
        let threshold = cfg.threshold_ns(self.srtt_us);
        let quiet = now.saturating_sub(self.anchor.0);
        if quiet > threshold / 2 {
            tracing::trace!(target: "tcpvigil::stop", conn = %self.id.tuple, now, quiet, threshold, acked = self.acked,
                hold = ?self.hold, retrans = self.ev.retrans_segs, rtos = self.ev.rtos, asked = ?self.asked, "candidate");
        }
        if quiet * 4 < threshold * 3 {
            return false;
        }
        // Past three quarters of the threshold: a fresh look, so that the stop starts at the
        // last delivery and its owner can be decided by then. The fallback reports a bulk
        // connection's ACK when the next one arrives, and samples come once per interval: the
        // last advance before a silence may not have been reported (ACKs 50 ms apart look like
        // 100-150 ms of silence; in Recovery on a long path, the last advance came a round trip
        // after the last sample). A look flushes what the kernel holds back and dates the last
        // ACK; it is waited for a little past the threshold, within the time to report. It also
        // confirms a window an emptying ACK reported closed: a later ACK of the same clock tick
        // may have left nothing to send.
        let silent_only = !self.ev.resent() && (self.hold.in_flight > 0 || self.hold.by_ack);
        let decided = self.ev.resent() || self.hold.decided_owner().is_some();
        let ask = self.asked.is_none();
        if ask {
            self.asked = Some(now);
        }
        if quiet <= threshold {
            return ask;
        }
        let waited_out = self.asked.is_some_and(|t| now >= t + cfg.confirm_ms * 1_000_000);
        if !decided && !waited_out {
            return ask;
        }
        // Waited for where the records leave the start or the owner in doubt: silence alone, or
        // timeouts and retransmissions with data in flight (the last advance may be held back).
        // A window seen closed decides at once.
        let looked = self.asked.is_some_and(|t| self.hold.ts_ns >= t);
        let doubt = silent_only || self.hold.decided_owner().is_none();
        if doubt && !looked && now < self.anchor.0 + threshold + LOOK_WAIT_NS {
            return ask;
        }
        let v = self.judge(cfg, false);
        if v.0 == StopOwner::Application {
            return ask;
        }
        let start = match self.last_stop {
            Some((s, e, o)) if self.anchor.0.saturating_sub(e) <= threshold && o == v.0 => s,
            _ => self.anchor.0,
        };
        self.active = Some(start);
        self.verdict = Some(v);
        self.was_receivers = v.0 == StopOwner::Receiver;
        out.push(self.finding(now, start, None, v));
        ask
    }

    /// The last word is an emptying ACK's that left data waiting behind an open window: the kernel
    /// sends such data at once, so a later ACK said something else, unchecked because it came in
    /// the same clock tick (a path shorter than a tick, a receiver reading in bursts: a window
    /// that closed again was taken for an open one). Only a look tells.
    fn hold_is_stale_ack(&self) -> bool {
        self.hold.by_ack && self.hold.owner() == StopOwner::Undetermined
    }

    /// A connection not bulk yet: the kernel samples it only from then on, so its clock starts
    /// there, not at its last sample before, unless timeouts prove it stopped first. With data
    /// outstanding, timeouts in a row and nothing acknowledged between them, it is the network's
    /// stop whatever it delivered before (a black hole from the first segment delivers nothing at
    /// all). A socket still connecting is none. Returns whether a fresh look is wanted.
    fn tick_not_bulk(&mut self, cfg: &StopConfig, now: u64, out: &mut Vec<Finding>) -> bool {
        let e = &self.ev;
        if !e.resent() {
            self.restart(now);
            return false;
        }
        if e.rtos_in_row < NOT_BULK_RTOS || e.delivered > 0 || self.anchor.0 + cfg.threshold_ns(self.srtt_us) > now {
            return false;
        }
        if !self.established {
            // Only a look tells an established connection from one retrying its SYN.
            let ask = self.asked.is_none();
            self.asked.get_or_insert(now);
            return ask;
        }
        self.start_if_networks(cfg, now, out);
        false
    }

    /// A bulk connection its application closed with data still outstanding: the last window
    /// draining, or the megabytes an HTTP server wrote before it closed. The per-ACK hook is blind past
    /// ESTABLISHED, so silence proves nothing here; a timeout does. A timeout with nothing
    /// acknowledged since the clock started, past the threshold, is the network's stop, dated from
    /// the last tick before the first resend (lab fuzz seed 67 run 29: a server closed with 5 MB
    /// unsent, then an 8.6 s outage stalled the download for 13.8 s and nothing was reported).
    /// Returns whether a fresh look is wanted.
    fn tick_closing(&mut self, cfg: &StopConfig, now: u64, out: &mut Vec<Finding>) -> bool {
        let e = &self.ev;
        // A connection that never moved much, or one with only its FIN unacknowledged (a peer
        // gone), is no transfer held up.
        let data_waits = self.hold.in_flight > 1 || self.hold.unsent > 0;
        if !e.resent() || !self.bulk(cfg) || !data_waits {
            self.restart(now);
            return false;
        }
        if !self.established || e.rtos == 0 || e.delivered > 0 || self.anchor.0 + cfg.threshold_ns(self.srtt_us) > now {
            return false;
        }
        self.start_if_networks(cfg, now, out);
        false
    }

    /// Timeouts proved a stop where no sample can (not bulk, or closing): it starts at the clock's
    /// start if the network owns it.
    fn start_if_networks(&mut self, cfg: &StopConfig, now: u64, out: &mut Vec<Finding>) {
        let v = self.judge(cfg, false);
        if v.0 != StopOwner::Network {
            return;
        }
        self.active = Some(self.anchor.0);
        self.verdict = Some(v);
        self.was_receivers = false;
        out.push(self.finding(now, self.anchor.0, None, v));
    }

    /// The mechanism behind the stop in progress, where the kernel shows it.
    pub fn mechanism(&self) -> Option<Mechanism> {
        self.mtu_blackhole().map(|_| Mechanism::MtuBlackhole)
    }

    /// The owner the stop in progress was last reported with.
    pub fn owner_so_far(&self) -> StopOwner {
        self.verdict.map_or(StopOwner::Undetermined, |v| v.0)
    }

    /// A network stop with data still outstanding goes on after the application closes: its last
    /// data still waits for the path.
    pub fn outlives_close(&self) -> bool {
        self.verdict.is_some_and(|(o, _)| o == StopOwner::Network) && self.hold.outstanding()
    }

    /// Each RTT the ACKs acknowledge about all that is in flight (a small cwnd, each window
    /// delivered one RTT after it left): the network holds nothing back; the sender sends little.
    /// A look that finds all of it acknowledged with data waiting and the window open says the same.
    fn flight_cleared_each_rtt(&self) -> bool {
        let h = &self.hold;
        if h.exact && h.in_flight == 0 && h.unsent > 0 && h.usable_wnd >= u64::from(h.mss.max(1)) && self.ev.acks >= 2 {
            return true;
        }
        let last = self.hist.back().map(|&(t, ..)| t).unwrap_or(0);
        if !h.exact || h.in_flight == 0 || self.ev.acks < 2 || last <= self.anchor.0 || self.srtt_us == 0 {
            return false;
        }
        let secs = (last - self.anchor.0) as f64 / 1e9;
        let per_rtt = self.ev.delivered as f64 * self.srtt_us as f64 / 1e6 / secs;
        per_rtt >= 0.75 * f64::from(h.in_flight) * f64::from(h.mss.max(1))
    }

    /// ACKs keep coming while the congestion window grows, with no loss, no timeout and no
    /// Recovery: the sender ramping up from a small window (after an idle the kernel restarts from
    /// the initial window), not the network holding data back (that loses, retransmits or stops
    /// acknowledging).
    fn ramping(&self) -> bool {
        let e = &self.ev;
        e.acks >= 2
            && e.rtos == 0
            && e.retrans_segs == 0
            && e.ca_states.iter().all(|&s| s < CA_RECOVERY)
            && e.min_cwnd.is_some_and(|m| u64::from(self.hold.cwnd) * 2 >= u64::from(m) * 3 && self.hold.cwnd > m)
    }

    /// Process and cause from what the sender holds and what happened since delivery was healthy.
    /// Timeouts and retransmissions prove data was outstanding, whatever an older look said; an
    /// exact look after the last of them that shows nothing left to send proves it was delivered.
    pub fn judge(&self, cfg: &StopConfig, trusted: bool) -> (StopOwner, StopCause) {
        let e = &self.ev;
        let emptied = self.hold.exact && !self.hold.outstanding() && self.hold.ts_ns > e.last_loss_ns;
        let owner = if e.resent() && !emptied {
            StopOwner::Network
        } else if self.hold.exact
            && self.hold.in_flight > 0
            && self.hold.usable_wnd < self.hold.mss.max(1) as u64
            && e.acks > 0
        {
            // ACKs keep coming and each opens the window by a trickle: a receiver reading slowly,
            // not a network losing data (that would retransmit or time out).
            StopOwner::Receiver
        } else if e.acks > 0 && (self.hold.sender_held() || self.flight_cleared_each_rtt() || self.ramping()) {
            // ACKs keep acknowledging the little that is out while data waits with cwnd and window
            // to spare: the sending host trickles, nothing is stuck in the network.
            StopOwner::Application
        } else if trusted {
            self.hold.owner()
        } else {
            self.hold.decided_owner().unwrap_or(StopOwner::Undetermined)
        };
        let cause = match owner {
            StopOwner::Receiver => StopCause::ZeroWindow,
            StopOwner::Application | StopOwner::Undetermined => StopCause::Undetermined,
            StopOwner::Network => self.network_cause(cfg),
        };
        (owner, cause)
    }

    /// Why the network stopped the connection, from the losses and timeouts seen since.
    pub fn network_cause(&self, cfg: &StopConfig) -> StopCause {
        let e = &self.ev;
        if e.silent_rtos >= cfg.silent_rtos {
            StopCause::PathSilent
        } else if e.rtos > 0 && e.silent_rtos == e.rtos {
            // Every timeout so far went unanswered: resends lost again are the silence's doing.
            StopCause::Rto
        } else if e.lost_retrans > 0 && e.max_lost_delay_ns > 2 * self.srtt_us as u64 * 1000 {
            StopCause::LostRetransmit
        } else if e.rtos > 0 {
            StopCause::Rto
        } else if e.min_cwnd.is_some_and(|c| c <= 2) && e.ca_states.iter().any(|&s| s == CA_RECOVERY || s == CA_LOSS) {
            StopCause::CwndCollapse
        } else if e.acks == 0 {
            // Data in flight, nothing acknowledged, no timeout yet (a tail-loss probe or fast
            // retransmits may have gone out unanswered): the start of an outage or of heavy loss.
            // Several unanswered timeouts make it path_silent.
            StopCause::NoAck
        } else if e.retrans_segs > 0 && e.ca_states.contains(&CA_RECOVERY) {
            // A window's worth of holes repaired about one per RTT with cwnd still open: recovery
            // without SACK (NewReno) or with the scoreboard lost.
            StopCause::SlowRecovery
        } else {
            StopCause::Unknown
        }
    }
}

impl Conn {
    /// The stop ends at `end`: reported with the owner and cause it had while it lasted.
    pub fn end(&mut self, cfg: &StopConfig, now: u64, start: u64, end: u64, out: &mut Vec<Finding>) {
        let verdict = self.verdict.take().unwrap_or_else(|| self.judge(cfg, false));
        // The evidence gathered since the last tick (a timeout, say) may name the network cause better.
        let verdict = match verdict {
            (StopOwner::Network, _) => (StopOwner::Network, self.network_cause(cfg)),
            v => v,
        };
        out.push(self.finding(now, start, Some(end), verdict));
        self.active = None;
        self.was_receivers = false;
        self.resume = None;
        self.resumed_delivery = (0, 0);
        self.began_resuming = None;
        self.asked = None;
        self.ev = Evidence::default();
        self.path_answer = None;
        self.named = None;
        self.opened = None;
        self.emptied = false;
    }

    /// The stop from `start`, ended at `end` or in progress at `now`.
    pub fn finding(&mut self, now: u64, start: u64, end: Option<u64>, v: (StopOwner, StopCause)) -> Finding {
        let secs = end.unwrap_or(now).saturating_sub(start) as f64 / 1e9;
        let (owner, cause) = v;
        let mut evidence = self.ev.json(owner, &self.hold, now, self.srtt_us, self.rate_bps, secs);
        let mtu = self.mtu_blackhole();
        self.named = mtu.as_ref().map(|_| Mechanism::MtuBlackhole);
        if let (Some((e, advice)), Some(map)) = (mtu, evidence.as_object_mut()) {
            map.insert("mtu_blackhole".into(), e);
            map.insert("advice".into(), advice.into());
        }
        Finding {
            ts_ns: now,
            conn: Some(self.id),
            group: None,
            start_ns: start,
            duration_s: end.map(|_| secs),
            ongoing: end.is_none(),
            cause: cause.into(),
            owner: Some(owner),
            mechanism: self.named,
            path: PathTag::default(),
            evidence,
        }
    }
}
