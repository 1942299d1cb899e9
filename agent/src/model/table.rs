//! The connection table: the latest known state of every connection that moves data, and a few
//! bytes for each one that only exists.
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
/// A connection with no event for this much longer than the reap window keeps only that it
/// exists (and its process): the kernel reports a connection only while it moves, so a quiet one
/// is idle, not gone; its close, when it comes, still removes it.
pub const IDLE_NS: u64 = 60_000_000_000;

/// Processes of the sockets the table only knows exist, each kept once however many sockets share it
/// (a server's thousands of idle connections have one process).
#[derive(Debug, Default)]
struct Processes {
    ids: HashMap<Process, u32>,
    /// The process in each slot and how many sockets hold it; slot i is id i + 1 (0: no process).
    slots: Vec<Option<(Process, u32)>>,
    free: Vec<u32>,
}

impl Processes {
    fn hold(&mut self, o: Process) -> u32 {
        if let Some(&id) = self.ids.get(&o) {
            if let Some(Some((_, n))) = self.slots.get_mut(id as usize - 1) {
                *n += 1;
            }
            return id;
        }
        let id = match self.free.pop() {
            Some(id) => {
                self.slots[id as usize - 1] = Some((o.clone(), 1));
                id
            }
            None => {
                self.slots.push(Some((o.clone(), 1)));
                self.slots.len() as u32
            }
        };
        self.ids.insert(o, id);
        id
    }

    fn release(&mut self, id: u32) {
        let Some(slot) = id.checked_sub(1).and_then(|i| self.slots.get_mut(i as usize)) else { return };
        if let Some((o, n)) = slot {
            *n -= 1;
            if *n == 0 {
                self.ids.remove(o);
                *slot = None;
                self.free.push(id);
            }
        }
    }

    fn get(&self, id: u32) -> Option<&Process> {
        let i = id.checked_sub(1)? as usize;
        self.slots.get(i)?.as_ref().map(|(o, _)| o)
    }
}

#[derive(Debug, Default)]
pub struct ConnTable {
    /// Connections that moved data (samples, snapshots, losses): their full state.
    conns: HashMap<u64, ConnEntry>,
    /// Connections only known to exist (state records, processes, or idle for IDLE_NS): their
    /// process's id in `processes` (0: none). 17 bytes each in the map.
    known: HashMap<u64, u32>,
    processes: Processes,
    /// Connections closed while only known, by when: a record taken before the close and handed
    /// over after it does not bring them back.
    gone: HashMap<u64, u64>,
    /// Whether lost retransmissions come from the exact (fentry) variant: then
    /// `Retrans.lost_retrans` is informative only and `LostRetrans` events count.
    pub exact_lost_retrans: bool,
    pub stats: TableStats,
}

impl ConnTable {
    pub fn new(exact_lost_retrans: bool) -> Self {
        ConnTable { exact_lost_retrans, ..Default::default() }
    }

    /// A connection's full state (None for one only known to exist).
    pub fn get(&self, cookie: u64) -> Option<&ConnEntry> {
        self.conns.get(&cookie)
    }

    /// Connections with their full state.
    pub fn iter(&self) -> impl Iterator<Item = &ConnEntry> {
        self.conns.values()
    }

    /// Connections with their full state (closed ones not yet reaped included).
    pub fn len(&self) -> usize {
        self.conns.len()
    }

    pub fn is_empty(&self) -> bool {
        self.conns.is_empty() && self.known.is_empty()
    }

    /// Open connections: those with their full state and those only known to exist.
    pub fn open(&self) -> usize {
        self.known.len() + self.conns.values().filter(|e| !e.closed).count()
    }

    /// Connections only known to exist.
    pub fn known(&self) -> usize {
        self.known.len()
    }

    /// Whether the connection is open (with its full state or only known).
    pub fn is_open(&self, cookie: u64) -> bool {
        self.known.contains_key(&cookie) || self.conns.get(&cookie).is_some_and(|e| !e.closed)
    }

    /// The process of any open connection the table knows.
    pub fn process(&self, cookie: u64) -> Option<&Process> {
        match self.conns.get(&cookie) {
            Some(e) => e.process.as_ref(),
            None => self.processes.get(*self.known.get(&cookie)?),
        }
    }

