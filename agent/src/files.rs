//! Files in places other users may control. What the agent reads (configs, recordings, findings,
//! certificates) must be a regular file: a FIFO would block the open, a device never end. What it
//! writes as root (events, recordings, dumps, pictures, ready and lock files) is opened without
//! following a symlink, refused in a directory another user can write to (unless it is sticky and
//! the file ours), and locked where two daemons must not share it. Errors quote little of the input.
use std::fs::{File, Metadata, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};

use nix::fcntl::{openat, OFlag};
use nix::sys::stat::Mode;

/// At most this much of a bad input is quoted back in an error.
pub const QUOTE_BYTES: usize = 200;

/// `s` cut to `max` bytes (at a character boundary) with how much was left out.
pub fn clip(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}… ({} bytes in all)", &s[..end], s.len())
}

fn err(kind: io::ErrorKind, msg: String) -> io::Error {
    io::Error::new(kind, msg)
}

/// What a non-regular file is, for errors.
fn what(m: &Metadata) -> &'static str {
    let t = m.file_type();
    if t.is_dir() {
        "a directory"
    } else if t.is_fifo() {
        "a FIFO (named pipe)"
    } else if t.is_socket() {
        "a socket"
    } else if t.is_char_device() {
        "a character device"
    } else if t.is_block_device() {
        "a block device"
    } else if t.is_symlink() {
        "a symbolic link"
    } else {
        "not a regular file"
    }
}

/// Open `path` for reading; anything but a regular file is an error (without blocking on a FIFO).
pub fn open_regular(path: &Path) -> io::Result<File> {
    // O_NONBLOCK: opening a FIFO nobody writes to returns at once instead of waiting for a writer.
    let f = OpenOptions::new().read(true).custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC).open(path)?;
    let m = f.metadata()?;
    if !m.is_file() {
        return Err(err(io::ErrorKind::InvalidInput, format!("{}, not a regular file", what(&m))));
    }
    Ok(f)
}

/// The whole of a regular file of at most `limit` bytes; larger is an error saying so.
pub fn read_capped(path: &Path, limit: u64) -> io::Result<Vec<u8>> {
    use std::io::Read;
    let mut buf = Vec::new();
    open_regular(path)?.take(limit + 1).read_to_end(&mut buf)?;
    if buf.len() as u64 > limit {
        return Err(err(io::ErrorKind::InvalidData, format!("larger than {} KiB", limit >> 10)));
    }
    Ok(buf)
}

/// How `create` treats what is already in the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Existing {
    Append,
    Truncate,
}

fn ids() -> (u32, u32) {
    (nix::unistd::geteuid().as_raw(), nix::unistd::getegid().as_raw())
}

/// Whether a user other than us (and root) could add, remove or rename entries of a directory.
fn writable_by_others(m: &Metadata) -> bool {
    let (uid, gid) = ids();
    let foreign_owner = m.uid() != uid && m.uid() != 0;
    let group_w = m.mode() & 0o020 != 0 && m.gid() != gid && m.gid() != 0;
    foreign_owner || group_w || m.mode() & 0o002 != 0
}

fn sticky(m: &Metadata) -> bool {
    m.mode() & 0o1000 != 0
}

/// `p` as an absolute path, without resolving symlinks.
fn absolute(p: &Path) -> io::Result<PathBuf> {
    if p.is_absolute() {
        Ok(p.to_path_buf())
    } else {
        Ok(std::env::current_dir()?.join(p))
    }
}

