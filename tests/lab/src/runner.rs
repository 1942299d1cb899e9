//! Running a scenario: lab up, hooks, traffic with timed events, observation, truth.json.
use crate::apps;
use crate::clock::Stamp;
use crate::error::{LabError, Result};
use crate::lab::Lab;
use crate::observe::{self, SsSample};
use crate::path::Dir;
use crate::plain;
use crate::scenario::{Event, Scenario, Side};
use crate::traffic::{self, Traffic};
use crate::truth::{jain, Injection, Summary, Truth};
use serde_json::json;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// iperf3 flows, the plain pair's result, the applications' result.
type Outcome = (Vec<traffic::FlowResult>, Option<plain::PlainResult>, Option<apps::AppResult>);

/// How far ahead of the launch the traffic start is set (see `Scenario::run`).
const TRAFFIC_LEAD_MS: u64 = 150;

/// Set by Ctrl-C handling (or a caller) to make a running scenario stop early.
pub static STOP: AtomicBool = AtomicBool::new(false);

/// How to run a scenario.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// Parent of the run directory (`<out_dir>/<scenario>-<UTC timestamp>`).
    pub out_dir: PathBuf,
    /// Exact run directory instead (created if missing).
    pub run_dir: Option<PathBuf>,
    /// Capture TCP headers on each sender's interface (capture-s<i>.pcap).
    pub capture: bool,
    /// `ss -tin` sampling period of the senders in ms (0 = off).
    pub ss_interval_ms: u64,
    /// Print progress to stderr.
    pub progress: bool,
}

impl Default for RunOptions {
    fn default() -> Self {
        RunOptions {
            out_dir: PathBuf::from("lab-runs"),
            run_dir: None,
            capture: false,
            ss_interval_ms: 100,
            progress: false,
        }
    }
}

fn make_run_dir(opts: &RunOptions, name: &str) -> Result<PathBuf> {
    let dir = match &opts.run_dir {
        Some(d) => d.clone(),
        None => {
            let base =
                opts.out_dir.join(format!("{name}-{}", crate::clock::utc_stamp(Stamp::now().unix_ns / 1_000_000_000)));
            let mut d = base.clone();
            let mut n = 1;
            while d.exists() {
                d = PathBuf::from(format!("{}-{n}", base.display()));
                n += 1;
            }
            d
        }
    };
    std::fs::create_dir_all(&dir).map_err(|e| LabError::io(format!("create run dir {}", dir.display()), e))?;
    Ok(dir)
}

fn progress(on: bool, msg: &str) {
    if on {
        eprintln!("[lab] {msg}");
    }
}

impl Scenario {
    /// Runs the scenario end to end and returns (and writes) its truth.
    pub fn run(&self, opts: &RunOptions) -> Result<Truth> {
        self.run_with(opts, |_| Ok(()), |_, _, _| Ok(())).map(|(t, _)| t)
    }

    /// Runs the scenario with hooks: `on_ready` is called when the lab is up and before traffic
    /// (start an agent there and return its guard); `on_done` gets the guard after the traffic,
    /// with the lab still up and the truth written (stop the agent there and return what it saw).
    pub fn run_with<G, R>(
        &self,
        opts: &RunOptions,
        on_ready: impl FnOnce(&Lab) -> Result<G>,
        on_done: impl FnOnce(G, &Lab, &Truth) -> Result<R>,
    ) -> Result<(Truth, R)> {
        let run_dir = make_run_dir(opts, &self.name)?;
        progress(opts.progress, &format!("{}: building lab (run dir {})", self.name, run_dir.display()));
        let mut lab = Lab::up(&self.lab, &run_dir)?;
        if let Some(t) = &lab.trim {
            progress(
                opts.progress,
                &format!(
                    "idle RTT {:.2} ms -> {:.2} ms after trim (set {:.1} ms)",
                    t.before.avg_ms,
                    t.after.avg_ms,
                    self.lab.path.rtt_ms()
                ),
            );
        }
        let guard = on_ready(&lab)?;
        let truth = self.drive(&mut lab, opts, &run_dir)?;
        let r = on_done(guard, &lab, &truth)?;
        Ok((truth, r))
    }

