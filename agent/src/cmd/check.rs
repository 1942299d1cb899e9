//! `tcpvigil check`: trial-load every candidate program and say which variant each need gets.
use std::process::ExitCode;

use anyhow::Result;
use tcpvigil::bpf::variants::{capture_libbpf_log, choose, Choice};
use tcpvigil::caps::{self, Cap};

use super::common::{kernel_release, require_privileges, usage};

#[derive(clap::Args)]
pub struct Args {
    /// Print the result as JSON.
    #[arg(long)]
    json: bool,
}

pub fn run(a: Args) -> Result<ExitCode> {
    if let Err(e) = require_privileges() {
        return Ok(usage(e));
    }
    capture_libbpf_log();
    let v = choose();
    let missing = v.missing_essential();
    let cg = tcpvigil::bpf::load::cgroup2_root();
    if a.json {
        let out = serde_json::json!({
            "kernel": kernel_release(),
            "btf": true,
            "hz": tcpvigil::bpf::kconfig::hz().ok(),
            "cgroup2": cg.as_ref().ok().map(|p| p.display().to_string()),
            "needs": v.choices,
            "ok": missing.is_empty(),
            "verdict": verdict(&v.choices).1,
        });
        println!("{}", serde_json::to_string_pretty(&out)?);
    } else {
        println!("kernel {} with BTF", kernel_release());
        match tcpvigil::bpf::kconfig::hz() {
            Ok(h) => println!("CONFIG_HZ={} ({})", h.hz, h.source),
            Err(e) => println!("CONFIG_HZ unknown: {e}"),
        }
        match &cg {
            Ok(p) => println!("cgroup-v2 root: {}", p.display()),
            Err(e) => println!("cgroup-v2 root: none ({e})"),
        }
        for c in &v.choices {
            let how = match (c.prog.is_some(), c.preferred) {
                (true, true) => "preferred".to_string(),
                (true, false) => "fallback".to_string(),
                (false, _) if c.essential => "MISSING".to_string(),
                (false, _) => "fallback".to_string(),
            };
            println!("{:<13} {:<58} [{}]", c.need, c.variant, how);
            for (cand, why) in &c.refused {
                println!("{:<13}   refused: {cand}: {why}", "");
            }
        }
    }
    let (ok, line) = verdict(&v.choices);
    if !a.json {
        println!("{line}");
    }
    Ok(if ok { ExitCode::SUCCESS } else { ExitCode::from(1) })
}

/// The closing line: whether this host can run tcpvigil (every essential need has a variant),
/// and for each need that is not on its preferred program, what was refused and the likely reason.
pub fn verdict(choices: &[Choice]) -> (bool, String) {
    let missing: Vec<&Choice> = choices.iter().filter(|c| !c.ok()).collect();
    let fallback: Vec<&Choice> = choices.iter().filter(|c| c.ok() && !c.preferred).collect();
    let why = |c: &Choice| {
        let r: Vec<String> =
            c.refused.iter().map(|(cand, w)| format!("{cand} refused: {}", likely_reason(cand, w))).collect();
        format!("{} ({})", c.need, if r.is_empty() { "no program of its own".to_string() } else { r.join("; ") })
    };
    if !missing.is_empty() {
        let m: Vec<String> = missing.iter().map(|c| why(c)).collect();
        return (false, format!("NOT OK: tcpvigil cannot run on this host: no working variant for {}", m.join(", ")));
    }
    if fallback.is_empty() {
        return (true, format!("OK: all {} needs run on their preferred program", choices.len()));
    }
    let f: Vec<String> = fallback.iter().map(|c| why(c)).collect();
    (
        true,
        format!(
            "OK: every need has a variant; {} of {} on a fallback: {}",
            fallback.len(),
            choices.len(),
            f.join(", ")
        ),
    )
}

/// The kernel's lockdown mode when one is active (`integrity`, `confidentiality`).
fn lockdown() -> Option<String> {
    let s = std::fs::read_to_string("/sys/kernel/security/lockdown").ok()?;
    let mode = s.split_whitespace().find(|w| w.starts_with('['))?.trim_matches(['[', ']']);
    (mode != "none").then(|| mode.to_string())
}

/// Why the kernel most likely refused the candidate `cand` with the message `why`.
pub fn likely_reason(cand: &str, why: &str) -> String {
    reason_given(cand, why, &caps::held(), lockdown().as_deref())
}

