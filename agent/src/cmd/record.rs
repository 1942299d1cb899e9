//! `tcpvigil record`: per-ACK samples and events of the selected connections, as JSON lines.
use std::collections::{BTreeMap, HashSet};
use std::io::{BufWriter, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use tcpvigil::bpf::agent::{Agent, Msg, KERNEL_STAT_NAMES};
use tcpvigil::bpf::load::Settings;
use tcpvigil::model::{Body, Filter};
use tcpvigil::recording::{write_event, write_header};

use super::common::*;

#[derive(clap::Args)]
pub struct Args {
    /// File to write (JSON lines: a header, then one event per line; created 0640), or "-" for
    /// stdout.
    #[arg(long, short)]
    out: PathBuf,
    /// Stop after this many seconds (default: until Ctrl-C).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=604800))]
    duration: Option<u64>,
    /// Connections to record (ADDR:PORT, :PORT, ADDR, [V6]:PORT, a socket cookie as sk:HEX, 0xHEX
    /// or decimal, LADDR:LPORT-RADDR:RPORT);
    /// repeat for several. Without it every connection is recorded.
    #[arg(long = "conn")]
    conns: Vec<String>,
    /// Create this file once the probes are attached (for harnesses).
    #[arg(long)]
    ready_file: Option<PathBuf>,
    /// Seconds between connection snapshots.
    #[arg(long, default_value_t = 1.0, value_parser = parse_interval)]
    snapshot_interval: f64,
    /// Record what the daemon sees instead of every ACK: at most one sample per connection per
    /// this many milliseconds (bulk connections, plus the sample of an ACK that drains the pipe).
    /// Small recordings of long runs, e.g. detector fixtures. 0 (default): every ACK.
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u64).range(0..=60_000))]
    sample_every: u64,
    /// Size of the kernel ring buffer, KiB (a power of two, 16 to 1048576). Small: records are
    /// lost (and counted) under load; the default 8192 keeps up with a few fast transfers.
    #[arg(long, default_value_t = 8192, value_parser = parse_ringbuf_kib)]
    ringbuf_kib: u32,
}

fn parse_ringbuf_kib(s: &str) -> Result<u32, String> {
    match s.parse::<u32>() {
        Ok(v) if (16..=1 << 20).contains(&v) && v.is_power_of_two() => Ok(v),
        _ => Err(format!("{s:?}: give a power of two from 16 to 1048576 (KiB)")),
    }
}

fn parse_interval(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if (0.05..=60.0).contains(&v) => Ok(v),
        _ => Err("a number of seconds from 0.05 to 60".into()),
    }
}

pub fn run(a: Args) -> Result<ExitCode> {
    let filters = match parse_filters(&a.conns) {
        Ok(f) => f,
        Err(e) => return Ok(usage(e)),
    };
    let to_stdout = a.out.as_os_str() == "-";
    if !to_stdout {
        if let Err(e) = check_out_path(&a.out) {
            return Ok(usage(e));
        }
    }
    // Privileges before anything is created: nothing is left behind by a run that cannot load.
    if let Err(e) = require_privileges() {
        return Ok(usage(e));
    }
    let rules: Vec<_> = filters.iter().flat_map(|f| f.rules()).collect();
    if rules.len() > tcpvigil::bpf::abi::MAX_FILTERS {
        return Ok(usage(format!(
            "too many filters: they need {} kernel rules, at most {} fit",
            rules.len(),
            tcpvigil::bpf::abi::MAX_FILTERS
        )));
    }
    // 0640, like the events file: a recording names hosts, ports and processes (an older file
    // of that name keeps no wider mode). Never through a symlink (record runs as root); a bad path
    // is exit 2 before anything is loaded.
    let out: Box<dyn Write> = if to_stdout {
        Box::new(std::io::stdout().lock())
    } else {
        let created = tcpvigil::files::create(&a.out, tcpvigil::files::Existing::Truncate, 0o640).and_then(|f| {
            use std::os::unix::fs::PermissionsExt;
            f.set_permissions(std::fs::Permissions::from_mode(0o640)).map(|()| f)
        });
        match created {
            Ok(f) => Box::new(f),
            Err(e) => return Ok(usage(format!("cannot create {}: {e}", a.out.display()))),
        }
    };
    let variants = match prepare_bpf() {
        Ok(v) => v,
        Err(code) => return Ok(code),
    };
    let mut w = BufWriter::with_capacity(1 << 20, out);
    // Daemon-like sampling selects no connection in the kernel; the filters then apply here only.
    let daemon_like = a.sample_every > 0;
    let settings = Settings {
        bulk_interval_ns: a.sample_every * 1_000_000,
        select_all: filters.is_empty() && !daemon_like,
        rules: if daemon_like { Vec::new() } else { rules },
        snapshot_interval_ms: (a.snapshot_interval * 1000.0) as u64,
        ringbuf_bytes: a.ringbuf_kib * 1024,
        ..Default::default()
    };
    let header = recording_header(&variants, a.conns.clone());
    write_header(&mut w, &header)?;
    let agent = Agent::start(settings, variants, 1 << 16, false)?;
    if let Some(r) = &a.ready_file {
        tcpvigil::files::write(r, b"", 0o644).with_context(|| format!("creating the ready file {}", r.display()))?;
    }
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let summary = rt.block_on(pump(agent, &filters, a.duration.map(Duration::from_secs), &mut w))?;
    w.flush()?;
    eprintln!("{summary}");
    if !to_stdout {
        eprintln!("tcpvigil: wrote {}", a.out.display());
    }
    Ok(ExitCode::SUCCESS)
}

