//! The connection table: the latest known state of every connection, updated from events.
use std::collections::HashMap;

use super::conn::{ConnId, Owner};
use super::record::{Body, Event, Sample, Snap};

#[derive(Debug, Clone)]
pub struct ConnEntry {
    pub id: ConnId,
    pub first_ns: u64,
    pub last_ns: u64,
    pub owner: Option<Owner>,
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
            owner: None,
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
            Body::Owner(o) => e.owner = Some(o.clone()),
            Body::Snapshot(s) => {
                if e.owner.is_none() && s.owner.pid != 0 {
                    e.owner = Some(s.owner.clone());
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
            Body::CaState(_) | Body::State(_) => {}
        }
    }

    /// Forget connections closed before `before_ns` (their final state was exported).
    pub fn reap(&mut self, before_ns: u64) -> Vec<ConnEntry> {
        let gone: Vec<u64> =
            self.conns.values().filter(|e| e.closed && e.last_ns < before_ns).map(|e| e.id.cookie).collect();
        gone.iter().filter_map(|k| self.conns.remove(k)).collect()
    }
}
