//! Scenario type, timed events and the knob overrides a person or test can apply to any scenario.
use crate::bpf::RetxDrop;
use crate::error::{LabError, Result};
use crate::lab::LabConfig;
use crate::path::{Dir, Police, Shape};
use crate::plain::Pause;
use crate::topo::Family;
use crate::traffic::Traffic;
use crate::truth::Expected;
use serde::{Deserialize, Serialize};

/// Something that happens at a time during the traffic.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum Event {
    /// Drop every packet of `dir` (None = both) from `at_s` for `for_s` seconds after traffic start;
    /// with `receiver`, only the packets to and from that receiver (one remote prefix fails).
    Outage {
        at_s: f64,
        for_s: f64,
        dir: Option<Dir>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        receiver: Option<usize>,
    },
    /// Freeze (SIGSTOP) the traffic applications (iperf3, python3, curl) of one side from `at_s` for
    /// `for_s` seconds: a sending application that stops writing, a receiving one that stops reading.
    AppPause { at_s: f64, for_s: f64, side: Side },
    /// The router's links towards the receivers drop to `mtu` from `at_s` (for `for_s` seconds, or
    /// to the end), the router's ICMP about it dropped when `filter_icmp`: a path MTU black hole
    /// mid-transfer ([`crate::path::MtuDrop`]).
    MtuDrop {
        at_s: f64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        for_s: Option<f64>,
        mtu: u32,
        filter_icmp: bool,
    },
    /// The router's links towards the receivers get their MTU back at `at_s` (ends a drop that was
    /// in force from the start, `PathConfig::next_mtu`).
    MtuRestore { at_s: f64 },
}

/// Which end hosts an application pause freezes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Side {
    Sender,
    Receiver,
}

/// A named, reproducible situation with the diagnosis the agent should make.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Scenario {
    pub name: String,
    /// One line: what happens.
    pub summary: String,
    /// The study it reproduces (docs/diagnosis.md, "The studies cited"), if any.
    pub paper: Option<String>,
    /// How it was scaled from the paper and what to look for.
    pub doc: String,
    pub lab: LabConfig,
    pub traffic: Traffic,
    pub events: Vec<Event>,
    pub expected: Vec<Expected>,
}

/// Overrides for a scenario's defaults (the `lab run` flags; also usable from tests).
#[derive(Debug, Clone, Default, clap::Args)]
pub struct Knobs {
    /// Round-trip delay in ms added by the delay line, split evenly between the directions (0..=2000).
    #[arg(long, value_parser = clap::value_parser!(u32).range(0..=2000))]
    pub rtt_ms: Option<u32>,
    /// Forward (data) bottleneck rate in Mbit/s, shaped with tbf on the router (1..=10000).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=10000))]
    pub rate_mbit: Option<u32>,
    /// tbf queue limit in bytes for the forward bottleneck (drop-tail buffer).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1500..=1_000_000_000))]
    pub queue_bytes: Option<u64>,
    /// Forward policer rate in Mbit/s (token bucket on arrival at the router; drops what exceeds it).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=10000))]
    pub police_mbit: Option<u32>,
    /// Policer bucket (burst) in bytes; needs a policer (scenario's or --police-mbit).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1500..=4_000_000_000))]
    pub police_burst: Option<u64>,
    /// Random forward loss in percent (0..=100, e.g. 0.05).
    #[arg(long)]
    pub loss_pct: Option<f64>,
    /// Traffic duration in seconds (1..=600); with --bytes it is the cap.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=600))]
    pub duration: Option<u32>,
    /// Bytes each iperf3 client sends (iperf3 -n), e.g. 1000000000 for the paper's 1 GB.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub bytes: Option<u64>,
    /// Parallel streams per iperf3 client (iperf3 -P, 1..=32).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=32))]
    pub streams: Option<u32>,
    /// Congestion control of every connection (cubic, reno, bbr): iperf3 -C and the congctl of the
    /// end hosts' routes (socket pair, http.server, curl); iperf3 scenarios default to cubic.
    #[arg(long)]
    pub cc: Option<String>,
    /// SACK on the senders: on or off.
    #[arg(long, value_parser = ["on", "off"])]
    pub sack: Option<String>,
    /// Receivers' tcp_rmem max in bytes (also sets core.rmem_max).
    #[arg(long, value_parser = clap::value_parser!(u64).range(4096..=1_073_741_824))]
    pub rmem_max: Option<u64>,
    /// Senders' tcp_wmem max in bytes (also sets core.wmem_max).
    #[arg(long, value_parser = clap::value_parser!(u64).range(4096..=1_073_741_824))]
    pub wmem_max: Option<u64>,
    /// MTU of every lab link (576..=9000).
    #[arg(long, value_parser = clap::value_parser!(u32).range(576..=9000))]
    pub mtu: Option<u32>,
    /// Start of an outage (both directions), seconds after traffic start.
    #[arg(long)]
    pub outage_at: Option<f64>,
    /// Length of the outage in seconds (with --outage-at; default 2.5).
    #[arg(long)]
    pub outage_for: Option<f64>,
    /// Targeted drop: how many distinct retransmitted segments get their retransmissions dropped.
    #[arg(long, value_parser = clap::value_parser!(u32).range(0..=100000))]
    pub retx_segments: Option<u32>,
    /// Targeted drop: how many retransmissions of each target are dropped (default 1).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=100))]
    pub retx_drops: Option<u32>,
    /// Plain receiver (zero-window scenario): stop reading at this second.
    #[arg(long)]
    pub pause_at: Option<f64>,
    /// Plain receiver: stop reading for this many seconds.
    #[arg(long)]
    pub pause_for: Option<f64>,
    /// Do not trim the delay lines by the lab's measured overhead.
    #[arg(long)]
    pub no_trim: bool,
    /// Keep TSO/GSO/GRO on the veths (fewer, larger packets; less like a real wire).
    #[arg(long)]
    pub offload: bool,
    /// Address family of the traffic (every lab host has an IPv4 and an IPv6 address); default v4.
    #[arg(long, value_enum)]
    pub family: Option<Family>,
}

