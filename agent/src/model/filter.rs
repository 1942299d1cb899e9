//! Connection filters as users type them (`ADDR:PORT`, `:PORT`, `ADDR`, `[v6]:PORT`, a socket
//! cookie as `ss -e` prints it (`sk:HEX`) or as `0xHEX` or decimal, `L-R`).
use std::net::{IpAddr, SocketAddr};
use std::str::FromStr;

use super::conn::ConnId;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Filter {
    /// Either end has this address and port.
    Endpoint(SocketAddr),
    /// Either end has this port.
    Port(u16),
    /// Either end has this address.
    Addr(IpAddr),
    /// The socket cookie.
    Cookie(u64),
    /// Exactly this local and remote end.
    Pair(SocketAddr, SocketAddr),
}

/// One kernel-side rule: every `Some` field must match.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Rule {
    pub cookie: Option<u64>,
    pub laddr: Option<IpAddr>,
    pub lport: Option<u16>,
    pub raddr: Option<IpAddr>,
    pub rport: Option<u16>,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("bad connection filter {:?}: {why}; use ADDR:PORT, :PORT, ADDR, [V6ADDR]:PORT, a socket cookie (sk:HEX as `ss -e` prints it, 0xHEX or decimal), or LADDR:LPORT-RADDR:RPORT", crate::files::clip(input, crate::files::QUOTE_BYTES))]
pub struct FilterError {
    pub input: String,
    pub why: &'static str,
}

/// A filter that can match no connection is refused rather than left to match nothing.
fn end(a: SocketAddr) -> Result<SocketAddr, &'static str> {
    if a.port() == 0 {
        Err("port 0 is no connection's port")
    } else {
        Ok(a)
    }
}

impl FromStr for Filter {
    type Err = FilterError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = |why| FilterError { input: s.to_string(), why };
        let t = s.trim();
        if t.is_empty() {
            return Err(err("it is empty"));
        }
        if let Some(port) = t.strip_prefix(':') {
            return match port.parse::<u16>() {
                Ok(p) if p != 0 => Ok(Filter::Port(p)),
                _ => Err(err("the port is not a number from 1 to 65535")),
            };
        }
        let hex = ["sk:", "0x"]
            .iter()
            .find_map(|p| t.get(..p.len()).filter(|h| h.eq_ignore_ascii_case(p)).map(|_| &t[p.len()..]));
        let cookie = match hex {
            Some(h) if !h.is_empty() && h.bytes().all(|b| b.is_ascii_hexdigit()) => Some(u64::from_str_radix(h, 16)),
            Some(_) => return Err(err("a socket cookie in hex is sk:HEX or 0xHEX, digits 0-9 a-f")),
            None if t.bytes().all(|b| b.is_ascii_digit()) => Some(t.parse()),
            None => None,
        };
        if let Some(k) = cookie {
            return match k {
                Ok(0) => Err(err("a socket cookie is never 0")),
                Ok(k) => Ok(Filter::Cookie(k)),
                Err(_) => Err(err("the cookie does not fit 64 bits")),
            };
        }
        if let Ok(a) = t.parse::<SocketAddr>() {
            return end(a).map(Filter::Endpoint).map_err(err);
        }
        // LADDR:LPORT-RADDR:RPORT; the dash cannot occur inside an address.
        if let Some((l, r)) = t.split_once('-') {
            let l = l.parse::<SocketAddr>().map_err(|_| err("the local end is not ADDR:PORT"))?;
            let r = r.parse::<SocketAddr>().map_err(|_| err("the remote end is not ADDR:PORT"))?;
            return Ok(Filter::Pair(end(l).map_err(err)?, end(r).map_err(err)?));
        }
        // A bare address; an IPv6 one may stand in one pair of brackets, nothing else may.
        let bare = match t.strip_prefix('[').and_then(|x| x.strip_suffix(']')) {
            Some(inner) => match inner.parse::<IpAddr>() {
                Ok(IpAddr::V6(a)) => return Ok(Filter::Addr(IpAddr::V6(a))),
                _ => return Err(err("brackets hold an IPv6 address, as in [fd00::1] or [fd00::1]:5201")),
            },
            None => t,
        };
        if bare.contains(['[', ']']) {
            return Err(err("the brackets do not pair up around an IPv6 address"));
        }
        if let Ok(a) = bare.parse::<IpAddr>() {
            return Ok(Filter::Addr(a));
        }
        Err(err("it is neither an address, a port, a cookie nor a pair"))
    }
}

fn same_ip(a: IpAddr, b: IpAddr) -> bool {
    a == b || a.to_canonical() == b.to_canonical()
}

impl Filter {
    pub fn matches(&self, c: &ConnId) -> bool {
        let (l, r) = (c.tuple.local, c.tuple.remote);
        let end = |e: SocketAddr, a: SocketAddr| e.port() == a.port() && same_ip(e.ip(), a.ip());
        match *self {
            Filter::Endpoint(a) => end(l, a) || end(r, a),
            Filter::Port(p) => l.port() == p || r.port() == p,
            Filter::Addr(a) => same_ip(l.ip(), a) || same_ip(r.ip(), a),
            Filter::Cookie(k) => c.cookie == k,
            Filter::Pair(fl, fr) => end(l, fl) && end(r, fr),
        }
    }