    /// Fold one event into the table.
    pub fn apply(&mut self, ev: &Event) {
        let cookie = ev.conn.cookie;
        if let Some(e) = self.conns.get_mut(&cookie) {
            fold(e, ev, self.exact_lost_retrans, &mut self.stats);
            return;
        }
        if self.gone.contains_key(&cookie) {
            return;
        }
        match &ev.body {
            // A connection that never moved data goes: nothing of it is kept.
            Body::State(st) if st.new == TCP_CLOSE => self.forget(cookie, ev.ts_ns),
            Body::Close(_) => self.forget(cookie, ev.ts_ns),
            Body::State(_) => {
                if !self.known.contains_key(&cookie) {
                    self.known.insert(cookie, 0);
                    self.stats.opened += 1;
                }
            }
            Body::Process(o) => {
                let id = self.processes.hold(o.clone());
                match self.known.insert(cookie, id) {
                    Some(old) => self.processes.release(old),
                    None => self.stats.opened += 1,
                }
            }
            _ => {
                // It moves data: from now on it has its full state.
                let process = match self.known.remove(&cookie) {
                    Some(id) => {
                        let o = self.processes.get(id).cloned();
                        self.processes.release(id);
                        o
                    }
                    None => {
                        self.stats.opened += 1;
                        None
                    }
                };
                let mut e = ConnEntry::new(ev.conn, ev.ts_ns);
                e.process = process;
                fold(&mut e, ev, self.exact_lost_retrans, &mut self.stats);
                self.conns.insert(cookie, e);
            }
        }
    }

    /// A connection only known to exist closed.
    fn forget(&mut self, cookie: u64, ts_ns: u64) {
        if let Some(id) = self.known.remove(&cookie) {
            self.processes.release(id);
            self.stats.closed += 1;
            self.gone.insert(cookie, ts_ns);
        }
    }

    /// Forget connections closed before `before_ns` (their final state was exported), and keep
    /// of the open ones with no event for IDLE_NS more only that they exist. Returns the entries
    /// taken out of the full table (closed or idle). The maps give memory back when they shrank
    /// a lot.
    pub fn reap(&mut self, before_ns: u64) -> Vec<ConnEntry> {
        let idle = before_ns.saturating_sub(IDLE_NS);
        let out: Vec<u64> = self
            .conns
            .values()
            .filter(|e| (e.closed && e.last_ns < before_ns) || (!e.closed && e.last_ns < idle))
            .map(|e| e.id.cookie)
            .collect();
        let mut taken = Vec::with_capacity(out.len());
        for k in out {
            let Some(e) = self.conns.remove(&k) else { continue };
            if !e.closed {
                let id = e.process.clone().map_or(0, |o| self.processes.hold(o));
                self.known.insert(k, id);
            }
            taken.push(e);
        }
        self.gone.retain(|_, t| *t >= before_ns);
        shrink(&mut self.conns);
        shrink(&mut self.known);
        shrink(&mut self.gone);
        taken
    }
}

fn shrink<V>(m: &mut HashMap<u64, V>) {
    if m.capacity() > 4 * m.len() + 1024 {
        m.shrink_to(2 * m.len());
    }
}