    /// Drives this scenario's traffic and events on an existing lab and writes truth.json into `run_dir`.
    pub fn drive(&self, lab: &mut Lab, opts: &RunOptions, run_dir: &Path) -> Result<Truth> {
        let roles = lab.roles();
        let mut before = BTreeMap::new();
        for (role, ns) in &roles {
            before.insert(role.clone(), observe::nstat(ns)?);
        }
        let idle_ping = lab.ping(0, 0, 5, 0.02).ok();
        let mut captures = Vec::new();
        let mut capture_file = None;
        if opts.capture {
            for (i, h) in lab.senders().iter().enumerate() {
                let f = run_dir.join(format!("capture-s{i}.pcap"));
                captures.push(observe::start_capture(&h.netns, &h.ifname, &f)?);
                capture_file.get_or_insert(f);
            }
        }
        let servers = match &self.traffic {
            Traffic::Iperf { flows, .. } => Some(traffic::start_servers(lab, flows)?),
            _ => None,
        };
        let mut app_servers = match &self.traffic {
            Traffic::App(a) => Some(apps::start(lab, a, run_dir)?),
            _ => None,
        };
        let stop = Arc::new(AtomicBool::new(false));
        let samples: Mutex<Vec<SsSample>> = Mutex::new(Vec::new());
        let event_log: Mutex<Vec<Injection>> = Mutex::new(Vec::new());
        // Traffic and events count from a start a moment ahead, so the clients, samplers and event
        // thread are all spawned and waiting when it comes: starting "now" let the first client
        // start late (thread spawns and `ss` on a busy machine), which shortened a staggered spread.
        let lead = Duration::from_millis(TRAFFIC_LEAD_MS);
        let t0 = Instant::now() + lead;
        let traffic_start = Stamp::ahead(lead);
        progress(opts.progress, &format!("{}: traffic for up to {:.0} s", self.name, self.traffic.max_seconds()));
        let lab_ref: &Lab = lab;
        let outcome = std::thread::scope(|scope| -> Result<Outcome> {
            // One sampler thread per sender, inside its namespace, so `ss` runs without `ip netns exec`.
            for (i, h) in lab_ref.senders().iter().enumerate() {
                let (stop_s, samples_ref, interval) = (stop.clone(), &samples, opts.ss_interval_ms);
                let (role, ns) = (format!("s{i}"), h.netns.clone());
                scope.spawn(move || {
                    if interval == 0 || crate::netns::enter(&ns).is_err() {
                        return;
                    }
                    let mut next = Instant::now();
                    while !stop_s.load(Ordering::Relaxed) {
                        if let Ok(s) = observe::ss_sample_here(&role) {
                            if let Ok(mut v) = samples_ref.lock() {
                                v.push(s);
                            }
                        }
                        next += Duration::from_millis(interval);
                        while Instant::now() < next && !stop_s.load(Ordering::Relaxed) {
                            std::thread::sleep(Duration::from_millis(2));
                        }
                    }
                });
            }
            let stop_e = stop.clone();
            let log = &event_log;
            let events = self.events.clone();
            scope.spawn(move || run_events(lab_ref, &events, t0, &stop_e, log));
            let stop_p = stop.clone();
            let (name, total, show) = (self.name.clone(), self.traffic.max_seconds(), opts.progress);
            scope.spawn(move || {
                let mut last = 0u64;
                while !stop_p.load(Ordering::Relaxed) {
                    std::thread::sleep(Duration::from_millis(50));
                    let el = t0.elapsed().as_secs();
                    if show && el > last {
                        last = el;
                        eprintln!("[lab] {name}: {el} / ~{total:.0} s");
                    }
                }
            });
            let res = match &self.traffic {
                Traffic::Iperf { flows, duration_s, bytes, cc } => {
                    traffic::run_iperf(lab_ref, flows, *duration_s, *bytes, cc.as_deref(), t0, &STOP)
                        .map(|f| (f, None, None))
                }
                Traffic::Plain(spec) => {
                    let plain_stop = Arc::new(AtomicBool::new(false));
                    let ps = plain_stop.clone();
                    let watcher = scope.spawn(move || {
                        while !ps.load(Ordering::Relaxed) {
                            if STOP.load(Ordering::Relaxed) {
                                ps.store(true, Ordering::Relaxed);
                            }
                            std::thread::sleep(Duration::from_millis(20));
                        }
                    });
                    std::thread::sleep(t0.saturating_duration_since(Instant::now()));
                    let r = plain::run_plain(lab_ref, spec, plain_stop.clone());
                    plain_stop.store(true, Ordering::Relaxed);
                    let _ = watcher.join();
                    r.map(|p| (Vec::new(), Some(p), None))
                }
                Traffic::App(a) => match app_servers.as_mut() {
                    Some(sv) => apps::run(lab_ref, a, sv, run_dir, t0, &STOP).map(|r| (Vec::new(), None, Some(r))),
                    None => Err(LabError::Missing("application servers".into())),
                },
            };
            stop.store(true, Ordering::Relaxed);
            res
        });
        let traffic_end = Stamp::now();
        drop(servers);
        drop(app_servers);
        // tcpdump hands packets over in blocks that fill or time out after 1 s; a SIGINT drops the
        // block in hand: wait for the last one (mtu-blackhole-start lost its last 17 packets, the
        // retransmission and the close 0.5 s before the stop).
        if !captures.is_empty() {
            std::thread::sleep(Duration::from_millis(1100));
        }
        for mut c in captures {
            crate::cmd::interrupt_and_wait(&mut c, Duration::from_secs(3));
        }
        if STOP.load(Ordering::Relaxed) {
            return Err(LabError::Interrupted);
        }
        let (flows, plain_res, app_res) = outcome?;
        progress(opts.progress, &format!("{}: collecting counters", self.name));
        let mut nstat = BTreeMap::new();
        for (role, ns) in &roles {
            let after = observe::nstat(ns)?;
            let b = before.get(role).cloned().unwrap_or_default();
            nstat.insert(role.clone(), observe::nstat_delta(&b, &after));
        }
        let mut injections = static_injections(self, lab, traffic_end);
        injections.extend(event_log.into_inner().unwrap_or_else(|p| p.into_inner()));
        if let Some(p) = &plain_res {
            if let (Some(s), Some(e)) = (p.pause_start, p.pause_end) {
                injections.push(Injection {
                    kind: "zero-window".into(),
                    dir: "receiver".into(),
                    detail: json!({"what": "receiver stopped reading"}),
                    start: s,
                    end: Some(e),
                });
            }
        }
        if let Some(a) = &app_res {
            if let (Some(s), Some(e)) = (a.pause_start, a.pause_end) {
                injections.push(Injection {
                    kind: "zero-window".into(),
                    dir: "receiver".into(),
                    detail: json!({"what": "the receiving application stopped reading"}),
                    start: s,
                    end: Some(e),
                });
            }
        }
        let mut ss_samples = samples.into_inner().unwrap_or_else(|p| p.into_inner());
        ss_samples.sort_by_key(|s| s.at.mono_ns);
        let nft_counters = lab.path().nft_counters().unwrap_or_default();
        let qdisc_stats = lab.path().qdisc_stats();
        let retx_drop = lab.path().retx_stats()?;
        let delay_stats = lab.path_mut().stop_delay();
        let mut truth = Truth {
            scenario: self.name.clone(),
            summary_text: self.summary.clone(),
            paper: self.paper.clone(),
            config: self.lab.clone(),
            traffic_spec: self.traffic.clone(),
            expected: self.expected.clone(),
            router: lab.router().to_string(),
            senders: lab.senders().to_vec(),
            receivers: lab.receivers().to_vec(),
            lab_up: lab.up_at,
            traffic_start,
            traffic_end,
            delay_trim: lab.trim.clone(),
            idle_ping,
            injections,
            flows,
            plain: plain_res,
            apps: app_res,
            nstat,
            ss_samples,
            nft_counters,
            qdisc_stats,
            delay_stats,
            retx_drop,
            capture: capture_file,
            run_dir: run_dir.to_path_buf(),
            summary: Summary::default(),
        };
        truth.summary = summarize(self, &truth);
        let p = truth.write()?;
        progress(
            opts.progress,
            &format!("{}: goodput {:.1} Mbit/s, truth in {}", self.name, truth.summary.goodput_mbit, p.display()),
        );
        Ok(truth)
    }
}

