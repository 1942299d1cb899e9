//! What a watched connection's numbers say: its goodput over a window, its efficiency, and what
//! holds it back now (the renderer words each reason).
use super::conn::ConnView;
use crate::model::event::{ca_state_name, CA_LOSS, CA_RECOVERY};

impl ConnView {
    /// Goodput over the bins that ended in `(end - span, end]`, bits per second.
    pub fn goodput_bps(&self, end_ns: u64, span_ns: u64) -> f64 {
        let (mut bytes, mut width) = (0u64, 0u64);
        for b in self.goodput.iter().rev() {
            if b.t_end_ns > end_ns {
                continue;
            }
            if b.t_end_ns + span_ns <= end_ns {
                break;
            }
            bytes += b.bytes as u64;
            width += b.width_ns as u64;
        }
        if width == 0 {
            0.0
        } else {
            bytes as f64 * 8e9 / width as f64
        }
    }

    /// Mean goodput from the first delivery to the last event, bits per second.
    pub fn mean_goodput_bps(&self) -> f64 {
        let start = self.first_delivery_ns.unwrap_or(self.first_ns);
        let end = self.closed_ns.unwrap_or(self.last_ns).max(self.last_delivery_ns);
        if end <= start {
            return 0.0;
        }
        self.total_bytes as f64 * 8e9 / (end - start) as f64
    }

    /// Goodput relative to the best delivery rate the kernel measured (0 when unknown).
    pub fn efficiency(&self, goodput_bps: f64) -> f64 {
        let max = self.max_rate_bps;
        if max <= 0.0 {
            0.0
        } else {
            (goodput_bps / max).min(1.0)
        }
    }

    /// Data outstanding yet nothing delivered for more than 4 RTTs and 200 ms: how long, in ns.
    pub fn stalled_ns(&self, now: u64) -> Option<u64> {
        if self.closed() || (self.live.packets_out == 0 && self.live.write_queue == 0) {
            return None;
        }
        let quiet = now.saturating_sub(self.last_delivery_ns);
        let rtt = self.live.srtt_us as u64 * 1000;
        (quiet > 200_000_000 && quiet > 4 * rtt).then_some(quiet)
    }

    /// What holds the connection back now, most telling first, written into `out`.
    pub fn holds_back(&self, now: u64, out: &mut Vec<Reason>) {
        out.clear();
        if let Some(s) = self.stop.as_ref().filter(|s| s.ongoing) {
            out.push(Reason::Stop { secs: now.saturating_sub(s.start_ns) as f64 / 1e9 });
        } else if let Some(q) = self.stalled_ns(now) {
            let rtt = (self.live.srtt_us as u64).max(1) * 1000;
            out.push(Reason::Stalled { secs: q as f64 / 1e9, rtts: q / rtt });
        }
        if self.live.ca_state == CA_LOSS || self.live.ca_state == CA_RECOVERY {
            out.push(Reason::LossRecovery { state: ca_state_name(self.live.ca_state), cwnd: self.live.cwnd });
        }
        if let Some(c) = &self.chrono {
            if c.rwnd_share >= 0.1 {
                out.push(Reason::ReceiveWindow { share: c.rwnd_share });
            }
            if c.sndbuf_share >= 0.1 {
                out.push(Reason::SendBuffer { share: c.sndbuf_share });
            }
        }
        if let Some(s) = &self.snap {
            if s.app_limited {
                out.push(Reason::Application);
            }
            if !s.options.sack {
                out.push(Reason::NoSack);
            }
            if !s.options.wscale {
                out.push(Reason::NoWindowScaling);
            }
        }
        if self.limit.is_some() {
            out.push(Reason::LimitFinding);
        }
        let l = &self.live;
        if out.is_empty() && self.has_live && l.cwnd > 0 && l.in_flight + 1 >= l.cwnd {
            out.push(Reason::CongestionWindow);
        }
    }
}

/// One answer to "what holds it back"; the text is the renderer's job.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Reason {
    Stop { secs: f64 },
    Stalled { secs: f64, rtts: u64 },
    LossRecovery { state: &'static str, cwnd: u32 },
    ReceiveWindow { share: f64 },
    SendBuffer { share: f64 },
    Application,
    NoSack,
    NoWindowScaling,
    LimitFinding,
    CongestionWindow,
}
