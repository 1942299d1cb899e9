//! `Lab`: a topology with its path applied and sysctls set — the handle tests and scenarios work with.
use crate::clock::Stamp;
use crate::cmd;
use crate::error::{LabError, Result};
use crate::observe::{self, PingStats};
use crate::path::{self, AppliedPath, Dir, PathConfig};
use crate::topo::{Family, Host, TopoConfig, Topology, IPV6_MIN_MTU};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::process::Command;

/// Everything needed to build a lab.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct LabConfig {
    pub topo: TopoConfig,
    pub path: PathConfig,
    /// sysctls set in every sender namespace, e.g. ("net.ipv4.tcp_sack", "0").
    pub sender_sysctls: Vec<(String, String)>,
    /// sysctls set in every receiver namespace.
    pub receiver_sysctls: Vec<(String, String)>,
    /// Measure the idle RTT after setup and shorten the delay lines by the lab's own overhead.
    pub trim_delay: bool,
    /// The family the traffic (and the delay trim's ping) uses; every host has both addresses.
    #[serde(default)]
    pub family: Family,
    /// Congestion control of every connection of the end hosts (`congctl` on their routes): cubic,
    /// reno, bbr. None: the host's default (iperf3 scenarios still pass their own `-C`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cc: Option<String>,
}

impl LabConfig {
    /// Checks the path and that the family fits the rest (IPv6 needs links of 1280 bytes or more;
    /// the targeted drop parses IPv4 only).
    pub fn validate(&self) -> Result<()> {
        self.path.validate()?;
        if self.family == Family::V6 && self.topo.mtu < IPV6_MIN_MTU {
            return Err(LabError::Invalid(format!(
                "IPv6 needs an MTU of at least {IPV6_MIN_MTU}, not {}",
                self.topo.mtu
            )));
        }
        if self.family == Family::V6 && self.path.retx_drop.is_some() {
            return Err(LabError::Invalid("the targeted drop (retx_drop) handles IPv4 only".into()));
        }
        if let Some(m) = self.path.next_mtu {
            self.check_mtu_drop(m.mtu)?;
        }
        if let Some(cc) = &self.cc {
            if cc.is_empty() || !cc.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                return Err(LabError::Invalid(format!("congestion control `{cc}` is no kernel CC name")));
            }
        }
        Ok(())
    }

    /// An MTU the receivers' links can drop to: below the lab's own, and for IPv6 traffic not below
    /// IPv6's 1280 (a smaller MTU takes IPv6 off the link: an outage, not a black hole).
    pub fn check_mtu_drop(&self, mtu: u32) -> Result<()> {
        path::check_mtu(mtu)?;
        if mtu >= self.topo.mtu {
            return Err(LabError::Invalid(format!(
                "an MTU drop to {mtu} is no drop from the links' {}",
                self.topo.mtu
            )));
        }
        if self.family == Family::V6 && mtu < IPV6_MIN_MTU {
            return Err(LabError::Invalid(format!(
                "IPv6 traffic needs the next link's MTU at {IPV6_MIN_MTU} or more, not {mtu}"
            )));
        }
        Ok(())
    }
}

/// What the delay trim measured and did.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TrimReport {
    pub before: PingStats,
    pub trimmed_ms: Vec<(Dir, f64)>,
    pub after: PingStats,
}

/// A running lab. Dropping it stops the delay lines and removes every namespace.
pub struct Lab {
    // Field order matters: the path (delay threads) goes before the namespaces.
    path: AppliedPath,
    topo: Topology,
    cfg: LabConfig,
    work_dir: PathBuf,
    /// When the lab finished setting up.
    pub up_at: Stamp,
    /// Delay trim, when `trim_delay` was set and a delay is configured.
    pub trim: Option<TrimReport>,
}

/// True when running as root (the lab needs CAP_NET_ADMIN and CAP_SYS_ADMIN).
pub fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

/// Tools the lab runs; the first missing one is reported.
pub const TOOLS: &[&str] =
    &["ip", "tc", "nft", "ethtool", "sysctl", "ping", "nstat", "ss", "iperf3", "tcpdump", "clang", "bpftool"];

/// Checks root and tools up front, with a message that says what is missing.
pub fn check_prerequisites() -> Result<()> {
    if !is_root() {
        return Err(LabError::Missing("root (network namespaces, tc, nft need CAP_NET_ADMIN/CAP_SYS_ADMIN)".into()));
    }
    let missing: Vec<&str> = TOOLS.iter().copied().filter(|t| !cmd::have_tool(t)).collect();
    if !missing.is_empty() {
        return Err(LabError::Missing(format!("tools {} (run scripts/install-deps.sh)", missing.join(", "))));
    }
    Ok(())
}