/// Every directory on the way to `dir` (and `dir`) must be writable by us and root only, or be
/// sticky; a symlink on the way must sit in such a directory or be ours (the kernel's
/// protected_symlinks rule). Otherwise another user could swap a directory for a link to
/// anywhere between our check and our open.
fn check_chain(dir: &Path) -> io::Result<()> {
    let (uid, _) = ids();
    let mut at = PathBuf::new();
    let mut parent: Option<Metadata> = None;
    for c in absolute(dir)?.components() {
        match c {
            Component::RootDir => at.push("/"),
            Component::CurDir => continue,
            Component::ParentDir => {
                at.pop();
                parent = None;
                continue;
            }
            Component::Normal(n) => at.push(n),
            Component::Prefix(_) => continue,
        }
        let l = std::fs::symlink_metadata(&at)?;
        if l.file_type().is_symlink() {
            if let Some(p) = &parent {
                if writable_by_others(p) && !(sticky(p) && (l.uid() == uid || l.uid() == 0)) {
                    return Err(err(
                        io::ErrorKind::PermissionDenied,
                        format!("{} is a symbolic link in a directory other users can write to", at.display()),
                    ));
                }
            }
        }
        let m = std::fs::metadata(&at)?;
        if writable_by_others(&m) && !sticky(&m) {
            return Err(err(
                io::ErrorKind::PermissionDenied,
                format!(
                    "{} can be written by other users (mode {:o}, owner uid {}): a file beneath it could be swapped; use a directory only root can write to",
                    at.display(),
                    m.mode() & 0o7777,
                    m.uid()
                ),
            ));
        }
        parent = Some(m);
    }
    Ok(())
}

fn split(path: &Path) -> io::Result<(&Path, &std::ffi::OsStr)> {
    let name = match path.components().next_back() {
        Some(Component::Normal(n)) => n,
        _ => return Err(err(io::ErrorKind::InvalidInput, "not a file name".into())),
    };
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    Ok((dir, name))
}

/// Open the directory `dir` after checking the way to it; returns it with its metadata.
fn open_dir(dir: &Path) -> io::Result<(File, Metadata)> {
    check_chain(dir)?;
    let d = OpenOptions::new().read(true).custom_flags(libc::O_DIRECTORY | libc::O_CLOEXEC).open(dir)?;
    let m = d.metadata()?;
    Ok((d, m))
}

fn from_nix(e: nix::errno::Errno) -> io::Error {
    io::Error::from_raw_os_error(e as i32)
}

/// Create (or open) the file `path` for writing, mode `mode` if new: never through a symlink or a
/// hard link, only a regular file, and in a sticky shared directory only a file of ours. A file
/// that existed with permissions for "other" loses them.
pub fn create(path: &Path, existing: Existing, mode: u32) -> io::Result<File> {
    let (dir, name) = split(path)?;
    let (d, dm) = open_dir(dir)?;
    let mut flags = OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC | OFlag::O_NONBLOCK;
    if existing == Existing::Append {
        flags |= OFlag::O_APPEND;
    }
    let fd = openat(&d, name, flags, Mode::from_bits_truncate(mode)).map_err(|e| match e {
        nix::errno::Errno::ELOOP => {
            err(io::ErrorKind::PermissionDenied, "is a symbolic link; refusing to follow it".into())
        }
        nix::errno::Errno::ENXIO => err(io::ErrorKind::InvalidInput, "a FIFO, not a regular file".into()),
        e => from_nix(e),
    })?;
    let f = File::from(fd);
    let m = f.metadata()?;
    if !m.is_file() {
        return Err(err(io::ErrorKind::InvalidInput, format!("{}, not a regular file", what(&m))));
    }
    if m.nlink() > 1 {
        return Err(err(
            io::ErrorKind::PermissionDenied,
            format!("has {} hard links; refusing to write to a file that is also elsewhere", m.nlink()),
        ));
    }
    let (uid, _) = ids();
    if writable_by_others(&dm) && m.uid() != uid {
        return Err(err(
            io::ErrorKind::PermissionDenied,
            format!("belongs to uid {} in a directory other users can write to", m.uid()),
        ));
    }
    if m.uid() == uid && m.mode() & 0o007 != 0 {
        f.set_permissions(std::fs::Permissions::from_mode(m.mode() & 0o770))?;
    }
    if existing == Existing::Truncate {
        f.set_len(0)?;
    }
    Ok(f)
}

/// Write `bytes` as the whole content of a new or truncated file (see `create`).
pub fn write(path: &Path, bytes: &[u8], mode: u32) -> io::Result<()> {
    use std::io::Write;
    create(path, Existing::Truncate, mode)?.write_all(bytes)
}

