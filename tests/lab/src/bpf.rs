//! The tc-bpf targeted-drop program (bpf/retx_drop.bpf.c): compiled with clang at run time, attached on the router's egress, counters read back by map id.
use crate::cmd;
use crate::error::{LabError, Result};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// The C source, embedded so the lab works from any directory.
pub const RETX_DROP_SRC: &str = include_str!("../bpf/retx_drop.bpf.c");

/// Settings of the retransmission-drop program (compiled in as -D defines).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct RetxDrop {
    /// How many distinct retransmitted segments become targets (the first ones seen).
    pub segments: u32,
    /// How many retransmissions of each target are dropped before the next one passes.
    pub drops_per_segment: u32,
}

/// The program's own counters (see STAT_* in the C source).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RetxStats {
    /// Data segments seen on the attached egress.
    pub data_segments: u64,
    /// Of those, retransmissions (end sequence not beyond the highest seen).
    pub retransmissions: u64,
    /// Retransmissions dropped.
    pub dropped: u64,
    /// Distinct segments targeted.
    pub targets: u64,
    /// Retransmissions let through.
    pub passed_retransmissions: u64,
    /// Map update failures.
    pub errors: u64,
}

/// Compiles the program with the given settings into `dir`; returns the object path.
pub fn compile(cfg: &RetxDrop, dir: &Path) -> Result<PathBuf> {
    if !cmd::have_tool("clang") {
        return Err(LabError::Missing("clang (run scripts/install-deps.sh)".into()));
    }
    std::fs::create_dir_all(dir).map_err(|e| LabError::io(format!("mkdir {}", dir.display()), e))?;
    let src = dir.join("retx_drop.bpf.c");
    std::fs::write(&src, RETX_DROP_SRC).map_err(|e| LabError::io(format!("write {}", src.display()), e))?;
    let obj = dir.join("retx_drop.bpf.o");
    let arch_inc = format!("-I/usr/include/{}-linux-gnu", std::env::consts::ARCH);
    let d1 = format!("-DTARGET_SEGS={}", cfg.segments);
    let d2 = format!("-DDROPS_PER_SEG={}", cfg.drops_per_segment);
    let (s, o) = (src.to_string_lossy().into_owned(), obj.to_string_lossy().into_owned());
    // -mcpu=v3: atomic adds that return the old value (kernel 5.12+).
    cmd::run(&["clang", "-O2", "-g", "-target", "bpf", "-mcpu=v3", &arch_inc, &d1, &d2, "-c", &s, "-o", &o])?;
    Ok(obj)
}

/// Attaches `obj` on the egress of `dev` in namespace `ns` (clsact + direct-action filter).
pub fn attach(ns: &str, dev: &str, obj: &Path) -> Result<()> {
    cmd::run_in(ns, &["tc", "qdisc", "replace", "dev", dev, "clsact"])?;
    let o = obj.to_string_lossy();
    cmd::run_in(
        ns,
        &[
            "tc", "filter", "replace", "dev", dev, "egress", "prio", "1", "handle", "1", "bpf", "da", "obj", &o, "sec",
            "tc",
        ],
    )?;
    Ok(())
}

fn prog_id(ns: &str, dev: &str) -> Result<u64> {
    let out = cmd::run_in(ns, &["tc", "filter", "show", "dev", dev, "egress"])?;
    out.split_whitespace()
        .skip_while(|w| *w != "id")
        .nth(1)
        .and_then(|w| w.parse().ok())
        .ok_or_else(|| LabError::Parse { what: "tc filter show".into(), detail: out.clone() })
}

fn json(args: &[&str]) -> Result<serde_json::Value> {
    let out = cmd::run(args)?;
    serde_json::from_str(&out).map_err(|e| LabError::Parse { what: args.join(" "), detail: e.to_string() })
}

fn le_u64(bytes: &[serde_json::Value]) -> u64 {
    bytes.iter().take(8).enumerate().fold(0u64, |acc, (i, b)| {
        let v = b.as_str().and_then(|s| u64::from_str_radix(s.trim_start_matches("0x"), 16).ok()).unwrap_or(0);
        acc | (v << (8 * i))
    })
}

/// Reads the program's counters from the filter attached on `dev` in `ns`.
pub fn read_stats(ns: &str, dev: &str) -> Result<RetxStats> {
    let id = prog_id(ns, dev)?.to_string();
    let prog = json(&["bpftool", "-j", "prog", "show", "id", &id])?;
    let maps: Vec<u64> =
        prog["map_ids"].as_array().map(|a| a.iter().filter_map(|v| v.as_u64()).collect()).unwrap_or_default();
    for m in maps {
        let ms = m.to_string();
        let info = json(&["bpftool", "-j", "map", "show", "id", &ms])?;
        if info["name"].as_str() != Some("retx_stats") {
            continue;
        }
        let dump = json(&["bpftool", "-j", "map", "dump", "id", &ms])?;
        let mut v = [0u64; 8];
        for e in dump.as_array().into_iter().flatten() {
            let key = e["key"].as_array().map(|k| le_u64(k)).unwrap_or(u64::MAX);
            let val = e["value"].as_array().map(|k| le_u64(k)).unwrap_or(0);
            if let Some(slot) = usize::try_from(key).ok().and_then(|k| v.get_mut(k)) {
                *slot = val;
            }
        }
        return Ok(RetxStats {
            data_segments: v[0],
            retransmissions: v[1],
            dropped: v[2],
            targets: v[3],
            passed_retransmissions: v[4],
            errors: v[5],
        });
    }
    Err(LabError::Parse { what: format!("maps of bpf prog {id}"), detail: "no retx_stats map".into() })
}
