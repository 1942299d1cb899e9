//! Owners of sockets older than the daemon (its programs saw no connect() or listen() for them), read once from /proc at start-up.
use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::io::BufRead;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::Path;

use super::cgroup::{Cgroups, RuntimeFiles};
use crate::model::{ConnId, Process};

/// TCP states as /proc/net/tcp prints them.
const ESTABLISHED: u8 = 0x01;
const LISTEN: u8 = 0x0a;

/// One line of /proc/net/tcp or tcp6.
#[derive(Debug, Clone, PartialEq)]
pub struct ProcSock {
    pub local: SocketAddr,
    pub remote: SocketAddr,
    pub state: u8,
    pub uid: u32,
    pub inode: u64,
}

/// Sockets that existed when the daemon started, by where they are: connections by their tuple,
/// listeners by their port (a connection accepted later from an old listener is its process's).
/// Bounded: 16 bytes per connection (a hash of its tuple and the index of its owner), each owner
/// kept once however many sockets it holds.
#[derive(Debug, Default)]
pub struct PreOwners {
    conns: HashMap<u64, u32>,
    listeners: HashMap<(u32, u16), Vec<(IpAddr, u32)>>,
    owners: Vec<Process>,
    by_pid: HashMap<u32, u32>,
}

/// A connection's place: its namespace and both ends (IPv4-mapped addresses as IPv4). Hashed with
/// fixed keys: two connections of one host colliding in 64 bits is not to be expected.
fn key(ns: u32, local: SocketAddr, remote: SocketAddr) -> u64 {
    let mut h = std::hash::DefaultHasher::new();
    (ns, canonical(local), canonical(remote)).hash(&mut h);
    h.finish()
}

impl PreOwners {
    /// Reads every process's socket descriptors and its namespace's TCP table (each namespace once,
    /// line by line). What cannot be read (a process gone meanwhile, no /proc) is skipped:
    /// attribution is best effort.
    pub fn scan(proc_root: &Path) -> PreOwners {
        let Ok(dir) = std::fs::read_dir(proc_root) else { return PreOwners::default() };
        let pids: Vec<u32> = dir.flatten().filter_map(|d| d.file_name().to_str()?.parse().ok()).collect();
        // The descriptors of 100,000 sockets take most of the time: processes split among threads.
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get()).clamp(1, 4);
        let parts: Vec<Vec<(u64, u32, u32)>> = std::thread::scope(|s| {
            let handles: Vec<_> = pids
                .chunks(pids.len().div_ceil(threads).max(1))
                .map(|chunk| s.spawn(move || chunk.iter().flat_map(|&pid| sockets_of(proc_root, pid)).collect()))
                .collect();
            handles.into_iter().filter_map(|h| h.join().ok()).collect()
        });
        let mut by_inode: HashMap<u64, (u32, u32)> = HashMap::new(); // socket inode -> (pid, netns)
        let mut netns_pid: HashMap<u32, u32> = HashMap::new();
        for (ino, pid, ns) in parts.into_iter().flatten() {
            by_inode.entry(ino).or_insert((pid, ns));
            netns_pid.entry(ns).or_insert(pid);
        }
        let mut out = PreOwners::default();
        let mut cgroups = Cgroups::new(proc_root, super::load::cgroup2_root().ok(), RuntimeFiles::host());
        let mut line = String::new();
        for (&ns, &pid) in &netns_pid {
            for file in ["tcp", "tcp6"] {
                let path = proc_root.join(pid.to_string()).join("net").join(file);
                let Ok(f) = std::fs::File::open(path) else { continue };
                let mut r = std::io::BufReader::new(f);
                line.clear();
                let _ = r.read_line(&mut line); // the header
                loop {
                    line.clear();
                    if !matches!(r.read_line(&mut line), Ok(n) if n > 0) {
                        break;
                    }
                    let Some(s) = parse_line(&line) else { continue };
                    let Some(&(owner_pid, owner_ns)) = by_inode.get(&s.inode) else { continue };
                    if owner_ns != ns {
                        continue;
                    }
                    let id = out.owner_id(proc_root, owner_pid, s.uid, &mut cgroups);
                    out.add_id(ns, &s, id);
                }
            }
        }
        out.by_pid = HashMap::new();
        out
    }

    /// The index of a process's owner record, read from /proc once per process (its cgroup once
    /// per cgroup).
    fn owner_id(&mut self, proc_root: &Path, pid: u32, uid: u32, cgroups: &mut Cgroups) -> u32 {
        if let Some(&i) = self.by_pid.get(&pid) {
            return i;
        }
        let comm = std::fs::read_to_string(proc_root.join(pid.to_string()).join("comm"))
            .map(|c| c.trim_end().to_string())
            .unwrap_or_default();
        let (cgroup_id, cgroup) = cgroups.of_pid(pid).map_or((0, None), |(id, c)| (id, Some(c)));
        self.owners.push(Process { pid, uid, cgroup_id, comm, cgroup });
        let i = self.owners.len() as u32 - 1;
        self.by_pid.insert(pid, i);
        i
    }

    /// Adds one socket of namespace `ns`.
    pub fn add(&mut self, ns: u32, s: &ProcSock, owner: Process) {
        self.owners.push(owner);
        let id = self.owners.len() as u32 - 1;
        self.add_id(ns, s, id);
    }

    fn add_id(&mut self, ns: u32, s: &ProcSock, id: u32) {
        match s.state {
            ESTABLISHED => {
                self.conns.insert(key(ns, s.local, s.remote), id);
            }
            LISTEN => self.listeners.entry((ns, s.local.port())).or_default().push((s.local.ip().to_canonical(), id)),
            _ => {}
        }
    }

    /// (connections, listeners) known.
    pub fn counts(&self) -> (usize, usize) {
        (self.conns.len(), self.listeners.values().map(Vec::len).sum())
    }

    /// The owner of a connection the daemon has no owner record for: the process that held it at
    /// start-up, or the one listening on its local address then (the most specific address first).
    pub fn owner_of(&self, id: &ConnId) -> Option<Process> {
        let (local, remote) = (canonical(id.tuple.local), canonical(id.tuple.remote));
        if let Some(&i) = self.conns.get(&key(id.netns, local, remote)) {
            return self.owners.get(i as usize).cloned();
        }
        let l = self.listeners.get(&(id.netns, local.port()))?;
        l.iter()
            .find(|(ip, _)| *ip == local.ip())
            .or_else(|| l.iter().find(|(ip, _)| ip.is_unspecified()))
            .and_then(|(_, i)| self.owners.get(*i as usize).cloned())
    }
}

