//! sd_notify for the `Type=notify` unit in deploy/systemd: READY=1 once hooks are attached and
//! /metrics serves, RELOADING=1 / READY=1 around a reload, STOPPING=1 on shutdown.
use std::io;
use std::os::unix::net::UnixDatagram;

/// Send `state` (e.g. "READY=1\nSTATUS=12 hooks attached") to $NOTIFY_SOCKET.
/// Returns Ok(false) when not started by systemd (no $NOTIFY_SOCKET).
pub fn notify(state: &str) -> io::Result<bool> {
    let Some(path) = std::env::var_os("NOTIFY_SOCKET") else { return Ok(false) };
    let path = path.to_string_lossy().into_owned();
    let sock = UnixDatagram::unbound()?;
    if let Some(abstract_name) = path.strip_prefix('@') {
        use std::os::linux::net::SocketAddrExt;
        let addr = std::os::unix::net::SocketAddr::from_abstract_name(abstract_name.as_bytes())?;
        sock.send_to_addr(state.as_bytes(), &addr)?;
    } else {
        sock.send_to(state.as_bytes(), &path)?;
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ready_reaches_the_notify_socket() {
        let dir = std::env::temp_dir().join(format!("tcpvigil-notify-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("notify");
        let _ = std::fs::remove_file(&path);
        let rx = UnixDatagram::bind(&path).unwrap();
        // Only this test touches NOTIFY_SOCKET.
        std::env::set_var("NOTIFY_SOCKET", &path);
        assert!(notify("READY=1").unwrap());
        std::env::remove_var("NOTIFY_SOCKET");
        let mut buf = [0u8; 64];
        let n = rx.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"READY=1");
        assert!(!notify("READY=1").unwrap());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
