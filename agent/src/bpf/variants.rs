//! Which program serves each hook need on this kernel, decided by trial loads (never by probes).
use std::mem::MaybeUninit;
use std::sync::Mutex;

use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use libbpf_rs::{OpenProgramMut, PrintLevel, ProgramMut};
use serde::Serialize;

use super::skel::{OpenTcpvigilSkel, TcpvigilSkel, TcpvigilSkelBuilder};

/// The loaded program of `p`.
pub fn prog_ref<'a, 'b>(skel: &'a TcpvigilSkel<'b>, p: Prog) -> &'a ProgramMut<'b> {
    let s = &skel.progs;
    match p {
        Prog::TcpProbe => &s.tv_tcp_probe,
        Prog::SacktagExit => &s.tv_sacktag_exit,
        Prog::RetransV2 => &s.tv_retrans_v2,
        Prog::RetransV1 => &s.tv_retrans_v1,
        Prog::MarkLost => &s.tv_mark_lost,
        Prog::CongState => &s.tv_cong_state,
        Prog::Sockops => &s.tv_sockops,
        Prog::RtoTimer => &s.tv_rto_timer,
        Prog::SetState => &s.tv_set_state,
        Prog::Destroy => &s.tv_destroy,
        Prog::Iter => &s.tv_iter,
        Prog::Look => &s.tv_look,
    }
}

/// The look iterates the live-set map: its link is made with that map.
pub fn attach_look(skel: &TcpvigilSkel<'_>) -> libbpf_rs::Result<libbpf_rs::Link> {
    use std::os::fd::AsFd;
    skel.progs.tv_look.attach_iter(skel.maps.tv_live.as_fd())
}

/// Every program in the object.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub enum Prog {
    TcpProbe,
    SacktagExit,
    RetransV2,
    RetransV1,
    MarkLost,
    CongState,
    Sockops,
    RtoTimer,
    SetState,
    Destroy,
    Iter,
    Look,
}

pub const ALL: [Prog; 12] = [
    Prog::TcpProbe,
    Prog::SacktagExit,
    Prog::RetransV2,
    Prog::RetransV1,
    Prog::MarkLost,
    Prog::CongState,
    Prog::Sockops,
    Prog::RtoTimer,
    Prog::SetState,
    Prog::Destroy,
    Prog::Iter,
    Prog::Look,
];

impl Prog {
    /// The section as a user reads it.
    pub fn label(self) -> &'static str {
        match self {
            Prog::TcpProbe => "tp_btf/tcp_probe",
            Prog::SacktagExit => "fexit/tcp_sacktag_write_queue",
            Prog::RetransV2 => "tp_btf/tcp_retransmit_skb (sk, skb, err)",
            Prog::RetransV1 => "tp_btf/tcp_retransmit_skb (sk, skb)",
            Prog::MarkLost => "fentry/tcp_mark_skb_lost",
            Prog::CongState => "tp_btf/tcp_cong_state_set",
            Prog::Sockops => "sockops RTO_CB (cgroup-v2 root)",
            Prog::RtoTimer => "fentry/tcp_retransmit_timer",
            Prog::SetState => "tp_btf/inet_sock_set_state",
            Prog::Destroy => "tp_btf/tcp_destroy_sock",
            Prog::Iter => "iter/tcp",
            Prog::Look => "iter/bpf_sk_storage_map (live set)",
        }
    }

    /// Attached by `attach()` on its own (sockops needs a cgroup, the iterator is read on demand).
    pub fn auto_attach(self) -> bool {
        !matches!(self, Prog::Sockops | Prog::Iter | Prog::Look)
    }

    pub fn of<'a, 'b>(self, open: &'a mut OpenTcpvigilSkel<'b>) -> &'a mut OpenProgramMut<'b> {
        let p = &mut open.progs;
        match self {
            Prog::TcpProbe => &mut p.tv_tcp_probe,
            Prog::SacktagExit => &mut p.tv_sacktag_exit,
            Prog::RetransV2 => &mut p.tv_retrans_v2,
            Prog::RetransV1 => &mut p.tv_retrans_v1,
            Prog::MarkLost => &mut p.tv_mark_lost,
            Prog::CongState => &mut p.tv_cong_state,
            Prog::Sockops => &mut p.tv_sockops,
            Prog::RtoTimer => &mut p.tv_rto_timer,
            Prog::SetState => &mut p.tv_set_state,
            Prog::Destroy => &mut p.tv_destroy,
            Prog::Iter => &mut p.tv_iter,
            Prog::Look => &mut p.tv_look,
        }
    }
}

