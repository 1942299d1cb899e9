//! Which knob holds a buffer-limited connection: the application's setsockopt (SO_RCVBUF /
//! SO_SNDBUF, which turns autotuning off) or the sysctl ceiling autotuning stops at, with the value
//! to set. A receiver on this host is found by its socket's tuple, the sender's reversed.
use std::collections::HashMap;
use std::net::SocketAddr;

use serde_json::{json, Value};

use crate::model::{Mechanism, Process, Snap, Tuple};

/// A buffer this close to its namespace's ceiling has reached it (autotuning sets it to the
/// ceiling exactly; a little slack for a ceiling lowered while the socket lived).
const AT_CEILING: f64 = 0.95;

/// The default maximum of net.ipv4.tcp_rmem: where a Linux receiver's autotuning stops unless
/// told otherwise.
const DEFAULT_RMEM_MAX: u64 = 6 << 20;

/// A socket's buffers as its last snapshot showed them.
#[derive(Debug, Clone, PartialEq)]
pub struct SockBuffers {
    pub cookie: u64,
    pub rcvbuf: u32,
    pub rcvbuf_locked: bool,
    pub rmem_max: u32,
    pub sndbuf: u32,
    pub sndbuf_locked: bool,
    pub wmem_max: u32,
    pub process: Process,
}

impl SockBuffers {
    pub fn of(cookie: u64, s: &Snap) -> Self {
        SockBuffers {
            cookie,
            rcvbuf: s.rcvbuf,
            rcvbuf_locked: s.rcvbuf_locked,
            rmem_max: s.rmem_max,
            sndbuf: s.sndbuf,
            sndbuf_locked: s.sndbuf_locked,
            wmem_max: s.wmem_max,
            process: s.process.clone(),
        }
    }

    fn who(&self) -> String {
        if self.process.pid == 0 {
            "the application".into()
        } else {
            format!("the application ({} pid {})", self.process.comm, self.process.pid)
        }
    }
}

/// The sockets of this host by (local, remote): a connection's receiver, when it is here, is the
/// socket whose tuple is the sender's reversed. Two sockets with one tuple (namespaces reusing
/// addresses) make it unknown.
#[derive(Default)]
pub struct Peers {
    by_tuple: HashMap<(SocketAddr, SocketAddr), Vec<SockBuffers>>,
    tuples: HashMap<u64, (SocketAddr, SocketAddr)>,
}

impl Peers {
    pub fn update(&mut self, cookie: u64, t: &Tuple, s: &Snap) {
        let key = (t.local, t.remote);
        self.tuples.insert(cookie, key);
        let socks = self.by_tuple.entry(key).or_default();
        let b = SockBuffers::of(cookie, s);
        match socks.iter_mut().find(|x| x.cookie == cookie) {
            Some(x) => *x = b,
            None => socks.push(b),
        }
    }

    pub fn remove(&mut self, cookie: u64) {
        let Some(key) = self.tuples.remove(&cookie) else { return };
        if let Some(socks) = self.by_tuple.get_mut(&key) {
            socks.retain(|x| x.cookie != cookie);
            if socks.is_empty() {
                self.by_tuple.remove(&key);
            }
        }
    }

    /// The other end of `t`, if it is a socket of this host (and only one has that tuple).
    pub fn peer(&self, t: &Tuple) -> Option<&SockBuffers> {
        match self.by_tuple.get(&(t.remote, t.local))?.as_slice() {
            [one] => Some(one),
            _ => None,
        }
    }

    pub fn len(&self) -> usize {
        self.tuples.len()
    }
}

/// What holds a buffer-limited connection and what to change, with a value.
#[derive(Debug, Clone, PartialEq)]
pub struct Knob {
    pub mechanism: Option<Mechanism>,
    pub advice: String,
    /// Merged into the finding's evidence: `knob`, `side`, `value` and what the socket showed.
    pub evidence: Value,
}

fn at_ceiling(buf: u32, max: u32) -> bool {
    max > 0 && f64::from(buf) >= AT_CEILING * f64::from(max)
}

/// Why the 2.5 x BDP, and that a capped delivery understates the BDP.
fn sizing(factor: f64, bdp: f64, capped: bool) -> String {
    format!(
        "about {factor} x the BDP of {} bytes, as the emulated-network study (\"Performance evaluation of TCP/IP in an emulated network environment\") found buffers must be{}",
        bdp as u64,
        if capped { "; the buffer caps delivery, so the path's BDP may be larger: size for the link's rate x RTT" } else { "" }
    )
}

