//! Loss episodes of each connection (an entry into Recovery, with the RTT and the flight where it
//! began) and the mechanism they show: a token-bucket policer drops at the path's own RTT, each
//! time about the same flight is out; a full drop-tail queue drops after the RTT grew by the
//! queue's depth. Pure and bounded: a few numbers per episode, the last `KEPT` per connection.
use std::collections::{HashMap, HashSet, VecDeque};
use std::net::IpAddr;

use crate::model::event::{CA_LOSS, CA_RECOVERY};
use crate::model::{Body, Event, Mechanism};

/// Episodes kept per connection (and the most the verdict looks at).
const KEPT: usize = 12;
/// Episodes a flat-RTT verdict (a policer) needs: one flat loss is any loss.
const MIN_FLAT: usize = 4;
/// Holes a policer's episodes repair, at the median: its bucket ran dry and it dropped what came
/// on at the line's rate; random loss at a steady flight (a small window's equilibrium) makes one.
const POLICER_HOLES: u32 = 2;
/// Episodes a queue verdict needs, and the one that suffices when the RTT grew by this many times
/// the path's RTT (a deep queue fills seconds apart).
const MIN_QUEUED: usize = 2;
const ONE_DEEP: f64 = 0.5;
/// At or below this queueing delay an episode began at the path's RTT (the per-packet RTT of a
/// path with no queue scatters by a few hundred µs: timers, interrupt moderation, virtual links).
const FLAT_US: u32 = 1_500;
const FLAT_SHARE: f64 = 0.03;
/// At or above this (and `QUEUED_SHARE` of the path's RTT) it began behind a queue.
const QUEUED_US: u32 = 3_000;
const QUEUED_SHARE: f64 = 0.05;
/// Of a verdict's episodes, at least this share must agree.
const AGREE: f64 = 0.75;
/// A policer lets through about the same burst each time: the flights where its losses began
/// vary by at most this robust coefficient of variation (random loss strikes at any flight).
const STEADY_FLIGHT_CV: f64 = 0.25;
/// A sender that keeps its flight steady whatever it loses (BBR) needs more: its episodes at a
/// steady pace, where random loss strikes at random times (exponential gaps: a robust CV near
/// 0.9). A loss-based sender's halving makes random loss's flights vary already (the gaps of
/// cubic through the lab's policer were irregular: robust CV 0.77).
const STEADY_GAP_CV: f64 = 0.5;
/// Episodes of all connections kept to tell whether one fell alone (bounded: on a busy host the
/// oldest are forgotten, and an episode older than all of them is not judged alone).
const RECENT_KEPT: usize = 4096;
/// Another connection's episode this close (in the path's RTTs) and it did not fall alone: one
/// loss event of a queue they share, where a lane's random losses fall anywhere.
pub const TOGETHER_RTT: f64 = 0.5;

/// One entry into Recovery.
#[derive(Debug, Clone, PartialEq)]
pub struct Episode {
    pub at_ns: u64,
    /// The RTT where it began: of the packet (s)acknowledged that revealed the loss (RACK's), or
    /// the smoothed RTT when that is unknown.
    pub rtt_us: u32,
    /// The path's RTT: the windowed minimum then.
    pub base_us: u32,
    /// Bytes in flight when it began.
    pub flight_bytes: u64,
    /// The delivery rate just before (bytes/s; 0 unknown).
    pub rate_bps: f64,
    /// The connection's first loss (the end of slow start: its flight says nothing of a policer).
    pub first: bool,
    /// The sender's congestion control keeps its flight whatever it loses (BBR): a steady flight
    /// then says nothing of a policer.
    pub steady_sender: bool,
    /// Holes it repaired: retransmissions that began past every earlier one of the episode (0:
    /// none seen). A policer whose bucket ran dry drops a run of segments; random loss, one.
    pub holes: u32,
}

impl Episode {
    pub fn queueing_us(&self) -> u32 {
        self.rtt_us.saturating_sub(self.base_us)
    }