/// The traffic applications' processes in namespace `ns` (the lab's own tcpdump is never one).
fn app_pids(ns: &str) -> Vec<i32> {
    let out = crate::cmd::run(&["ip", "netns", "pids", ns]).unwrap_or_default();
    out.split_whitespace()
        .filter_map(|p| p.parse::<i32>().ok())
        .filter(|p| {
            let comm = std::fs::read_to_string(format!("/proc/{p}/comm")).unwrap_or_default();
            let c = comm.trim();
            c == "iperf3" || c == "curl" || c.starts_with("python")
        })
        .collect()
}

fn signal_all(pids: &[i32], sig: nix::sys::signal::Signal) {
    for p in pids {
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(*p), sig);
    }
}

fn wait_until(at: Instant, stop: &AtomicBool) -> bool {
    while Instant::now() < at {
        if stop.load(Ordering::Relaxed) {
            return false;
        }
        std::thread::sleep((at - Instant::now()).min(Duration::from_millis(2)));
    }
    true
}

/// Runs every event on its own thread (they may overlap), logging each as an injection.
fn run_events(lab: &Lab, events: &[Event], t0: Instant, stop: &AtomicBool, log: &Mutex<Vec<Injection>>) {
    std::thread::scope(|scope| {
        for ev in events {
            scope.spawn(move || run_event(lab, ev, t0, stop, log));
        }
    });
}