fn reason_given(cand: &str, why: &str, held: &[Cap], lockdown: Option<&str>) -> String {
    let w = why.to_lowercase();
    let missing = caps::missing_from(held);
    if w.contains("operation not permitted") || w.contains("os error 1)") {
        if cand.starts_with("sockops") && !held.contains(&Cap::NetAdmin) && !held.contains(&Cap::SysAdmin) {
            return format!("{} is missing: it is needed to {}", Cap::NetAdmin.name(), Cap::NetAdmin.why());
        }
        if !missing.required.is_empty() {
            return format!("{} missing", caps::names(&missing.required));
        }
        if let Some(mode) = lockdown {
            return format!("EPERM: kernel lockdown ({mode}) forbids it");
        }
        let what = if cand.starts_with("fentry") || cand.starts_with("fexit") { "BPF trampolines" } else { "it" };
        return format!(
            "EPERM although CAP_BPF and CAP_PERFMON are held: kernel lockdown, a security module or the hypervisor forbids {what} here"
        );
    }
    if w.contains("btf") && (w.contains("not found") || w.contains("failed to find"))
        || w.contains("no such file")
        || w.contains("no such process")
    {
        return "not in this kernel (no such function, tracepoint or BTF type: an older kernel, or one built without it)"
            .into();
    }
    if w.contains("verifier") || w.contains("permission denied") {
        return "the verifier refused it on this kernel".into();
    }
    if w.contains("invalid argument") || w.contains("not supported") {
        return "this kernel does not support it (too old for this program type or attach point)".into();
    }
    "see the kernel's message above".into()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn choice(need: &'static str, essential: bool, prog: bool, preferred: bool, refused: &[(&str, &str)]) -> Choice {
        Choice {
            need,
            what: "",
            essential,
            prog: prog.then_some(tcpvigil::bpf::variants::Prog::TcpProbe),
            variant: String::new(),
            preferred,
            refused: refused.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect(),
        }
    }

    const EPERM: &str = "Operation not permitted (os error 1): prog 'tv_rto_timer': BPF program load failed";

    #[test]
    fn the_closing_line_says_ok_names_fallbacks_and_why_or_says_it_cannot_run() {
        let all = [choice("ack", true, true, true, &[]), choice("owner", false, false, true, &[])];
        assert_eq!(verdict(&all), (true, "OK: all 2 needs run on their preferred program".to_string()));
        let fb = [choice("ack", true, true, true, &[]), choice("rto", true, true, false, &[("fentry/x", EPERM)])];
        let (ok, line) = verdict(&fb);
        assert!(
            ok && line.starts_with("OK: every need has a variant; 1 of 2 on a fallback: rto (fentry/x refused: "),
            "{line}"
        );
        let bad = [choice("rto", true, false, false, &[("fentry/x", EPERM), ("sockops RTO_CB", EPERM)])];
        let (ok, line) = verdict(&bad);
        assert!(
            !ok && line.starts_with("NOT OK: tcpvigil cannot run on this host: no working variant for rto"),
            "{line}"
        );
    }

    #[test]
    fn refusals_are_explained_by_capabilities_lockdown_or_the_kernels_age() {
        let all = caps::ALL;
        let no_net = [Cap::Bpf, Cap::Perfmon, Cap::SysPtrace];
        assert!(reason_given("sockops RTO_CB (cgroup-v2 root)", EPERM, &no_net, None)
            .starts_with("CAP_NET_ADMIN is missing"));
        assert_eq!(reason_given("fentry/x", EPERM, &[Cap::NetAdmin], None), "CAP_BPF, CAP_PERFMON missing");
        assert_eq!(
            reason_given("fentry/x", EPERM, &all, Some("integrity")),
            "EPERM: kernel lockdown (integrity) forbids it"
        );
        assert!(reason_given("fexit/x", EPERM, &all, None).contains("BPF trampolines"));
        let old = "libbpf: prog 'tv_mark_lost': failed to find kernel BTF type ID of 'tcp_mark_skb_lost': -3 (No such process)";
        assert!(reason_given("fentry/tcp_mark_skb_lost", old, &all, None).starts_with("not in this kernel"));
        let verifier = "Permission denied (os error 13): verifier: invalid mem access";
        assert_eq!(reason_given("tp_btf/x", verifier, &all, None), "the verifier refused it on this kernel");
    }
}