/// (socket inode, pid, netns) of every socket descriptor of one process (none if it is gone).
fn sockets_of(proc_root: &Path, pid: u32) -> Vec<(u64, u32, u32)> {
    let dir = proc_root.join(pid.to_string());
    let Some(ns) = std::fs::read_link(dir.join("ns/net")).ok().and_then(|l| ns_inode(&l.to_string_lossy())) else {
        return Vec::new();
    };
    let fd_dir = dir.join("fd");
    let (Ok(d), Ok(entries)) = (std::fs::File::open(&fd_dir), std::fs::read_dir(&fd_dir)) else { return Vec::new() };
    let mut out = Vec::new();
    for e in entries.flatten() {
        // Relative to the open directory: no path is built per descriptor.
        if let Ok(l) = nix::fcntl::readlinkat(&d, e.file_name().as_os_str()) {
            if let Some(ino) = socket_inode(&l.to_string_lossy()) {
                out.push((ino, pid, ns));
            }
        }
    }
    out
}

/// An IPv4-mapped IPv6 address as the IPv4 address it is (a dual-stack socket's view).
fn canonical(a: SocketAddr) -> SocketAddr {
    SocketAddr::new(a.ip().to_canonical(), a.port())
}

/// `net:[4026531840]` -> 4026531840 (as the agent's u32 netns ids).
fn ns_inode(link: &str) -> Option<u32> {
    link.strip_prefix("net:[")?.strip_suffix(']')?.parse().ok()
}

/// `socket:[12345]` -> 12345.
fn socket_inode(link: &str) -> Option<u64> {
    link.strip_prefix("socket:[")?.strip_suffix(']')?.parse().ok()
}

/// One data line of /proc/net/tcp{,6}: `sl local rem st tx:rx tr:when retrnsmt uid timeout inode ...`.
pub fn parse_line(line: &str) -> Option<ProcSock> {
    let mut f = line.split_whitespace();
    let local = parse_addr(f.nth(1)?)?;
    let remote = parse_addr(f.next()?)?;
    let state = u8::from_str_radix(f.next()?, 16).ok()?;
    let uid = f.nth(3)?.parse().ok()?;
    let inode = f.nth(1)?.parse().ok()?;
    Some(ProcSock { local, remote, state, uid, inode })
}

