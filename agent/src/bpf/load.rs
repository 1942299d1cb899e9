//! Open the object with the chosen variants, write its settings, and attach every program.
use std::collections::HashSet;
use std::fs::File;
use std::mem::MaybeUninit;
use std::os::fd::AsRawFd;
use std::path::PathBuf;

use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use libbpf_rs::{Link, MapCore, MapFlags, OpenObject};

use super::abi::{as_bytes, tv_config, tv_filter, tv_match};
use super::skel::{TcpvigilSkel, TcpvigilSkelBuilder};
use super::variants::{attach_look, prog_ref, reason, take_libbpf_log, Prog, Variants, ALL};
use crate::model::filter::Rule;

/// What the kernel side is told before it starts.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Periodic sample of unselected bulk connections (0: off).
    pub bulk_interval_ns: u64,
    pub bulk_min_bytes: u64,
    /// Per-ACK samples for every connection.
    pub select_all: bool,
    /// Per-ACK samples for connections matching any of these.
    pub rules: Vec<Rule>,
    pub ringbuf_bytes: u32,
    pub snapshot_interval_ms: u64,
    /// Hold the start pass (every socket older than the agent) until `Agent::start_pass`: the
    /// daemon's /proc owner scan runs first, alone on the CPUs.
    pub hold_start_pass: bool,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            bulk_interval_ns: 50_000_000,
            bulk_min_bytes: 1 << 20,
            select_all: false,
            rules: Vec::new(),
            ringbuf_bytes: 8 << 20,
            snapshot_interval_ms: 1000,
            hold_start_pass: false,
        }
    }
}

/// Why the programs could not be loaded, attached or told their settings.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error(transparent)]
    Kconfig(#[from] super::kconfig::KconfigError),
    #[error("opening the eBPF object: {0}")]
    Open(libbpf_rs::Error),
    /// The kernel refused: libbpf's error and the log lines that tell why.
    #[error("loading the eBPF programs: {0}")]
    Load(String),
    #[error("attaching {what}: {err}")]
    Attach { what: String, err: libbpf_rs::Error },
    #[error("reading /proc/self/mounts: {0}")]
    Mounts(std::io::Error),
    #[error("no cgroup2 file system is mounted (needed for the sockops RTO hook); mount one, e.g. `mount -t cgroup2 none /sys/fs/cgroup/unified`")]
    NoCgroup2,
    #[error("opening cgroup {}: {err}", path.display())]
    Cgroup { path: PathBuf, err: std::io::Error },
    #[error("at most {max} filter rules fit in the kernel (got {got})")]
    TooManyRules { max: usize, got: usize },
    /// A map could not be sized or updated.
    #[error(transparent)]
    Map(#[from] libbpf_rs::Error),
}

type Result<T> = std::result::Result<T, LoadError>;

/// The cgroup-v2 mount point (the root of the unified hierarchy).
pub fn cgroup2_root() -> Result<PathBuf> {
    let mounts = std::fs::read_to_string("/proc/self/mounts").map_err(LoadError::Mounts)?;
    mounts
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() > 2 && f[2] == "cgroup2").then(|| PathBuf::from(f[1]))
        })
        .min_by_key(|p| p.as_os_str().len())
        .ok_or(LoadError::NoCgroup2)
}

pub struct Loaded<'obj> {
    pub skel: TcpvigilSkel<'obj>,
    pub links: Vec<Link>,
    /// iter/tcp: the start pass, or (without the look) every snapshot pass, per namespace.
    pub iter_link: Option<Link>,
    /// The look at the live set (iter/bpf_sk_storage_map over tv_live).
    pub look_link: Option<Link>,
    pub cfg: tv_config,
}

/// A socket quiet this long leaves the live set (tv_config.live_quiet_ms): a few looks, so a
/// connection that pauses between requests is not taken out and put back every time.
pub const LIVE_QUIET_MS: u32 = 5000;

/// The look's iterator link: the program over the live-set map.
fn rule_to_filter(r: &Rule) -> tv_filter {
    let mut f = tv_filter::default();
    let put = |addr: std::net::IpAddr, out: &mut [u8; 16]| -> u16 {
        match addr.to_canonical() {
            std::net::IpAddr::V4(a) => {
                out[..4].copy_from_slice(&a.octets());
                2
            }
            std::net::IpAddr::V6(a) => {
                *out = a.octets();
                10
            }
        }
    };
    if let Some(c) = r.cookie {
        f.r#match |= tv_match::TV_M_COOKIE.0;
        f.cookie = c;
    }
    if let Some(a) = r.laddr {
        f.r#match |= tv_match::TV_M_LADDR.0;
        f.family = put(a, &mut f.laddr);
    }
    if let Some(a) = r.raddr {
        f.r#match |= tv_match::TV_M_RADDR.0;
        f.family = put(a, &mut f.raddr);
    }
    if let Some(p) = r.lport {
        f.r#match |= tv_match::TV_M_LPORT.0;
        f.lport = p;
    }
    if let Some(p) = r.rport {
        f.r#match |= tv_match::TV_M_RPORT.0;
        f.rport = p;
    }
    f
}

