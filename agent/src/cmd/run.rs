//! `tcpvigil run`: the daemon: events -> connection table -> detectors -> metrics, events, recorder.
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use prometheus_client::registry::Registry;
use tcpvigil::bpf::agent::{Agent, Counters, Msg};
use tcpvigil::bpf::preowners::PreOwners;
use tcpvigil::bpf::variants::Prog;
use tcpvigil::clock::mono_now_ns;
use tcpvigil::config::Config;
use tcpvigil::detect::{Input, Pipeline};
use tcpvigil::export::config::ListenAddr;
use tcpvigil::export::health::{KernelCounters, ProgStats};
use tcpvigil::export::http::{HttpError, HttpHandle};
use tcpvigil::export::outputs::{Flight, Outputs};
use tcpvigil::export::recorder::sink::DumpSink;
use tcpvigil::export::recorder::Recorder;
use tcpvigil::export::{EventsTarget, EventsWriter, Health, HttpServer, Metrics, WebConfig};

use super::common::*;
use super::notify::notify;
use super::reload::{plan, Overrides};

#[derive(clap::Args)]
pub struct Args {
    /// Configuration file (TOML); without it the embedded defaults apply. SIGHUP reads it again.
    #[arg(long)]
    config: Option<PathBuf>,
    /// Validate the configuration and the paths it writes to, and exit (0 good, 2 bad) without
    /// loading anything.
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
    /// holds the address /metrics is served on (useful with `--listen 127.0.0.1:0`), and is
    /// written again when a reload moves the server.
    #[arg(long)]
    ready_file: Option<PathBuf>,
    /// Write flight-recorder dumps into this directory (overrides recorder.dir and turns the
    /// recorder on).
    #[arg(long, value_name = "DIR")]
    dump_dir: Option<PathBuf>,
}

/// The configuration file and the command line over it.
fn load(path: Option<&Path>, o: &Overrides) -> Result<Config, String> {
    let mut cfg = Config::load(path).map_err(|e| e.to_string())?;
    o.apply(&mut cfg)?;
    Ok(cfg)
}

