//! tvguest: the kernel-matrix tests, run inside a test VM (as its /init's child) or natively on
//! the host. Prints TVTEST lines (see report.rs) and exits non-zero when any test failed.
mod capture;
mod check;
mod datapath;
mod net;
mod recorder;
mod report;
mod sys;
mod traffic;

use std::process::ExitCode;

use clap::Parser;

use report::Report;

/// What this kernel should allow.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Expect {
    /// fentry/fexit load: the preferred variants must be chosen (the Debian VMs).
    Fentry,
    /// fentry/fexit refused: the fallbacks must be chosen and the refusal reported (this host).
    Fallback,
    /// Whatever `check` finds for fexit/tcp_sacktag_write_queue, held consistently across the
    /// other trampoline needs and the samples (the host run: right on any machine).
    Any,
}

#[derive(Parser)]
#[command(about = "tcpvigil kernel-matrix tests (TVTEST lines on stdout)")]
struct Cli {
    #[arg(long, value_enum, default_value_t = Expect::Any)]
    expect: Expect,
    /// The tcpvigil binary under test.
    #[arg(long, default_value = "tcpvigil")]
    tcpvigil: String,
    /// Comma-separated tests to run: check, datapath (default: all).
    #[arg(long)]
    only: Option<String>,
    #[command(flatten)]
    datapath: datapath::Opts,
    /// Accepted for symmetry with the runner (`tvguest all`).
    #[arg(hide = true)]
    cmd: Option<String>,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let mut r = Report::default();
    r.info(&format!("kernel {} expect {:?}", sys::kernel_release(), cli.expect));
    let wanted = |t: &str| cli.only.as_deref().map(|o| o.split(',').any(|x| x.trim() == t)).unwrap_or(true);
    if !nix::unistd::geteuid().is_root() {
        r.fail("root", "the matrix tests need root (eBPF, network namespaces)");
    } else {
        if wanted("check") {
            if let Err(e) = check::run(&mut r, &cli.tcpvigil, cli.expect) {
                r.fail("check", &format!("{e:#}"));
            }
        }
        if wanted("datapath") {
            let t0 = std::time::Instant::now();
            if let Err(e) = datapath::run(&mut r, &cli.tcpvigil, cli.expect, &cli.datapath) {
                r.fail("datapath", &format!("{e:#}"));
            }
            r.info(&format!("datapath took {:.1}s", t0.elapsed().as_secs_f64()));
        }
    }
    r.done();
    if r.fail == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
