//! The connection table: the latest known state of every connection, updated from events.
use std::collections::HashMap;

use super::conn::{ConnId, Process};
use super::event::{Body, Event, Sample, Snap};

#[derive(Debug, Clone)]
pub struct ConnEntry {
    pub id: ConnId,
    pub first_ns: u64,
    pub last_ns: u64,
    pub process: Option<Process>,
    pub snap: Option<Snap>,
    pub last_sample: Option<Sample>,
    pub retrans_segs: u64,
    pub lost_retrans: u64,
    pub rtos: u64,
    pub closed: bool,
}

impl ConnEntry {
    fn new(id: ConnId, ts: u64) -> Self {
        ConnEntry {
            id,
            first_ns: ts,
            last_ns: ts,
            process: None,
            snap: None,
            last_sample: None,
            retrans_segs: 0,
            lost_retrans: 0,
            rtos: 0,
            closed: false,
        }
    }

    /// Smoothed RTT in microseconds from whatever was seen last (0 when unknown).
    pub fn srtt_us(&self) -> u32 {
        match (&self.last_sample, &self.snap) {
            (Some(s), _) if s.srtt_us > 0 => s.srtt_us,
            (_, Some(s)) => s.srtt_us,
            _ => 0,
        }
    }
}

/// Counts kept by the table itself, for exporters.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct TableStats {
    pub opened: u64,
    pub closed: u64,
}

/// TCP_CLOSE in a state-change record.
const TCP_CLOSE: u8 = 7;
/// How much longer than the reap window a connection may go without any event before it is
/// dropped as gone (snapshots come every `bpf.snapshot_interval`, 1 s by default, at most 60 s).
pub const UNSEEN_NS: u64 = 120_000_000_000;

#[derive(Debug, Default)]
pub struct ConnTable {
    conns: HashMap<u64, ConnEntry>,
    /// Whether lost retransmissions come from the exact (fentry) variant: then
    /// `Retrans.lost_retrans` is informative only and `LostRetrans` events count.
    pub exact_lost_retrans: bool,
    pub stats: TableStats,
}

impl ConnTable {
    pub fn new(exact_lost_retrans: bool) -> Self {
        ConnTable { exact_lost_retrans, ..Default::default() }
    }

    pub fn get(&self, cookie: u64) -> Option<&ConnEntry> {
        self.conns.get(&cookie)
    }

    pub fn iter(&self) -> impl Iterator<Item = &ConnEntry> {
        self.conns.values()
    }

    pub fn len(&self) -> usize {
        self.conns.len()
    }

    pub fn is_empty(&self) -> bool {
        self.conns.is_empty()
    }

    /// Fold one event into the table.
    pub fn apply(&mut self, ev: &Event) {
        let stats = &mut self.stats;
        let e = self.conns.entry(ev.conn.cookie).or_insert_with(|| {
            stats.opened += 1;
            ConnEntry::new(ev.conn, ev.ts_ns)
        });
        e.last_ns = e.last_ns.max(ev.ts_ns);
        match &ev.body {
            Body::Sample(s) => e.last_sample = Some(s.clone()),
            Body::Retrans(r) => {
                e.retrans_segs += r.segs as u64;
                if r.lost_retrans && !self.exact_lost_retrans {
                    e.lost_retrans += r.segs as u64;
                }
            }
            Body::LostRetrans(r) => {
                if self.exact_lost_retrans {
                    e.lost_retrans += r.segs as u64;
                }
            }
            Body::Rto(_) => e.rtos += 1,
            Body::Process(p) => e.process = Some(p.clone()),
            Body::Snapshot(s) => {
                if e.process.is_none() && s.process.pid != 0 {
                    e.process = Some(s.process.clone());
                }
                e.snap = Some(s.clone());
            }
            Body::Close(s) => {
                e.snap = Some(s.clone());
                if !e.closed {
                    e.closed = true;
                    self.stats.closed += 1;
                }
            }
            // TCP_CLOSE: a connection that never carried data gets no Close record (tcp_destroy_sock
            // reports only sockets that moved bytes), so without this it would stay forever.
            Body::State(st) if st.new == TCP_CLOSE => {
                if !e.closed {
                    e.closed = true;
                    self.stats.closed += 1;
                }
            }
            Body::CaState(_) | Body::State(_) => {}
        }
    }

    /// Forget connections closed before `before_ns` (their final state was exported), and any
    /// connection with no event at all for UNSEEN_NS more (a live one gets a snapshot every
    /// snapshot period, so its close was lost). The map gives memory back when it shrank a lot.
    pub fn reap(&mut self, before_ns: u64) -> Vec<ConnEntry> {
        let unseen = before_ns.saturating_sub(UNSEEN_NS);
        let gone: Vec<u64> = self
            .conns
            .values()
            .filter(|e| (e.closed && e.last_ns < before_ns) || e.last_ns < unseen)
            .map(|e| e.id.cookie)
            .collect();
        let out: Vec<ConnEntry> = gone.iter().filter_map(|k| self.conns.remove(k)).collect();
        if self.conns.capacity() > 4 * self.conns.len() + 1024 {
            self.conns.shrink_to(2 * self.conns.len());
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::event::StateChange;
    use crate::model::{ConnId, Tuple};

    fn ev(cookie: u64, ts_ns: u64, body: Body) -> Event {
        let t = Tuple { local: "10.0.0.1:1000".parse().unwrap(), remote: "10.0.0.2:80".parse().unwrap() };
        Event { ts_ns, conn: ConnId { cookie, netns: 1, tuple: t }, body }
    }

    #[test]
    fn a_connection_that_closes_without_data_is_reaped_and_a_silent_one_too() {
        let s = 1_000_000_000u64;
        let mut t = ConnTable::new(false);
        // 1: established and closed, never a Close record (no bytes moved).
        t.apply(&ev(1, s, Body::State(StateChange { old: 2, new: 1 })));
        t.apply(&ev(1, 2 * s, Body::State(StateChange { old: 1, new: 7 })));
        // 2: established, then nothing at all (its close was lost).
        t.apply(&ev(2, s, Body::State(StateChange { old: 2, new: 1 })));
        // 3: established and alive (recent events).
        t.apply(&ev(3, 200 * s, Body::State(StateChange { old: 2, new: 1 })));
        let gone: Vec<u64> = t.reap(20 * s).iter().map(|e| e.id.cookie).collect();
        assert_eq!(gone, vec![1]);
        let gone: Vec<u64> = t.reap(20 * s + UNSEEN_NS).iter().map(|e| e.id.cookie).collect();
        assert_eq!(gone, vec![2]);
        assert!(t.get(3).is_some());
    }
}
