//! `lab fuzz`'s plans: the seeded draw of a randomized run (path, client, events, family) and the scenario it becomes.
use crate::apps::{App, AppSpec};
use crate::lab::LabConfig;
use crate::path::{Dir, PathConfig, Shape};
use crate::scenario::{Event, Scenario, Side};
use crate::topo::{Family, TopoConfig};
use crate::traffic::{IperfFlow, Traffic};
use serde::{Deserialize, Serialize};

/// The highest bottleneck drawn. The issue asks for up to 2 Gbit/s; on this 2-core machine the
/// delay line, the capture at the sender and the daemon share the cores with the traffic, and
/// above ~600 Mbit/s the run measures the CPU, not the path (README: 500 Mbit/s carried with the
/// RTT within 5 %).
pub const MAX_RATE_MBIT: f64 = 600.0;

/// splitmix64: small, seedable, the same on every machine.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    /// Uniform in [0, 1).
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
    pub fn uniform(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * self.unit()
    }
    /// Log-uniform in [lo, hi]: as many short values as long ones per decade.
    pub fn log_uniform(&mut self, lo: f64, hi: f64) -> f64 {
        (lo.ln() + (hi.ln() - lo.ln()) * self.unit()).exp()
    }
    pub fn chance(&mut self, p: f64) -> bool {
        self.unit() < p
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }
}

/// Which client carries the data.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Client {
    Iperf3,
    Socket,
    Http,
}

/// One drawn run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Plan {
    pub seed: u64,
    pub run: u32,
    pub rtt_ms: u32,
    pub rate_mbit: u32,
    pub queue_bytes: u64,
    pub loss_pct: f64,
    pub client: Client,
    pub streams: u32,
    /// (at, for, dir: None both ways)
    pub outage: Option<(f64, f64, Option<Dir>)>,
    pub recv_pause: Option<(f64, f64)>,
    pub send_pause: Option<(f64, f64)>,
    /// How long the clients send (iperf3 -t, socket --seconds); http: the download's size decides.
    pub duration_s: f64,
    /// Http: the file's size.
    pub bytes: Option<u64>,
    /// IPv4 or IPv6 (from its own stream: the draws above are those of the IPv4-only lab). Plans
    /// saved before IPv6 read as v4.
    #[serde(default)]
    pub family: Family,
    /// iperf3 only: each stream's `-b`, Mbit/s, 20-70 % of its share of the bottleneck (an
    /// application-limited sender whose pipe empties between bursts), from a stream of its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub app_rate_mbit: Option<u32>,
    /// Congestion control of every connection (iperf3 -C and the hosts' routes), from a stream of
    /// its own. None (plans saved before it): iperf3 cubic, the other clients the host default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cc: Option<String>,
    /// When a long RTT (200-300 ms, from a stream of its own) replaced the drawn one: the drawn one
    /// (`rtt_ms`, the queue and the download's size follow the long one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drawn_rtt_ms: Option<u32>,
    /// The loss or limit mechanism of the run (`fuzzcase`), from a stream of its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub case: Option<crate::fuzzcase::Case>,
}

fn round(x: f64, step: f64) -> f64 {
    (x / step).round() * step
}

/// When the first retransmission after an outage of `len` s gets through: RTOs back off from
/// `rto0` (200 ms + RTT), doubling.
pub fn first_retry_after(len: f64, rto0: f64) -> f64 {
    let (mut t, mut rto) = (0.0, rto0.max(0.2));
    while t < len {
        t += rto;
        rto = (rto * 2.0).min(120.0);
    }
    t - len
}

pub(crate) fn run_seed(seed: u64, run: u32) -> u64 {
    seed ^ u64::from(run).wrapping_mul(0xd6e8_feb8_6659_fd93)
}

/// The family of run `run` of campaign `seed`, even odds, from a stream of its own so that adding it
/// left every other draw of a seed as it was.
pub fn draw_family(seed: u64, run: u32) -> Family {
    let mut r = Rng::new(Rng::new(run_seed(seed, run) ^ 0x4950_7636_6661_6d31).next_u64());
    if r.chance(0.5) {
        Family::V6
    } else {
        Family::V4
    }
}

/// Whether an iperf3 run's sender is application-limited (one in three), and at what rate per
/// stream: from a stream of its own, so the other draws of a seed stay as they were.
pub fn draw_app_rate(seed: u64, run: u32, rate_mbit: u32, streams: u32) -> Option<u32> {
    let mut r = Rng::new(Rng::new(run_seed(seed, run) ^ 0x6170_706c_696d_6974).next_u64());
    let share = f64::from(rate_mbit) / f64::from(streams.max(1));
    r.chance(1.0 / 3.0).then(|| (share * r.uniform(0.2, 0.7)).round().max(1.0) as u32)
}