/// Whether `create(path, Append, ..)` would succeed, without creating anything: the directory is
/// safe and writable, and an existing file passes the same checks.
pub fn check_create(path: &Path) -> io::Result<()> {
    let (dir, name) = split(path)?;
    let (d, _) = open_dir(dir)?;
    match nix::sys::stat::fstatat(&d, name, nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW) {
        Ok(_) => {
            // It exists: opening it to append changes nothing.
            create(path, Existing::Append, 0o640).map(drop)
        }
        Err(nix::errno::Errno::ENOENT) => {
            nix::unistd::faccessat(&d, ".", nix::unistd::AccessFlags::W_OK, nix::fcntl::AtFlags::empty())
                .map_err(from_nix)
        }
        Err(e) => Err(from_nix(e)),
    }
}

/// Create the directory `path` (and missing parents, `mode`) or accept it as it is: a real
/// directory (not a symlink), ours, that no other user can write to.
pub fn create_dir(path: &Path, mode: u32) -> io::Result<()> {
    let (dir, name) = split(path)?;
    if !dir.exists() {
        std::os::unix::fs::DirBuilderExt::mode(std::fs::DirBuilder::new().recursive(true), mode).create(dir)?;
    }
    let (d, _) = open_dir(dir)?;
    match nix::sys::stat::mkdirat(&d, name, Mode::from_bits_truncate(mode)) {
        Ok(()) | Err(nix::errno::Errno::EEXIST) => {}
        Err(e) => return Err(from_nix(e)),
    }
    let st = nix::sys::stat::fstatat(&d, name, nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW).map_err(from_nix)?;
    let kind = st.st_mode & libc::S_IFMT;
    if kind == libc::S_IFLNK {
        return Err(err(io::ErrorKind::PermissionDenied, "is a symbolic link; refusing to follow it".into()));
    }
    if kind != libc::S_IFDIR {
        return Err(err(io::ErrorKind::AlreadyExists, "exists and is not a directory".into()));
    }
    let (uid, _) = ids();
    if st.st_uid != uid && st.st_uid != 0 {
        return Err(err(io::ErrorKind::PermissionDenied, format!("belongs to uid {}, not to us", st.st_uid)));
    }
    check_chain(path)
}

/// Take an exclusive lock on `f` (held until it is closed). When another process holds it, the
/// error names it: "in use by tcpvigil (pid 1234)".
pub fn lock(f: &File) -> io::Result<()> {
    // SAFETY: flock on a descriptor we own; no memory is passed.
    if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
        return Ok(());
    }
    let e = io::Error::last_os_error();
    if e.raw_os_error() != Some(libc::EWOULDBLOCK) {
        return Err(e);
    }
    let who = f
        .metadata()
        .ok()
        .and_then(|m| holder(&m))
        .map_or_else(|| "another process".to_string(), |(pid, comm)| format!("{comm} (pid {pid})"));
    Err(err(io::ErrorKind::WouldBlock, format!("in use by {who}")))
}

