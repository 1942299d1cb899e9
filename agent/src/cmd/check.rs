//! `tcpvigil check`: trial-load every candidate program and say which variant each need gets.
use std::process::ExitCode;

use anyhow::Result;
use tcpvigil::bpf::variants::{capture_libbpf_log, choose};

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
    if missing.is_empty() {
        Ok(ExitCode::SUCCESS)
    } else {
        for m in missing {
            let why: Vec<String> = m.refused.iter().map(|(c, w)| format!("{c}: {w}")).collect();
            eprintln!("tcpvigil: no working variant for `{}` ({}): {}", m.need, m.what, why.join("; "));
        }
        Ok(ExitCode::from(1))
    }
}