/// Draws run `run` of campaign `seed`; `max_s` caps the traffic's length (CI's slice), shortening
/// outages and pauses to fit: the plan of [`draw_base`] with its congestion control, a long RTT
/// now and then and a mechanism case, each from a stream of its own ([`crate::fuzzcase`]).
pub fn draw(seed: u64, run: u32, max_s: f64) -> Plan {
    let mut p = draw_base(seed, run, max_s);
    crate::fuzzcase::extend(&mut p, max_s);
    p
}

/// The draws of the lab before congestion control, long RTTs and mechanism cases were drawn: every
/// plan of a seed as it was (the family and the application-limited rate included).
pub fn draw_base(seed: u64, run: u32, max_s: f64) -> Plan {
    let mut r = Rng::new(run_seed(seed, run));
    let rtt_ms = r.log_uniform(5.0, 200.0).round() as u32;
    let rate_mbit = r.log_uniform(20.0, MAX_RATE_MBIT).round() as u32;
    let bdp = f64::from(rate_mbit) * 1e6 / 8.0 * f64::from(rtt_ms) / 1e3;
    let queue_bytes = (bdp * r.uniform(0.25, 2.0)).clamp(30_000.0, 20e6).round() as u64;
    let loss_pct = if r.chance(0.3) { round(r.log_uniform(0.01, 0.5), 0.001) } else { 0.0 };
    let client = [Client::Iperf3, Client::Socket, Client::Http][r.below(3) as usize];
    let streams = if r.chance(0.6) { 1 } else { 2 + r.below(3) as u32 };
    let rto0 = 0.2 + f64::from(rtt_ms) / 1e3;
    let room = (max_s - 5.0).max(0.5);
    let (mut outage, mut recv_pause, mut send_pause) = (None, None, None);
    let mut tail: f64 = 0.0;
    let what = r.unit();
    let second = r.chance(0.2);
    let mut pick = |k: f64, r: &mut Rng| {
        let at = round(r.uniform(2.0, 4.0), 0.01);
        if k < 0.35 {
            let len = round(r.log_uniform(0.5, 20.0).min(room / 2.0), 0.01);
            let dir = [None, Some(Dir::Forward), Some(Dir::Reverse)][r.below(3) as usize];
            outage = Some((at, len, dir));
            tail = tail.max(at + len + first_retry_after(len, rto0));
        } else if k < 0.7 {
            let len = round(r.log_uniform(0.5, 30.0).min(room), 0.01);
            recv_pause = Some((at, len));
            tail = tail.max(at + len);
        } else if k < 0.9 {
            let len = round(r.log_uniform(0.5, 10.0).min(room), 0.01);
            send_pause = Some((at, len));
            tail = tail.max(at + len);
        }
    };
    pick(what, &mut r);
    if second {
        let k = r.unit();
        pick(k, &mut r);
    }
    let duration_s = round((tail + 3.0).max(8.0).min(max_s.max(8.0)), 0.1);
    let bytes = (client == Client::Http).then(|| http_bytes(rtt_ms, rate_mbit, loss_pct, streams, f64::MAX));
    Plan {
        seed,
        run,
        rtt_ms,
        rate_mbit,
        queue_bytes,
        loss_pct,
        client,
        streams,
        outage,
        recv_pause,
        send_pause,
        duration_s,
        bytes,
        family: draw_family(seed, run),
        app_rate_mbit: (client == Client::Iperf3).then(|| draw_app_rate(seed, run, rate_mbit, streams)).flatten(),
        cc: None,
        drawn_rtt_ms: None,
        case: None,
    }
}

/// The download's size: about 6 s at what the path can carry (the bottleneck, or Mathis' bound
/// under random loss, or a 16 MB window per RTT, or `cap_bps`), 2-600 MB.
pub(crate) fn http_bytes(rtt_ms: u32, rate_mbit: u32, loss_pct: f64, streams: u32, cap_bps: f64) -> u64 {
    let rtt = f64::from(rtt_ms) / 1e3;
    let mathis = if loss_pct > 0.0 { 1.22 * 1448.0 * 8.0 / (rtt * (loss_pct / 100.0).sqrt()) } else { f64::MAX };
    let bps = (f64::from(rate_mbit) * 1e6 * 0.8).min(mathis).min(16e6 * 8.0 / rtt).min(cap_bps);
    ((bps / 8.0 * 6.0 / f64::from(streams)).clamp(2e6, 600e6)) as u64
}

