//! `tcpvigil watch --conn FILTER`: select the connections in the kernel and feed the terminal view.
//! `tcpvigil watch`: the host view, fed as the daemon is (bulk samples and snapshots of every
//! connection, processes of older sockets from /proc); only the connection opened with Enter is
//! selected for per-ACK samples.
use std::process::ExitCode;

use anyhow::Result;
use tcpvigil::bpf::agent::{Agent, Msg};
use tcpvigil::bpf::load::Settings;
use tcpvigil::bpf::preowners::PreOwners;
use tcpvigil::bpf::variants::Prog;
use tcpvigil::detect::{DetectConfig, Input, Pipeline};
use tcpvigil::model::{Event, Filter};
use tcpvigil::watch::{WatchInput, WatchOpts};
use tokio::sync::mpsc;

use super::common::*;

/// The host view forgets connections closed (or silent) this long ago, as the daemon does.
const REAP_NS: u64 = 10_000_000_000;

pub fn run(opts: WatchOpts) -> Result<ExitCode> {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    if opts.replay.is_some() {
        let (_tx, rx) = mpsc::channel(1);
        rt.block_on(tcpvigil::watch::run(opts, rx, Box::new(|_| {})))?;
        return Ok(ExitCode::SUCCESS);
    }
    if let Err(e) = require_privileges() {
        return Ok(usage(e));
    }
    let variants = match prepare_bpf() {
        Ok(v) => v,
        Err(code) => return Ok(code),
    };
    let settings = match &opts.conn {
        Some(f) => Settings { bulk_interval_ns: 0, rules: f.rules(), snapshot_interval_ms: 500, ..Default::default() },
        None => Settings { hold_start_pass: true, ..Default::default() },
    };
    let exact = variants.uses(Prog::MarkLost);
    let mut agent = Agent::start(settings, variants, 1 << 16, false)?;
    let filter = opts.conn.clone();
    let mut pipe = Pipeline::new(&DetectConfig::default(), exact);
    if filter.is_none() {
        // Sockets older than this watch: their processes, as the daemon reads them.
        let pre = PreOwners::scan(std::path::Path::new("/proc"));
        pipe = pipe.with_process_lookup(Box::new(move |id| pre.owner_of(id)));
    }
    agent.start_pass();
    let (select_tx, mut select_rx) = mpsc::unbounded_channel::<Option<u64>>();
    let select = Box::new(move |c| {
        let _ = select_tx.send(c);
    });
    let (tx, rx) = mpsc::channel(1 << 14);
    let summary = rt.block_on(async move {
        let feed = async {
            let mut phased = 0;
            let mut reaped = 0;
            loop {
                let msg = tokio::select! {
                    m = agent.events.recv() => m,
                    Some(c) = select_rx.recv() => {
                        agent.select(false, c.map(|k| Filter::Cookie(k).rules()).unwrap_or_default());
                        continue;
                    }
                };
                let Some(msg) = msg else { break };
                let mut made: Option<Event> = None;
                let input = match msg {
                    Msg::Event(ev) if filter.as_ref().is_none_or(|f| f.matches(&ev.conn)) => {
                        // The pipeline's table and detectors, on the watched connections only
                        // (every one, for the host view); a process the lookup made goes on too.
                        pipe.feed(Input::Event(&ev), |e| {
                            if !std::ptr::eq(e, &ev) {
                                made = Some(e.clone());
                            }
                        });
                        WatchInput::Event(ev)
                    }
                    Msg::Event(_) => continue,
                    Msg::Drained(t) => {
                        pipe.feed(Input::Time(t), |_| {});
                        if pipe.wants_snapshot() {
                            agent.snapshot_soon();
                        }
                        if filter.is_some() {
                            // The watched connections report their rounds (the send phase of the
                            // group view), whatever group the detectors give them.
                            let table = pipe.table();
                            if table.len() != phased {
                                phased = table.len();
                                agent.set_phase(table.iter().map(|e| e.id.cookie).collect(), pipe.phase_min_srtt_us());
                            }
                        } else {
                            if let Some((members, min_srtt_us)) = pipe.phase_members() {
                                agent.set_phase(members, min_srtt_us);
                            }
                            if t > reaped + 1_000_000_000 {
                                reaped = t;
                                pipe.reap(t.saturating_sub(REAP_NS));
                            }
                        }
                        WatchInput::Tick(t)
                    }
                };
                let found = pipe.findings().into_iter().map(WatchInput::Finding);
                for i in made.map(WatchInput::Event).into_iter().chain(found).chain(std::iter::once(input)) {
                    if tx.send(i).await.is_err() {
                        return;
                    }
                }
            }
        };
        tokio::select! {
            s = tcpvigil::watch::run(opts, rx, select) => s,
            _ = feed => Err(anyhow::anyhow!("the kernel feed ended")),
        }
    });
    summary.map(|_| ExitCode::SUCCESS)
}
