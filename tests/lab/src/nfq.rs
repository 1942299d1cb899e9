//! A minimal nfnetlink_queue client (bind a queue, metadata-only copy, read packet ids, batch verdicts).
//! Written on libc because batch verdicts (accept every id <= N with one message) are what make a FIFO delay line cheap.
use crate::error::{LabError, Result};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

const NETLINK_NETFILTER: libc::c_int = 12;
const SOL_NETLINK: libc::c_int = 270;
const NETLINK_NO_ENOBUFS: libc::c_int = 5;
const NFNL_SUBSYS_QUEUE: u16 = 3;
const NFQNL_MSG_PACKET: u16 = 0;
const NFQNL_MSG_VERDICT: u16 = 1;
const NFQNL_MSG_CONFIG: u16 = 2;
const NFQNL_MSG_VERDICT_BATCH: u16 = 3;
const NFQA_PACKET_HDR: u16 = 1;
const NFQA_VERDICT_HDR: u16 = 2;
const NFQA_PAYLOAD: u16 = 10;
const NFQA_CFG_CMD: u16 = 1;
const NFQA_CFG_PARAMS: u16 = 2;
const NFQA_CFG_QUEUE_MAXLEN: u16 = 3;
const NFQNL_CFG_CMD_BIND: u8 = 1;
const NFQNL_COPY_PACKET: u8 = 2;
/// Bytes of each packet copied to userspace: enough for the IPv4/IPv6 length fields.
const COPY_RANGE: u32 = 8;
const NLM_F_REQUEST: u16 = 1;
const NLM_F_ACK: u16 = 4;
const NLMSG_ERROR: u16 = 2;
/// Verdict: let the packet continue.
pub const NF_ACCEPT: u32 = 1;
/// Verdict: drop the packet.
pub const NF_DROP: u32 = 0;

fn last_os(what: &str) -> LabError {
    LabError::io(what.to_string(), std::io::Error::last_os_error())
}

/// One bound queue on a netlink socket, in the network namespace of the thread that opened it.
pub struct NfQueue {
    fd: OwnedFd,
    queue: u16,
    seq: u32,
    buf: Vec<u8>,
}

fn put_attr(msg: &mut Vec<u8>, ty: u16, payload: &[u8]) {
    let len = 4 + payload.len();
    msg.extend_from_slice(&(len as u16).to_ne_bytes());
    msg.extend_from_slice(&ty.to_ne_bytes());
    msg.extend_from_slice(payload);
    while msg.len() % 4 != 0 {
        msg.push(0);
    }
}

impl NfQueue {
    /// Opens a netlink socket, binds queue `queue` copying the first bytes of each packet (for its length), with a long kernel queue.
    pub fn open(queue: u16, max_len: u32) -> Result<NfQueue> {
        // SAFETY: plain socket(2) call; the result is checked before use.
        let raw = unsafe { libc::socket(libc::AF_NETLINK, libc::SOCK_RAW | libc::SOCK_CLOEXEC, NETLINK_NETFILTER) };
        if raw < 0 {
            return Err(last_os("socket(AF_NETLINK, NETLINK_NETFILTER)"));
        }
        // SAFETY: `raw` is a fresh descriptor we own.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        // SAFETY: zeroed sockaddr_nl is a valid value; we set the family.
        let mut sa: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
        sa.nl_family = libc::AF_NETLINK as libc::sa_family_t;
        // SAFETY: sa is a valid sockaddr_nl and the length matches.
        let rc = unsafe {
            libc::bind(
                fd.as_raw_fd(),
                &sa as *const _ as *const libc::sockaddr,
                std::mem::size_of::<libc::sockaddr_nl>() as u32,
            )
        };
        if rc < 0 {
            return Err(last_os("bind netlink socket"));
        }
        set_int_opt(fd.as_raw_fd(), libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, 64 << 20)?;
        set_int_opt(fd.as_raw_fd(), SOL_NETLINK, NETLINK_NO_ENOBUFS, 1)?;
        let mut q = NfQueue { fd, queue, seq: 1, buf: vec![0u8; 1 << 16] };
        q.config(NFQA_CFG_CMD, &[NFQNL_CFG_CMD_BIND, 0, 0, 0])?;
        let mut params = COPY_RANGE.to_be_bytes().to_vec();
        params.push(NFQNL_COPY_PACKET);
        q.config(NFQA_CFG_PARAMS, &params)?;
        q.config(NFQA_CFG_QUEUE_MAXLEN, &max_len.to_be_bytes())?;
        Ok(q)
    }