impl Plan {
    /// How long the clients send: until the last event's end (an outage or a black hole: plus the
    /// first backed-off retransmission after it) + 3 s, at least 8 s, at most `max_s`.
    pub fn length(&self, max_s: f64) -> f64 {
        let rto0 = 0.2 + f64::from(self.rtt_ms) / 1e3;
        let mut tail: f64 = 0.0;
        if let Some((at, len, _)) = self.outage {
            tail = tail.max(at + len + first_retry_after(len, rto0));
        }
        for (at, len) in self.recv_pause.iter().chain(self.send_pause.iter()) {
            tail = tail.max(at + len);
        }
        if let Some(t) = self.case.as_ref().and_then(|c| c.tail(rto0)) {
            tail = tail.max(t);
        }
        round((tail + 3.0).max(8.0).min(max_s.max(8.0)), 0.1)
    }

    /// Runs the plan over family `f` (an MTU case below IPv6's 1280 is raised to it there).
    pub fn set_family(&mut self, f: Family) {
        self.family = f;
        if let (
            Family::V6,
            Some(crate::fuzzcase::Case::MtuDrop { mtu, .. } | crate::fuzzcase::Case::MtuFromStart { mtu, .. }),
        ) = (f, self.case.as_mut())
        {
            *mtu = (*mtu).max(crate::topo::IPV6_MIN_MTU);
        }
    }

    /// One line: what this run does.
    pub fn describe(&self) -> String {
        let mut s = format!(
            "{} {:?} x{} rtt {} ms, {} Mbit/s, queue {} kB, loss {:.3} %, {:.1} s",
            self.family.as_str(),
            self.client,
            self.streams,
            self.rtt_ms,
            self.rate_mbit,
            self.queue_bytes / 1000,
            self.loss_pct,
            self.duration_s
        );
        if let Some(b) = self.bytes {
            s += &format!(" ({} MB file)", b / 1_000_000);
        }
        if let Some(m) = self.app_rate_mbit {
            s += &format!(", app-limited {m} Mbit/s per stream");
        }
        if let Some(cc) = &self.cc {
            s += &format!(", {cc}");
        }
        if let Some(r) = self.drawn_rtt_ms {
            s += &format!(" (rtt long, drawn {r} ms)");
        }
        if let Some(c) = &self.case {
            s += &format!(", {}", c.describe());
        }
        if let Some((at, len, dir)) = self.outage {
            s += &format!(
                ", outage {} {len:.2} s at {at:.2}",
                dir.map(|d| format!("{d:?}").to_lowercase()).unwrap_or("both".into())
            );
        }
        if let Some((at, len)) = self.recv_pause {
            s += &format!(", receiver pause {len:.2} s at {at:.2}");
        }
        if let Some((at, len)) = self.send_pause {
            s += &format!(", sender pause {len:.2} s at {at:.2}");
        }
        s
    }