/// One thing the agent needs from the kernel, with its candidates best first.
pub struct Need {
    pub name: &'static str,
    pub what: &'static str,
    /// Without it the agent cannot run.
    pub essential: bool,
    pub candidates: &'static [Prog],
    /// What serves the need when no candidate loads (None: nothing does).
    pub otherwise: Option<&'static str>,
}

pub const NEEDS: &[Need] = &[
    Need {
        name: "sack",
        what: "scoreboard after each SACK is processed",
        essential: false,
        candidates: &[Prog::SacktagExit],
        otherwise: Some("tp_btf/tcp_probe, SACK blocks parsed and joined with the next ACK"),
    },
    Need {
        name: "ack",
        what: "per-ACK samples and bulk sampling",
        essential: true,
        candidates: &[Prog::TcpProbe],
        otherwise: None,
    },
    Need {
        name: "retrans",
        what: "retransmissions and the delay between resends",
        essential: true,
        candidates: &[Prog::RetransV2, Prog::RetransV1],
        otherwise: None,
    },
    Need {
        name: "lost_retrans",
        what: "retransmissions lost again",
        essential: false,
        candidates: &[Prog::MarkLost],
        otherwise: Some("TCPCB_REPAIRED (0x10) bit at tcp_retransmit_skb"),
    },
    Need {
        name: "ca_state",
        what: "congestion-state changes",
        essential: false,
        candidates: &[Prog::CongState],
        otherwise: Some("state compared at every tcp_probe"),
    },
    Need {
        name: "rto",
        what: "retransmission timeouts",
        essential: true,
        candidates: &[Prog::RtoTimer, Prog::Sockops],
        otherwise: None,
    },
    Need {
        name: "lifecycle",
        what: "connection state changes",
        essential: true,
        candidates: &[Prog::SetState],
        otherwise: None,
    },
    Need {
        name: "close",
        what: "final counters at socket destruction",
        essential: false,
        candidates: &[Prog::Destroy],
        otherwise: Some("last snapshot"),
    },
    Need {
        name: "owner",
        what: "process attribution (pid, comm, cgroup)",
        essential: false,
        // No program of its own: read at connect()/listen() by the lifecycle hook and inherited by
        // accepted sockets (state.h), so nothing runs per send.
        candidates: &[],
        otherwise: Some("tp_btf/inet_sock_set_state at connect()/listen(), inherited on accept"),
    },
    Need {
        name: "snapshot",
        what: "queues, chrono stats, options of the connections that move (a look at the live set)",
        essential: true,
        // The fallback walks every socket of every network namespace each period.
        candidates: &[Prog::Look, Prog::Iter],
        otherwise: None,
    },
    Need {
        name: "start",
        what: "sockets older than the agent: callbacks asked for, existence (once, per netns)",
        essential: false,
        candidates: &[Prog::Iter],
        otherwise: Some("none: older sockets are known once they move, and get no RTO callbacks"),
    },
];

/// What was decided for one need.
#[derive(Debug, Clone, Serialize)]
pub struct Choice {
    pub need: &'static str,
    pub what: &'static str,
    pub essential: bool,
    /// The program chosen, if any.
    pub prog: Option<Prog>,
    pub variant: String,
    pub preferred: bool,
    /// Candidates that were refused, with the kernel's reason.
    pub refused: Vec<(String, String)>,
}

