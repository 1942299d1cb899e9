//! Each live connection's 4-tuple by socket cookie, so that the events the kernel emits after it
//! released the local port (the state change to CLOSE of an aborted connection, the close
//! snapshot) carry the port again and still match a `LADDR:LPORT-…` or `:LPORT` filter.
use std::collections::HashMap;

use crate::model::{Body, Event, Tuple};

const TCP_CLOSE: u8 = 7;
/// A connection that went to CLOSE but whose close snapshot never came is forgotten after this.
const LINGER_NS: u64 = 10_000_000_000;

#[derive(Debug)]
pub struct Tuples {
    /// cookie -> (tuple, when it went to CLOSE).
    map: HashMap<u64, (Tuple, Option<u64>)>,
    cap: usize,
}

impl Tuples {
    /// Remembers at most `cap` connections (beyond that, new ones are not remembered).
    pub fn new(cap: usize) -> Self {
        Tuples { map: HashMap::new(), cap }
    }

    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Restore a zero local port from what was seen before; remember a complete tuple.
    pub fn fix(&mut self, ev: &mut Event) {
        let cookie = ev.conn.cookie;
        if ev.conn.tuple.local.port() == 0 {
            if let Some((t, _)) = self.map.get(&cookie) {
                ev.conn.tuple = *t;
            }
        } else if !self.map.contains_key(&cookie) {
            if self.map.len() >= self.cap {
                let now = ev.ts_ns;
                self.map.retain(|_, (_, closed)| closed.is_none_or(|t| t + LINGER_NS > now));
            }
            if self.map.len() < self.cap {
                self.map.insert(cookie, (ev.conn.tuple, None));
            }
        }
        match &ev.body {
            Body::Close(_) => {
                self.map.remove(&cookie);
            }
            Body::State(s) if s.new == TCP_CLOSE => {
                if let Some(e) = self.map.get_mut(&cookie) {
                    e.1 = Some(ev.ts_ns);
                }
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::event::StateChange;
    use crate::model::ConnId;

    fn ev(ts: u64, cookie: u64, local: &str, body: Body) -> Event {
        Event {
            ts_ns: ts,
            conn: ConnId {
                cookie,
                netns: 1,
                tuple: Tuple { local: local.parse().unwrap(), remote: "10.72.1.2:5201".parse().unwrap() },
            },
            body,
        }
    }

    fn state(new: u8) -> Body {
        Body::State(StateChange { old: 1, new })
    }

    #[test]
    fn an_abort_gets_its_local_port_back_and_the_close_forgets_the_connection() {
        let mut t = Tuples::new(10);
        let mut e = ev(1, 7, "10.71.1.2:39018", state(1));
        t.fix(&mut e);
        let mut e = ev(2, 7, "10.71.1.2:0", state(TCP_CLOSE));
        t.fix(&mut e);
        assert_eq!(e.conn.tuple.local.to_string(), "10.71.1.2:39018");
        let (rec, _) = crate::plot::synth::outage();
        let snap = rec.events.iter().find_map(|e| matches!(e.body, Body::Snapshot(_)).then(|| e.body.clone())).unwrap();
        let Body::Snapshot(s) = snap else { unreachable!() };
        let mut e = ev(3, 7, "10.71.1.2:0", Body::Close(s));
        t.fix(&mut e);
        assert_eq!(e.conn.tuple.local.port(), 39018);
        assert!(t.is_empty());
        // Unknown cookies keep what the kernel said.
        let mut e = ev(4, 8, "10.71.1.2:0", state(TCP_CLOSE));
        t.fix(&mut e);
        assert_eq!(e.conn.tuple.local.port(), 0);
    }

    #[test]
    fn the_cap_holds_and_connections_closed_long_ago_make_room() {
        let mut t = Tuples::new(2);
        for (ts, k) in [(1, 1), (2, 2)] {
            t.fix(&mut ev(ts, k, "10.0.0.1:1000", state(1)));
        }
        t.fix(&mut ev(3, 1, "10.0.0.1:1000", state(TCP_CLOSE)));
        t.fix(&mut ev(4, 3, "10.0.0.1:1001", state(1)));
        assert_eq!(t.len(), 2, "full: cookie 3 is not remembered yet");
        let mut late = ev(4 + LINGER_NS, 3, "10.0.0.1:1001", state(1));
        t.fix(&mut late);
        assert_eq!(t.len(), 2);
        let mut e = ev(5 + LINGER_NS, 3, "10.0.0.1:0", state(TCP_CLOSE));
        t.fix(&mut e);
        assert_eq!(e.conn.tuple.local.port(), 1001, "cookie 1 made room for it");
    }
}
