//! The ABI structs generated from ebpf/include/abi.h, made readable from raw bytes.
pub use super::skel::types::{
    tv_abi, tv_ca_state, tv_config, tv_filter, tv_hdr, tv_kind, tv_lock_bits, tv_match, tv_opt_bits, tv_owner,
    tv_retrans, tv_rto, tv_sample, tv_sample_flags, tv_sample_src, tv_snap, tv_stat, tv_state, tv_tuple,
};

// SAFETY: these are #[repr(C)] structs of plain integers and integer arrays generated
// from BTF with explicit padding fields; every bit pattern is a valid value.
unsafe impl plain::Plain for tv_hdr {}
// SAFETY: as above.
unsafe impl plain::Plain for tv_sample {}
// SAFETY: as above.
unsafe impl plain::Plain for tv_retrans {}
// SAFETY: as above.
unsafe impl plain::Plain for tv_ca_state {}
// SAFETY: as above.
unsafe impl plain::Plain for tv_rto {}
// SAFETY: as above.
unsafe impl plain::Plain for tv_state {}
// SAFETY: as above.
unsafe impl plain::Plain for tv_owner {}
// SAFETY: as above.
unsafe impl plain::Plain for tv_snap {}
// SAFETY: as above.
unsafe impl plain::Plain for tv_config {}
// SAFETY: as above.
unsafe impl plain::Plain for tv_filter {}

pub const ABI_VERSION: u32 = tv_abi::TV_ABI_VERSION.0;
/// TV_MAX_FILTERS in abi.h (a #define, so not in BTF; pinned by a test below).
pub const MAX_FILTERS: usize = 8;
/// TV_MAX_PHASE in abi.h (pinned by a test).
pub const MAX_PHASE: usize = 4096;

/// Bytes of a plain struct, to write into a map.
pub fn as_bytes<T: plain::Plain>(v: &T) -> &[u8] {
    // SAFETY: T is Plain (no padding-sensitive invariants, no pointers); the slice
    // covers exactly the value and lives as long as the borrow.
    unsafe { std::slice::from_raw_parts((v as *const T).cast::<u8>(), std::mem::size_of::<T>()) }
}

#[cfg(test)]
mod tests {
    use std::mem::size_of;

    use super::*;

    /// The sizes the C compiler gave these structs; a change here must bump TV_ABI_VERSION.
    #[test]
    fn abi_struct_sizes_are_pinned() {
        assert_eq!(size_of::<tv_tuple>(), 40);
        assert_eq!(size_of::<tv_hdr>(), 64);
        assert_eq!(size_of::<tv_sample>(), 192);
        assert_eq!(size_of::<tv_retrans>(), 120);
        assert_eq!(size_of::<tv_ca_state>(), 120);
        assert_eq!(size_of::<tv_rto>(), 96);
        assert_eq!(size_of::<tv_state>(), 72);
        assert_eq!(size_of::<tv_owner>(), 96);
        assert_eq!(size_of::<tv_snap>() % 8, 0);
        assert_eq!(ABI_VERSION, 5);
    }

    /// The #defines of abi.h that BTF does not carry.
    #[test]
    fn abi_defines_match_the_header() {
        let h = include_str!("../../../ebpf/include/abi.h");
        let define = |name: &str| -> usize {
            let line = h.lines().find(|l| l.starts_with(&format!("#define {name} "))).unwrap();
            line.split_whitespace().nth(2).unwrap().parse().unwrap()
        };
        assert_eq!(define("TV_MAX_FILTERS"), MAX_FILTERS);
        assert_eq!(define("TV_MAX_PHASE"), MAX_PHASE);
    }
}
