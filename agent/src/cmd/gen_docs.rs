//! `tcpvigil gen-docs DIR` (hidden): man pages (clap_mangen) and shell completions (clap_complete) for packaging.
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, Result};
use clap_complete::Shell;

#[derive(clap::Args)]
pub struct Args {
    /// Output directory: man/tcpvigil.1, man/tcpvigil-SUBCOMMAND.1, completions/{tcpvigil.bash,_tcpvigil,tcpvigil.fish}.
    dir: PathBuf,
}

/// Writes the man pages of `cmd` and its subcommands, and the completions, under `a.dir`.
pub fn run(a: Args, mut cmd: clap::Command) -> Result<ExitCode> {
    let man = a.dir.join("man");
    let comp = a.dir.join("completions");
    for d in [&man, &comp] {
        std::fs::create_dir_all(d).with_context(|| format!("creating {}", d.display()))?;
    }
    cmd.build();
    write_man(&man, &cmd, "tcpvigil")?;
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set() && s.get_name() != "help") {
        // clap wants a 'static name; this one-shot command leaks a few bytes per page.
        let name: &'static str = Box::leak(format!("tcpvigil-{}", sub.get_name()).into_boxed_str());
        write_man(&man, &sub.clone().name(name).display_name(name), name)?;
    }
    for (shell, file) in [(Shell::Bash, "tcpvigil.bash"), (Shell::Zsh, "_tcpvigil"), (Shell::Fish, "tcpvigil.fish")] {
        let mut out = std::fs::File::create(comp.join(file)).with_context(|| format!("creating {file}"))?;
        clap_complete::generate(shell, &mut cmd, "tcpvigil", &mut out);
    }
    println!("man pages in {}, completions in {}", man.display(), comp.display());
    Ok(ExitCode::SUCCESS)
}

fn write_man(dir: &Path, cmd: &clap::Command, name: &str) -> Result<()> {
    let mut buf = Vec::new();
    clap_mangen::Man::new(cmd.clone()).section("1").render(&mut buf)?;
    let p = dir.join(format!("{name}.1"));
    std::fs::write(&p, buf).with_context(|| format!("writing {}", p.display()))
}
