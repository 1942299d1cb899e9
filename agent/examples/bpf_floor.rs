//! Loads a BPF object and attaches its programs (or only those named) until stdin closes: the floor programs of the benches.
use std::io::Read;

use anyhow::{bail, Context, Result};
use libbpf_rs::ObjectBuilder;

fn main() -> Result<()> {
    let mut args = std::env::args().skip(1);
    let path = args.next().context("usage: bpf_floor OBJECT.bpf.o [PROGRAM...] (runs until stdin closes)")?;
    let only: Vec<String> = args.collect();
    let obj = ObjectBuilder::default().open_file(&path)?.load().with_context(|| format!("loading {path}"))?;
    let mut links = Vec::new();
    for prog in obj.progs_mut() {
        let name = prog.name().to_string_lossy().into_owned();
        if !only.is_empty() && !only.contains(&name) {
            continue;
        }
        links.push(prog.attach().with_context(|| format!("attaching {name}"))?);
        eprintln!("bpf_floor: attached {name}");
    }
    if links.is_empty() {
        bail!("{path} has none of the programs {only:?}");
    }
    let mut sink = Vec::new();
    let _ = std::io::stdin().read_to_end(&mut sink);
    drop(links);
    Ok(())
}