fn set_sysctl(list: &mut Vec<(String, String)>, k: &str, v: String) {
    list.retain(|(kk, _)| kk != k);
    list.push((k.to_string(), v));
}

fn check_secs(name: &str, v: Option<f64>) -> Result<()> {
    match v {
        Some(x) if !(0.0..=600.0).contains(&x) => {
            Err(LabError::Invalid(format!("--{name} {x} not in 0..=600 seconds")))
        }
        _ => Ok(()),
    }
}

impl Scenario {
    /// Applies knob overrides; errors on values out of range or knobs the scenario cannot take.
    pub fn apply_knobs(&mut self, k: &Knobs) -> Result<()> {
        check_secs("outage-at", k.outage_at)?;
        check_secs("outage-for", k.outage_for)?;
        check_secs("pause-at", k.pause_at)?;
        check_secs("pause-for", k.pause_for)?;
        let p = &mut self.lab.path;
        if let Some(rtt) = k.rtt_ms {
            p.forward.delay_ms = f64::from(rtt) / 2.0;
            p.reverse.delay_ms = f64::from(rtt) / 2.0;
        }
        if let Some(r) = k.rate_mbit {
            let s = p.forward.shape.get_or_insert(Shape { rate_mbit: 0.0, burst_bytes: None, limit_bytes: None });
            s.rate_mbit = f64::from(r);
        }
        if let Some(q) = k.queue_bytes {
            let s = p
                .forward
                .shape
                .as_mut()
                .ok_or_else(|| LabError::Invalid("--queue-bytes needs a shaper (--rate-mbit)".into()))?;
            s.limit_bytes = Some(q);
        }
        if let Some(r) = k.police_mbit {
            let pol = p.forward.police.get_or_insert(Police { rate_mbit: 0.0, burst_bytes: 256 * 1024 });
            pol.rate_mbit = f64::from(r);
        }
        if let Some(b) = k.police_burst {
            let pol = p
                .forward
                .police
                .as_mut()
                .ok_or_else(|| LabError::Invalid("--police-burst needs a policer (--police-mbit)".into()))?;
            pol.burst_bytes = b;
        }
        if let Some(l) = k.loss_pct {
            if !(0.0..=100.0).contains(&l) {
                return Err(LabError::Invalid(format!("--loss-pct {l} not in 0..=100")));
            }
            p.forward.loss_ppm = (l * 10_000.0).round() as u32;
        }
        if let Some(n) = k.retx_segments {
            let d = p.retx_drop.get_or_insert(RetxDrop { segments: 0, drops_per_segment: 1 });
            d.segments = n;
        }
        if let Some(n) = k.retx_drops {
            let d =
                p.retx_drop.as_mut().ok_or_else(|| LabError::Invalid("--retx-drops needs --retx-segments".into()))?;
            d.drops_per_segment = n;
        }
        if let Some(m) = k.mtu {
            self.lab.topo.mtu = m;
        }
        if k.offload {
            self.lab.topo.offload = true;
        }
        if k.no_trim {
            self.lab.trim_delay = false;
        }
        if let Some(f) = k.family {
            self.lab.family = f;
            if f == Family::V6 {
                // IPv6 does not run below 1280: a smaller next link would be an outage.
                let v6 = |m: &mut u32| *m = (*m).max(crate::topo::IPV6_MIN_MTU);
                if let Some(m) = self.lab.path.next_mtu.as_mut() {
                    v6(&mut m.mtu);
                }
                for e in self.events.iter_mut() {
                    if let Event::MtuDrop { mtu, .. } = e {
                        v6(mtu);
                    }
                }
            }
        }
        if let Some(cc) = &k.cc {
            // Every connection of the end hosts (their routes' congctl) and iperf3's own -C.
            self.lab.cc = Some(cc.clone());
            if let Traffic::Iperf { cc: c, .. } = &mut self.traffic {
                *c = Some(cc.clone());
            }
        }
        if let Some(s) = &k.sack {
            set_sysctl(&mut self.lab.sender_sysctls, "net.ipv4.tcp_sack", if s == "on" { "1" } else { "0" }.into());
        }
        if let Some(m) = k.rmem_max {
            set_sysctl(
                &mut self.lab.receiver_sysctls,
                "net.ipv4.tcp_rmem",
                format!("4096 {} {m}", (m / 2).min(131072)),
            );
            set_sysctl(&mut self.lab.receiver_sysctls, "net.core.rmem_max", m.to_string());
        }
        if let Some(m) = k.wmem_max {
            set_sysctl(&mut self.lab.sender_sysctls, "net.ipv4.tcp_wmem", format!("4096 {} {m}", (m / 2).min(16384)));
            set_sysctl(&mut self.lab.sender_sysctls, "net.core.wmem_max", m.to_string());
        }
        if let Some(at) = k.outage_at {
            self.events.retain(|e| !matches!(e, Event::Outage { .. }));
            self.events.push(Event::Outage { at_s: at, for_s: k.outage_for.unwrap_or(2.5), dir: None, receiver: None });
        } else if let Some(f) = k.outage_for {
            let mut found = false;
            for e in self.events.iter_mut() {
                if let Event::Outage { for_s, .. } = e {
                    *for_s = f;
                    found = true;
                }
            }
            if !found {
                return Err(LabError::Invalid("--outage-for needs --outage-at (this scenario has no outage)".into()));
            }
        }
        match &mut self.traffic {
            Traffic::Iperf { flows, duration_s, bytes, .. } => {
                if let Some(d) = k.duration {
                    *duration_s = f64::from(d);
                }
                if let Some(b) = k.bytes {
                    *bytes = Some(b);
                }
                if let Some(n) = k.streams {
                    flows.iter_mut().for_each(|f| f.streams = n);
                }
                if k.pause_at.is_some() || k.pause_for.is_some() {
                    return Err(LabError::Invalid(
                        "--pause-at/--pause-for only apply to the plain pair (zero-window)".into(),
                    ));
                }
            }
            Traffic::App(a) => {
                if let Some(d) = k.duration {
                    a.duration_s = f64::from(d);
                }
                if let Some(b) = k.bytes {
                    a.bytes = Some(b);
                }
                if let Some(n) = k.streams {
                    a.streams = n;
                }
                if k.pause_at.is_some() || k.pause_for.is_some() {
                    let old = a.recv_pause.unwrap_or(Pause { at_s: 2.0, for_s: 3.0 });
                    a.recv_pause =
                        Some(Pause { at_s: k.pause_at.unwrap_or(old.at_s), for_s: k.pause_for.unwrap_or(old.for_s) });
                }
            }
            Traffic::Plain(pl) => {
                if let Some(d) = k.duration {
                    pl.duration_s = f64::from(d);
                }
                if k.bytes.is_some() || k.streams.is_some() {
                    return Err(LabError::Invalid("--bytes/--streams only apply to iperf3 scenarios".into()));
                }
                if k.pause_at.is_some() || k.pause_for.is_some() {
                    let old = pl.pause.unwrap_or(Pause { at_s: 2.0, for_s: 3.0 });
                    pl.pause =
                        Some(Pause { at_s: k.pause_at.unwrap_or(old.at_s), for_s: k.pause_for.unwrap_or(old.for_s) });
                }
            }
        }
        self.validate()
    }

    /// Checks the lab and the events that depend on it (an MTU drop below the links' MTU).
    pub fn validate(&self) -> Result<()> {
        self.lab.validate()?;
        for e in &self.events {
            if let Event::MtuDrop { mtu, .. } = e {
                self.lab.check_mtu_drop(*mtu)?;
            }
        }
        Ok(())
    }

    /// The forward bottleneck rate (policer first, then shaper), Mbit/s.
    pub fn bottleneck_mbit(&self) -> Option<f64> {
        let f = &self.lab.path.forward;
        match (f.police, f.shape) {
            (Some(p), Some(s)) => Some(p.rate_mbit.min(s.rate_mbit)),
            (Some(p), None) => Some(p.rate_mbit),
            (None, Some(s)) => Some(s.rate_mbit),
            (None, None) => None,
        }
    }
}