async fn pump(mut agent: Agent, filters: &[Filter], duration: Option<Duration>, w: &mut impl Write) -> Result<String> {
    let start = Instant::now();
    let deadline = async {
        match duration {
            Some(d) => tokio::time::sleep(d).await,
            None => std::future::pending().await,
        }
    };
    tokio::pin!(deadline);
    let stop = interrupted();
    tokio::pin!(stop);
    let mut progress = tokio::time::interval(Duration::from_secs(5));
    progress.tick().await;
    let mut by_type: BTreeMap<&'static str, u64> = BTreeMap::new();
    let mut conns = HashSet::new();
    // Ring-buffer records (not snapshots, which the iterator reads) not selected by the filters.
    let mut unselected = 0u64;
    eprintln!(
        "tcpvigil: recording{}; Ctrl-C to stop",
        duration.map(|d| format!(" for {}s", d.as_secs())).unwrap_or_default()
    );
    loop {
        tokio::select! {
            msg = agent.events.recv() => {
                let ev = match msg {
                    Some(Msg::Event(ev)) => ev,
                    Some(Msg::Drained(_)) => continue,
                    None => break,
                };
                if !filters.is_empty() && !filters.iter().any(|f| f.matches(&ev.conn)) {
                    unselected += !matches!(ev.body, Body::Snapshot(_)) as u64;
                    continue;
                }
                *by_type.entry(kind_name(&ev.body)).or_default() += 1;
                conns.insert(ev.conn.cookie);
                write_event(&mut *w, &ev)?;
            }
            _ = &mut deadline => break,
            _ = &mut stop => break,
            _ = progress.tick() => {
                eprintln!("tcpvigil: {:>5.0}s  {} events  {} connections", start.elapsed().as_secs_f64(), by_type.values().sum::<u64>(), conns.len());
            }
        }
    }
    agent.stop();
    // Events decoded before the thread stopped are still in the channel.
    while let Ok(msg) = agent.events.try_recv() {
        let Msg::Event(ev) = msg else { continue };
        if filters.is_empty() || filters.iter().any(|f| f.matches(&ev.conn)) {
            *by_type.entry(kind_name(&ev.body)).or_default() += 1;
            conns.insert(ev.conn.cookie);
            write_event(&mut *w, &ev)?;
        } else {
            unselected += !matches!(ev.body, Body::Snapshot(_)) as u64;
        }
    }
    let c = &agent.counters;
    let kernel = c.kernel.lock().map(|k| k.clone()).unwrap_or_default();
    let mut s = format!(
        "tcpvigil: recorded {:.1}s, {} connections, {} events ({})",
        start.elapsed().as_secs_f64(),
        conns.len(),
        by_type.values().sum::<u64>(),
        by_type.iter().map(|(k, v)| format!("{k} {v}")).collect::<Vec<_>>().join(", ")
    );
    let lost_rb = kernel.first().copied().unwrap_or(0);
    // The account: what the programs produced against what was written or filtered out here.
    let produced = kernel.get(5).copied().unwrap_or(0) + kernel.get(6).copied().unwrap_or(0) + lost_rb;
    let written_ring = by_type.iter().filter(|(k, _)| **k != "snapshot").map(|(_, v)| v).sum::<u64>();
    s.push_str(&format!(
        "\ntcpvigil: account: produced {produced} ring-buffer records, written {written_ring}, not selected {unselected}, lost {}",
        produced.saturating_sub(written_ring + unselected)
    ));
    s.push_str(&format!(
        "\ntcpvigil: lost: {} in the kernel ring buffer, {} in the channel, {} undecodable",
        lost_rb,
        c.channel_dropped.load(Ordering::Relaxed),
        c.decode_errors.load(Ordering::Relaxed)
    ));
    // Runs the kernel skipped because the program was already running on that CPU: events never seen.
    if let Ok(progs) = c.prog_stats.lock() {
        for (name, _, _, misses) in progs.iter().filter(|p| p.3 > 0) {
            s.push_str(&format!(", {misses} runs of {name} skipped by the kernel (recursion)"));
        }
    }
    for (i, name) in KERNEL_STAT_NAMES.iter().enumerate().skip(1).take(4) {
        if let Some(v) = kernel.get(i).filter(|v| **v > 0) {
            s.push_str(&format!(", {v} {name}"));
        }
    }
    Ok(s)
}

pub fn kind_name(b: &Body) -> &'static str {
    match b {
        Body::Sample(_) => "sample",
        Body::Retrans(_) => "retrans",
        Body::LostRetrans(_) => "lost_retrans",
        Body::CaState(_) => "ca_state",
        Body::Rto(_) => "rto",
        Body::State(_) => "state",
        Body::Snapshot(_) => "snapshot",
        Body::Close(_) => "close",
        Body::Process(_) => "owner",
    }
}
