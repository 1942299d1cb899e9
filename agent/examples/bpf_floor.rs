//! Loads a BPF object and attaches every program in it until stdin closes: the floor programs of scripts/bench-datapath.sh.
use std::io::Read;

use anyhow::{Context, Result};
use libbpf_rs::ObjectBuilder;

fn main() -> Result<()> {
    let path = std::env::args().nth(1).context("usage: bpf_floor OBJECT.bpf.o (runs until stdin closes)")?;
    let obj = ObjectBuilder::default().open_file(&path)?.load().with_context(|| format!("loading {path}"))?;
    let mut links = Vec::new();
    for prog in obj.progs_mut() {
        let name = prog.name().to_string_lossy().into_owned();
        links.push(prog.attach().with_context(|| format!("attaching {name}"))?);
        eprintln!("bpf_floor: attached {name}");
    }
    let mut sink = Vec::new();
    let _ = std::io::stdin().read_to_end(&mut sink);
    drop(links);
    Ok(())
}
