//! systemd's sd_notify protocol: READY=1, RELOADING=1, STOPPING=1, STATUS=... over $NOTIFY_SOCKET.
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixDatagram};

/// Tell systemd something; silently nothing when not run by systemd.
pub fn notify(state: &str) {
    let Some(path) = std::env::var_os("NOTIFY_SOCKET") else { return };
    let path = path.to_string_lossy().into_owned();
    let Ok(sock) = UnixDatagram::unbound() else { return };
    let addr = match path.strip_prefix('@') {
        Some(name) => SocketAddr::from_abstract_name(name.as_bytes()),
        None => SocketAddr::from_pathname(&path),
    };
    if let Ok(a) = addr {
        let _ = sock.send_to_addr(state.as_bytes(), &a);
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn sends_the_state_to_the_notify_socket() {
        let dir = std::env::temp_dir().join(format!("tv-notify-{}", std::process::id()));
        let _ = std::fs::remove_file(&dir);
        let rx = std::os::unix::net::UnixDatagram::bind(&dir).unwrap();
        std::env::set_var("NOTIFY_SOCKET", &dir);
        super::notify("READY=1");
        let mut buf = [0u8; 64];
        let n = rx.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"READY=1");
        std::env::remove_var("NOTIFY_SOCKET");
        let _ = std::fs::remove_file(&dir);
    }
}
