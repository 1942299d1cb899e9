//! The `lab` command: list, run and tear down tcpvigil lab scenarios; benchmark the delay line.
use anyhow::Context;
use clap::{Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::Ordering;
use tcpvigil_lab::{bench, lab, registry, runner, Knobs, LabError, RunOptions, Scenario};

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
        #[command(flatten)]
        knobs: Box<Knobs>,
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
            println!("scenario      {}", t.scenario);
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

fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Err(e) = install_signal_thread() {
        eprintln!("lab: {e:#}");
        return ExitCode::from(1);
    }
    let result: Result<ExitCode, (u8, anyhow::Error)> = match cli.cmd {
        Cmd::List { json } => list(json).map(|_| ExitCode::SUCCESS).map_err(|e| (1, e)),
        Cmd::Run { scenario, out, run_dir, capture, ss_interval_ms, quiet, knobs } => {
            let opts = RunOptions { out_dir: out, run_dir, capture, ss_interval_ms, progress: !quiet };
            run(&scenario, opts, &knobs)
        }
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