    /// How the RTT stood where it began.
    pub fn shape(&self) -> Shape {
        let (q, base) = (self.queueing_us(), f64::from(self.base_us));
        if self.rtt_us == 0 || self.base_us == 0 {
            Shape::Unknown
        } else if q <= FLAT_US.max((FLAT_SHARE * base) as u32) {
            Shape::Flat
        } else if q >= QUEUED_US.max((QUEUED_SHARE * base) as u32) {
            Shape::Queued
        } else {
            Shape::Unknown
        }
    }
}

/// Where an episode's RTT stood.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// At the path's RTT: no queue before the loss.
    Flat,
    /// Grown by a queue.
    Queued,
    /// In between, or not measured.
    Unknown,
}

/// What a connection's loss episodes show.
#[derive(Debug, Clone, PartialEq)]
pub struct Verdict {
    pub mechanism: Mechanism,
    /// The episodes behind it (the last `KEPT` at most) and the first one's time.
    pub episodes: usize,
    pub since_ns: u64,
    /// Medians over them: queueing delay at the loss, the path's RTT, the delivery rate before,
    /// the flight.
    pub queueing_us: u32,
    pub base_us: u32,
    pub rate_bps: f64,
    pub flight_bytes: u64,
    /// The flights' robust coefficient of variation (0 with fewer than two).
    pub flight_cv: f64,
}

impl Verdict {
    /// The queue the RTT grew by, at the delivery rate: queueing x rate.
    pub fn queue_bytes(&self) -> u64 {
        (f64::from(self.queueing_us) / 1e6 * self.rate_bps) as u64
    }

    /// The queue in units of the path's bandwidth-delay product (queueing over the path's RTT).
    pub fn queue_bdp(&self) -> f64 {
        f64::from(self.queueing_us) / f64::from(self.base_us.max(1))
    }
}

#[derive(Default)]
struct Conn {
    eps: VecDeque<Episode>,
    /// Recovery episodes seen (kept or not).
    count: u64,
    mss: u32,
    srtt_us: u32,
    min_rtt_us: u32,
    /// The last samples' delivery rates (time, bytes/s), for the rate before an episode.
    rates: VecDeque<(u64, f64)>,
    remote: Option<IpAddr>,
    steady_sender: bool,
    /// The last sample: the connection was sending then.
    active_ns: u64,
    /// In Recovery since its last episode began, and where its latest hole ended.
    repairing: bool,
    repaired_to: Option<u32>,
}

const RATES_KEPT: usize = 8;

/// Every connection's loss episodes.
#[derive(Default)]
pub struct Episodes {
    conns: HashMap<u64, Conn>,
    /// Every connection's latest episodes (time, cookie), oldest first.
    recent: VecDeque<(u64, u64)>,
    /// The connections to each remote address: the others on a connection's path.
    by_remote: HashMap<IpAddr, HashSet<u64>>,
}

fn median<T: Copy + PartialOrd>(mut v: Vec<T>) -> Option<T> {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
    v.get(v.len() / 2).copied()
}

