//! The tcpvigil command line: parse, validate, dispatch. Exit 2 on bad input, before any BPF.
mod cmd;

use std::process::ExitCode;

use clap::{CommandFactory, Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "tcpvigil",
    version = concat!(env!("CARGO_PKG_VERSION"), " (", env!("TCPVIGIL_REVISION"), ")"),
    about = "TCP loss-recovery observability for bulk transfers over long fat networks",
    after_help = cmd::help::top()
)]
struct Cli {
    /// Log style on stderr: auto (journal priorities under systemd, colour only on a terminal),
    /// text, json, journal.
    #[arg(long, global = true, value_enum, default_value_t = tcpvigil::logging::LogFormat::Auto)]
    log_format: tcpvigil::logging::LogFormat,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// What this kernel allows and which variant each hook need uses.
    #[command(after_help = cmd::help::check())]
    Check(cmd::check::Args),
    /// Write per-ACK samples and events of selected connections to a file.
    Record(cmd::record::Args),
    /// The daemon: diagnoses, Prometheus metrics, JSON events, flight recorder.
    #[command(after_help = cmd::help::run())]
    Run(cmd::run::Args),
    /// Replay a recording through the detectors and print the diagnoses.
    Analyze(cmd::analyze::Args),
    /// The host's bulk connections, or one connection (or a group), live in the terminal; JSON lines when not a terminal.
    Watch(tcpvigil::watch::WatchOpts),
    /// Pictures of a recording: goodput, window, scoreboard and sequence over time (SVG and PNG).
    Plot(tcpvigil::plot::PlotArgs),
    /// Man pages and shell completions into a directory (packaging).
    #[command(hide = true)]
    GenDocs(cmd::gen_docs::Args),
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() { ExitCode::from(2) } else { ExitCode::SUCCESS };
        }
    };
    tcpvigil::logging::init(cli.log_format);
    let r = match cli.cmd {
        Cmd::Check(a) => cmd::check::run(a),
        Cmd::Record(a) => cmd::record::run(a),
        Cmd::Run(a) => cmd::run::run(a),
        Cmd::Analyze(a) => cmd::analyze::run(a),
        Cmd::Watch(a) => cmd::watch::run(a),
        Cmd::Plot(a) => cmd::plot::run(a),
        Cmd::GenDocs(a) => cmd::gen_docs::run(a, Cli::command()),
    };
    match r {
        Ok(code) => code,
        Err(e) => {
            eprintln!("tcpvigil: {e:#}");
            ExitCode::from(1)
        }
    }
}
