//! Compiles ../ebpf/tcpvigil.bpf.c into a libbpf-rs skeleton in OUT_DIR, and names the source
//! revision (TCPVIGIL_REVISION: `git rev-parse --short HEAD`, else "unknown") for build_info.
use std::process::Command;
use std::{env, path::PathBuf};

use libbpf_cargo::SkeletonBuilder;

fn main() {
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("OUT_DIR is set by cargo"));
    let src = "../ebpf/tcpvigil.bpf.c";
    SkeletonBuilder::new()
        .source(src)
        .clang_args(["-I../ebpf/include", "-I../ebpf", "-D__TARGET_ARCH_x86", "-Wno-compare-distinct-pointer-types"])
        .build_and_generate(out.join("tcpvigil.skel.rs"))
        .expect("compile and generate the eBPF skeleton (is clang installed? run scripts/install-deps.sh)");
    println!("cargo:rerun-if-changed=../ebpf");
    revision();
}

/// The git revision the binary is built from; a packager without git may set TCPVIGIL_REVISION.
fn revision() {
    println!("cargo:rerun-if-env-changed=TCPVIGIL_REVISION");
    let git = |args: &[&str]| {
        Command::new("git")
            .args(args)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .and_then(|o| String::from_utf8(o.stdout).ok())
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
    };
    let rev = env::var("TCPVIGIL_REVISION")
        .ok()
        .filter(|r| !r.is_empty())
        .or_else(|| git(&["rev-parse", "--short", "HEAD"]))
        .unwrap_or_else(|| "unknown".into());
    println!("cargo:rustc-env=TCPVIGIL_REVISION={rev}");
    // Build again when HEAD moves (a commit, a checkout): its reflog changes every time.
    if let Some(log) = git(&["rev-parse", "--path-format=absolute", "--git-path", "logs/HEAD"]) {
        if std::path::Path::new(&log).exists() {
            println!("cargo:rerun-if-changed={log}");
        }
    }
}