impl Episodes {
    /// One event; returns whether it began an episode of its connection.
    pub fn observe(&mut self, ev: &Event) -> bool {
        let cookie = ev.conn.cookie;
        if matches!(ev.body, Body::Sample(_) | Body::Snapshot(_) | Body::CaState(_))
            && !self.conns.contains_key(&cookie)
        {
            let remote = ev.conn.tuple.remote.ip().to_canonical();
            self.by_remote.entry(remote).or_default().insert(cookie);
            self.conns.insert(cookie, Conn { remote: Some(remote), ..Default::default() });
        }
        match &ev.body {
            Body::Sample(s) => {
                let c = self.conns.entry(cookie).or_default();
                c.active_ns = ev.ts_ns;
                c.mss = s.mss;
                c.srtt_us = s.srtt_us;
                let r = s.delivery_rate_bps();
                if r > 0.0 {
                    c.rates.push_back((ev.ts_ns, r));
                    if c.rates.len() > RATES_KEPT {
                        c.rates.pop_front();
                    }
                }
            }
            Body::Snapshot(s) => {
                let c = self.conns.entry(cookie).or_default();
                c.steady_sender = s.cc.starts_with("bbr");
                c.mss = s.mss;
                if s.min_rtt_us > 0 {
                    c.min_rtt_us = s.min_rtt_us;
                }
                if c.srtt_us == 0 {
                    c.srtt_us = s.srtt_us;
                }
            }
            Body::CaState(x) if x.new == CA_RECOVERY && x.old < CA_RECOVERY => {
                let c = self.conns.entry(cookie).or_default();
                let base = if x.min_rtt_us > 0 { x.min_rtt_us } else { c.min_rtt_us };
                let rtt = [x.rack_rtt_us, x.srtt_us].into_iter().find(|&r| r > 0).unwrap_or(0);
                // The rate of the last second before it, at its highest (a sample in a loss
                // episode's wake reads low).
                let rate =
                    c.rates.iter().filter(|(t, _)| t + 1_000_000_000 >= ev.ts_ns).map(|r| r.1).fold(0.0, f64::max);
                let e = Episode {
                    at_ns: ev.ts_ns,
                    rtt_us: rtt,
                    base_us: base,
                    flight_bytes: u64::from(x.packets_out) * u64::from(c.mss.max(1)),
                    rate_bps: rate,
                    first: c.count == 0,
                    steady_sender: c.steady_sender,
                    holes: 0,
                };
                (c.repairing, c.repaired_to) = (true, None);
                c.count += 1;
                c.eps.push_back(e);
                self.recent.push_back((ev.ts_ns, cookie));
                if self.recent.len() > RECENT_KEPT {
                    self.recent.pop_front();
                }
                if c.eps.len() > KEPT {
                    c.eps.pop_front();
                }
                return true;
            }
            Body::Retrans(r) => {
                if let Some(c) = self.conns.get_mut(&cookie).filter(|c| c.repairing) {
                    // A resend of a hole already counted (a retransmission lost again) is no new hole.
                    let new = c.repaired_to.is_none_or(|to| (r.seq.wrapping_sub(to) as i32) >= 0);
                    if new {
                        c.repaired_to = Some(r.end_seq);
                        if let Some(e) = c.eps.back_mut() {
                            e.holes += 1;
                        }
                    }
                }
            }
            Body::CaState(x) if x.new < CA_RECOVERY => {
                if let Some(c) = self.conns.get_mut(&cookie) {
                    c.repairing = false;
                }
            }
            // A timeout says the path went silent or lost everything: not a loss of this kind.
            Body::CaState(x) if x.new == CA_LOSS => {
                if let Some(c) = self.conns.get_mut(&cookie) {
                    c.repairing = false;
                }
            }
            Body::Close(_) => {
                if let Some(r) = self.conns.remove(&cookie).and_then(|c| c.remote) {
                    let set = self.by_remote.entry(r).or_default();
                    set.remove(&cookie);
                    if set.is_empty() {
                        self.by_remote.remove(&r);
                    }
                }
            }
            _ => {}
        }
        false
    }

    /// The kept episodes of a connection, oldest first.
    pub fn of(&self, cookie: u64) -> impl Iterator<Item = &Episode> {
        self.conns.get(&cookie).into_iter().flat_map(|c| c.eps.iter())
    }

    /// Connections tracked.
    pub fn len(&self) -> usize {
        self.conns.len()
    }

    pub fn is_empty(&self) -> bool {
        self.conns.is_empty()
    }

    /// Of the connection's kept episodes after its first, those the other connections' can be
    /// told from (no older than the oldest remembered) and, of them, those that fell alone: no
    /// other connection to the same remote address lost within half the path's RTT.
    pub fn alone(&self, cookie: u64) -> (Vec<&Episode>, Vec<&Episode>) {
        let oldest = self.recent.front().map_or(u64::MAX, |r| r.0);
        let judged: Vec<&Episode> = self.of(cookie).filter(|e| !e.first && e.at_ns >= oldest).collect();
        let remote = self.conns.get(&cookie).and_then(|c| c.remote);
        let peer = |c: u64| c != cookie && self.conns.get(&c).is_some_and(|x| x.remote == remote);
        let alone = judged
            .iter()
            .copied()
            .filter(|e| {
                let rtt = if e.base_us > 0 { e.base_us } else { e.rtt_us };
                let w = (TOGETHER_RTT * f64::from(rtt) * 1e3) as u64;
                let from = self.recent.partition_point(|r| r.0 + w < e.at_ns);
                !self.recent.range(from..).take_while(|r| r.0 <= e.at_ns + w).any(|r| peer(r.1))
            })
            .collect();
        (judged, alone)
    }

