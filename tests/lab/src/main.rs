//! The `lab` command: list, run and tear down tcpvigil lab scenarios; benchmark the delay line.
use anyhow::Context;
use clap::{Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::Ordering;
use tcpvigil_lab::{bench, fuzz, lab, registry, runner, Knobs, LabError, RunOptions, Scenario};

/// Long-fat-network lab for tcpvigil: builds network namespaces (senders -- router -- receivers),
/// impairs the path (NFQUEUE delay line, tbf, nft policer/loss/outage, tc-bpf targeted drops),
/// drives traffic and writes the ground truth of every run as JSON. Needs root.
#[derive(Parser)]
#[command(name = "lab", version)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// List the scenarios with a one-line summary (--json: full definitions with defaults).
    List {
        #[arg(long)]
        json: bool,
    },
    /// Run one scenario and write <out>/<scenario>-<UTC time>/truth.json.
    Run {
        /// Scenario name (see `lab list`).
        scenario: String,
        /// Parent directory of run directories.
        #[arg(long, default_value = "lab-runs")]
        out: PathBuf,
        /// Exact run directory (instead of <out>/<scenario>-<time>).
        #[arg(long)]
        run_dir: Option<PathBuf>,
        /// Capture TCP headers on the senders' interfaces (tcpdump, capture-s<i>.pcap in the run dir).
        #[arg(long)]
        capture: bool,
        /// Period of `ss -tin` samples of the senders, ms (0 = off).
        #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u64).range(0..=10000))]
        ss_interval_ms: u64,
        /// No progress on stderr.
        #[arg(long, short)]
        quiet: bool,
        /// Run beside a live `tcpvigil run` with a capture and judge its reports as `lab fuzz`
        /// does (exit 1 on a failure).
        #[arg(long)]
        judge: bool,
        /// The tcpvigil binary for --judge (default: next to lab in target/{release,debug}).
        #[arg(long, requires = "judge")]
        tcpvigil: Option<PathBuf>,
        /// With --judge: a mechanism the run contains that no finding names fails it too.
        #[arg(long, requires = "judge")]
        judge_mechanism: bool,
        #[command(flatten)]
        knobs: Box<Knobs>,
    },
    /// Randomized scenarios beside the live daemon, each judged against a capture at the sender;
    /// prints a confusion matrix and every failing run (exit 1 if any).
    Fuzz {
        /// Number of runs (runs 0..N of the seed).
        #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..=100000))]
        runs: u32,
        /// Campaign seed: the same seed draws the same runs.
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Replay only run K of the seed (as printed for a failing run).
        #[arg(long)]
        run: Option<u32>,
        /// The first run (with --runs N: runs K..K+N), to split a campaign into batches.
        #[arg(long, default_value_t = 0, conflicts_with = "run")]
        first: u32,
        /// Cap on each run's traffic in seconds (longer outages and pauses are shortened to fit).
        #[arg(long, default_value_t = 40.0)]
        max_seconds: f64,
        /// The tcpvigil binary (default: next to lab in target/{release,debug}).
        #[arg(long)]
        tcpvigil: Option<PathBuf>,
        /// Parent of run directories (a passing run's is removed unless --keep).
        #[arg(long, default_value = "lab-runs/fuzz")]
        out: PathBuf,
        #[arg(long)]
        keep: bool,
        /// Run every plan over this family instead of the drawn one (v4 replays a campaign of the
        /// IPv4-only lab exactly).
        #[arg(long, value_enum)]
        family: Option<tcpvigil_lab::Family>,
        /// Plans as drawn before congestion control, long RTTs and mechanism cases (replays an
        /// older campaign exactly).
        #[arg(long)]
        base_draws: bool,
        /// A mechanism the run contains that no finding names, or one named where it is absent,
        /// fails the run (default: counted in the mechanism matrix only; TV_LAB_JUDGE_MECHANISM=1
        /// sets it too).
        #[arg(long)]
        judge_mechanism: bool,
    },
    /// Judge kept `lab fuzz` (or `lab run --judge`) run directories again with the current truth
    /// and judge.
    Rejudge {
        #[arg(required = true)]
        dirs: Vec<PathBuf>,
        /// A missed or wrongly named mechanism fails the run too.
        #[arg(long)]
        judge_mechanism: bool,
    },
    /// Print the truth stalls of a capture (pcap) at a sender: every connection of the --sender addresses.
    Stalls {
        pcap: PathBuf,
        /// The sender's address(es).
        #[arg(long, required = true)]
        sender: Vec<std::net::IpAddr>,
    },
    /// Remove lab namespaces left by killed runs (--all: every lab namespace, even of live runs).
    Down {
        #[arg(long)]
        all: bool,
    },
    /// Measure the delay line: sustainable packets/s and RTT accuracy while carrying a TCP flow.
    BenchDelay {
        /// RTT to emulate, ms.
        #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..=1000))]
        rtt_ms: u32,
        /// TCP rate for the RTT-accuracy test, Mbit/s (iperf3 -b).
        #[arg(long, default_value_t = 500, value_parser = clap::value_parser!(u32).range(1..=10000))]
        rate_mbit: u32,
        /// Seconds per measurement step.
        #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=60))]
        seconds: u32,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
}

/// Ctrl-C / SIGTERM: ask the run to stop (it tears down on its way out); if it has not exited
/// within 15 s, remove every namespace of this process and exit.
fn install_signal_thread() -> anyhow::Result<()> {
    use nix::sys::signal::{SigSet, Signal};
    let mut set = SigSet::empty();
    set.add(Signal::SIGINT);
    set.add(Signal::SIGTERM);
    set.thread_block().context("blocking SIGINT/SIGTERM")?;
    std::thread::Builder::new().name("signals".into()).spawn(move || {
        if let Ok(sig) = set.wait() {
            eprintln!("[lab] {sig:?}: stopping and removing the lab");
            runner::STOP.store(true, Ordering::Relaxed);
            std::thread::sleep(std::time::Duration::from_secs(15));
            tcpvigil_lab::daemon::interrupt_running();
            registry::cleanup_all();
            std::process::exit(130);
        }
    })?;
    Ok(())
}

fn list(json: bool) -> anyhow::Result<()> {
    if json {
        println!("{}", serde_json::to_string_pretty(&Scenario::all())?);
        return Ok(());
    }
    for s in Scenario::all() {
        let paper = s.paper.as_deref().map(|p| format!(" [{p}]")).unwrap_or_default();
        println!("{:<22} {}{paper}", s.name, s.summary);
    }
    println!("\n`lab list --json` shows every default; `lab run NAME --help` lists the knobs.");
    Ok(())
}

fn run(name: &str, opts: RunOptions, knobs: &Knobs) -> Result<ExitCode, (u8, anyhow::Error)> {
    let mut sc = Scenario::by_name(name).map_err(|e| (2, e.into()))?;
    sc.apply_knobs(knobs).map_err(|e| (2, e.into()))?;
    lab::check_prerequisites().map_err(|e| (2, e.into()))?;
    match sc.run(&opts) {
        Ok(t) => {
            let s = &t.summary;
            println!("scenario      {} (IP{})", t.scenario, t.config.family.as_str());
            println!(
                "goodput       {:.1} Mbit/s{}",
                s.goodput_mbit,
                s.efficiency
                    .map(|e| format!(
                        " (efficiency {:.0} % of {:.0} Mbit/s)",
                        e * 100.0,
                        s.bottleneck_mbit.unwrap_or(0.0)
                    ))
                    .unwrap_or_default()
            );
            if s.stream_goodput_mbit.len() > 1 {
                let v: Vec<String> = s.stream_goodput_mbit.iter().map(|g| format!("{g:.1}")).collect();
                println!("streams       {} Mbit/s (Jain {:.3})", v.join(" / "), s.jain_index.unwrap_or(0.0));
            }
            println!(
                "retransmits   {} segs, {} RTOs, {} lost retransmits",
                s.retrans_segs, s.rto_timeouts, s.lost_retransmits
            );
            if let Some(p) = &t.idle_ping {
                println!("idle RTT      {:.2} ms (set {:.1} ms)", p.avg_ms, t.config.path.rtt_ms());
            }
            if let Some(r) = &t.retx_drop {
                println!(
                    "retx-drop     {} retransmissions seen, {} dropped, {} targets",
                    r.retransmissions, r.dropped, r.targets
                );
            }
            for e in &t.expected {
                println!("expected      {} / {}: {}", e.kind, e.cause, e.note);
            }
            println!("truth         {}", t.run_dir.join("truth.json").display());
            Ok(ExitCode::SUCCESS)
        }
        Err(LabError::Interrupted) => Ok(ExitCode::from(130)),
        Err(e @ LabError::Invalid(_)) => Err((2, e.into())),
        Err(e) => Err((1, e.into())),
    }
}

/// `lab run NAME --judge`: the scenario beside the daemon, judged against its capture.
fn judged_run(
    name: &str,
    out: &std::path::Path,
    run_dir: Option<PathBuf>,
    bin: Option<&std::path::Path>,
    knobs: &Knobs,
    progress: bool,
    judge_mechanism: bool,
) -> Result<ExitCode, (u8, anyhow::Error)> {
    let mut sc = Scenario::by_name(name).map_err(|e| (2, e.into()))?;
    sc.apply_knobs(knobs).map_err(|e| (2, e.into()))?;
    lab::check_prerequisites().map_err(|e| (2, e.into()))?;
    let bin = tcpvigil_lab::daemon::find_binary(bin).map_err(|e| (2, e.into()))?;
    let dir = run_dir.unwrap_or_else(|| out.join(format!("{name}-judged-{}", std::process::id())));
    let daemon = tcpvigil_lab::daemon::Daemon::start(&bin, &dir.join("daemon")).map_err(|e| (1, e.into()))?;
    let (truth, all) = match fuzz::run_beside(&sc, &daemon, &dir, progress) {
        Ok(x) => x,
        Err(LabError::Interrupted) => return Ok(ExitCode::from(130)),
        Err(e) => return Err((1, e.into())),
    };
    drop(daemon);
    let mut j = fuzz::judge_run(&truth, all, truth.config.path.rtt_ms() / 1e3).map_err(|e| (1, anyhow::anyhow!(e)))?;
    if judge_mechanism {
        j.judge_mechanism();
    }
    let text = fuzz::judged_text(&j);
    let _ = std::fs::write(dir.join("fuzz.json"), fuzz::fuzz_json(None, &j));
    let _ = std::fs::write(dir.join("judged.txt"), &text);
    println!("{text}\nrun dir       {}", dir.display());
    Ok(if j.verdict.failures.is_empty() { ExitCode::SUCCESS } else { ExitCode::from(1) })
}

fn fuzz_cmd(opts: fuzz::FuzzOptions) -> Result<ExitCode, (u8, anyhow::Error)> {
    let total = opts.runs.len();
    let started = std::time::Instant::now();
    let mut done = 0;
    let (matrix, reports) = fuzz::campaign(&opts, |r| {
        done += 1;
        let verdict = match (&r.error, r.verdict.failures.len()) {
            (Some(e), _) => format!("ERROR {e}"),
            (None, 0) => "pass".into(),
            (None, n) => format!("FAIL ({n})"),
        };
        eprintln!(
            "[fuzz] {done}/{total} seed {} run {}: {} -> {verdict} ({:.0} s, {:.0} s so far)",
            r.plan.seed,
            r.plan.run,
            r.plan.describe(),
            r.seconds,
            started.elapsed().as_secs_f64()
        );
        for f in &r.verdict.failures {
            eprintln!("[fuzz]     {f}");
        }
    })
    .map_err(|e| (if matches!(e, LabError::Missing(_) | LabError::Invalid(_)) { 2 } else { 1 }, e.into()))?;
    println!("{}", fuzz::summary(&opts, &matrix, &reports, started.elapsed().as_secs_f64()));
    Ok(if reports.iter().any(|r| r.failed()) { ExitCode::from(1) } else { ExitCode::SUCCESS })
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Err(e) = install_signal_thread() {
        eprintln!("lab: {e:#}");
        return ExitCode::from(1);
    }
    let result: Result<ExitCode, (u8, anyhow::Error)> = match cli.cmd {
        Cmd::List { json } => list(json).map(|_| ExitCode::SUCCESS).map_err(|e| (1, e)),
        Cmd::Run {
            scenario,
            out,
            run_dir,
            capture,
            ss_interval_ms,
            quiet,
            judge,
            tcpvigil,
            judge_mechanism,
            knobs,
        } => {
            if judge {
                let mech = judge_mechanism || fuzz::FuzzOptions::default().judge_mechanism;
                judged_run(&scenario, &out, run_dir, tcpvigil.as_deref(), &knobs, !quiet, mech)
            } else {
                let opts = RunOptions { out_dir: out, run_dir, capture, ss_interval_ms, progress: !quiet };
                run(&scenario, opts, &knobs)
            }
        }
        Cmd::Fuzz { runs, seed, run, first, max_seconds, tcpvigil, out, keep, family, base_draws, judge_mechanism } => {
            if !(8.0..=600.0).contains(&max_seconds) {
                Err((2, anyhow::anyhow!("--max-seconds {max_seconds} not in 8..=600")))
            } else {
                match tcpvigil_lab::daemon::find_binary(tcpvigil.as_deref()) {
                    Err(e) => Err((2, e.into())),
                    Ok(bin) => fuzz_cmd(fuzz::FuzzOptions {
                        seed,
                        runs: run.map(|k| vec![k]).unwrap_or_else(|| (first..first.saturating_add(runs)).collect()),
                        max_s: max_seconds,
                        tcpvigil: bin,
                        out_dir: out,
                        keep,
                        progress: true,
                        family,
                        base_draws,
                        judge_mechanism: judge_mechanism || fuzz::FuzzOptions::default().judge_mechanism,
                    }),
                }
            }
        }
        Cmd::Rejudge { dirs, judge_mechanism } => {
            let mut failed = 0;
            let mut m = tcpvigil_lab::fuzzjudge::Matrix::default();
            let mut mm = tcpvigil_lab::mechjudge::MechMatrix::default();
            let mut res = Ok(());
            for d in &dirs {
                match fuzz::rejudge(d) {
                    Ok((what, mut j)) => {
                        if judge_mechanism || fuzz::FuzzOptions::default().judge_mechanism {
                            j.judge_mechanism();
                        }
                        m.add(&j.verdict.cells);
                        mm.add(&j.mech.outcomes);
                        let ok = j.verdict.failures.is_empty();
                        failed += usize::from(!ok);
                        println!("{what} -> {}", if ok { "pass" } else { "FAIL" });
                        for f in &j.verdict.failures {
                            println!("  {f}");
                        }
                        for t in &j.mechanisms {
                            let how = if t.required {
                                "the run's"
                            } else if t.unconfirmed {
                                "not on the wire"
                            } else {
                                "background"
                            };
                            println!("  mechanism {} ({how}): {}", t.mechanism, t.evidence);
                        }
                    }
                    Err(e) => res = Err((2, anyhow::anyhow!("{}: {e}", d.display()))),
                }
            }
            println!("\n{}\n{}", m.render(), mm.render());
            res.map(|_| if failed > 0 { ExitCode::from(1) } else { ExitCode::SUCCESS })
        }
        Cmd::Stalls { pcap, sender } => match tcpvigil_lab::pcap::read(&pcap) {
            Err(e) => Err((2, e.into())),
            Ok(segs) => {
                for f in tcpvigil_lab::stalls::flows(&segs, |ip| sender.contains(ip), 64 * 1024) {
                    println!(
                        "{} -> {}: {} bytes acked, mss {}, {:.3}..{:.3}",
                        f.local, f.remote, f.bytes_acked, f.mss, f.first, f.last
                    );
                    for s in &f.stalls {
                        println!(
                            "  {:<11} {:<14} {:>7.3} s from +{:.3} (threshold {:.3} s, {:?}, {} retransmissions)",
                            s.owner.as_str(),
                            s.cause,
                            s.duration(),
                            s.start - f.first,
                            s.threshold_s,
                            s.level,
                            s.retransmissions
                        );
                    }
                }
                Ok(ExitCode::SUCCESS)
            }
        },
        Cmd::Down { all } => {
            if !lab::is_root() {
                Err((2, anyhow::anyhow!("lab down needs root")))
            } else {
                let removed = registry::sweep_leftovers(all);
                println!(
                    "removed {} namespace(s){}",
                    removed.len(),
                    if removed.is_empty() { String::new() } else { format!(": {}", removed.join(" ")) }
                );
                Ok(ExitCode::SUCCESS)
            }
        }
        Cmd::BenchDelay { rtt_ms, rate_mbit, seconds, json } => match lab::check_prerequisites() {
            Err(e) => Err((2, e.into())),
            Ok(()) => bench::run(f64::from(rtt_ms), f64::from(rate_mbit), f64::from(seconds))
                .map_err(|e| (1, anyhow::Error::from(e)))
                .and_then(|r| {
                    if json {
                        println!("{}", serde_json::to_string_pretty(&r).map_err(|e| (1, e.into()))?);
                    } else {
                        bench::print(&r);
                    }
                    Ok(ExitCode::SUCCESS)
                }),
        },
    };
    match result {
        Ok(c) => c,
        Err((code, e)) => {
            eprintln!("lab: {e:#}");
            ExitCode::from(code)
        }
    }
}