    /// The kernel rules whose union selects exactly the connections `matches` accepts.
    pub fn rules(&self) -> Vec<Rule> {
        let r = Rule::default();
        match *self {
            Filter::Endpoint(a) => vec![
                Rule { laddr: Some(a.ip()), lport: Some(a.port()), ..r },
                Rule { raddr: Some(a.ip()), rport: Some(a.port()), ..r },
            ],
            Filter::Port(p) => vec![Rule { lport: Some(p), ..r }, Rule { rport: Some(p), ..r }],
            Filter::Addr(a) => vec![Rule { laddr: Some(a), ..r }, Rule { raddr: Some(a), ..r }],
            Filter::Cookie(k) => vec![Rule { cookie: Some(k), ..r }],
            Filter::Pair(l, rr) => vec![Rule {
                laddr: Some(l.ip()),
                lport: Some(l.port()),
                raddr: Some(rr.ip()),
                rport: Some(rr.port()),
                ..r
            }],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::conn::Tuple;

    fn conn(l: &str, r: &str) -> ConnId {
        ConnId { cookie: 77, netns: 1, tuple: Tuple { local: l.parse().unwrap(), remote: r.parse().unwrap() } }
    }

    #[test]
    fn parses_every_documented_form() {
        assert_eq!("10.0.0.1:5201".parse(), Ok(Filter::Endpoint("10.0.0.1:5201".parse().unwrap())));
        assert_eq!(":5201".parse(), Ok(Filter::Port(5201)));
        assert_eq!("10.0.0.1".parse(), Ok(Filter::Addr("10.0.0.1".parse().unwrap())));
        assert_eq!("[fd00::1]:80".parse(), Ok(Filter::Endpoint("[fd00::1]:80".parse().unwrap())));
        assert_eq!("fd00::1".parse(), Ok(Filter::Addr("fd00::1".parse().unwrap())));
        assert_eq!("12345".parse(), Ok(Filter::Cookie(12345)));
        assert_eq!("sk:3039".parse(), Ok(Filter::Cookie(12345)));
        assert_eq!("SK:3039".parse(), Ok(Filter::Cookie(12345)));
        assert_eq!("0x3039".parse(), Ok(Filter::Cookie(12345)));
        assert_eq!("0X3039".parse(), Ok(Filter::Cookie(12345)));
        assert_eq!("sk:ffffffffffffffff".parse(), Ok(Filter::Cookie(u64::MAX)));
        let k = 0x1f3a_u64;
        assert_eq!(crate::model::Sk(k).to_string().parse(), Ok(Filter::Cookie(k)), "what we print is what we take");
        assert_eq!(
            "10.0.0.1:40000-10.0.0.2:5201".parse(),
            Ok(Filter::Pair("10.0.0.1:40000".parse().unwrap(), "10.0.0.2:5201".parse().unwrap()))
        );
        assert_eq!("[fd00::1]:1-[fd00::2]:2".parse::<Filter>().map(|f| f.rules().len()), Ok(1));
    }

    #[test]
    fn rejects_nonsense_with_a_reason() {
        for bad in [
            "",
            ":0",
            ":99999",
            "host.example:80",
            "1.2.3.4:5-x",
            "999999999999999999999",
            "sk:",
            "0x",
            "sk:xyz",
            "sk:1_0",
        ] {
            let e = bad.parse::<Filter>().unwrap_err();
            assert!(e.to_string().contains("bad connection filter"), "{bad}: {e}");
        }
    }

    #[test]
    fn refuses_filters_that_could_match_no_connection() {
        for (bad, why) in [
            ("0", "never 0"),
            ("sk:0", "never 0"),
            ("sk:10000000000000000", "64 bits"),
            ("00", "never 0"),
            ("10.0.0.1:0", "port 0"),
            ("[fd00::1]:0", "port 0"),
            ("10.0.0.1:0-10.0.0.2:5201", "port 0"),
            ("10.0.0.1:40000-10.0.0.2:0", "port 0"),
            ("[10.0.0.1]", "IPv6"),
            ("[[fd00::1]]", "IPv6"),
            ("[fd00::1", "pair up"),
            ("fd00::1]", "pair up"),
            ("[]", "IPv6"),
        ] {
            let e = bad.parse::<Filter>().unwrap_err().to_string();
            assert!(e.contains(why), "{bad}: {e}");
        }
        assert_eq!("[fd00::1]".parse(), Ok(Filter::Addr("fd00::1".parse().unwrap())));
        let e = format!("{}x", "1".repeat(1 << 20)).parse::<Filter>().unwrap_err().to_string();
        assert!(e.len() < 600, "{} bytes of error", e.len());
    }

    #[test]
    fn matches_either_end_or_exact_pair() {
        let c = conn("10.0.0.1:40000", "10.0.0.2:5201");
        assert!(":5201".parse::<Filter>().unwrap().matches(&c));
        assert!(":40000".parse::<Filter>().unwrap().matches(&c));
        assert!(!":5202".parse::<Filter>().unwrap().matches(&c));
        assert!("10.0.0.2:5201".parse::<Filter>().unwrap().matches(&c));
        assert!(!"10.0.0.2:40000".parse::<Filter>().unwrap().matches(&c));
        assert!("10.0.0.2".parse::<Filter>().unwrap().matches(&c));
        assert!("77".parse::<Filter>().unwrap().matches(&c));
        assert!("10.0.0.1:40000-10.0.0.2:5201".parse::<Filter>().unwrap().matches(&c));
        assert!(!"10.0.0.2:5201-10.0.0.1:40000".parse::<Filter>().unwrap().matches(&c));
    }

    #[test]
    fn ipv4_mapped_addresses_match_plain_ipv4() {
        let c = conn("[::ffff:10.0.0.1]:40000", "[::ffff:10.0.0.2]:5201");
        assert!("10.0.0.2:5201".parse::<Filter>().unwrap().matches(&c));
    }
}