impl Choice {
    pub fn ok(&self) -> bool {
        !self.essential || self.prog.is_some()
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct Variants {
    pub choices: Vec<Choice>,
}

impl Variants {
    pub fn uses(&self, p: Prog) -> bool {
        self.choices.iter().any(|c| c.prog == Some(p))
    }

    /// Programs to load: the chosen ones.
    pub fn progs(&self) -> Vec<Prog> {
        let mut v: Vec<Prog> = Vec::new();
        for p in self.choices.iter().filter_map(|c| c.prog) {
            if !v.contains(&p) {
                v.push(p);
            }
        }
        v
    }

    pub fn missing_essential(&self) -> Vec<&Choice> {
        self.choices.iter().filter(|c| !c.ok()).collect()
    }

    /// (need, variant) pairs for headers and metrics.
    pub fn pairs(&self) -> Vec<(String, String)> {
        self.choices.iter().map(|c| (c.need.to_string(), c.variant.clone())).collect()
    }
}

static LIBBPF_LOG: Mutex<String> = Mutex::new(String::new());

fn collect_log(_level: PrintLevel, msg: String) {
    if let Ok(mut l) = LIBBPF_LOG.lock() {
        if l.len() < 64 * 1024 {
            l.push_str(&msg);
        }
    }
}

/// Route libbpf's messages into a buffer (read by `take_libbpf_log`) instead of stderr.
pub fn capture_libbpf_log() {
    libbpf_rs::set_print(Some((PrintLevel::Warn, collect_log)));
}

pub fn take_libbpf_log() -> String {
    LIBBPF_LOG.lock().map(|mut l| std::mem::take(&mut *l)).unwrap_or_default()
}

/// libbpf's own reason for a failure: the error (with its errno) and the telling lines of its log.
pub fn reason(err: &libbpf_rs::Error, log: &str) -> String {
    if std::env::var_os("TCPVIGIL_LIBBPF_LOG").is_some() {
        eprintln!("{log}");
    }
    match telling_lines(log) {
        Some(l) => format!("{err}: {l}"),
        None => err.to_string(),
    }
}

/// The lines of a libbpf log that say why, not that, loading failed: the first specific warning
/// (Kconfig, BTF, extern, program load refusal) and the verifier's last words, joined by "; ".
/// The generic "failed to load object/skeleton" trailers say nothing and are dropped.
pub fn telling_lines(log: &str) -> Option<String> {
    let clean = |l: &str| l.trim().trim_start_matches("libbpf:").trim().to_string();
    let generic = |l: &str| {
        l.contains("failed to load object") || l.contains("failed to load BPF skeleton") || l.contains("PROG LOAD LOG")
    };
    let lines: Vec<&str> = log.lines().filter(|l| !l.trim().is_empty()).collect();
    let first = lines.iter().map(|l| clean(l)).find(|l| {
        !generic(l)
            && (l.contains("failed")
                || l.contains("Kconfig")
                || l.contains("extern")
                || l.contains("BTF")
                || l.contains("Permission")
                || l.contains("invalid")
                || l.contains("not found")
                || l.contains("unknown"))
    });
    // The verifier log sits between BEGIN and END PROG LOAD LOG; its last line is the refusal.
    let verifier = lines
        .iter()
        .position(|l| l.contains("END PROG LOAD LOG"))
        .and_then(|end| lines[..end].iter().rev().find(|l| !l.contains("processed ") && !l.contains("PROG LOAD LOG")))
        .map(|l| format!("verifier: {}", clean(l)));
    match (first, verifier) {
        (Some(a), Some(b)) => Some(format!("{a}; {b}")),
        (a, b) => a.or(b),
    }
}

/// Why a trial load refused a program.
#[derive(Debug, thiserror::Error)]
pub enum TrialError {
    #[error(transparent)]
    Kconfig(#[from] super::kconfig::KconfigError),
    #[error("{0}")]
    Open(libbpf_rs::Error),
    /// The kernel refused to load it: libbpf's error and the log lines that tell why.
    #[error("{0}")]
    Load(String),
    #[error("loads but does not attach: {0}")]
    Attach(String),
}

/// Load the object with only `prog` enabled (maps shrunk) and, for tracing programs, attach it once.
pub fn trial(prog: Prog) -> Result<(), TrialError> {
    let _ = take_libbpf_log();
    let mut storage = MaybeUninit::uninit();
    let opts = super::kconfig::open_opts()?;
    let mut open = TcpvigilSkelBuilder::default().open_opts(opts, &mut storage).map_err(TrialError::Open)?;
    for p in ALL {
        p.of(&mut open).set_autoload(p == prog);
    }
    let _ = open.maps.tv_events.set_max_entries(4096);
    let _ = open.maps.tv_rtx.set_max_entries(16);
    let skel = open.load().map_err(|e| TrialError::Load(reason(&e, &take_libbpf_log())))?;
    if prog.auto_attach() {
        let p = prog_ref(&skel, prog);
        let link = p.attach().map_err(|e| TrialError::Attach(reason(&e, &take_libbpf_log())))?;
        drop(link);
    }
    if prog == Prog::Look {
        let link = attach_look(&skel).map_err(|e| TrialError::Attach(reason(&e, &take_libbpf_log())))?;
        drop(link);
    }
    Ok(())
}

/// Decide every need by trial load.
pub fn choose() -> Variants {
    let mut choices = Vec::new();
    for need in NEEDS {
        let mut refused = Vec::new();
        let mut chosen = None;
        for &c in need.candidates {
            match trial(c) {
                Ok(()) => {
                    chosen = Some(c);
                    break;
                }
                Err(e) => refused.push((c.label().to_string(), e.to_string())),
            }
        }
        let preferred = chosen == need.candidates.first().copied();
        let variant = match (chosen, need.otherwise) {
            (Some(p), _) => p.label().to_string(),
            (None, Some(o)) => o.to_string(),
            (None, None) => "none".to_string(),
        };
        choices.push(Choice {
            need: need.name,
            what: need.what,
            essential: need.essential,
            prog: chosen,
            variant,
            preferred,
            refused,
        });
    }
    Variants { choices }
}

#[cfg(test)]
mod tests {
    use super::telling_lines;

    #[test]
    fn missing_kconfig_is_named_not_the_generic_trailer() {
        let log = "libbpf: failed to open system Kconfig\nlibbpf: failed to load object 'tcpvigil_bpf'\nlibbpf: failed to load BPF skeleton 'tcpvigil_bpf': -22\n";
        assert_eq!(telling_lines(log).as_deref(), Some("failed to open system Kconfig"));
    }

    #[test]
    fn verifier_refusal_gives_the_load_failure_and_the_verifiers_last_line() {
        let log = "libbpf: prog 'tv_x': BPF program load failed: Permission denied\nlibbpf: prog 'tv_x': -- BEGIN PROG LOAD LOG --\n0: R1=ctx()\naccess beyond struct sock at off 1444 size 4\nprocessed 12 insns (limit 1000000)\n-- END PROG LOAD LOG --\nlibbpf: prog 'tv_x': failed to load: -13\nlibbpf: failed to load object 'o'\n";
        assert_eq!(
            telling_lines(log).as_deref(),
            Some("prog 'tv_x': BPF program load failed: Permission denied; verifier: access beyond struct sock at off 1444 size 4")
        );
    }

    #[test]
    fn a_log_with_nothing_specific_gives_none() {
        assert_eq!(telling_lines(""), None);
        assert_eq!(telling_lines("libbpf: failed to load object 'o'\n"), None);
    }
}