    /// The lab scenario of this plan.
    pub fn scenario(&self) -> Scenario {
        let mut path = PathConfig::with_rtt(f64::from(self.rtt_ms));
        path.forward.shape = Some(Shape {
            rate_mbit: f64::from(self.rate_mbit),
            burst_bytes: None,
            limit_bytes: Some(self.queue_bytes),
        });
        path.forward.loss_ppm = (self.loss_pct * 10_000.0).round() as u32;
        let mut lab = LabConfig {
            topo: TopoConfig { senders: 1, ..TopoConfig::default() },
            path,
            trim_delay: true,
            family: self.family,
            ..LabConfig::default()
        };
        let max = (16u64 << 20).to_string();
        let kv = |k: &str, v: String| (k.to_string(), v);
        lab.sender_sysctls.push(kv("net.ipv4.tcp_wmem", format!("4096 16384 {max}")));
        lab.sender_sysctls.push(kv("net.core.wmem_max", max.clone()));
        lab.receiver_sysctls.push(kv("net.ipv4.tcp_rmem", format!("4096 131072 {max}")));
        lab.receiver_sysctls.push(kv("net.core.rmem_max", max));
        let traffic = match self.client {
            Client::Iperf3 => Traffic::Iperf {
                flows: vec![IperfFlow {
                    sender: 0,
                    receiver: 0,
                    streams: self.streams,
                    start_offset_ms: 0.0,
                    rate_mbit: self.app_rate_mbit.map(f64::from),
                    client_port: None,
                }],
                duration_s: self.duration_s,
                bytes: None,
                cc: Some(self.cc.clone().unwrap_or_else(|| "cubic".into())),
            },
            Client::Socket | Client::Http => Traffic::App(AppSpec {
                app: if self.client == Client::Socket { App::Socket } else { App::Http },
                sender: 0,
                receiver: 0,
                streams: self.streams,
                duration_s: self.duration_s,
                bytes: self.bytes,
                recv_pause: None,
                rcvbuf: None,
                port: 8080,
                sndbuf: None,
                client_port: None,
            }),
        };
        let mut events = Vec::new();
        if let Some((at_s, for_s, dir)) = self.outage {
            events.push(Event::Outage { at_s, for_s, dir, receiver: None });
        }
        if let Some((at_s, for_s)) = self.recv_pause {
            events.push(Event::AppPause { at_s, for_s, side: Side::Receiver });
        }
        if let Some((at_s, for_s)) = self.send_pause {
            events.push(Event::AppPause { at_s, for_s, side: Side::Sender });
        }
        lab.cc = self.cc.clone();
        let mut sc = Scenario {
            name: format!("fuzz-{}-{}", self.seed, self.run),
            summary: self.describe(),
            paper: None,
            doc: "drawn by lab fuzz; judged against the capture at the sender".into(),
            lab,
            traffic,
            events,
            expected: Vec::new(),
        };
        if let Some(c) = &self.case {
            c.apply(self, &mut sc);
        }
        sc
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draws_are_reproducible_within_range_and_varied() {
        assert_eq!(draw(7, 3, 40.0), draw(7, 3, 40.0));
        assert_ne!(draw(7, 3, 40.0), draw(7, 4, 40.0));
        let plans: Vec<Plan> = (0..300).map(|k| draw(11, k, 40.0)).collect();
        for p in &plans {
            assert!((5..=300).contains(&p.rtt_ms), "{p:?}");
            assert!(p.drawn_rtt_ms.is_none_or(|d| (5..=200).contains(&d) && p.rtt_ms >= 200), "{p:?}");
            assert!((20..=600).contains(&p.rate_mbit), "{p:?}");
            assert!(p.duration_s >= 8.0 && p.duration_s <= 40.0, "{p:?}");
            if let Some((_, len, _)) = p.outage {
                assert!((0.5..=20.0).contains(&len), "{p:?}");
            }
            if let Some((_, len)) = p.recv_pause {
                assert!((0.5..=30.0).contains(&len), "{p:?}");
            }
        }
        for c in [Client::Iperf3, Client::Socket, Client::Http] {
            assert!(plans.iter().any(|p| p.client == c));
        }
        assert!(plans.iter().any(|p| p.outage.is_some()) && plans.iter().any(|p| p.recv_pause.is_some()));
        assert!(plans.iter().any(|p| p.send_pause.is_some()) && plans.iter().any(|p| p.streams > 1));
        assert!(plans.iter().any(|p| p.outage.map(|o| o.1 > 10.0).unwrap_or(false)));
        // The CI slice's cap shortens what does not fit.
        assert!((0..50).map(|k| draw(11, k, 12.0)).all(|p| p.duration_s <= 12.0));
    }

    #[test]
    fn backed_off_retries_land_after_the_outage() {
        // 0.3 s RTO: tries at 0.3, 0.9, 2.1, 4.5 s; a 2.5 s outage ends 2.0 s before the fourth.
        assert!((first_retry_after(2.5, 0.3) - 2.0).abs() < 1e-9);
        assert!(first_retry_after(0.1, 0.3) > 0.0);
    }

    #[test]
    fn a_plan_becomes_its_scenario() {
        let mut p = draw(1, 0, 40.0);
        p.client = Client::Http;
        p.bytes = Some(5_000_000);
        p.outage = Some((2.0, 1.0, Some(Dir::Reverse)));
        let s = p.scenario();
        assert!(matches!(s.traffic, Traffic::App(AppSpec { app: App::Http, bytes: Some(5_000_000), .. })));
        assert_eq!(s.events[0], Event::Outage { at_s: 2.0, for_s: 1.0, dir: Some(Dir::Reverse), receiver: None });
        assert_eq!(s.lab.path.forward.shape.map(|x| x.limit_bytes), Some(Some(p.queue_bytes)));
        assert!(s.lab.validate().is_ok());
        assert_eq!(s.lab.family, p.family);
    }

    #[test]
    fn the_family_has_even_odds_from_its_own_stream_and_old_plans_read_as_ipv4() {
        let v6 = (0..400).filter(|&k| draw(11, k, 40.0).family == Family::V6).count();
        assert!((150..=250).contains(&v6), "{v6} of 400 runs over IPv6");
        assert_eq!(draw(7, 3, 40.0).family, draw_family(7, 3));
        let mut v = serde_json::to_value(draw(1, 0, 40.0)).unwrap_or_default();
        v.as_object_mut().map(|o| o.remove("family"));
        let old: Plan = serde_json::from_value(v).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(old.family, Family::V4);
        assert!(draw(1, 0, 40.0).describe().starts_with(draw(1, 0, 40.0).family.as_str()));
    }

    #[test]
    fn the_family_left_the_draws_of_the_ipv4_only_lab_as_they_were() {
        // Plans of the README's campaigns and CI's slice, as the lab drew them before IPv6 (commit
        // 90e2479; all 800 plans of seeds 1, 7, 2026 and 11, runs 0-99, at 40 s and 9 s matched).
        let old = [
            (1, 22, 40.0, "Socket x1 rtt 10 ms, 156 Mbit/s, queue 315 kB, loss 0.000 %, 10.9 s, sender pause 4.09 s at 3.83"),
            (1, 39, 40.0, "Iperf3 x1 rtt 132 ms, 353 Mbit/s, queue 5220 kB, loss 0.000 %, 13.8 s, receiver pause 0.78 s at 3.63, sender pause 8.51 s at 2.24"),
            (7, 1, 40.0, "Socket x2 rtt 30 ms, 102 Mbit/s, queue 695 kB, loss 0.000 %, 20.4 s, outage both 10.05 s at 2.92"),
            (2026, 8, 9.0, "Iperf3 x2 rtt 74 ms, 340 Mbit/s, queue 5669 kB, loss 0.053 %, 8.0 s, outage both 0.69 s at 3.13"),
        ];
        for (seed, run, max, want) in old {
            let mut p = draw_base(seed, run, max);
            p.app_rate_mbit = None;
            assert_eq!(p.describe(), format!("{} {want}", p.family.as_str()), "seed {seed} run {run}");
        }
    }

    #[test]
    fn the_base_draws_are_every_plan_the_lab_drew_before_mechanism_cases() {
        // FNV-1a of the JSON of 1400 plans (seeds 1, 7, 11, 23, 31, 37, 2026; runs 0-99; at 40 s
        // and 9 s) as `draw` made them at commit 656acd0, before congestion control, long RTTs and
        // mechanism cases were drawn (the README's campaigns and CI's slice among them).
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for seed in [1u64, 7, 11, 23, 31, 37, 2026] {
            for max in [40.0, 9.0] {
                for run in 0..100 {
                    let json = serde_json::to_string(&draw_base(seed, run, max)).unwrap_or_default();
                    for b in json.bytes() {
                        h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
                    }
                }
            }
        }
        assert_eq!(h, 0x0586_a0e2_917d_2238);
    }

    #[test]
    fn a_third_of_iperf3_runs_are_application_limited_below_their_share() {
        let plans: Vec<Plan> = (0..600).map(|k| draw(11, k, 40.0)).filter(|p| p.client == Client::Iperf3).collect();
        let limited: Vec<&Plan> = plans.iter().filter(|p| p.app_rate_mbit.is_some()).collect();
        let frac = limited.len() as f64 / plans.len() as f64;
        assert!((0.25..=0.42).contains(&frac), "{} of {} iperf3 runs application-limited", limited.len(), plans.len());
        for p in &limited {
            let share = f64::from(p.rate_mbit) / f64::from(p.streams);
            let m = f64::from(p.app_rate_mbit.unwrap());
            assert!(m >= 1.0 && m <= 0.7 * share + 0.5 && m >= 0.2 * share - 0.5, "{m} of a {share} Mbit/s share");
            assert!(p.describe().contains(&format!("app-limited {m} Mbit/s")), "{}", p.describe());
            let flows = match p.scenario().traffic {
                Traffic::Iperf { flows, .. } => flows,
                t => panic!("{t:?}"),
            };
            assert_eq!(flows[0].rate_mbit, Some(m));
        }
        assert!((0..600).map(|k| draw(11, k, 40.0)).all(|p| p.client == Client::Iperf3 || p.app_rate_mbit.is_none()));
    }
}