/// The receiver's window holds the sender back: which knob on the receiver. `peer` is the
/// receiving socket when it is on this host; `largest_window` the most the receiver advertised.
pub fn receive_knob(
    peer: Option<&SockBuffers>,
    largest_window: u32,
    value: u64,
    factor: f64,
    bdp: f64,
    capped: bool,
) -> Knob {
    let why = sizing(factor, bdp, capped);
    match peer {
        Some(p) if p.rcvbuf_locked => Knob {
            mechanism: Some(Mechanism::Application),
            advice: format!(
                "{} on the receiver set SO_RCVBUF: its receive buffer is fixed at {} bytes (the kernel doubles the request) and autotuning is off, so net.ipv4.tcp_rmem changes nothing; have it ask for setsockopt(SO_RCVBUF, {value}) ({why}; net.core.rmem_max must allow it), or not set SO_RCVBUF and let autotuning grow the buffer",
                p.who(), p.rcvbuf
            ),
            evidence: json!({"knob": "SO_RCVBUF", "side": "receiver", "value": value,
                "receiver": {"on_this_host": true, "cookie": p.cookie, "rcvbuf": p.rcvbuf, "locked": true, "rmem_max": p.rmem_max}}),
        },
        Some(p) if at_ceiling(p.rcvbuf, p.rmem_max) => Knob {
            mechanism: Some(Mechanism::Sysctl),
            advice: format!(
                "the receiver's buffer grew to the net.ipv4.tcp_rmem maximum of its namespace ({} bytes) and stopped there: raise that maximum (the third value) to {value} on the receiver, e.g. sysctl -w net.ipv4.tcp_rmem=\"4096 131072 {value}\" ({why})",
                p.rmem_max
            ),
            evidence: json!({"knob": "net.ipv4.tcp_rmem", "sysctl": "net.ipv4.tcp_rmem", "side": "receiver", "value": value,
                "receiver": {"on_this_host": true, "cookie": p.cookie, "rcvbuf": p.rcvbuf, "locked": false, "rmem_max": p.rmem_max}}),
        },
        Some(p) => Knob {
            mechanism: None,
            advice: format!(
                "the receiver's window holds the sender back while its buffer ({} bytes) is below the net.ipv4.tcp_rmem maximum ({} bytes) and not fixed by the application: autotuning had room, so the receiving application may read too slowly; if the buffer stays there, raise net.ipv4.tcp_rmem max on the receiver to {value} ({why})",
                p.rcvbuf, p.rmem_max
            ),
            evidence: json!({"knob": "net.ipv4.tcp_rmem", "sysctl": "net.ipv4.tcp_rmem", "side": "receiver", "value": value,
                "receiver": {"on_this_host": true, "cookie": p.cookie, "rcvbuf": p.rcvbuf, "locked": false, "rmem_max": p.rmem_max}}),
        },
        None => Knob {
            mechanism: None,
            advice: format!(
                "the receiver's window holds the sender back: it advertised at most {largest_window} bytes, where a Linux receiver autotuning to the default net.ipv4.tcp_rmem maximum ({DEFAULT_RMEM_MAX} bytes) would offer about half of that; the receiver is not on this host, so on it: raise net.ipv4.tcp_rmem max to {value}, or, if its application sets SO_RCVBUF (autotuning off), have it ask for {value} ({why})"
            ),
            evidence: json!({"knob": "net.ipv4.tcp_rmem", "sysctl": "net.ipv4.tcp_rmem", "side": "receiver", "value": value,
                "receiver": {"on_this_host": false, "largest_window": largest_window}}),
        },
    }
}

