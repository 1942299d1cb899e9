//! `tcpvigil run`: the daemon: events -> connection table -> detectors -> metrics, events, recorder.
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use tcpvigil::bpf::agent::{Agent, Counters, Msg};
use tcpvigil::bpf::preowners::PreOwners;
use tcpvigil::bpf::variants::Prog;
use tcpvigil::clock::mono_now_ns;
use tcpvigil::config::Config;
use tcpvigil::detect::{Input, Pipeline};
use tcpvigil::export::config::ListenAddr;
use tcpvigil::export::health::{KernelCounters, ProgStats};
use tcpvigil::export::outputs::{Flight, Outputs};
use tcpvigil::export::recorder::sink::DumpSink;
use tcpvigil::export::recorder::Recorder;
use tcpvigil::export::{EventsTarget, EventsWriter, Health, HttpServer, Metrics, WebConfig};

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
    /// Address for /metrics and /healthz: IP:PORT, [IPV6]:PORT, :PORT (every address) or
    /// HOST:PORT (overrides export.listen; default 127.0.0.1:9977).
    #[arg(long, value_name = "ADDR")]
    listen: Option<ListenAddr>,
    /// Write findings as JSON lines to this file ("-" for stdout; overrides export.events).
    #[arg(long)]
    events: Option<String>,
    /// Create this file once the probes are attached and the daemon serves (for harnesses); it
    /// holds the address /metrics is served on (useful with `--listen 127.0.0.1:0`).
    #[arg(long)]
    ready_file: Option<PathBuf>,
    /// Write flight-recorder dumps into this directory (overrides recorder.dir and turns the
    /// recorder on).
    #[arg(long, value_name = "DIR")]
    dump_dir: Option<PathBuf>,
}

pub fn run(a: Args) -> Result<ExitCode> {
    let mut cfg = match Config::load(a.config.as_deref()) {
        Ok(c) => c,
        Err(e) => return Ok(usage(e)),
    };
    if let Some(l) = &a.listen {
        cfg.export.listen = l.clone();
    }
    if let Some(e) = &a.events {
        cfg.export.events = Some(e.clone());
    }
    if let Some(d) = &a.dump_dir {
        cfg.recorder.dir = d.clone();
        cfg.recorder.enabled = true;
        if let Err(e) = cfg.recorder.validate() {
            return Ok(usage(format!("--dump-dir: {e}")));
        }
    }
    let web = match cfg.export.web_config.as_deref().map(WebConfig::load).transpose() {
        Ok(w) => w,
        Err(e) => return Ok(usage(e)),
    };
    // The outputs are checked (--check-config, creating nothing) or opened and locked once here,
    // before anything is loaded: a bad or busy path is exit 2 with one message.
    let events = cfg.export.events.as_deref().map(EventsTarget::parse);
    let opened = match &events {
        Some(t) if a.check_config => EventsWriter::check(t),
        Some(t) => EventsWriter::open(t.clone(), 0).map(drop),
        None => Ok(()),
    };
    if let Err(e) = opened {
        return Ok(usage(e));
    }
    if cfg.recorder.enabled {
        let dir = &cfg.recorder.dir;
        let r = if a.check_config { DumpSink::check_dir(dir) } else { DumpSink::prepare_dir(dir).map(drop) };
        if let Err(e) = r {
            return Ok(usage(format!("{e} (recorder.dir; or set recorder.enabled = false)")));
        }
    }
    if a.check_config {
        println!("configuration OK");
        return Ok(ExitCode::SUCCESS);
    }
    raise_nofile(tcpvigil::export::http::MAX_CONNS as u64 + 256);
    let variants = match prepare_bpf() {
        Ok(v) => v,
        Err(code) => return Ok(code),
    };
    let out = tcpvigil::config::outputs(&cfg, a.config.as_deref());
    let get = |k: &str| out.iter().find(|(n, _)| *n == k).map_or("", |(_, v)| v.as_str());
    tracing::info!(
        config = get("config"),
        dumps = get("dumps"),
        events = get("events"),
        metrics = get("metrics"),
        "where tcpvigil writes"
    );
    for c in &variants.choices {
        tracing::info!(need = c.need, variant = %c.variant, preferred = c.preferred, "hook");
    }
    let header = recording_header(&variants, Vec::new());
    let flight = if cfg.recorder.enabled {
        let rec = Recorder::new(cfg.recorder.clone())?;
        let sink = DumpSink::start(&cfg.recorder, header)?;
        tracing::info!(dir = %sink.dir().display(), "flight recorder on");
        Some(Flight { rec, sink })
    } else {
        None
    };
    let agent = Agent::start(cfg.bpf.settings(), variants, cfg.bpf.channel, cfg.bpf.bpf_stats)?;
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    rt.block_on(daemon(agent, cfg, web, a.config, a.ready_file, flight))
}

