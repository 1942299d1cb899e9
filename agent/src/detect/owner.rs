//! Whose stop it is: the network, the receiver or the sending application, from what the sender holds.
use crate::model::event::{Sample, Snap};
pub use crate::model::StopOwner;

/// kernel `icsk_pending` value of the zero-window probe timer (ICSK_TIME_PROBE0).
const TIMER_PROBE0: u8 = 3;

/// What the sender held at one moment: the facts the owner is decided by.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Hold {
    /// When it was seen (CLOCK_MONOTONIC ns).
    pub ts_ns: u64,
    /// Segments sent and not yet acknowledged (packets_out).
    pub in_flight: u32,
    /// Bytes the application wrote that are not sent yet.
    pub unsent: u64,
    /// Window the receiver offers beyond what is in flight, bytes.
    pub usable_wnd: u64,
    pub mss: u32,
    /// Congestion window, segments (0: not seen).
    pub cwnd: u32,
    /// The zero-window probe timer is armed, or probes went unanswered (snapshots only).
    pub probing: bool,
    /// The state after the last ACK the kernel processed: a snapshot, the state a pipe-emptying
    /// ACK leaves, a timer or retransmission, or a periodic sample (after which every ACK that
    /// empties the pipe is reported, once per clock tick). Not a per-ACK sample of a selected
    /// connection: those are one ACK behind until the next ACK or snapshot.
    pub exact: bool,
    /// Reported by an ACK that emptied the pipe, not by a look. The kernel checks such ACKs once
    /// per clock tick: on a path shorter than a tick a later ACK of the same tick may have left
    /// something else (the look that follows reports it), so a stop is not judged on this alone.
    pub by_ack: bool,
}

impl Hold {
    /// The state a sample reports.
    pub fn of_sample(ts_ns: u64, s: &Sample) -> Hold {
        let sent = s.snd_nxt.wrapping_sub(s.snd_una);
        Hold {
            ts_ns,
            in_flight: s.packets_out,
            unsent: s.write_queue.saturating_sub(sent) as u64,
            usable_wnd: usable(s.snd_una, s.snd_wnd, s.snd_nxt),
            mss: s.mss,
            cwnd: s.cwnd,
            probing: false,
            exact: s.drained || !s.selected,
            by_ack: s.drained,
        }
    }

    /// The state a snapshot reports: exact, read after everything the kernel had processed.
    pub fn of_snapshot(ts_ns: u64, s: &Snap) -> Hold {
        Hold {
            ts_ns,
            in_flight: s.packets_out,
            unsent: s.unsent as u64,
            usable_wnd: usable(s.snd_una, s.snd_wnd, s.snd_nxt),
            mss: s.mss,
            cwnd: s.cwnd,
            probing: s.packets_out == 0 && (s.timer == TIMER_PROBE0 || s.probes_out > 0),
            exact: true,
            by_ack: false,
        }
    }

    /// Data is in flight (a timer fired or a segment was retransmitted: it was outstanding).
    pub fn in_flight_at(self, ts_ns: u64, packets_out: u32) -> Hold {
        Hold { ts_ns, in_flight: packets_out.max(1), probing: false, exact: true, by_ack: false, ..self }
    }

    /// Anything to deliver: in flight or waiting to be sent.
    pub fn outstanding(&self) -> bool {
        self.in_flight > 0 || self.unsent > 0
    }

    /// Data waits, the window and cwnd have room for twice what is in flight, yet only that little is
    /// out: the sending host holds it back (pacing, CPU, small queues), not the network.
    pub fn sender_held(&self) -> bool {
        self.exact
            && self.in_flight > 0
            && self.unsent > 0
            && self.usable_wnd >= self.mss.max(1) as u64
            && self.cwnd > 0
            && self.in_flight.saturating_mul(2) < self.cwnd
    }

    /// Whose stop this is, were the connection stopped now.
    pub fn owner(&self) -> StopOwner {
        if self.in_flight > 0 {
            StopOwner::Network
        } else if self.unsent == 0 {
            StopOwner::Application
        } else if self.usable_wnd < self.mss.max(1) as u64 || self.probing {
            StopOwner::Receiver
        } else {
            StopOwner::Undetermined
        }
    }