fn run_event(lab: &Lab, ev: &Event, t0: Instant, stop: &AtomicBool, log: &Mutex<Vec<Injection>>) {
    match *ev {
        Event::Outage { at_s, for_s, dir, receiver } => {
            let at = t0 + Duration::from_secs_f64(at_s);
            if !wait_until(at, stop) {
                return;
            }
            let requested = Stamp::now();
            let only = receiver.and_then(|j| lab.receivers().get(j)).map(|h| lab.addr(h));
            let Ok(h) = lab.path().outage_begin(dir, only) else { return };
            let start = Stamp::now();
            // Timed from the rule in force, not from when it was asked for: an nft call slow on a
            // loaded host must not shorten the outage (the scenarios' checks want its length
            // within 0.1 s of the one asked).
            wait_until(Instant::now() + Duration::from_secs_f64(for_s), stop);
            let end = Stamp::now();
            let _ = lab.path().outage_end(h);
            let confirmed = Stamp::now();
            let d = match dir {
                Some(Dir::Forward) => "forward",
                Some(Dir::Reverse) => "reverse",
                None => "both",
            };
            if let Ok(mut v) = log.lock() {
                v.push(Injection { kind: "outage".into(), dir: d.into(), detail: json!({
                    "at_s": at_s, "for_s": for_s, "what": "nft drop rule in the router's forward chain",
                    "receiver": only.map(|a| a.to_string()),
                    "note": "the rule is certainly in force from start to end; its true edges lie within [begin_requested, start] and [end, end_confirmed]",
                    "begin_requested": requested, "end_confirmed": confirmed,
                }), start, end: Some(end) });
            }
        }
        Event::MtuDrop { at_s, for_s, mtu, filter_icmp } => {
            let at = t0 + Duration::from_secs_f64(at_s);
            if !wait_until(at, stop) {
                return;
            }
            let requested = Stamp::now();
            let res = lab.path().mtu_drop(crate::path::MtuDrop { mtu, filter_icmp });
            let start = Stamp::now();
            let in_force = Instant::now();
            let end = for_s.and_then(|f| {
                wait_until(in_force + Duration::from_secs_f64(f), stop);
                let e = Stamp::now();
                lab.path().mtu_restore().ok().map(|_| e)
            });
            if let Ok(mut v) = log.lock() {
                v.push(Injection { kind: "mtu".into(), dir: "forward".into(), detail: json!({
                    "at_s": at_s, "for_s": for_s, "mtu": mtu, "link_mtu": lab.config().topo.mtu,
                    "filter_icmp": filter_icmp, "error": res.err().map(|e| e.to_string()),
                    "what": "the router's links towards the receivers at this MTU (ICMP about it dropped when filter_icmp)",
                    "begin_requested": requested,
                }), start, end });
            }
        }
        Event::MtuRestore { at_s } => {
            if !wait_until(t0 + Duration::from_secs_f64(at_s), stop) {
                return;
            }
            let res = lab.path().mtu_restore();
            let at = Stamp::now();
            if let Ok(mut v) = log.lock() {
                v.push(Injection {
                    kind: "mtu-restore".into(),
                    dir: "forward".into(),
                    detail: json!({
                        "at_s": at_s, "link_mtu": lab.config().topo.mtu, "error": res.err().map(|e| e.to_string()),
                        "what": "the router's links towards the receivers back at the lab's MTU",
                    }),
                    start: at,
                    end: Some(at),
                });
            }
        }
        Event::AppPause { at_s, for_s, side } => {
            let at = t0 + Duration::from_secs_f64(at_s);
            if !wait_until(at, stop) {
                return;
            }
            let hosts = match side {
                Side::Sender => lab.senders(),
                Side::Receiver => lab.receivers(),
            };
            let pids: Vec<i32> = hosts.iter().flat_map(|h| app_pids(&h.netns)).collect();
            signal_all(&pids, nix::sys::signal::Signal::SIGSTOP);
            let start = Stamp::now();
            // Resumed even when the run is stopped early, so the processes can exit.
            let until = at + Duration::from_secs_f64(for_s);
            while Instant::now() < until && !stop.load(Ordering::Relaxed) {
                std::thread::sleep((until - Instant::now()).min(Duration::from_millis(2)));
            }
            let end = Stamp::now();
            signal_all(&pids, nix::sys::signal::Signal::SIGCONT);
            let d = match side {
                Side::Sender => "sender",
                Side::Receiver => "receiver",
            };
            if let Ok(mut v) = log.lock() {
                v.push(Injection {
                    kind: "app-pause".into(),
                    dir: d.into(),
                    detail: json!({"at_s": at_s, "for_s": for_s, "pids": pids, "what": "SIGSTOP .. SIGCONT of the traffic applications"}),
                    start,
                    end: Some(end),
                });
            }
        }
    }
}