/// The process holding a flock on the file `m` describes, from /proc/locks.
fn holder(m: &Metadata) -> Option<(u32, String)> {
    let dev = m.dev();
    let (major, minor) = (libc::major(dev), libc::minor(dev));
    let want = format!("{major:02x}:{minor:02x}:{}", m.ino());
    let locks = std::fs::read_to_string("/proc/locks").ok()?;
    let pid: u32 = locks.lines().filter(|l| !l.contains("->")).find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        (f.get(1) == Some(&"FLOCK") && f.get(5) == Some(&want.as_str())).then(|| f.get(4)?.parse().ok()).flatten()
    })?;
    let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).map(|c| c.trim().to_string()).unwrap_or_default();
    Some((pid, if comm.is_empty() { "a process".into() } else { comm }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn tmp(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("tcpvigil-files-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o755)).unwrap();
        d
    }

    #[test]
    fn a_symlink_is_never_followed_and_its_target_is_untouched() {
        let d = tmp("symlink");
        let victim = d.join("victim");
        std::fs::write(&victim, b"keep\n").unwrap();
        std::fs::set_permissions(&victim, std::fs::Permissions::from_mode(0o644)).unwrap();
        let link = d.join("events.jsonl");
        std::os::unix::fs::symlink(&victim, &link).unwrap();
        for how in [Existing::Append, Existing::Truncate] {
            let e = create(&link, how, 0o640).unwrap_err();
            assert!(e.to_string().contains("symbolic link"), "{e}");
        }
        assert!(check_create(&link).is_err());
        assert_eq!(std::fs::read(&victim).unwrap(), b"keep\n");
        assert_eq!(std::fs::metadata(&victim).unwrap().permissions().mode() & 0o777, 0o644, "mode changed");
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_hard_link_a_fifo_and_a_shared_directory_are_refused() {
        let d = tmp("hard");
        std::fs::write(d.join("a"), b"x").unwrap();
        std::fs::hard_link(d.join("a"), d.join("b")).unwrap();
        assert!(create(&d.join("b"), Existing::Append, 0o640).unwrap_err().to_string().contains("hard links"));
        nix::unistd::mkfifo(&d.join("fifo"), Mode::from_bits_truncate(0o600)).unwrap();
        let t = std::time::Instant::now();
        assert!(create(&d.join("fifo"), Existing::Append, 0o640).is_err());
        let e = open_regular(&d.join("fifo")).unwrap_err();
        assert!(e.to_string().contains("FIFO"), "{e}");
        assert!(t.elapsed() < std::time::Duration::from_secs(2), "a FIFO blocked");
        let shared = d.join("shared");
        std::fs::create_dir(&shared).unwrap();
        std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o777)).unwrap();
        let e = create(&shared.join("events.jsonl"), Existing::Append, 0o640).unwrap_err();
        assert!(e.to_string().contains("can be written by other users"), "{e}");
        assert!(create_dir(&shared.join("dumps"), 0o750).is_err());
        // Sticky (as /tmp): a file of ours is fine.
        std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o1777)).unwrap();
        let mut f = create(&shared.join("events.jsonl"), Existing::Append, 0o640).unwrap();
        f.write_all(b"{}\n").unwrap();
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn an_existing_file_keeps_or_loses_its_content_and_loses_other_permissions() {
        let d = tmp("existing");
        let p = d.join("f");
        std::fs::write(&p, b"old\n").unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o666)).unwrap();
        create(&p, Existing::Append, 0o640).unwrap().write_all(b"new\n").unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"old\nnew\n");
        assert_eq!(std::fs::metadata(&p).unwrap().permissions().mode() & 0o777, 0o660);
        write(&p, b"only\n", 0o640).unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"only\n");
        check_create(&d.join("new")).unwrap();
        assert!(!d.join("new").exists(), "check_create created the file");
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_directory_symlink_is_refused_and_a_real_one_accepted() {
        let d = tmp("dir");
        create_dir(&d.join("a/b/dumps"), 0o750).unwrap();
        create_dir(&d.join("a/b/dumps"), 0o750).unwrap();
        std::os::unix::fs::symlink(&d, d.join("link")).unwrap();
        let e = create_dir(&d.join("link"), 0o750).unwrap_err();
        assert!(e.to_string().contains("symbolic link"), "{e}");
        std::fs::write(d.join("file"), b"").unwrap();
        assert!(create_dir(&d.join("file"), 0o750).is_err());
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_second_lock_names_the_holder() {
        let d = tmp("lock");
        let a = create(&d.join("l"), Existing::Append, 0o640).unwrap();
        lock(&a).unwrap();
        let b = create(&d.join("l"), Existing::Append, 0o640).unwrap();
        let e = lock(&b).unwrap_err().to_string();
        assert!(e.contains(&format!("(pid {})", std::process::id())), "{e}");
        drop(a);
        lock(&b).unwrap();
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn clip_keeps_a_few_hundred_bytes_and_says_how_many_there_were() {
        assert_eq!(clip("short", 10), "short");
        let long = "é".repeat(1000);
        let c = clip(&long, QUOTE_BYTES);
        assert!(c.len() < QUOTE_BYTES + 40, "{}", c.len());
        assert!(c.ends_with("(2000 bytes in all)"), "{c}");
    }
}
