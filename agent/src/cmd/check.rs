//! `tcpvigil check`: trial-load every candidate program and say which variant each need gets.
use std::process::ExitCode;

use anyhow::Result;
use tcpvigil::bpf::variants::{capture_libbpf_log, choose, Choice};

use super::common::{kernel_release, require_privileges, usage};
use super::refusal::likely_reason;

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
}