/// One event into a connection's full state.
fn fold(e: &mut ConnEntry, ev: &Event, exact_lost_retrans: bool, stats: &mut TableStats) {
    e.last_ns = e.last_ns.max(ev.ts_ns);
    let mut close = |e: &mut ConnEntry| {
        if !e.closed {
            e.closed = true;
            stats.closed += 1;
        }
    };
    match &ev.body {
        Body::Sample(s) => e.last_sample = Some(s.clone()),
        Body::Retrans(r) => {
            e.retrans_segs += r.segs as u64;
            if r.lost_retrans && !exact_lost_retrans {
                e.lost_retrans += r.segs as u64;
            }
        }
        Body::LostRetrans(r) => {
            if exact_lost_retrans {
                e.lost_retrans += r.segs as u64;
            }
        }
        Body::Rto(_) => e.rtos += 1,
        Body::Process(o) => e.process = Some(o.clone()),
        Body::Snapshot(s) => {
            if e.process.is_none() && s.process.pid != 0 {
                e.process = Some(s.process.clone());
            }
            e.snap = Some(s.clone());
            // A look at a socket already closed (destroyed a little later).
            if s.state == TCP_CLOSE {
                close(e);
            }
        }
        Body::Close(s) => {
            e.snap = Some(s.clone());
            close(e);
        }
        // TCP_CLOSE: a connection that never carried data gets no Close record (tcp_destroy_sock
        // reports only sockets that moved bytes), so without this it would stay forever.
        Body::State(st) if st.new == TCP_CLOSE => close(e),
        Body::CaState(_) | Body::State(_) => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::event::StateChange;
    use crate::model::{ConnId, Snap, Tuple};

    fn ev(cookie: u64, ts_ns: u64, body: Body) -> Event {
        let t = Tuple { local: "10.0.0.1:1000".parse().unwrap(), remote: "10.0.0.2:80".parse().unwrap() };
        Event { ts_ns, conn: ConnId { cookie, netns: 1, tuple: t }, body }
    }

    fn process(pid: u32) -> Process {
        Process { pid, uid: 0, cgroup_id: 0, comm: format!("p{pid}"), cgroup: None }
    }

    const S: u64 = 1_000_000_000;
    const EST: Body = Body::State(StateChange { old: 2, new: 1 });
    const CLOSE: Body = Body::State(StateChange { old: 1, new: 7 });

    #[test]
    fn a_connection_that_never_moves_data_is_only_known_and_gone_at_its_close() {
        let mut t = ConnTable::new(false);
        t.apply(&ev(1, S, EST));
        t.apply(&ev(1, S, Body::Process(process(10))));
        t.apply(&ev(2, S, EST));
        assert_eq!((t.len(), t.known(), t.open()), (0, 2, 2), "no full state for idle connections");
        assert!(t.get(1).is_none() && t.is_open(1));
        assert_eq!(t.process(1).map(|o| o.pid), Some(10));
        t.apply(&ev(1, 2 * S, CLOSE));
        assert_eq!((t.known(), t.open(), t.stats.opened, t.stats.closed), (1, 1, 2, 1));
        // A snapshot taken before the close and handed over after it does not bring it back.
        t.apply(&ev(1, 2 * S, Body::Snapshot(Snap::default())));
        assert_eq!((t.len(), t.open()), (0, 1));
        // Idle for as long as you like: still known (the kernel reports only what moves).
        t.reap(1000 * S);
        assert_eq!((t.known(), t.open()), (1, 1));
    }

    #[test]
    fn a_connection_that_moves_data_gets_its_full_state_with_its_owner_and_loses_it_when_idle() {
        let mut t = ConnTable::new(false);
        t.apply(&ev(1, S, EST));
        t.apply(&ev(1, S, Body::Process(process(10))));
        t.apply(&ev(1, 2 * S, Body::Snapshot(Snap { bytes_acked: 5000, ..Default::default() })));
        let e = t.get(1).expect("full state");
        assert_eq!(e.process.as_ref().map(|o| o.pid), Some(10), "the process it had while only known");
        assert_eq!((t.len(), t.known(), t.open()), (1, 0, 1));
        t.reap(2 * S + IDLE_NS - 1);
        assert!(t.get(1).is_some(), "not idle long enough");
        let taken = t.reap(2 * S + IDLE_NS + 1);
        assert_eq!(taken.len(), 1);
        assert!(t.get(1).is_none() && t.is_open(1), "idle: only known, with its process");
        assert_eq!(t.process(1).map(|o| o.pid), Some(10));
        // It moves again: full state, the process kept.
        t.apply(&ev(1, 200 * S, Body::Snapshot(Snap { bytes_acked: 9000, ..Default::default() })));
        assert_eq!(t.get(1).and_then(|e| e.process.as_ref()).map(|o| o.pid), Some(10));
        t.apply(&ev(1, 201 * S, CLOSE));
        t.apply(&ev(1, 201 * S, Body::Close(Snap::default())));
        assert!(!t.is_open(1));
        assert_eq!(t.reap(210 * S).len(), 1, "closed and reaped");
        assert!(t.is_empty());
    }

    #[test]
    fn idle_connections_of_one_process_share_one_owner() {
        let mut t = ConnTable::new(false);
        for c in 0..1000 {
            t.apply(&ev(c, S, Body::Process(process(7))));
        }
        t.apply(&ev(5000, S, Body::Process(process(8))));
        assert_eq!(t.processes.ids.len(), 2);
        for c in 0..1000 {
            t.apply(&ev(c, 2 * S, CLOSE));
        }
        assert_eq!(t.processes.ids.len(), 1, "released with the last socket that held it");
        t.apply(&ev(6000, S, Body::Process(process(9))));
        assert_eq!(t.processes.slots.len(), 2, "a freed slot is reused");
        assert_eq!(t.process(6000).map(|o| o.pid), Some(9));
    }

    #[test]
    fn a_look_at_a_closed_socket_closes_its_full_state() {
        let mut t = ConnTable::new(false);
        t.apply(&ev(3, S, Body::Snapshot(Snap { bytes_acked: 1, state: 1, ..Default::default() })));
        t.apply(&ev(3, 2 * S, Body::Snapshot(Snap { bytes_acked: 1, state: TCP_CLOSE, ..Default::default() })));
        assert!(!t.is_open(3));
        assert_eq!(t.stats.closed, 1);
    }
}