    /// The owner, if this look can be trusted for it; else a fresh look is needed.
    pub fn decided_owner(&self) -> Option<StopOwner> {
        match self.owner() {
            StopOwner::Undetermined => None,
            _ if !self.exact => None,
            o => Some(o),
        }
    }

    /// The facts, for a finding's evidence.
    pub fn evidence(&self) -> serde_json::Value {
        serde_json::json!({
            "in_flight_segments": self.in_flight,
            "unsent_bytes": self.unsent,
            "usable_window_bytes": self.usable_wnd,
            "window_probing": self.probing,
        })
    }
}

/// Bytes the receiver's window allows beyond snd_nxt (0 when it is closed or shrunk).
fn usable(snd_una: u32, snd_wnd: u32, snd_nxt: u32) -> u64 {
    let edge = snd_una.wrapping_add(snd_wnd);
    let room = edge.wrapping_sub(snd_nxt) as i32;
    room.max(0) as u64
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::detect::tests_support::sample;

    fn hold(in_flight: u32, unsent: u64, wnd: u64) -> Hold {
        Hold {
            ts_ns: 1,
            in_flight,
            unsent,
            usable_wnd: wnd,
            mss: 1448,
            cwnd: 0,
            probing: false,
            exact: true,
            by_ack: false,
        }
    }

    #[test]
    fn owner_follows_what_is_in_flight_waiting_and_offered() {
        assert_eq!(hold(10, 0, 0).owner(), StopOwner::Network, "in flight, window closed: still the network");
        assert_eq!(hold(10, 1 << 20, 1 << 20).owner(), StopOwner::Network);
        assert_eq!(hold(0, 1 << 20, 0).owner(), StopOwner::Receiver);
        assert_eq!(hold(0, 1 << 20, 1000).owner(), StopOwner::Receiver, "a sub-MSS window is closed");
        assert_eq!(hold(0, 0, 0).owner(), StopOwner::Application);
        assert_eq!(hold(0, 0, 1 << 20).owner(), StopOwner::Application);
        assert_eq!(hold(0, 1 << 20, 1 << 20).owner(), StopOwner::Undetermined);
        assert_eq!(hold(0, 1 << 20, 1 << 20).decided_owner(), None);
    }

    #[test]
    fn a_selected_per_ack_sample_is_not_trusted_but_a_drained_one_is() {
        let mut s = sample(5 << 20);
        s.selected = true;
        assert_eq!(Hold::of_sample(1, &s).decided_owner(), None, "one ACK behind");
        s.drained = true;
        assert_eq!(Hold::of_sample(1, &s).decided_owner(), Some(StopOwner::Network));
        s.selected = false;
        s.drained = false;
        assert_eq!(Hold::of_sample(1, &s).decided_owner(), Some(StopOwner::Network));
    }

    #[test]
    fn a_drained_sample_with_a_closed_window_is_the_receiver() {
        let mut s = sample(5 << 20);
        s.drained = true;
        s.packets_out = 0;
        s.snd_nxt = 1000;
        s.snd_una = 1000;
        s.write_queue = 300_000;
        s.snd_wnd = 0;
        let h = Hold::of_sample(1, &s);
        assert_eq!(h.unsent, 300_000);
        assert_eq!(h.decided_owner(), Some(StopOwner::Receiver));
        s.write_queue = 0;
        assert_eq!(Hold::of_sample(1, &s).decided_owner(), Some(StopOwner::Application));
    }

    #[test]
    fn a_snapshot_with_the_probe_timer_armed_is_the_receiver_even_with_some_window() {
        let s = Snap { packets_out: 0, unsent: 50_000, snd_wnd: 4 * 1448, mss: 1448, timer: 3, ..Default::default() };
        assert_eq!(Hold::of_snapshot(1, &s).decided_owner(), Some(StopOwner::Receiver));
        let s = Snap { packets_out: 0, unsent: 50_000, snd_wnd: 0, mss: 1448, ..Default::default() };
        assert_eq!(Hold::of_snapshot(1, &s).decided_owner(), Some(StopOwner::Receiver));
    }

    #[test]
    fn usable_window_wraps_with_sequence_numbers() {
        assert_eq!(usable(u32::MAX - 10, 100, 5), 84);
        assert_eq!(usable(100, 50, 200), 0, "window shrunk below what was sent");
    }
}
