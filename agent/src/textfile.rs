//! Small text files read whole, with a size cap: a configuration file is never a device or a
//! huge file by mistake.
use std::path::Path;

/// Config files (daemon, web) are small; anything larger is not one (/dev/zero would never end).
pub const MAX_CONFIG_BYTES: u64 = 1 << 20;

/// Read a whole text file of at most `limit` bytes: larger, not a regular file (a FIFO would
/// block the read), or not UTF-8, is an error saying so.
pub fn read_capped(path: &Path, limit: u64) -> std::io::Result<String> {
    use std::io::{Error, ErrorKind};
    let buf = crate::files::read_capped(path, limit).map_err(|e| match e.kind() {
        ErrorKind::InvalidData | ErrorKind::InvalidInput => Error::new(e.kind(), format!("{e}: not a config file")),
        _ => e,
    })?;
    String::from_utf8(buf).map_err(|_| Error::new(ErrorKind::InvalidData, "not UTF-8 text"))
}