async fn daemon(
    mut agent: Agent,
    cfg: Config,
    web: Option<WebConfig>,
    cfg_path: Option<PathBuf>,
    ready_file: Option<PathBuf>,
    flight: Option<Flight>,
) -> Result<ExitCode> {
    let exact = agent.variants.uses(Prog::MarkLost);
    // Sockets older than the daemon: their connect() and listen() happened before its programs.
    let t = std::time::Instant::now();
    let pre = PreOwners::scan(std::path::Path::new("/proc"));
    let (old_conns, old_listeners) = pre.counts();
    tracing::info!(
        connections = old_conns,
        listeners = old_listeners,
        ms = t.elapsed().as_millis() as u64,
        "processes of sockets older than the daemon read from /proc"
    );
    let mut pipe = Pipeline::new(&cfg.detect, exact).with_process_lookup(Box::new(move |id| pre.owner_of(id)));
    let (mut metrics, registry) = Metrics::new_registered(&cfg.export);
    metrics.set_exact_lost_retrans(exact);
    let choices = &agent.variants.choices;
    let fallback: Vec<&str> = choices.iter().filter(|c| !c.preferred).map(|c| c.need).collect();
    metrics.set_hooks(choices.len() - fallback.len(), choices.len(), &fallback);
    let events = match &cfg.export.events {
        Some(t) => Some(EventsWriter::open(EventsTarget::parse(t), 0).context("opening the events output")?),
        None => None,
    };
    let mut out = Outputs::new(metrics, events, flight);
    let ready = Arc::new(AtomicBool::new(false));
    let server = HttpServer::bind_listen(&cfg.export.listen, web, Arc::new(registry), ready.clone()).await?;
    let http = server.handle();
    let serving = server.local_addr();
    tracing::info!("serving /metrics and /healthz on {serving}");
    let (stop_http, http_stopped) = tokio::sync::oneshot::channel::<()>();
    let server_task = tokio::spawn(server.run(async {
        let _ = http_stopped.await;
    }));

    let mut refresh = tokio::time::interval(Duration::from_secs(1));
    let mut hup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())?;
    let stop = interrupted();
    tokio::pin!(stop);
    ready.store(true, Ordering::SeqCst);
    notify("READY=1");
    if let Some(r) = &ready_file {
        // Written whole to a temporary name first: a harness that sees the file sees the address.
        let tmp = r.with_extension("tmp");
        tcpvigil::files::write(&tmp, format!("{serving}\n").as_bytes(), 0o644)
            .and_then(|()| std::fs::rename(&tmp, r))
            .with_context(|| format!("creating the ready file {}", r.display()))?;
    }
    tracing::info!("tcpvigil running");
    loop {
        tokio::select! {
            msg = agent.events.recv() => match msg {
                Some(Msg::Event(ev)) => out.step(&mut pipe, Input::Event(&ev)),
                // Time advances only as far as the kernel's records have been read.
                Some(Msg::Drained(t)) => {
                    out.step(&mut pipe, Input::Time(t));
                    if pipe.wants_snapshot() {
                        agent.snapshot_soon();
                    }
                    if let Some((members, min_srtt_us)) = pipe.phase_members() {
                        agent.set_phase(members, min_srtt_us);
                    }
                }
                None => break,
            },
            _ = refresh.tick() => {
                out.refresh(pipe.table(), health(&agent));
                if pipe.reap(mono_now_ns().saturating_sub(10_000_000_000)) >= 1000 {
                    give_back_memory();
                }
            }
            _ = hup.recv() => {
                notify("RELOADING=1");
                if let Err(e) = http.reload(cfg.export.web_config.as_deref()) {
                    tracing::warn!("web config reload failed, keeping the old one: {e}");
                }
                if let Some(e) = out.events.as_mut() {
                    if let Err(err) = e.reopen() {
                        tracing::warn!("reopening the events file: {err}");
                    }
                }
                tracing::info!("reloaded (config file {:?}: detector and hook settings need a restart)", cfg_path);
                notify("READY=1");
            }
            _ = &mut stop => break,
        }
    }
    notify("STOPPING=1");
    tracing::info!("tcpvigil stopping");
    ready.store(false, Ordering::SeqCst);
    let _ = stop_http.send(());
    let _ = server_task.await;
    agent.stop();
    if let Some(mut fl) = out.flight {
        // Open dumps are written now, with the history they have.
        let last = fl.rec.flush();
        let s = fl.rec.stats();
        let c = tokio::task::spawn_blocking(move || fl.sink.finish(last, Duration::from_secs(10))).await?;
        tracing::info!(
            written = c.written,
            failed = c.failed,
            dropped = c.dropped,
            no_history = s.no_history,
            conns = s.conns,
            memory_bytes = s.bytes,
            largest_conn_bytes = s.largest_conn_bytes,
            "flight recorder stopped"
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// What the BPF side counts about itself (the outputs add their own counts).
fn health(agent: &Agent) -> Health {
    let c: &Counters = &agent.counters;
    let k = c.kernel.lock().map(|k| k.clone()).unwrap_or_default();
    let at = |i: usize| k.get(i).copied().unwrap_or(0);
    Health {
        variants: agent.variants.pairs(),
        programs: c
            .prog_stats
            .lock()
            .map(|v| {
                v.iter()
                    .map(|(n, t, r, m)| ProgStats {
                        name: n.clone(),
                        run_time_ns: *t,
                        run_cnt: *r,
                        recursion_misses: *m,
                    })
                    .collect()
            })
            .unwrap_or_default(),
        kernel: KernelCounters {
            ring_full: at(0),
            storage_fail: at(1),
            rtx_map_full: at(2),
            opt_read_fail: at(3),
            seq_write_fail: at(4),
            samples: at(5),
            events: at(6),
        },
        maps: Vec::new(),
        channel_dropped: c.channel_dropped.load(Ordering::Relaxed),
        decode_errors: c.decode_errors.load(Ordering::Relaxed),
        events_write_errors: 0,
        recorder: Default::default(),
        snapshot_seconds: c.snapshot_ns.load(Ordering::Relaxed) as f64 / 1e9,
    }
}
