//! glibc heap tuning: keep the daemon's resident memory close to what it holds.

/// Loading parses the kernel's BTF in the BPF thread's heap. glibc raises its mmap and trim
/// thresholds when large blocks are freed, and then never gives that heap's free top back (12 MiB
/// of the 48 MiB the daemon had at start): fixed thresholds keep large blocks in their own
/// mappings and let the top shrink.
pub fn fixed_thresholds() {
    #[cfg(target_env = "gnu")]
    // SAFETY: mallopt only changes glibc's tuning parameters.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 256 << 10);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 1 << 20);
    }
}

/// Hand freed heap pages back to the system (after loading, after a churn of connections):
/// glibc keeps them otherwise, and the RSS stays at its peak for good.
pub fn give_back() {
    #[cfg(target_env = "gnu")]
    // SAFETY: malloc_trim only releases free memory of glibc's heaps; no pointer passes.
    unsafe {
        libc::malloc_trim(0);
    }
}