impl Lab {
    /// Builds the topology, applies sysctls and the path. `work_dir` holds build artefacts (bpf object).
    pub fn up(cfg: &LabConfig, work_dir: &Path) -> Result<Lab> {
        check_prerequisites()?;
        cfg.validate()?;
        let topo = Topology::build(&cfg.topo)?;
        for h in &topo.senders {
            for (k, v) in &cfg.sender_sysctls {
                topo.sysctl(&h.netns, k, v)?;
            }
        }
        for h in &topo.receivers {
            for (k, v) in &cfg.receiver_sysctls {
                topo.sysctl(&h.netns, k, v)?;
            }
        }
        if let Some(cc) = &cfg.cc {
            let have =
                std::fs::read_to_string("/proc/sys/net/ipv4/tcp_available_congestion_control").unwrap_or_default();
            if !have.split_whitespace().any(|c| c == cc) {
                return Err(LabError::Missing(format!(
                    "congestion control {cc} (have: {}; modprobe tcp_{cc})",
                    have.trim()
                )));
            }
            topo.set_cc(cc)?;
        }
        let path = path::apply(&topo, &cfg.path, work_dir)?;
        let mut lab =
            Lab { path, topo, cfg: cfg.clone(), work_dir: work_dir.to_path_buf(), up_at: Stamp::now(), trim: None };
        if cfg.trim_delay && cfg.path.rtt_ms() > 0.0 {
            lab.trim = Some(lab.trim_delay()?);
        }
        lab.up_at = Stamp::now();
        Ok(lab)
    }

    fn trim_delay(&self) -> Result<TrimReport> {
        let before = self.ping(0, 0, 20, 0.02)?;
        if before.received < 10 {
            return Err(LabError::Invalid(format!(
                "path lost {}/{} pings while idle; cannot trim delay",
                before.sent - before.received,
                before.sent
            )));
        }
        // min is the least disturbed estimate of the fixed overhead; avg carries wake-up noise.
        let excess = ((before.min_ms + before.avg_ms) / 2.0 - self.cfg.path.rtt_ms()).max(0.0);
        let trimmed_ms = self.path.trim_delay(&self.cfg.path, excess);
        let after = self.ping(0, 0, 20, 0.02)?;
        Ok(TrimReport { before, trimmed_ms, after })
    }

    /// The configuration this lab was built from.
    pub fn config(&self) -> &LabConfig {
        &self.cfg
    }
    /// Sender hosts.
    pub fn senders(&self) -> &[Host] {
        &self.topo.senders
    }
    /// Receiver hosts.
    pub fn receivers(&self) -> &[Host] {
        &self.topo.receivers
    }
    /// Router namespace name.
    pub fn router(&self) -> &str {
        &self.topo.router
    }
    /// Name prefix of this lab's namespaces.
    pub fn prefix(&self) -> &str {
        &self.topo.prefix
    }
    /// The applied path (outages, counters).
    pub fn path(&self) -> &AppliedPath {
        &self.path
    }
    /// Mutable access to the applied path (stopping delay lines).
    pub fn path_mut(&mut self) -> &mut AppliedPath {
        &mut self.path
    }
    /// Where build artefacts go.
    pub fn work_dir(&self) -> &Path {
        &self.work_dir
    }
    /// Every namespace with its role: ("router", ns), ("s0", ns), ("r0", ns), ...
    pub fn roles(&self) -> Vec<(String, String)> {
        let mut v = vec![("router".to_string(), self.topo.router.clone())];
        v.extend(self.topo.senders.iter().enumerate().map(|(i, h)| (format!("s{i}"), h.netns.clone())));
        v.extend(self.topo.receivers.iter().enumerate().map(|(i, h)| (format!("r{i}"), h.netns.clone())));
        v
    }
    /// Runs a command in namespace `ns` and returns stdout.
    pub fn exec(&self, ns: &str, args: &[&str]) -> Result<String> {
        cmd::run_in(ns, args)
    }
    /// A `Command` that runs inside namespace `ns` (set stdio, then spawn).
    pub fn command(&self, ns: &str, args: &[&str]) -> Command {
        cmd::command_in(ns, args)
    }
    /// The family the traffic uses.
    pub fn family(&self) -> Family {
        self.cfg.family
    }
    /// `host`'s address in the family the traffic uses.
    pub fn addr(&self, host: &Host) -> std::net::IpAddr {
        host.ip(self.cfg.family)
    }
    /// Pings receiver `receiver` from sender `sender` (in the lab's family).
    pub fn ping(&self, sender: usize, receiver: usize, count: u32, interval_s: f64) -> Result<PingStats> {
        let (s, r) = self.pair(sender, receiver)?;
        observe::ping(&s.netns, &self.addr(r).to_string(), count, interval_s)
    }
    /// The sender and receiver hosts at these indices.
    pub fn pair(&self, sender: usize, receiver: usize) -> Result<(&Host, &Host)> {
        let s = self.topo.senders.get(sender).ok_or_else(|| LabError::Invalid(format!("no sender {sender}")))?;
        let r =
            self.topo.receivers.get(receiver).ok_or_else(|| LabError::Invalid(format!("no receiver {receiver}")))?;
        Ok((s, r))
    }
}
