//! The house rules a newcomer relies on to find their room: every product source file opens with
//! a line that says what it is for, and none grows past 500 lines (split it by concern instead).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};

const MAX_LINES: usize = 500;

/// Product sources under `dir`: Rust files that are not tests (`tests.rs`, `tests_*.rs`, anything
/// in a `tests` folder), and the BPF programs' C sources and headers but the generated vmlinux.h.
fn product_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        let name = p.file_name().unwrap().to_string_lossy().into_owned();
        if p.is_dir() {
            if name != "tests" {
                product_files(&p, out);
            }
        } else if (name.ends_with(".rs") && name != "tests.rs" && !name.starts_with("tests_"))
            || ((name.ends_with(".c") || name.ends_with(".h")) && name != "vmlinux.h")
        {
            out.push(p);
        }
    }
}

#[test]
fn every_product_file_opens_with_its_purpose_and_stays_under_500_lines() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let mut files = Vec::new();
    product_files(&root.join("agent/src"), &mut files);
    product_files(&root.join("ebpf"), &mut files);
    assert!(files.len() > 100, "found only {} files under {}", files.len(), root.display());
    let mut bad = Vec::new();
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap();
        let first = text.lines().next().unwrap_or("");
        if !(first.starts_with("//! ") || first.starts_with("/* ")) {
            bad.push(format!("{}: no purpose line first ({first:?})", f.display()));
        }
        let n = text.lines().count();
        if n > MAX_LINES {
            bad.push(format!("{}: {n} lines", f.display()));
        }
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}
