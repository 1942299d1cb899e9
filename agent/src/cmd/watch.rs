//! `tcpvigil watch --conn FILTER`: select the connections in the kernel and feed the terminal view.
use std::process::ExitCode;

use anyhow::Result;
use tcpvigil::bpf::agent::{Agent, Msg};
use tcpvigil::bpf::load::Settings;
use tcpvigil::bpf::variants::Prog;
use tcpvigil::detect::{DetectConfig, Input, Pipeline};
use tcpvigil::watch::{WatchInput, WatchOpts};
use tokio::sync::mpsc;

use super::common::*;

pub fn run(opts: WatchOpts) -> Result<ExitCode> {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    if opts.replay.is_some() {
        let (_tx, rx) = mpsc::channel(1);
        rt.block_on(tcpvigil::watch::run(opts, rx))?;
        return Ok(ExitCode::SUCCESS);
    }
    if let Err(e) = require_privileges() {
        return Ok(usage(e));
    }
    let variants = match prepare_bpf() {
        Ok(v) => v,
        Err(code) => return Ok(code),
    };
    let settings =
        Settings { bulk_interval_ns: 0, rules: opts.conn.rules(), snapshot_interval_ms: 500, ..Default::default() };
    let exact = variants.uses(Prog::MarkLost);
    let mut agent = Agent::start(settings, variants, 1 << 16, false)?;
    let filter = opts.conn.clone();
    let (tx, rx) = mpsc::channel(1 << 14);
    let summary = rt.block_on(async move {
        let feed = async {
            // The daemon's pipeline, on the watched connections only.
            let mut pipe = Pipeline::new(&DetectConfig::default(), exact);
            let mut phased = 0;
            while let Some(msg) = agent.events.recv().await {
                let input = match msg {
                    Msg::Event(ev) if filter.matches(&ev.conn) => {
                        pipe.feed(Input::Event(&ev), |_| {});
                        WatchInput::Event(ev)
                    }
                    Msg::Event(_) => continue,
                    Msg::Drained(t) => {
                        pipe.feed(Input::Time(t), |_| {});
                        if pipe.wants_snapshot() {
                            agent.snapshot_soon();
                        }
                        // The watched connections report their rounds (the send phase of the
                        // group view), whatever group the detectors give them.
                        let table = pipe.table();
                        if table.len() != phased {
                            phased = table.len();
                            agent.set_phase(table.iter().map(|e| e.id.cookie).collect(), pipe.phase_min_srtt_us());
                        }
                        WatchInput::Tick(t)
                    }
                };
                for f in pipe.findings() {
                    if tx.send(WatchInput::Finding(f)).await.is_err() {
                        return;
                    }
                }
                if tx.send(input).await.is_err() {
                    return;
                }
            }
        };
        tokio::select! {
            s = tcpvigil::watch::run(opts, rx) => s,
            _ = feed => Err(anyhow::anyhow!("the kernel feed ended")),
        }
    });
    summary.map(|_| ExitCode::SUCCESS)
}
