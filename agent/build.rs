//! Compiles ../ebpf/tcpvigil.bpf.c into a libbpf-rs skeleton in OUT_DIR.
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
}
