//! The namespace topology: senders -- router -- receivers over veth, dual-stack (IPv4 and IPv6), removed on Drop.
use crate::cmd;
use crate::error::Result;
use crate::registry;
use serde::{Deserialize, Serialize};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::os::unix::fs::MetadataExt;

/// Shape of the topology.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TopoConfig {
    /// Number of sender namespaces (each with one link to the router).
    pub senders: usize,
    /// Number of receiver namespaces.
    pub receivers: usize,
    /// MTU of every lab link.
    pub mtu: u32,
    /// Keep TSO/GSO/GRO on the veths. Off (the default) makes every segment a wire-sized packet,
    /// as on a real router, at the price of more packets per second through the delay line.
    pub offload: bool,
}

impl Default for TopoConfig {
    fn default() -> Self {
        TopoConfig { senders: 1, receivers: 1, mtu: 1500, offload: false }
    }
}

/// The address family the lab's traffic uses; every host has an address of each.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Family {
    #[default]
    V4,
    V6,
}

impl Family {
    /// `v4` or `v6`.
    pub fn as_str(self) -> &'static str {
        match self {
            Family::V4 => "v4",
            Family::V6 => "v6",
        }
    }
}

/// The smallest MTU IPv6 runs on: a lab with smaller links has IPv4 only.
pub const IPV6_MIN_MTU: u32 = 1280;

fn no_v6() -> Ipv6Addr {
    Ipv6Addr::UNSPECIFIED
}

/// One end host and its link to the router.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Host {
    /// Network namespace name (use with `ip netns exec`).
    pub netns: String,
    /// Interface name inside the host namespace.
    pub ifname: String,
    /// The host's IPv4 address.
    pub addr: Ipv4Addr,
    /// The router-side interface of this host's link (inside the router namespace).
    pub router_ifname: String,
    /// The router's address on this link (the host's default gateway).
    pub router_addr: Ipv4Addr,
    /// The host's IPv6 address (`::` when the lab's MTU is below 1280, or in results saved before IPv6).
    #[serde(default = "no_v6")]
    pub addr6: Ipv6Addr,
    /// The router's IPv6 address on this link.
    #[serde(default = "no_v6")]
    pub router_addr6: Ipv6Addr,
    /// Inode of the namespace (what the agent reports as `netns`): addresses repeat across runs, this does not.
    #[serde(default)]
    pub netns_ino: u64,
}

impl Host {
    /// The host's address of family `f`.
    pub fn ip(&self, f: Family) -> IpAddr {
        match f {
            Family::V4 => IpAddr::V4(self.addr),
            Family::V6 => IpAddr::V6(self.addr6),
        }
    }
}

/// `n` written in decimal read as hex digits, so that 10.71.3.2 becomes fd00:71:3::2.
fn decimal_digits(n: u16) -> u16 {
    (n / 100) * 0x100 + (n / 10 % 10) * 0x10 + n % 10
}

/// A built topology. Dropping it deletes every namespace (and so every veth and process in them).
#[derive(Debug)]
pub struct Topology {
    /// Name prefix shared by this run's namespaces (`tvl<pid>-<n>`).
    pub prefix: String,
    /// Router namespace (holds the bottleneck, delay line, policer, drops).
    pub router: String,
    /// Sender hosts (data flows from these).
    pub senders: Vec<Host>,
    /// Receiver hosts.
    pub receivers: Vec<Host>,
    /// MTU of every link.
    pub mtu: u32,
    namespaces: Vec<String>,
}

fn add_netns(ns: &str, all: &mut Vec<String>) -> Result<()> {
    registry::register(ns);
    all.push(ns.to_string());
    cmd::run(&["ip", "netns", "add", ns])?;
    cmd::run(&["ip", "-n", ns, "link", "set", "lo", "up"])?;
    // Before any veth exists (they take `default`): no router advertisements, and no duplicate
    // address detection, so link-local and lab addresses are usable at once.
    cmd::run_in(
        ns,
        &[
            "sysctl",
            "-qw",
            "net.ipv6.conf.all.accept_ra=0",
            "net.ipv6.conf.default.accept_ra=0",
            "net.ipv6.conf.default.accept_dad=0",
        ],
    )?;
    Ok(())
}

fn link(host: &Host, router: &str, cfg: &TopoConfig) -> Result<()> {
    let mtu = cfg.mtu.to_string();
    cmd::run(&[
        "ip",
        "link",
        "add",
        "name",
        &host.ifname,
        "netns",
        &host.netns,
        "mtu",
        &mtu,
        "type",
        "veth",
        "peer",
        "name",
        &host.router_ifname,
        "netns",
        router,
        "mtu",
        &mtu,
    ])?;
    let h = format!("{}/24", host.addr);
    let r = format!("{}/24", host.router_addr);
    cmd::run(&["ip", "-n", &host.netns, "addr", "add", &h, "dev", &host.ifname])?;
    cmd::run(&["ip", "-n", router, "addr", "add", &r, "dev", &host.router_ifname])?;
    cmd::run(&["ip", "-n", &host.netns, "link", "set", &host.ifname, "up"])?;
    cmd::run(&["ip", "-n", router, "link", "set", &host.router_ifname, "up"])?;
    let gw = host.router_addr.to_string();
    cmd::run(&["ip", "-n", &host.netns, "route", "add", "default", "via", &gw])?;
    if !host.addr6.is_unspecified() {
        let h6 = format!("{}/64", host.addr6);
        let r6 = format!("{}/64", host.router_addr6);
        cmd::run(&["ip", "-n", &host.netns, "-6", "addr", "add", &h6, "dev", &host.ifname, "nodad"])?;
        cmd::run(&["ip", "-n", router, "-6", "addr", "add", &r6, "dev", &host.router_ifname, "nodad"])?;
        let gw6 = host.router_addr6.to_string();
        cmd::run(&["ip", "-n", &host.netns, "-6", "route", "add", "default", "via", &gw6, "dev", &host.ifname])?;
    }
    if !cfg.offload {
        let off = ["tso", "off", "gso", "off", "gro", "off"];
        let mut a = vec!["ethtool", "-K", &host.ifname];
        a.extend_from_slice(&off);
        cmd::run_in(&host.netns, &a)?;
        let mut b = vec!["ethtool", "-K", &host.router_ifname];
        b.extend_from_slice(&off);
        cmd::run_in(router, &b)?;
    }
    Ok(())
}

