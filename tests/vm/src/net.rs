//! A two-namespace path (sender, receiver, one veth pair) with delay, loss and outages.
//!
//! netem on the sender's egress when the kernel has it (the Debian VMs); otherwise (this host,
//! which has no netem) tbf for the rate and nft drops at the receiver's input for loss and
//! outages, as the lab does. Loss only ever hits data segments: the ACK path stays clean, so
//! every counted retransmission is the sender's.
use anyhow::{bail, Result};

use crate::report::note;
use crate::sys::{run, run_quiet};

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Impair {
    /// netem if the kernel has it, else nft.
    Auto,
    Netem,
    Nft,
}

#[derive(Debug, Clone, Copy)]
pub struct Shape {
    pub delay_ms: u32,
    pub rate_mbit: u32,
}

pub struct Path {
    pub snd: String,
    pub rcv: String,
    pub snd_if: String,
    pub rcv_ip: String,
    pub impair: Impair,
    pub port: u16,
    shape: Shape,
}

impl Path {
    pub fn new(impair: Impair, shape: Shape, port: u16) -> Result<Path> {
        let (snd, rcv) = ("tvgs".to_string(), "tvgr".to_string());
        let (snd_if, rcv_if) = ("tvs0".to_string(), "tvr0".to_string());
        run_quiet("ip", &["netns", "del", &snd]);
        run_quiet("ip", &["netns", "del", &rcv]);
        run("ip", &["netns", "add", &snd])?;
        run("ip", &["netns", "add", &rcv])?;
        let mut p = Path { snd, rcv, snd_if, rcv_ip: "10.99.0.2".into(), impair, port, shape };
        run(
            "ip",
            &["link", "add", &p.snd_if, "netns", &p.snd, "type", "veth", "peer", "name", &rcv_if, "netns", &p.rcv],
        )?;
        for (ns, dev, ip) in [(&p.snd, &p.snd_if, "10.99.0.1/24"), (&p.rcv, &rcv_if, "10.99.0.2/24")] {
            run("ip", &["-n", ns, "addr", "add", ip, "dev", dev])?;
            run("ip", &["-n", ns, "link", "set", dev, "up"])?;
            run("ip", &["-n", ns, "link", "set", "lo", "up"])?;
        }
        p.impair = match impair {
            Impair::Auto | Impair::Netem => match p.netem(0.0) {
                Ok(()) => Impair::Netem,
                Err(e) if impair == Impair::Auto => {
                    note(&format!("no netem here ({e}); using tbf + nft drops"));
                    p.nft_setup()?;
                    Impair::Nft
                }
                Err(e) => return Err(e),
            },
            Impair::Nft => {
                p.nft_setup()?;
                Impair::Nft
            }
        };
        Ok(p)
    }

    fn netem(&self, loss_pct: f64) -> Result<()> {
        let verb = if loss_pct == 0.0 && self.impair != Impair::Netem { "add" } else { "change" };
        let (d, r) = (format!("{}ms", self.shape.delay_ms), format!("{}mbit", self.shape.rate_mbit));
        let loss = format!("{loss_pct}%");
        // A queue long enough never to drop locally: a retransmission the qdisc refuses counts in
        // TcpRetransSegs (and TCPRetransFail) but was never sent, so the agent rightly skips it.
        // With random loss cwnd stays small, so the queue does not inflate the RTT much.
        run(
            "tc",
            &[
                "-n",
                &self.snd,
                "qdisc",
                verb,
                "dev",
                &self.snd_if,
                "root",
                "netem",
                "delay",
                &d,
                "rate",
                &r,
                "loss",
                &loss,
                "limit",
                "10000",
            ],
        )?;
        Ok(())
    }

    fn nft_setup(&self) -> Result<()> {
        let r = format!("{}mbit", self.shape.rate_mbit);
        // As for netem: a limit above tcp_limit_output_bytes, so the qdisc never drops.
        run(
            "tc",
            &[
                "-n",
                &self.snd,
                "qdisc",
                "add",
                "dev",
                &self.snd_if,
                "root",
                "tbf",
                "rate",
                &r,
                "burst",
                "32kb",
                "limit",
                "4mb",
            ],
        )?;
        if self.shape.delay_ms > 0 {
            note("nft mode has no delay: the path's RTT is the veth's");
        }
        Ok(())
    }

    fn nft(&self, script: &str) -> Result<()> {
        let mut c = std::process::Command::new("ip")
            .args(["netns", "exec", &self.rcv, "nft", "-f", "-"])
            .stdin(std::process::Stdio::piped())
            .spawn()?;
        if let Some(mut i) = c.stdin.take() {
            std::io::Write::write_all(&mut i, script.as_bytes())?;
        }
        if !c.wait()?.success() {
            bail!("nft -f failed for: {script}");
        }
        Ok(())
    }

    /// Random loss of data segments (SYNs spared), in percent.
    pub fn set_loss(&self, pct: f64) -> Result<()> {
        match self.impair {
            Impair::Netem => self.netem(pct),
            _ => {
                run_quiet("ip", &["netns", "exec", &self.rcv, "nft", "delete", "table", "inet", "tvloss"]);
                if pct <= 0.0 {
                    return Ok(());
                }
                let per_10k = (pct * 100.0).round() as u32;
                self.nft(&format!(
                    "table inet tvloss {{\n chain in {{\n  type filter hook input priority 0; policy accept;\n  tcp dport {} tcp flags & syn == 0 numgen random mod 10000 < {per_10k} drop\n }}\n}}\n",
                    self.port
                ))
            }
        }
    }

    /// Everything from sender to receiver lost (on) or the previous loss rate back (off).
    pub fn outage(&self, on: bool, loss_pct: f64) -> Result<()> {
        match self.impair {
            Impair::Netem => self.netem(if on { 100.0 } else { loss_pct }),
            _ if on => self
                .nft("table inet tvout {\n chain in {\n  type filter hook input priority -10; policy drop;\n }\n}\n"),
            _ => {
                run("ip", &["netns", "exec", &self.rcv, "nft", "delete", "table", "inet", "tvout"])?;
                Ok(())
            }
        }
    }
}

impl Drop for Path {
    fn drop(&mut self) {
        run_quiet("ip", &["netns", "del", &self.snd]);
        run_quiet("ip", &["netns", "del", &self.rcv]);
    }
}
