//! Connection identity: socket cookie, network namespace and 4-tuple, plus its process.
use std::fmt;
use std::net::{IpAddr, SocketAddr};

use serde::{Deserialize, Serialize};

use super::cgroup::Cgroup;

/// Local and remote end of a connection as this host sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Tuple {
    pub local: SocketAddr,
    pub remote: SocketAddr,
}

impl fmt::Display for Tuple {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.local, self.remote)
    }
}

impl Tuple {
    pub fn remote_ip(&self) -> IpAddr {
        self.remote.ip()
    }
}

/// Who a connection is: the socket cookie is the key, the rest labels it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ConnId {
    pub cookie: u64,
    pub netns: u32,
    #[serde(flatten)]
    pub tuple: Tuple,
}

impl fmt::Display for ConnId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({}, netns {})", self.tuple, Sk(self.cookie), self.netns)
    }
}

/// A socket cookie as `ss -e` prints it, and as people read it everywhere: `sk:1f3a`
/// (lowercase hex, no 0x). The JSON events keep the number.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Sk(pub u64);

impl fmt::Display for Sk {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "sk:{:x}", self.0)
    }
}

/// The process a socket belongs to: the one that first sent on it (or connected, listened,
/// accepted). Not whose stop it is: that is a stop's owner (`StopOwner`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
pub struct Process {
    pub pid: u32,
    pub uid: u32,
    /// Its cgroup v2 id (the cgroup directory's inode number), 0 when not known.
    pub cgroup_id: u64,
    pub comm: String,
    /// What its cgroup's path says (unit, container, pod), read once per cgroup and shared by
    /// every process and socket in it; None when it could not be read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cgroup: Option<Cgroup>,
}