    /// The queue number this socket is bound to.
    pub fn queue(&self) -> u16 {
        self.queue
    }

    /// The descriptor, for poll.
    pub fn raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    fn header(&mut self, msg_type: u16, flags: u16) -> Vec<u8> {
        let mut m = Vec::with_capacity(64);
        m.extend_from_slice(&0u32.to_ne_bytes()); // length, patched in send
        m.extend_from_slice(&((NFNL_SUBSYS_QUEUE << 8) | msg_type).to_ne_bytes());
        m.extend_from_slice(&(NLM_F_REQUEST | flags).to_ne_bytes());
        m.extend_from_slice(&self.seq.to_ne_bytes());
        m.extend_from_slice(&0u32.to_ne_bytes());
        self.seq = self.seq.wrapping_add(1);
        m.push(libc::AF_UNSPEC as u8); // nfgenmsg.nfgen_family
        m.push(0); // version
        m.extend_from_slice(&self.queue.to_be_bytes()); // res_id
        m
    }

    fn send(&self, mut m: Vec<u8>) -> Result<()> {
        let len = m.len() as u32;
        m[0..4].copy_from_slice(&len.to_ne_bytes());
        // SAFETY: m is a valid buffer of m.len() bytes; the kernel address is implied (connected to pid 0 by default).
        let n = unsafe { libc::send(self.fd.as_raw_fd(), m.as_ptr() as *const libc::c_void, m.len(), 0) };
        if n < 0 {
            return Err(last_os("send to nfnetlink_queue"));
        }
        Ok(())
    }

    fn config(&mut self, attr: u16, payload: &[u8]) -> Result<()> {
        let mut m = self.header(NFQNL_MSG_CONFIG, NLM_F_ACK);
        put_attr(&mut m, attr, payload);
        self.send(m)?;
        // Wait for the ACK (an NLMSG_ERROR with errno 0).
        let n = self.recv_raw(true)?;
        let b = &self.buf[..n];
        if b.len() >= 20 && u16::from_ne_bytes([b[4], b[5]]) == NLMSG_ERROR {
            let err = i32::from_ne_bytes([b[16], b[17], b[18], b[19]]);
            if err != 0 {
                return Err(LabError::io(
                    format!("nfqueue config attr {attr} on queue {}", self.queue),
                    std::io::Error::from_raw_os_error(-err),
                ));
            }
            return Ok(());
        }
        Err(LabError::Parse { what: "nfqueue config reply".into(), detail: format!("{n} bytes, not an ACK") })
    }

    fn recv_raw(&mut self, block: bool) -> Result<usize> {
        let flags = if block { 0 } else { libc::MSG_DONTWAIT };
        // SAFETY: buf is a valid writable buffer of buf.len() bytes.
        let n = unsafe {
            libc::recv(self.fd.as_raw_fd(), self.buf.as_mut_ptr() as *mut libc::c_void, self.buf.len(), flags)
        };
        if n < 0 {
            return Err(LabError::io("recv from nfnetlink_queue", std::io::Error::last_os_error()));
        }
        Ok(n as usize)
    }

    /// Reads everything queued without blocking; calls `on_packet(id, ip_len)` for each packet
    /// (ip_len = IP total length, 0 if unknown). Returns how many.
    pub fn drain(&mut self, mut on_packet: impl FnMut(u32, u32)) -> Result<usize> {
        let mut count = 0;
        loop {
            let n = match self.recv_raw(false) {
                Ok(n) => n,
                Err(LabError::Io { source, .. }) if source.kind() == std::io::ErrorKind::WouldBlock => {
                    return Ok(count)
                }
                Err(LabError::Io { source, .. }) if source.raw_os_error() == Some(libc::ENOBUFS) => continue,
                Err(e) => return Err(e),
            };
            let mut off = 0usize;
            let b = &self.buf[..n];
            while off + 20 <= n {
                let len = u32::from_ne_bytes([b[off], b[off + 1], b[off + 2], b[off + 3]]) as usize;
                let ty = u16::from_ne_bytes([b[off + 4], b[off + 5]]);
                if len < 16 || off + len > n {
                    break;
                }
                if ty == (NFNL_SUBSYS_QUEUE << 8) | NFQNL_MSG_PACKET {
                    let (id, ip_len) = packet_info(&b[off + 20..off + len]);
                    if let Some(id) = id {
                        on_packet(id, ip_len);
                        count += 1;
                    }
                }
                off += (len + 3) & !3;
            }
        }
    }