pub fn run(a: Args) -> Result<ExitCode> {
    let overrides = Overrides { listen: a.listen.clone(), events: a.events.clone(), dump_dir: a.dump_dir.clone() };
    let cfg = match load(a.config.as_deref(), &overrides) {
        Ok(c) => c,
        Err(e) => return Ok(usage(e)),
    };
    // Privileges first: without them nothing else matters, and the message says what to grant.
    if !a.check_config {
        if let Err(e) = require_privileges() {
            return Ok(usage(e));
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
            return Ok(usage(format!(
                "{e} (recorder.dir: run as a user who may write there, give another with --dump-dir DIR, or set recorder.enabled = false)"
            )));
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
    // The start pass waits for the owner scan: each alone on the CPUs takes less time.
    let settings = tcpvigil::bpf::load::Settings { hold_start_pass: true, ..cfg.bpf.settings() };
    let agent = Agent::start(settings, variants, cfg.bpf.channel, cfg.bpf.bpf_stats)?;
    // Sockets older than the daemon: their connect() and listen() happened before its programs.
    let t = std::time::Instant::now();
    let pre = PreOwners::scan(Path::new("/proc"));
    let (old_conns, old_listeners) = pre.counts();
    tracing::info!(
        connections = old_conns,
        listeners = old_listeners,
        ms = t.elapsed().as_millis() as u64,
        "processes of sockets older than the daemon read from /proc"
    );
    agent.start_pass();
    // Start-up is over: this thread, and every thread it starts from here on (the runtime, the
    // dump writer), needs none of the capabilities; the BPF thread kept what its loop needs.
    if let Err(e) = tcpvigil::caps::after_start() {
        tracing::warn!("dropping the capabilities after start-up: {e}");
    }
    tracing::info!(
        bpf_thread = %tcpvigil::caps::names(&tcpvigil::caps::kept_by_loop()),
        others = %tcpvigil::caps::names(&tcpvigil::caps::held()),
        "capabilities kept after start-up"
    );
    let flight = if cfg.recorder.enabled {
        let rec = Recorder::new(cfg.recorder.clone())?;
        let sink = DumpSink::start(&cfg.recorder, header)?;
        tracing::info!(dir = %sink.dir().display(), "flight recorder on");
        Some(Flight { rec, sink })
    } else {
        None
    };
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    let d = Daemon { cfg, path: a.config, overrides, ready_file: a.ready_file };
    rt.block_on(d.run(agent, pre, web, flight))
}

/// The HTTP server as it runs, and how to stop it.
struct Serving {
    handle: HttpHandle,
    addr: SocketAddr,
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<Result<(), HttpError>>,
}

async fn serve(
    listen: &ListenAddr,
    web: Option<WebConfig>,
    registry: Arc<Registry>,
    ready: Arc<AtomicBool>,
) -> Result<Serving, HttpError> {
    let server = HttpServer::bind_listen(listen, web, registry, ready).await?;
    let (handle, addr) = (server.handle(), server.local_addr());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(server.run(async {
        let _ = stopped.await;
    }));
    Ok(Serving { handle, addr, stop, task })
}

impl Serving {
    async fn stop(self) {
        let _ = self.stop.send(());
        let _ = self.task.await;
    }
}

/// What the daemon runs with: the configuration in force and where it came from.
struct Daemon {
    cfg: Config,
    path: Option<PathBuf>,
    overrides: Overrides,
    ready_file: Option<PathBuf>,
}

impl Daemon {
    async fn run(
        mut self,
        mut agent: Agent,
        pre: PreOwners,
        web: Option<WebConfig>,
        flight: Option<Flight>,
    ) -> Result<ExitCode> {
        let exact = agent.variants.uses(Prog::MarkLost);
        let mut pipe = Pipeline::new(&self.cfg.detect, exact).with_process_lookup(Box::new(move |id| pre.owner_of(id)));
        let (mut metrics, registry) = Metrics::new_registered(&self.cfg.export);
        metrics.set_exact_lost_retrans(exact);
        let choices = &agent.variants.choices;
        let fallback: Vec<&str> = choices.iter().filter(|c| !c.preferred).map(|c| c.need).collect();
        metrics.set_hooks(choices.len() - fallback.len(), choices.len(), &fallback);
        let events = match &self.cfg.export.events {
            Some(t) => Some(EventsWriter::open(EventsTarget::parse(t), 0).context("opening the events output")?),
            None => None,
        };
        let mut out = Outputs::new(metrics, events, flight);
        let ready = Arc::new(AtomicBool::new(false));
        let registry = Arc::new(registry);
        let mut http = serve(&self.cfg.export.listen, web, registry.clone(), ready.clone()).await?;
        tracing::info!("serving /metrics and /healthz on {}", http.addr);

        let mut refresh = tokio::time::interval(Duration::from_secs(1));
        let mut hup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())?;
        let stop = interrupted();
        tokio::pin!(stop);
        ready.store(true, Ordering::SeqCst);
        notify("READY=1");
        self.write_ready(http.addr)?;
        tracing::info!("tcpvigil running");
        loop {
            tokio::select! {
                msg = agent.events.recv() => match msg {
                    Some(Msg::Event(ev)) => out.step(&mut pipe, Input::Event(&ev)),
                    // Time advances only as far as the kernel's records have been read.
                    Some(Msg::Drained(t)) => {
                        out.step(&mut pipe, Input::Time(t));
                        agent.tick_at(pipe.next_due());
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
                        tcpvigil::heap::give_back();
                    }
                }
                _ = hup.recv() => {
                    notify("RELOADING=1");
                    if let Some(moved) = self.reload(&mut pipe, &mut out, &http, &registry, &ready).await {
                        std::mem::replace(&mut http, moved).stop().await;
                        tracing::info!("serving /metrics and /healthz on {} from now on", http.addr);
                        if let Err(e) = self.write_ready(http.addr) {
                            tracing::warn!("{e:#}");
                        }
                    }
                    notify("READY=1");
                }
                _ = &mut stop => break,
            }
        }
        notify("STOPPING=1");
        tracing::info!("tcpvigil stopping");
        ready.store(false, Ordering::SeqCst);
        http.stop().await;
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

    /// The ready file, written whole to a temporary name first: a harness that sees the file
    /// sees the address.
    fn write_ready(&self, serving: SocketAddr) -> Result<()> {
        let Some(r) = &self.ready_file else { return Ok(()) };
        let tmp = r.with_extension("tmp");
        tcpvigil::files::write(&tmp, format!("{serving}\n").as_bytes(), 0o644)
            .and_then(|()| std::fs::rename(&tmp, r))
            .with_context(|| format!("creating the ready file {}", r.display()))
    }

    fn shown_path(&self) -> String {
        self.path.as_ref().map_or("none (built-in defaults)".into(), |p| p.display().to_string())
    }

    /// SIGHUP: read the file again and apply what can change live, all or nothing; what needs a
    /// restart keeps its running value and is named. The events file is reopened and the web
    /// config read again in any case (log rotation, new certificates). Returns the new server
    /// when the listen address moved (the caller stops the old one).
    async fn reload(
        &mut self,
        pipe: &mut Pipeline,
        out: &mut Outputs,
        http: &Serving,
        registry: &Arc<Registry>,
        ready: &Arc<AtomicBool>,
    ) -> Option<Serving> {
        let config = self.shown_path();
        let (new, bad) = match load(self.path.as_deref(), &self.overrides) {
            Ok(c) => (c, false),
            Err(e) => {
                tracing::warn!(config = %config, error = %e, "configuration not reloaded: the running one is kept");
                (self.cfg.clone(), true)
            }
        };
        let p = plan(&self.cfg, new);
        let refused = |what: String| {
            tracing::warn!(config = %config, error = %what, "configuration not reloaded: the running one is kept");
        };
        // Everything that can fail first; nothing changes until all of it worked.
        let web = match p.cfg.export.web_config.as_deref().map(WebConfig::load).transpose() {
            Ok(w) => w,
            Err(e) => {
                refused(format!("export.web_config: {e}"));
                return self.reopen_events(out);
            }
        };
        let new_events = if p.cfg.export.events != self.cfg.export.events {
            match p.cfg.export.events.as_deref().map(|t| EventsWriter::open(EventsTarget::parse(t), out.offset())) {
                None => Some(None),
                Some(Ok(w)) => Some(Some(w)),
                Some(Err(e)) => {
                    refused(format!("export.events: {e}"));
                    return self.reopen_events(out);
                }
            }
        } else {
            None
        };
        let moved = if p.cfg.export.listen != self.cfg.export.listen {
            match serve(&p.cfg.export.listen, web.clone(), registry.clone(), ready.clone()).await {
                Ok(s) => Some(s),
                Err(e) => {
                    refused(format!("export.listen: {e}"));
                    return self.reopen_events(out);
                }
            }
        } else {
            None
        };
        pipe.reconfigure(&p.cfg.detect);
        out.metrics.reconfigure(&p.cfg.export);
        match new_events {
            Some(w) => out.events = w,
            None => {
                self.reopen_events(out);
            }
        }
        if moved.is_none() {
            http.handle.set(web);
        }
        if let Some(fl) = out.flight.as_mut() {
            if let Err(e) = fl.rec.set_config(p.cfg.recorder.clone()) {
                tracing::warn!("recorder limits: {e}");
            }
            fl.sink.set_limits(&p.cfg.recorder);
        }
        self.cfg = p.cfg;
        let applied = if p.applied.is_empty() { "nothing".to_string() } else { p.applied.join(", ") };
        if bad {
            // Said above; the events file was reopened and the web config read again.
        } else if p.kept.is_empty() {
            tracing::info!(config = %config, applied = %applied, "configuration reloaded");
        } else {
            tracing::warn!(
                config = %config,
                applied = %applied,
                restart_needed = %p.kept.join(", "),
                "configuration reloaded; the keys in restart_needed keep their running value until `systemctl restart tcpvigil`"
            );
        }
        moved
    }

    /// Reopen the events file where it is (log rotation); a failure is said, the writer retries.
    fn reopen_events(&self, out: &mut Outputs) -> Option<Serving> {
        if let Some(e) = out.events.as_mut() {
            if let Err(err) = e.reopen() {
                tracing::warn!("reopening the events file: {err}");
            }
        }
        None
    }
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
