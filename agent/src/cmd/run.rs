//! `tcpvigil run`: the daemon: events -> connection table -> detectors -> metrics, events, recorder.
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Result;
use tcpvigil::bpf::agent::Agent;
use tcpvigil::bpf::variants::{capture_libbpf_log, choose};
use tcpvigil::config::Config;
use tcpvigil::model::ConnTable;

use super::common::*;
use super::notify::notify;

#[derive(clap::Args)]
pub struct Args {
    /// Configuration file (TOML); without it the embedded defaults apply.
    #[arg(long)]
    config: Option<PathBuf>,
    /// Validate the configuration and exit (0 good, 2 bad) without loading anything.
    #[arg(long)]
    check_config: bool,
    /// Address for /metrics and /healthz (default from the config: 127.0.0.1:9977).
    #[arg(long)]
    listen: Option<SocketAddr>,
    /// Write findings as JSON lines to this file ("-" for stdout).
    #[arg(long)]
    events: Option<PathBuf>,
}

pub fn run(a: Args) -> Result<ExitCode> {
    let cfg = match Config::load(a.config.as_deref()) {
        Ok(c) => c,
        Err(e) => return Ok(usage(e)),
    };
    if a.check_config {
        println!("configuration OK");
        return Ok(ExitCode::SUCCESS);
    }
    if let Err(e) = require_privileges() {
        return Ok(usage(e));
    }
    capture_libbpf_log();
    let variants = choose();
    if let Some(m) = variants.missing_essential().first() {
        anyhow::bail!("no working variant for `{}`; run `tcpvigil check` for details", m.need);
    }
    for c in &variants.choices {
        tracing::info!(need = c.need, variant = %c.variant, preferred = c.preferred, "hook");
    }
    let agent = Agent::start(cfg.bpf.settings(), variants, cfg.bpf.channel, cfg.bpf.bpf_stats)?;
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    rt.block_on(daemon(agent, cfg, a))
}

async fn daemon(mut agent: Agent, _cfg: Config, _a: Args) -> Result<ExitCode> {
    let exact = agent.variants.uses(tcpvigil::bpf::variants::Prog::MarkLost);
    let mut table = ConnTable::new(exact);
    let mut tick = tokio::time::interval(Duration::from_millis(50));
    let mut reap = tokio::time::interval(Duration::from_secs(5));
    let stop = interrupted();
    tokio::pin!(stop);
    notify("READY=1");
    tracing::info!("tcpvigil running");
    loop {
        tokio::select! {
            ev = agent.events.recv() => {
                let Some(ev) = ev else { break };
                table.apply(&ev);
            }
            _ = tick.tick() => {}
            _ = reap.tick() => {
                let now = mono_now_ns();
                table.reap(now.saturating_sub(10_000_000_000));
            }
            _ = &mut stop => break,
        }
    }
    notify("STOPPING=1");
    tracing::info!("tcpvigil stopping");
    agent.stop();
    Ok(ExitCode::SUCCESS)
}