    /// Issues `verdict` for the one packet `id` (NFQNL_MSG_VERDICT).
    pub fn verdict(&mut self, id: u32, verdict: u32) -> Result<()> {
        let mut m = self.header(NFQNL_MSG_VERDICT, 0);
        let mut hdr = verdict.to_be_bytes().to_vec();
        hdr.extend_from_slice(&id.to_be_bytes());
        put_attr(&mut m, NFQA_VERDICT_HDR, &hdr);
        self.send(m)
    }

    /// Issues `verdict` for every queued packet with id <= `max_id` (NFQNL_MSG_VERDICT_BATCH).
    pub fn verdict_batch(&mut self, max_id: u32, verdict: u32) -> Result<()> {
        let mut m = self.header(NFQNL_MSG_VERDICT_BATCH, 0);
        let mut hdr = verdict.to_be_bytes().to_vec();
        hdr.extend_from_slice(&max_id.to_be_bytes());
        put_attr(&mut m, NFQA_VERDICT_HDR, &hdr);
        self.send(m)
    }
}

/// Packet id (NFQA_PACKET_HDR) and IP total length (from the copied head of NFQA_PAYLOAD).
fn packet_info(mut attrs: &[u8]) -> (Option<u32>, u32) {
    let (mut id, mut ip_len) = (None, 0u32);
    while attrs.len() >= 4 {
        let len = u16::from_ne_bytes([attrs[0], attrs[1]]) as usize;
        let ty = u16::from_ne_bytes([attrs[2], attrs[3]]) & 0x7fff;
        if len < 4 || len > attrs.len() {
            break;
        }
        let v = &attrs[4..len];
        if ty == NFQA_PACKET_HDR && v.len() >= 4 {
            id = Some(u32::from_be_bytes([v[0], v[1], v[2], v[3]]));
        } else if ty == NFQA_PAYLOAD && v.len() >= 6 {
            ip_len = match v[0] >> 4 {
                4 => u32::from(u16::from_be_bytes([v[2], v[3]])),
                6 => 40 + u32::from(u16::from_be_bytes([v[4], v[5]])),
                _ => 0,
            };
        }
        let adv = (len + 3) & !3;
        if adv >= attrs.len() {
            break;
        }
        attrs = &attrs[adv..];
    }
    (id, ip_len)
}

fn set_int_opt(fd: RawFd, level: libc::c_int, opt: libc::c_int, val: libc::c_int) -> Result<()> {
    // SAFETY: val lives across the call and the length matches its type.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            level,
            opt,
            &val as *const _ as *const libc::c_void,
            std::mem::size_of::<libc::c_int>() as u32,
        )
    };
    if rc < 0 {
        return Err(last_os(&format!("setsockopt level {level} opt {opt}")));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packet_id_and_ip_length_are_read_from_attributes() {
        let mut a = Vec::new();
        put_attr(&mut a, 9, &[1, 2, 3]);
        put_attr(&mut a, NFQA_PACKET_HDR, &[0, 0, 1, 2, 8, 0, 2]);
        put_attr(&mut a, NFQA_PAYLOAD, &[0x45, 0, 0x05, 0xdc, 0, 0, 0, 0]);
        assert_eq!(packet_info(&a), (Some(258), 1500));
        assert_eq!(packet_info(&a[..4]), (None, 0));
    }

    #[test]
    fn an_ipv6_packet_counts_its_fixed_header_and_payload_for_the_policer() {
        let mut a = Vec::new();
        put_attr(&mut a, NFQA_PACKET_HDR, &[0, 0, 0, 9, 0x86, 0xdd, 2]);
        // Version 6, payload length 1440: a 1480-byte packet (40-byte header not in the field).
        put_attr(&mut a, NFQA_PAYLOAD, &[0x60, 0, 0, 0, 0x05, 0xa0, 6, 64]);
        assert_eq!(packet_info(&a), (Some(9), 1480));
    }
}
