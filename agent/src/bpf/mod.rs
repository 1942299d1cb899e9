//! The kernel side: load and choose hook variants, attach, read the ring buffer, decode.
pub mod abi;
pub mod agent;
pub mod cgroup;
pub mod decode;
pub mod kconfig;
pub mod load;
pub mod netns;
pub mod preowners;
pub mod runstats;
pub mod variants;
mod wake;

pub mod skel {
    //! The generated skeleton of ebpf/tcpvigil.bpf.c.
    #![allow(clippy::all, missing_docs, unused_imports, non_camel_case_types, non_upper_case_globals, dead_code)]
    include!(concat!(env!("OUT_DIR"), "/tcpvigil.skel.rs"));
}
