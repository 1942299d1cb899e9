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
    let p = dir.join(format!("{name}.1"));
    std::fs::write(&p, man_page(cmd, name)?).with_context(|| format!("writing {}", p.display()))
}

/// The page clap_mangen renders, with REQUIREMENTS, ENVIRONMENT and SIGNALS where they apply
/// (instead of its EXTRA section, which would repeat them as `--help` prints them).
pub fn man_page(cmd: &clap::Command, name: &str) -> Result<Vec<u8>> {
    let man = clap_mangen::Man::new(cmd.clone()).section("1");
    let mut buf = Vec::new();
    man.render_title(&mut buf)?;
    man.render_name_section(&mut buf)?;
    man.render_synopsis_section(&mut buf)?;
    man.render_description_section(&mut buf)?;
    if cmd.get_arguments().any(|a| !a.is_hide_set()) {
        man.render_options_section(&mut buf)?;
    }
    if cmd.get_subcommands().any(|s| !s.is_hide_set()) {
        man.render_subcommands_section(&mut buf)?;
    }
    for (title, rows) in super::help::man_sections(name) {
        buf.extend_from_slice(format!(".SH {title}\n").as_bytes());
        for (k, v) in rows {
            buf.extend_from_slice(format!(".TP\n\\fB{}\\fR\n{}\n", roff(k), roff(v)).as_bytes());
        }
    }
    if cmd.get_version().is_some() {
        man.render_version_section(&mut buf)?;
    }
    Ok(buf)
}

/// Text as roff reads it literally: backslashes and hyphens escaped, no line read as a request.
fn roff(s: &str) -> String {
    let t = s.replace('\\', "\\e").replace('-', "\\-");
    if t.starts_with(['.', '\'']) {
        format!("\\&{t}")
    } else {
        t
    }
}
