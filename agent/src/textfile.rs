//! Small text files read whole, with a size cap: a configuration file is never a device or a
//! huge file by mistake.
use std::path::Path;

/// Config files (daemon, web) are small; anything larger is not one (/dev/zero would never end).
pub const MAX_CONFIG_BYTES: u64 = 1 << 20;

/// Read a whole text file of at most `limit` bytes: larger, or not UTF-8, is an error saying so.
pub fn read_capped(path: &Path, limit: u64) -> std::io::Result<String> {
    use std::io::Read;
    let mut buf = Vec::new();
    std::fs::File::open(path)?.take(limit + 1).read_to_end(&mut buf)?;
    if buf.len() as u64 > limit {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("larger than {} KiB: not a config file", limit >> 10),
        ));
    }
    String::from_utf8(buf).map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidData, "not UTF-8 text"))
}
