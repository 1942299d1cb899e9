//! A packet capture without tcpdump: an AF_PACKET socket in the sender's namespace collects the
//! SACK blocks of every ACK arriving from the receiver, to compare with the agent's samples.
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;

use anyhow::{anyhow, bail, Result};

use crate::sys::enter_netns;

pub struct Captured {
    /// Distinct SACK blocks (start, end) seen on the wire.
    pub blocks: BTreeSet<(u32, u32)>,
    pub acks_with_sack: u64,
    /// Packets the kernel dropped from the capture socket (PACKET_STATISTICS).
    pub dropped: u64,
}

pub struct Capture {
    stop: Arc<AtomicBool>,
    handle: JoinHandle<Result<Captured>>,
}

/// Capture IPv4 TCP packets with source port `port` arriving on `ifname` in `ns`.
pub fn start(ns: &str, ifname: &str, port: u16) -> Result<Capture> {
    let (ns, ifname) = (ns.to_string(), ifname.to_string());
    let stop = Arc::new(AtomicBool::new(false));
    let stop2 = stop.clone();
    let (tx, rx) = mpsc::channel();
    let handle = std::thread::spawn(move || -> Result<Captured> {
        let fd = match enter_netns(&ns).and_then(|()| open(&ifname)) {
            Ok(fd) => {
                let _ = tx.send(Ok(()));
                fd
            }
            Err(e) => {
                let _ = tx.send(Err(format!("{e:#}")));
                return Err(e);
            }
        };
        let mut c = Captured { blocks: BTreeSet::new(), acks_with_sack: 0, dropped: 0 };
        let mut buf = [0u8; 256];
        while !stop2.load(Ordering::Relaxed) {
            // SAFETY: buf is valid for buf.len() bytes; fd is an open socket owned by this thread.
            let n = unsafe { libc::recv(fd, buf.as_mut_ptr().cast(), buf.len(), 0) };
            if n <= 0 {
                continue; // receive timeout: look at the stop flag
            }
            let blocks = sack_blocks(&buf[..n as usize], port);
            if !blocks.is_empty() {
                c.acks_with_sack += 1;
                c.blocks.extend(blocks);
            }
        }
        c.dropped = dropped(fd);
        // SAFETY: fd is ours and closed once.
        unsafe { libc::close(fd) };
        Ok(c)
    });
    rx.recv_timeout(std::time::Duration::from_secs(10))
        .map_err(|_| anyhow!("capture did not start"))?
        .map_err(|e| anyhow!(e))?;
    Ok(Capture { stop, handle })
}

impl Capture {
    pub fn finish(self) -> Result<Captured> {
        self.stop.store(true, Ordering::Relaxed);
        self.handle.join().map_err(|_| anyhow!("capture panicked"))?
    }
}

fn open(ifname: &str) -> Result<i32> {
    let proto = (libc::ETH_P_IP as u16).to_be();
    // SAFETY: plain socket(2); the result is checked.
    let fd = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW, proto as i32) };
    if fd < 0 {
        bail!("AF_PACKET socket: {}", std::io::Error::last_os_error());
    }
    let name = std::ffi::CString::new(ifname)?;
    // SAFETY: name is a valid C string.
    let ifindex = unsafe { libc::if_nametoindex(name.as_ptr()) };
    if ifindex == 0 {
        bail!("no interface {ifname}");
    }
    // SAFETY: sockaddr_ll is plain data; zeroed is a valid value.
    let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    sll.sll_family = libc::AF_PACKET as u16;
    sll.sll_protocol = proto;
    sll.sll_ifindex = ifindex as i32;
    let size = std::mem::size_of::<libc::sockaddr_ll>() as u32;
    // SAFETY: sll outlives the call and `size` is its size.
    if unsafe { libc::bind(fd, (&sll as *const libc::sockaddr_ll).cast(), size) } < 0 {
        bail!("bind to {ifname}: {}", std::io::Error::last_os_error());
    }
    let rcvbuf: i32 = 32 << 20;
    let tv = libc::timeval { tv_sec: 0, tv_usec: 200_000 };
    // SAFETY: option values outlive the calls and their sizes are given.
    unsafe {
        libc::setsockopt(fd, libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, (&rcvbuf as *const i32).cast(), 4);
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_RCVTIMEO,
            (&tv as *const libc::timeval).cast(),
            std::mem::size_of::<libc::timeval>() as u32,
        );
    }
    Ok(fd)
}

fn dropped(fd: i32) -> u64 {
    let mut st = libc::tpacket_stats { tp_packets: 0, tp_drops: 0 };
    let mut len = std::mem::size_of::<libc::tpacket_stats>() as u32;
    // SAFETY: st and len are valid for writing; the kernel writes at most len bytes.
    let r = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_PACKET,
            libc::PACKET_STATISTICS,
            (&mut st as *mut libc::tpacket_stats).cast(),
            &mut len,
        )
    };
    if r == 0 {
        st.tp_drops as u64
    } else {
        0
    }
}

/// SACK blocks of an Ethernet frame carrying IPv4/TCP from source port `port` (else empty).
pub fn sack_blocks(frame: &[u8], port: u16) -> Vec<(u32, u32)> {
    match frame.get(14..).and_then(|ip| tcpvigil_lab::pcap::ip_packet(0.0, ip)) {
        Some(seg) if seg.src.is_ipv4() && seg.src.port() == port => seg.sack,
        _ => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sack_blocks_are_read_from_an_ack_after_nops_and_timestamps() {
        let mut f = vec![0u8; 14];
        let mut ip = vec![0x45, 0, 0, 0, 0, 0, 0, 0, 64, 6, 0, 0, 10, 0, 0, 2, 10, 0, 0, 1];
        let mut tcp = vec![0x14, 0x51, 0x9c, 0x40, 0, 0, 0, 1, 0, 0, 0, 2, 0, 0x10, 0, 0, 0, 0, 0, 0];
        // NOP NOP TS(10) NOP NOP SACK(18: two blocks) = 32 bytes of options
        let mut opts = vec![1, 1, 8, 10, 0, 0, 0, 1, 0, 0, 0, 2, 1, 1, 5, 18];
        for v in [100u32, 200, 300, 400] {
            opts.extend_from_slice(&v.to_be_bytes());
        }
        tcp[12] = (((20 + opts.len()) / 4) as u8) << 4;
        tcp.extend(opts);
        ip.append(&mut tcp);
        f.append(&mut ip);
        assert_eq!(sack_blocks(&f, 5201), vec![(100, 200), (300, 400)]);
        assert!(sack_blocks(&f, 5202).is_empty());
    }
}