/// The send buffer runs dry: which knob on this host, from the sender's own socket.
pub fn send_knob(own: &SockBuffers, value: u64, factor: f64, bdp: f64, capped: bool) -> Knob {
    let why = sizing(factor, bdp, capped);
    let seen = json!({"sndbuf": own.sndbuf, "locked": own.sndbuf_locked, "wmem_max": own.wmem_max});
    if own.sndbuf_locked {
        return Knob {
            mechanism: Some(Mechanism::Application),
            advice: format!(
                "{} set SO_SNDBUF: its send buffer is fixed at {} bytes (the kernel doubles the request) and autotuning is off, so net.ipv4.tcp_wmem changes nothing; have it ask for setsockopt(SO_SNDBUF, {value}) ({why}; net.core.wmem_max must allow it), or not set SO_SNDBUF",
                own.who(), own.sndbuf
            ),
            evidence: json!({"knob": "SO_SNDBUF", "side": "sender", "value": value, "sender": seen}),
        };
    }
    if at_ceiling(own.sndbuf, own.wmem_max) {
        return Knob {
            mechanism: Some(Mechanism::Sysctl),
            advice: format!(
                "the send buffer grew to the net.ipv4.tcp_wmem maximum of this namespace ({} bytes) and stopped there: raise that maximum (the third value) to {value}, e.g. sysctl -w net.ipv4.tcp_wmem=\"4096 16384 {value}\" ({why})",
                own.wmem_max
            ),
            evidence: json!({"knob": "net.ipv4.tcp_wmem", "sysctl": "net.ipv4.tcp_wmem", "side": "sender", "value": value, "sender": seen}),
        };
    }
    Knob {
        mechanism: None,
        advice: format!(
            "the send buffer runs dry at {} bytes, below the net.ipv4.tcp_wmem maximum ({}): the sending application may write too slowly; if the buffer stays there, raise net.ipv4.tcp_wmem max on this host to {value} ({why})",
            own.sndbuf,
            if own.wmem_max > 0 { format!("{} bytes", own.wmem_max) } else { "unknown here".into() }
        ),
        evidence: json!({"knob": "net.ipv4.tcp_wmem", "sysctl": "net.ipv4.tcp_wmem", "side": "sender", "value": value, "sender": seen}),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sock(cookie: u64, rcvbuf: u32, locked: bool, rmem_max: u32) -> Snap {
        Snap {
            rcvbuf,
            rcvbuf_locked: locked,
            rmem_max,
            sndbuf: 87_040,
            wmem_max: 4 << 20,
            process: Process { pid: 7, comm: format!("app{cookie}"), ..Default::default() },
            ..Default::default()
        }
    }

    fn tuple(l: &str, r: &str) -> Tuple {
        Tuple { local: l.parse().unwrap(), remote: r.parse().unwrap() }
    }

    #[test]
    fn a_receiver_on_this_host_is_found_by_the_reversed_tuple_and_a_clash_makes_it_unknown() {
        let mut p = Peers::default();
        let sender = tuple("10.71.1.2:40000", "10.72.1.2:5201");
        p.update(9, &tuple("10.72.1.2:5201", "10.71.1.2:40000"), &sock(9, 131_072, true, 6 << 20));
        assert_eq!(p.peer(&sender).map(|b| b.cookie), Some(9));
        assert!(p.peer(&tuple("10.71.1.2:40001", "10.72.1.2:5201")).is_none());
        // A second socket with the same tuple (another namespace): which one receives is unknown.
        p.update(10, &tuple("10.72.1.2:5201", "10.71.1.2:40000"), &sock(10, 131_072, false, 6 << 20));
        assert!(p.peer(&sender).is_none());
        p.remove(9);
        p.remove(10);
        assert_eq!(p.len(), 0);
        assert!(p.by_tuple.is_empty());
    }

    #[test]
    fn a_locked_receive_buffer_is_the_application_and_one_at_the_ceiling_the_sysctl() {
        let app = SockBuffers::of(9, &sock(9, 131_072, true, 6 << 20));
        let k = receive_knob(Some(&app), 65_535, 3 << 20, 2.5, 1e6, true);
        assert_eq!(k.mechanism, Some(Mechanism::Application));
        assert!(
            k.advice.contains("SO_RCVBUF") && k.advice.contains("3145728") && k.advice.contains("app9 pid 7"),
            "{}",
            k.advice
        );
        assert!(k.advice.contains("changes nothing"), "{}", k.advice);
        assert_eq!(k.evidence["knob"], "SO_RCVBUF");
        let capped = SockBuffers::of(9, &sock(9, 262_144, false, 262_144));
        let k = receive_knob(Some(&capped), 131_072, 3 << 20, 2.5, 1e6, true);
        assert_eq!(k.mechanism, Some(Mechanism::Sysctl));
        assert!(k.advice.contains("net.ipv4.tcp_rmem") && k.advice.contains("262144") && k.advice.contains("3145728"));
        // Below the ceiling and unlocked: autotuning had room, no knob to name.
        let room = SockBuffers::of(9, &sock(9, 1 << 20, false, 6 << 20));
        assert_eq!(receive_knob(Some(&room), 500_000, 3 << 20, 2.5, 1e6, false).mechanism, None);
        // A receiver elsewhere: what its window says, no mechanism.
        let far = receive_knob(None, 65_535, 3 << 20, 2.5, 1e6, true);
        assert_eq!(far.mechanism, None);
        assert!(far.advice.contains("at most 65535 bytes") && far.advice.contains("SO_RCVBUF"), "{}", far.advice);
        assert_eq!(far.evidence["receiver"]["on_this_host"], false);
    }

    #[test]
    fn a_locked_send_buffer_is_the_application_and_one_at_the_ceiling_the_sysctl() {
        let mut s = sock(1, 131_072, false, 6 << 20);
        s.sndbuf = 131_072;
        s.sndbuf_locked = true;
        let k = send_knob(&SockBuffers::of(1, &s), 2 << 20, 2.5, 8e5, false);
        assert_eq!(k.mechanism, Some(Mechanism::Application));
        assert!(k.advice.contains("SO_SNDBUF") && k.advice.contains("2097152"), "{}", k.advice);
        s.sndbuf_locked = false;
        s.sndbuf = 262_144;
        s.wmem_max = 262_144;
        let k = send_knob(&SockBuffers::of(1, &s), 2 << 20, 2.5, 8e5, false);
        assert_eq!(k.mechanism, Some(Mechanism::Sysctl));
        assert!(k.advice.contains("net.ipv4.tcp_wmem") && k.advice.contains("262144"), "{}", k.advice);
        s.wmem_max = 4 << 20;
        assert_eq!(send_knob(&SockBuffers::of(1, &s), 2 << 20, 2.5, 8e5, false).mechanism, None);
        // Unknown ceiling (a kernel before 4.15): never the sysctl.
        s.wmem_max = 0;
        assert_eq!(send_knob(&SockBuffers::of(1, &s), 2 << 20, 2.5, 8e5, false).mechanism, None);
    }
}