impl Topology {
    /// Sweeps leftovers of dead runs, then builds a fresh topology. On error, what was built is removed.
    pub fn build(cfg: &TopoConfig) -> Result<Topology> {
        if cfg.senders == 0 || cfg.receivers == 0 || cfg.senders > 16 || cfg.receivers > 16 {
            return Err(crate::LabError::Invalid("senders and receivers must be 1..=16".into()));
        }
        registry::sweep_leftovers(false);
        let prefix = registry::new_prefix();
        let router = format!("{prefix}-rt");
        let v6 = cfg.mtu >= IPV6_MIN_MTU;
        let host = |role: char, i: usize, net: u8| {
            let (n, k) = (decimal_digits(u16::from(net)), decimal_digits(i as u16 + 1));
            let six = |last: u16| if v6 { Ipv6Addr::new(0xfd00, n, k, 0, 0, 0, 0, last) } else { no_v6() };
            Host {
                netns: format!("{prefix}-{role}{i}"),
                ifname: "eth0".to_string(),
                addr: Ipv4Addr::new(10, net, i as u8 + 1, 2),
                router_ifname: format!("{role}{i}"),
                router_addr: Ipv4Addr::new(10, net, i as u8 + 1, 1),
                addr6: six(2),
                router_addr6: six(1),
                netns_ino: 0,
            }
        };
        let mut topo = Topology {
            senders: (0..cfg.senders).map(|i| host('s', i, 71)).collect(),
            receivers: (0..cfg.receivers).map(|i| host('r', i, 72)).collect(),
            prefix,
            router,
            mtu: cfg.mtu,
            namespaces: Vec::new(),
        };
        // On any error below, `topo` is dropped and removes what exists.
        let mut all = Vec::new();
        let r = (|| -> Result<()> {
            add_netns(&topo.router, &mut all)?;
            cmd::run_in(&topo.router, &["sysctl", "-qw", "net.ipv4.ip_forward=1", "net.ipv6.conf.all.forwarding=1"])?;
            for h in topo.senders.iter_mut().chain(topo.receivers.iter_mut()) {
                add_netns(&h.netns, &mut all)?;
                h.netns_ino = std::fs::metadata(format!("/run/netns/{}", h.netns)).map(|m| m.ino()).unwrap_or(0);
                link(h, &topo.router, cfg)?;
            }
            Ok(())
        })();
        topo.namespaces = all;
        r?;
        Ok(topo)
    }

    /// Every namespace of this topology (router first).
    pub fn namespaces(&self) -> &[String] {
        &self.namespaces
    }

    /// Makes every connection of the end hosts use congestion control `cc`: the `congctl` of their
    /// default routes (both families), which the kernel applies to connections it opens and
    /// accepts alike. A namespace's `net.ipv4.tcp_congestion_control` may only name the CCs of the
    /// host's `tcp_allowed_congestion_control` (cubic is refused with EPERM where only reno and bbr
    /// are allowed), and a setsockopt reaches only the applications the lab writes.
    pub fn set_cc(&self, cc: &str) -> Result<()> {
        for h in self.senders.iter().chain(self.receivers.iter()) {
            let gw = h.router_addr.to_string();
            cmd::run_in(&h.netns, &["ip", "route", "replace", "default", "via", &gw, "dev", &h.ifname, "congctl", cc])?;
            if !h.addr6.is_unspecified() {
                let gw6 = h.router_addr6.to_string();
                cmd::run_in(
                    &h.netns,
                    &["ip", "-6", "route", "replace", "default", "via", &gw6, "dev", &h.ifname, "congctl", cc],
                )?;
            }
        }
        Ok(())
    }

    /// Sets `key=value` (e.g. `net.ipv4.tcp_sack=0`) in namespace `ns`.
    pub fn sysctl(&self, ns: &str, key: &str, value: &str) -> Result<()> {
        let kv = format!("{key}={value}");
        cmd::run_in(ns, &["sysctl", "-qw", &kv]).map(|_| ())
    }
}

impl Drop for Topology {
    fn drop(&mut self) {
        for ns in self.namespaces.iter().rev() {
            registry::delete_netns(ns);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ipv6_addresses_mirror_the_ipv4_ones_and_old_results_still_parse() {
        assert_eq!(decimal_digits(71), 0x71);
        assert_eq!(decimal_digits(16), 0x16);
        let a = Ipv6Addr::new(0xfd00, decimal_digits(72), decimal_digits(3), 0, 0, 0, 0, 2);
        assert_eq!(a.to_string(), "fd00:72:3::2");
        let old = r#"{"netns":"n","ifname":"eth0","addr":"10.71.1.2","router_ifname":"s0","router_addr":"10.71.1.1"}"#;
        let h: Host = serde_json::from_str(old).unwrap_or_else(|e| panic!("{e}"));
        assert!(h.addr6.is_unspecified());
        assert_eq!(h.ip(Family::V4).to_string(), "10.71.1.2");
        assert_eq!(serde_json::to_string(&Family::V6).ok().as_deref(), Some("\"v6\""));
    }
}