/// Replace the selection rules; sockets re-evaluate lazily on their next event.
pub fn set_selection(skel: &TcpvigilSkel<'_>, cfg: &mut tv_config, select_all: bool, rules: &[Rule]) -> Result<()> {
    let n = rules.len().min(super::abi::MAX_FILTERS);
    if rules.len() > n {
        return Err(LoadError::TooManyRules { max: n, got: rules.len() });
    }
    for (i, r) in rules.iter().enumerate() {
        let f = rule_to_filter(r);
        skel.maps.tv_filters.update(&(i as u32).to_ne_bytes(), as_bytes(&f), MapFlags::ANY)?;
    }
    cfg.nfilters = n as u32;
    cfg.select_all = select_all as u32;
    cfg.filter_gen = cfg.filter_gen.wrapping_add(1);
    skel.maps.tv_cfg.update(&0u32.to_ne_bytes(), as_bytes(cfg), MapFlags::ANY)?;
    Ok(())
}

/// Make `want` the connections whose rounds are reported on paths of at least `min_srtt_us`
/// (`have`: what the map holds now); at most MAX_PHASE, the lowest cookies (the oldest
/// connections) first.
pub fn set_phase(
    skel: &TcpvigilSkel<'_>,
    cfg: &mut tv_config,
    have: &mut HashSet<u64>,
    want: HashSet<u64>,
    min_srtt_us: u32,
) -> Result<()> {
    let mut keep: Vec<u64> = want.into_iter().collect();
    keep.sort_unstable();
    keep.truncate(super::abi::MAX_PHASE);
    let want: HashSet<u64> = keep.into_iter().collect();
    for k in have.difference(&want) {
        // Gone already when the connection closed and the map entry was never there: fine.
        let _ = skel.maps.tv_phase.delete(&k.to_ne_bytes());
    }
    for k in want.difference(have) {
        skel.maps.tv_phase.update(&k.to_ne_bytes(), &[1u8], MapFlags::ANY)?;
    }
    *have = want;
    let on = if have.is_empty() { 0 } else { min_srtt_us.max(1) };
    if cfg.phase_min_srtt_us != on {
        cfg.phase_min_srtt_us = on;
        skel.maps.tv_cfg.update(&0u32.to_ne_bytes(), as_bytes(cfg), MapFlags::ANY)?;
    }
    Ok(())
}

/// Load the chosen programs and attach them.
pub fn load<'obj>(storage: &'obj mut MaybeUninit<OpenObject>, v: &Variants, s: &Settings) -> Result<Loaded<'obj>> {
    let opts = super::kconfig::open_opts()?;
    let mut open = TcpvigilSkelBuilder::default().open_opts(opts, storage).map_err(LoadError::Open)?;
    let chosen = v.progs();
    for p in ALL {
        p.of(&mut open).set_autoload(chosen.contains(&p));
    }
    open.maps.tv_events.set_max_entries(s.ringbuf_bytes)?;
    let _ = take_libbpf_log();
    let skel = open.load().map_err(|e| LoadError::Load(reason(&e, &take_libbpf_log())))?;

    let mut cfg = tv_config {
        bulk_interval_ns: s.bulk_interval_ns,
        bulk_min_bytes: s.bulk_min_bytes,
        fexit_sacktag: v.uses(Prog::SacktagExit) as u32,
        ca_from_probe: (!v.uses(Prog::CongState)) as u32,
        exact_lost_rtx: v.uses(Prog::MarkLost) as u32,
        rto_fentry: v.uses(Prog::RtoTimer) as u32,
        look: v.uses(Prog::Look) as u32,
        live_quiet_ms: LIVE_QUIET_MS,
        ..Default::default()
    };
    set_selection(&skel, &mut cfg, s.select_all, &s.rules)?;

    let mut links = Vec::new();
    for p in &chosen {
        if p.auto_attach() {
            let attach = prog_ref(&skel, *p).attach();
            let l = attach.map_err(|err| LoadError::Attach { what: p.label().into(), err })?;
            links.push(l);
        }
    }
    // Sockops: attached at the cgroup-v2 root for the RTO callback and to ask for it
    // on new connections, also when the fentry RTO variant is in use (harmless then).
    if chosen.contains(&Prog::Sockops) {
        let root = cgroup2_root()?;
        let f = File::open(&root).map_err(|err| LoadError::Cgroup { path: root.clone(), err })?;
        let attach = skel.progs.tv_sockops.attach_cgroup(f.as_raw_fd());
        let what = format!("sockops at {}", root.display());
        let l = attach.map_err(|err| LoadError::Attach { what, err })?;
        links.push(l);
    }
    let iter_link = match chosen.contains(&Prog::Iter) {
        true => Some(skel.progs.tv_iter.attach().map_err(|err| LoadError::Attach { what: "iter/tcp".into(), err })?),
        false => None,
    };
    let look_link = match chosen.contains(&Prog::Look) {
        true => Some(
            attach_look(&skel)
                .map_err(|err| LoadError::Attach { what: "the look (iter/bpf_sk_storage_map)".into(), err })?,
        ),
        false => None,
    };
    Ok(Loaded { skel, links, iter_link, look_link, cfg })
}