/// `0100007F:1F90` (IPv4) or 32 hex digits:port (IPv6): each 32-bit word in the kernel's (little-endian) byte order.
fn parse_addr(s: &str) -> Option<SocketAddr> {
    let (ip, port) = s.split_once(':')?;
    let port = u16::from_str_radix(port, 16).ok()?;
    let word = |i: usize| u32::from_str_radix(ip.get(i * 8..i * 8 + 8)?, 16).ok().map(u32::swap_bytes);
    let ip = match ip.len() {
        8 => IpAddr::V4(Ipv4Addr::from(word(0)?)),
        32 => {
            let mut b = [0u8; 16];
            for i in 0..4 {
                b[i * 4..i * 4 + 4].copy_from_slice(&word(i)?.to_be_bytes());
            }
            IpAddr::V6(Ipv6Addr::from(b))
        }
        _ => return None,
    };
    Some(SocketAddr::new(ip, port))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Tuple;

    fn owner(pid: u32, comm: &str) -> Process {
        Process { pid, uid: 0, cgroup_id: 0, comm: comm.into(), cgroup: None }
    }

    fn id(ns: u32, local: &str, remote: &str) -> ConnId {
        ConnId { cookie: 1, netns: ns, tuple: Tuple { local: local.parse().unwrap(), remote: remote.parse().unwrap() } }
    }

    #[test]
    fn proc_net_tcp_lines_parse_for_both_families() {
        let v4 = "   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 31337 1 0000000000000000 100 0 0 10 0";
        let s = parse_line(v4).unwrap();
        assert_eq!(s.local, "127.0.0.1:8080".parse().unwrap());
        assert_eq!((s.state, s.uid, s.inode), (LISTEN, 1000, 31337));
        let v6 = "   1: 0000000000000000FFFF00000100007F:1451 0000000000000000FFFF00000200007F:C350 01 00000000:00000000 00:00000000 00000000     0        0 4242 1 0000000000000000 20 4 30 10 -1";
        let s = parse_line(v6).unwrap();
        assert_eq!(s.local, "[::ffff:127.0.0.1]:5201".parse().unwrap());
        assert_eq!(s.remote, "[::ffff:127.0.0.2]:50000".parse().unwrap());
        let v6 = "   2: 710000FD000001000000000002000000:1451 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 77 1";
        assert_eq!(parse_line(v6).unwrap().local, "[fd00:71:1::2]:5201".parse().unwrap());
        assert_eq!(parse_line("  sl  local_address rem_address   st tx_queue rx_queue"), None, "the header");
        assert_eq!(parse_line("garbage"), None);
    }

    #[test]
    fn links_name_their_inodes() {
        assert_eq!(ns_inode("net:[4026531840]"), Some(4026531840));
        assert_eq!(socket_inode("socket:[12345]"), Some(12345));
        assert_eq!(socket_inode("pipe:[12345]"), None);
        assert_eq!(socket_inode("/dev/null"), None);
    }

    #[test]
    fn an_old_connection_is_its_holders_and_a_new_one_is_its_old_listeners() {
        let mut p = PreOwners::default();
        let est = |l: &str, r: &str| ProcSock {
            local: l.parse().unwrap(),
            remote: r.parse().unwrap(),
            state: ESTABLISHED,
            uid: 0,
            inode: 1,
        };
        let lis = |l: &str| ProcSock {
            local: l.parse().unwrap(),
            remote: "0.0.0.0:0".parse().unwrap(),
            state: LISTEN,
            uid: 0,
            inode: 2,
        };
        p.add(7, &est("10.0.0.1:40000", "10.0.0.2:5201"), owner(10, "client"));
        p.add(7, &lis("[::]:8080"), owner(20, "http"));
        p.add(7, &lis("10.0.0.1:5201"), owner(30, "iperf3"));
        p.add(7, &lis("0.0.0.0:5201"), owner(31, "other"));
        let o = |i: ConnId| p.owner_of(&i).map(|o| o.comm);
        assert_eq!(o(id(7, "10.0.0.1:40000", "10.0.0.2:5201")), Some("client".into()));
        assert_eq!(o(id(8, "10.0.0.1:40000", "10.0.0.2:5201")), None, "another namespace");
        assert_eq!(o(id(7, "10.0.0.1:8080", "10.0.0.9:1234")), Some("http".into()), "a dual-stack listener on ::");
        assert_eq!(o(id(7, "10.0.0.1:5201", "10.0.0.9:1234")), Some("iperf3".into()), "the specific address first");
        assert_eq!(o(id(7, "10.0.0.3:5201", "10.0.0.9:1234")), Some("other".into()));
        assert_eq!(o(id(7, "10.0.0.1:9999", "10.0.0.9:1234")), None);
        assert_eq!(p.counts(), (1, 3));
    }

    #[test]
    fn a_scan_of_this_process_finds_its_own_listener() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let p = PreOwners::scan(Path::new("/proc"));
        let ns = std::fs::read_link("/proc/self/ns/net").ok().and_then(|l| ns_inode(&l.to_string_lossy())).unwrap();
        let o = p.owner_of(&id(ns, &addr.to_string(), "127.0.0.1:1")).expect("the listener is found");
        assert_eq!(o.pid, std::process::id());
        // Its cgroup, as /proc/self/cgroup names it.
        let me = std::fs::read_to_string("/proc/self/cgroup").unwrap();
        let want = crate::model::cgroup::v2_path(&me).map(str::to_string);
        assert_eq!(o.cgroup.as_ref().map(|c| c.path.clone()), want);
        assert_eq!(o.cgroup_id != 0, want.is_some() && super::super::load::cgroup2_root().is_ok());
        assert!(p.owner_of(&id(ns, "127.0.0.1:1", "127.0.0.1:2")).is_none());
        assert!(PreOwners::scan(Path::new("/nonexistent")).counts() == (0, 0));
    }
}
