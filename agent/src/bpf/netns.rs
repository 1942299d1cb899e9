//! Find every network namespace on the host (processes' and named ones) to walk each with iter/tcp.
use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;

/// One path per namespace inode: /proc/PID/ns/net of some process, or /run/netns/NAME.
pub fn list() -> BTreeMap<u64, PathBuf> {
    let mut out = BTreeMap::new();
    if let Ok(rd) = fs::read_dir("/run/netns") {
        for e in rd.flatten() {
            if let Ok(md) = fs::metadata(e.path()) {
                out.entry(md.ino()).or_insert_with(|| e.path());
            }
        }
    }
    if let Ok(rd) = fs::read_dir("/proc") {
        for e in rd.flatten() {
            let name = e.file_name();
            if !name.to_string_lossy().bytes().all(|b| b.is_ascii_digit()) {
                continue;
            }
            let p = e.path().join("ns/net");
            if let Ok(md) = fs::metadata(&p) {
                out.entry(md.ino()).or_insert(p);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn finds_at_least_our_own_namespace() {
        let own = std::fs::metadata("/proc/self/ns/net").map(|m| std::os::unix::fs::MetadataExt::ino(&m));
        let all = super::list();
        if let Ok(ino) = own {
            assert!(all.contains_key(&ino), "own netns {ino} missing from {all:?}");
        }
    }
}