    /// The other connections to the connection's remote address that were sending at or after
    /// `since_ns`: without them, losses falling alone say nothing.
    pub fn peers(&self, cookie: u64, since_ns: u64) -> usize {
        let remote = self.conns.get(&cookie).and_then(|c| c.remote);
        let Some(set) = remote.and_then(|r| self.by_remote.get(&r)) else { return 0 };
        set.iter().filter(|&&c| c != cookie && self.conns.get(&c).is_some_and(|x| x.active_ns >= since_ns)).count()
    }

    /// What the connection's kept episodes show, if they agree.
    pub fn verdict(&self, cookie: u64) -> Option<Verdict> {
        let eps: Vec<&Episode> = self.of(cookie).collect();
        verdict(&eps)
    }
}

/// The mechanism a set of episodes shows: most of them behind a queue (two suffice, or one grown by
/// half the path's RTT), or most of them flat with a steady flight (a policer). None otherwise.
pub fn verdict(eps: &[&Episode]) -> Option<Verdict> {
    let measured: Vec<&Episode> = eps.iter().copied().filter(|e| e.rtt_us > 0 && e.base_us > 0).collect();
    let n = measured.len();
    if n == 0 {
        return None;
    }
    let share = |s: Shape| measured.iter().filter(|e| e.shape() == s).count() as f64 / n as f64;
    let queueing = median(measured.iter().map(|e| e.queueing_us()).collect())?;
    let base = median(measured.iter().map(|e| e.base_us).collect())?;
    let rate = median(measured.iter().map(|e| e.rate_bps).filter(|r| *r > 0.0).collect()).unwrap_or(0.0);
    // The flights of the policer's regime: slow start's overshoot is another thing.
    let flights: Vec<f64> = measured.iter().filter(|e| !e.first).map(|e| e.flight_bytes as f64).collect();
    let cv = coefficient_of_variation(&flights);
    let later: Vec<u64> = measured.iter().filter(|e| !e.first).map(|e| e.at_ns).collect();
    let gaps: Vec<f64> = later.windows(2).map(|w| w[1].saturating_sub(w[0]) as f64).collect();
    let v = |mechanism| Verdict {
        mechanism,
        episodes: n,
        since_ns: measured[0].at_ns,
        queueing_us: queueing,
        base_us: base,
        rate_bps: rate,
        flight_bytes: median(flights.clone()).unwrap_or(0.0) as u64,
        flight_cv: cv,
    };
    let deep = n >= 1 && f64::from(queueing) >= ONE_DEEP * f64::from(base) && share(Shape::Queued) >= AGREE;
    if (n >= MIN_QUEUED && share(Shape::Queued) >= AGREE) || deep {
        return Some(v(Mechanism::QueueOverflow));
    }
    // Holes per episode, where retransmissions were seen: a policer drops runs of segments.
    let holes = median(measured.iter().filter(|e| !e.first && e.holes > 0).map(|e| e.holes).collect());
    if n >= MIN_FLAT
        && flights.len() >= MIN_FLAT - 1
        && share(Shape::Flat) >= AGREE
        && holes.is_none_or(|h| h >= POLICER_HOLES)
        && cv <= STEADY_FLIGHT_CV
        && (!measured.iter().any(|e| e.steady_sender) || coefficient_of_variation(&gaps) <= STEADY_GAP_CV)
    {
        return Some(v(Mechanism::Policer));
    }
    None
}

/// The spread of `v` against its middle, robust to a few outliers (the recoveries right after
/// slow start carry larger flights): the median absolute deviation, scaled to match a standard
/// deviation for normal data, over the median.
fn coefficient_of_variation(v: &[f64]) -> f64 {
    if v.len() < 2 {
        return 0.0;
    }
    let Some(mid) = median(v.to_vec()).filter(|m| *m > 0.0) else { return 0.0 };
    let mad = median(v.iter().map(|x| (x - mid).abs()).collect()).unwrap_or(0.0);
    1.4826 * mad / mid
}

#[cfg(test)]
mod tests;