fn static_injections(sc: &Scenario, lab: &Lab, end: Stamp) -> Vec<Injection> {
    let mut v = Vec::new();
    let start = lab.up_at;
    let mut push = |kind: &str, dir: &str, detail: serde_json::Value| {
        v.push(Injection { kind: kind.into(), dir: dir.into(), detail, start, end: Some(end) });
    };
    let p = &sc.lab.path;
    for (name, d) in [("forward", &p.forward), ("reverse", &p.reverse)] {
        if d.delay_ms > 0.0 {
            push("delay", name, json!({"one_way_ms": d.delay_ms}));
        }
        if let Some(s) = d.shape {
            push("shape", name, json!({"rate_mbit": s.rate_mbit, "burst_bytes": s.burst(), "limit_bytes": s.limit()}));
        }
        if let Some(pol) = d.police {
            push("police", name, json!({"rate_mbit": pol.rate_mbit, "burst_bytes": pol.burst_bytes}));
        }
        if d.loss_ppm > 0 {
            push("loss", name, json!({"ppm": d.loss_ppm, "fraction": f64::from(d.loss_ppm) / 1e6}));
        }
    }
    if let Some(l) = p.lossy_lane {
        push(
            "loss-lane",
            "forward",
            json!({"port": l.port, "ppm": l.loss_ppm, "fraction": f64::from(l.loss_ppm) / 1e6,
            "what": "random loss on the packets of the connection with this client port only"}),
        );
    }
    if let Some(l) = p.lossy_sender {
        push(
            "loss-sender",
            "forward",
            json!({"sender": l.sender, "ppm": l.loss_ppm, "fraction": f64::from(l.loss_ppm) / 1e6}),
        );
    }
    if let Some(m) = p.next_mtu {
        push(
            "mtu",
            "forward",
            json!({"mtu": m.mtu, "link_mtu": sc.lab.topo.mtu, "filter_icmp": m.filter_icmp,
            "what": "the router's links towards the receivers at this MTU from the start"}),
        );
    }
    if let Some(cc) = &sc.lab.cc {
        push("cc", "hosts", json!({"cc": cc, "what": "congctl of the end hosts' default routes"}));
    }
    if let Some(r) = p.retx_drop {
        push("retx-drop", "forward", json!({"segments": r.segments, "drops_per_segment": r.drops_per_segment}));
    }
    for (k, val) in &sc.lab.sender_sysctls {
        push("sysctl", "senders", json!({"key": k, "value": val}));
    }
    for (k, val) in &sc.lab.receiver_sysctls {
        push("sysctl", "receivers", json!({"key": k, "value": val}));
    }
    v
}

fn summarize(sc: &Scenario, t: &Truth) -> Summary {
    let flow_goodput_mbit: Vec<f64> = match (&t.plain, &t.apps) {
        (Some(p), _) => vec![p.goodput_mbit],
        (_, Some(a)) => vec![a.goodput_mbit],
        _ => t.flows.iter().map(|f| f.goodput_mbit.unwrap_or(0.0)).collect(),
    };
    let stream_goodput_mbit: Vec<f64> = if t.plain.is_some() || t.apps.is_some() {
        flow_goodput_mbit.clone()
    } else {
        t.flows.iter().flat_map(|f| f.stream_goodput_mbit.iter().copied()).collect()
    };
    let goodput: f64 = flow_goodput_mbit.iter().sum();
    let bottleneck = sc.bottleneck_mbit();
    Summary {
        goodput_mbit: goodput,
        bottleneck_mbit: bottleneck,
        efficiency: bottleneck.map(|b| goodput / b),
        jain_index: jain(&stream_goodput_mbit),
        flow_goodput_mbit,
        stream_goodput_mbit,
        retrans_segs: t.sender_counter("TcpRetransSegs"),
        rto_timeouts: t.sender_counter("TcpExtTCPTimeouts"),
        lost_retransmits: t.sender_counter("TcpExtTCPLostRetransmit"),
    }
}
