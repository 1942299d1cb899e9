//! Test (a): `tcpvigil check --json` chose the variants this kernel should allow.
use anyhow::{Context, Result};
use serde_json::Value;

use crate::report::Report;
use crate::sys::kernel_version;
use crate::Expect;

/// The fentry/fexit variants the matrix exists to prove, by need.
pub const TRAMPOLINE: &[(&str, &str)] = &[
    ("sack", "fexit/tcp_sacktag_write_queue"),
    ("lost_retrans", "fentry/tcp_mark_skb_lost"),
    ("rto", "fentry/tcp_retransmit_timer"),
];

pub fn run(r: &mut Report, tcpvigil: &str, expect: Expect) -> Result<()> {
    let t0 = std::time::Instant::now();
    let out = std::process::Command::new(tcpvigil).args(["check", "--json"]).output().context("running check")?;
    let secs = t0.elapsed().as_secs_f64();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let v: Value = match serde_json::from_str(&stdout) {
        Ok(v) => v,
        Err(e) => {
            r.fail("check-json", &format!("{e}: {} {}", stdout.trim(), String::from_utf8_lossy(&out.stderr).trim()));
            return Ok(());
        }
    };
    r.info(&format!("check took {secs:.1}s"));
    let needs = v["needs"].as_array().cloned().unwrap_or_default();
    for n in &needs {
        let refused: Vec<String> = n["refused"]
            .as_array()
            .map(|a| {
                a.iter()
                    .map(|x| format!("{}: {}", x[0].as_str().unwrap_or("?"), x[1].as_str().unwrap_or("?")))
                    .collect()
            })
            .unwrap_or_default();
        r.info(&format!(
            "variant {} | {} | {}{}",
            n["need"].as_str().unwrap_or("?"),
            n["variant"].as_str().unwrap_or("?"),
            if n["preferred"] == true { "preferred" } else { "fallback" },
            if refused.is_empty() { String::new() } else { format!(" | refused: {}", refused.join("; ")) }
        ));
    }
    r.check("check-exit-ok", out.status.success() && v["ok"] == true, &format!("exit {} ok={}", out.status, v["ok"]));
    // Without /boot/config-$(uname -r) (the guests have none unless TV_VM_BOOT_CONFIG=1) the
    // loader measures CONFIG_HZ; the programs load either way.
    let boot_cfg = std::path::Path::new(&format!("/boot/config-{}", crate::sys::kernel_release())).exists();
    let hz_src = v["hz"]["source"].as_str().unwrap_or("none").to_string();
    r.check(
        "check-hz",
        v["hz"]["hz"].as_u64().is_some_and(|h| h > 0) && (boot_cfg || !hz_src.starts_with("/boot")),
        &format!("CONFIG_HZ={} from {hz_src} (/boot/config present: {boot_cfg})", v["hz"]["hz"]),
    );
    let get = |name: &str| needs.iter().find(|n| n["need"] == name).cloned().unwrap_or(Value::Null);
    let variant = |name: &str| get(name)["variant"].as_str().unwrap_or("none").to_string();

    for ess in ["ack", "retrans", "rto", "lifecycle", "snapshot"] {
        let n = get(ess);
        r.check(&format!("check-essential-{ess}"), n["prog"].is_string(), &variant(ess));
    }
    // Arity of the tcp_retransmit_skb tracepoint: (sk, skb, err) from 6.17.
    let (maj, min) = kernel_version();
    let want_rtx = if (maj, min) >= (6, 17) { "(sk, skb, err)" } else { "(sk, skb)" };
    r.check(
        "check-retrans-arity",
        variant("retrans").ends_with(want_rtx),
        &format!("{} (want {want_rtx})", variant("retrans")),
    );
    if (maj, min) >= (5, 19) {
        let ok = variant("ca_state") == "tp_btf/tcp_cong_state_set";
        r.check("check-ca-state-tracepoint", ok, &variant("ca_state"));
    }
    // Any: hold the kernel to what check found for the sack need (fexit loads or is refused),
    // so the host run checks consistency on machines with and without working trampolines.
    let expect = match expect {
        Expect::Any if get("sack")["preferred"] == true => Expect::Fentry,
        Expect::Any => Expect::Fallback,
        e => e,
    };
    r.info(&format!("check expectations: {expect:?}"));
    match expect {
        Expect::Fentry => {
            for (need, want) in TRAMPOLINE {
                let n = get(need);
                let ok = variant(need) == *want && n["preferred"] == true;
                r.check(&format!("check-preferred-{need}"), ok, &format!("{} (want {want})", variant(need)));
            }
        }
        Expect::Fallback => {
            for (need, want) in TRAMPOLINE {
                let n = get(need);
                let refusal = n["refused"]
                    .as_array()
                    .and_then(|a| a.iter().find(|x| x[0] == *want))
                    .map(|x| x[1].as_str().unwrap_or("").to_string());
                let ok = n["preferred"] == false && refusal.is_some();
                r.check(
                    &format!("check-fallback-{need}"),
                    ok,
                    &format!("{} ({want} refused: {})", variant(need), refusal.as_deref().unwrap_or("not reported")),
                );
            }
            r.check("check-fallback-ack", variant("ack") == "tp_btf/tcp_probe", &variant("ack"));
        }
        Expect::Any => {}
    }
    Ok(())
}
