//! The capabilities tcpvigil uses, checked before anything is loaded and dropped as soon as each
//! is no longer needed. Capability sets belong to a thread: the BPF thread keeps what its loop
//! needs; the daemon's other threads keep none of them.
use std::io;

/// A capability the hooks need, with its number (linux/capability.h).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cap {
    NetAdmin = 12,
    SysPtrace = 19,
    SysAdmin = 21,
    Perfmon = 38,
    Bpf = 39,
}

/// Every capability the daemon may hold (the unit's CapabilityBoundingSet).
pub const ALL: [Cap; 5] = [Cap::Bpf, Cap::Perfmon, Cap::NetAdmin, Cap::SysAdmin, Cap::SysPtrace];

impl Cap {
    pub fn name(self) -> &'static str {
        match self {
            Cap::Bpf => "CAP_BPF",
            Cap::Perfmon => "CAP_PERFMON",
            Cap::NetAdmin => "CAP_NET_ADMIN",
            Cap::SysAdmin => "CAP_SYS_ADMIN",
            Cap::SysPtrace => "CAP_SYS_PTRACE",
        }
    }

    /// What it is used for.
    pub fn why(self) -> &'static str {
        match self {
            Cap::Bpf => "load the eBPF programs and create their maps",
            Cap::Perfmon => "run tracing programs that read kernel memory (tp_btf, fentry/fexit, iter/tcp)",
            Cap::NetAdmin => {
                "load the sockops fallback for retransmission timeouts (CAP_SYS_ADMIN covers it too), used where fentry is refused"
            }
            Cap::SysAdmin => {
                "take snapshots of the connections in other network namespaces (setns) and read program run-time statistics"
            }
            Cap::SysPtrace => {
                "find the processes and network namespaces of other users' sockets (/proc/PID/fd, /proc/PID/ns/net)"
            }
        }
    }

    fn bit(self) -> u64 {
        1 << self as u64
    }
}

/// `Cap` names joined for a message.
pub fn names(caps: &[Cap]) -> String {
    caps.iter().map(|c| c.name()).collect::<Vec<_>>().join(", ")
}

#[repr(C)]
struct Header {
    version: u32,
    pid: i32,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct Data {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

/// _LINUX_CAPABILITY_VERSION_3: 64-bit sets in two words.
const VERSION_3: u32 = 0x2008_0522;

/// The calling thread's (effective, permitted, inheritable) sets.
fn get() -> io::Result<(u64, u64, u64)> {
    let mut h = Header { version: VERSION_3, pid: 0 };
    let mut d = [Data::default(); 2];
    // SAFETY: capget with a v3 header and room for the two data words it writes.
    if unsafe { libc::syscall(libc::SYS_capget, &mut h as *mut Header, d.as_mut_ptr()) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let w = |f: fn(&Data) -> u32| u64::from(f(&d[0])) | u64::from(f(&d[1])) << 32;
    Ok((w(|x| x.effective), w(|x| x.permitted), w(|x| x.inheritable)))
}

fn set(effective: u64, permitted: u64, inheritable: u64) -> io::Result<()> {
    let mut h = Header { version: VERSION_3, pid: 0 };
    let word = |v: u64, i: u32| (v >> (32 * i)) as u32;
    let d: [Data; 2] = [0, 1].map(|i| Data {
        effective: word(effective, i),
        permitted: word(permitted, i),
        inheritable: word(inheritable, i),
    });
    // SAFETY: capset with a v3 header and the two data words it reads; it changes only the
    // calling thread's sets.
    if unsafe { libc::syscall(libc::SYS_capset, &mut h as *mut Header, d.as_ptr()) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Whether the calling thread may use `c` now.
pub fn has(c: Cap) -> bool {
    get().is_ok_and(|(e, _, _)| e & c.bit() != 0)
}

/// The capabilities of `ALL` in the calling thread's effective set.
pub fn held() -> Vec<Cap> {
    ALL.into_iter().filter(|c| has(*c)).collect()
}

/// Remove `caps` from the calling thread for good (effective, permitted and inheritable, and so
/// from the ambient set); other threads keep theirs.
pub fn drop(caps: &[Cap]) -> io::Result<()> {
    let mask = caps.iter().fold(0u64, |m, c| m | c.bit());
    let (e, p, i) = get()?;
    set(e & !mask, p & !mask, i & !mask)
}

/// What start-up lacks: `required` without which nothing loads (CAP_BPF and CAP_PERFMON, which
/// CAP_SYS_ADMIN covers on its own), `optional` without which part of the agent is missing.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Missing {
    pub required: Vec<Cap>,
    pub optional: Vec<Cap>,
}

/// The start-up check of the calling thread's effective set.
pub fn missing() -> Missing {
    missing_from(&held())
}

pub fn missing_from(held: &[Cap]) -> Missing {
    let has = |c| held.contains(&c);
    let admin = has(Cap::SysAdmin);
    let required = [Cap::Bpf, Cap::Perfmon].into_iter().filter(|c| !has(*c) && !admin).collect();
    // The kernel takes CAP_SYS_ADMIN for CAP_NET_ADMIN when loading sockops.
    let optional = [Cap::NetAdmin, Cap::SysAdmin, Cap::SysPtrace]
        .into_iter()
        .filter(|c| !has(*c) && !(*c == Cap::NetAdmin && admin))
        .collect();
    Missing { required, optional }
}

/// How to give the daemon what it lacks.
pub const FIX: &str = "run it as root (sudo), under the systemd unit (deploy/systemd/tcpvigil.service grants them), \
                       or give them to the binary: setcap cap_bpf,cap_perfmon,cap_net_admin,cap_sys_admin,cap_sys_ptrace+ep \
                       $(command -v tcpvigil)";

/// The capabilities the BPF thread's loop keeps: CAP_SYS_ADMIN (setns into other network
/// namespaces for every snapshot; BPF_ENABLE_STATS) and CAP_SYS_PTRACE (opening other users'
/// /proc/PID/ns/net to find the namespaces); CAP_BPF only where the kernel checks it on every
/// bpf() call of the loop (before Linux 5.19 with kernel.unprivileged_bpf_disabled set), which
/// `needs_bpf` finds out by trying with it lowered.
pub const LOOP: [Cap; 2] = [Cap::SysAdmin, Cap::SysPtrace];

/// In the BPF thread once every program is attached: drop CAP_NET_ADMIN and CAP_PERFMON
/// (attaching is done), and CAP_BPF unless `works` (a map lookup, as the loop does) fails with
/// it lowered. Returns what the thread keeps.
pub fn after_attach(works: &dyn Fn() -> bool) -> Vec<Cap> {
    let kept = lower_after_attach(works);
    if let Ok(mut k) = LOOP_KEPT.lock() {
        *k = kept.clone();
    }
    kept
}

/// What the BPF thread kept after attaching (empty before).
pub fn kept_by_loop() -> Vec<Cap> {
    LOOP_KEPT.lock().map(|k| k.clone()).unwrap_or_default()
}

static LOOP_KEPT: std::sync::Mutex<Vec<Cap>> = std::sync::Mutex::new(Vec::new());

fn lower_after_attach(works: &dyn Fn() -> bool) -> Vec<Cap> {
    let mut gone = vec![Cap::NetAdmin, Cap::Perfmon];
    if let Ok((e, p, i)) = get() {
        if e & Cap::Bpf.bit() != 0 && set(e & !Cap::Bpf.bit(), p, i).is_ok() {
            if works() {
                gone.push(Cap::Bpf);
            } else {
                let _ = set(e, p, i);
            }
        }
    }
    if let Err(e) = drop(&gone) {
        tracing::warn!("dropping {}: {e}", names(&gone));
    }
    held()
}

/// In every other thread once start-up is over (programs attached, the processes of older
/// sockets read from /proc): none of them is needed any more.
pub fn after_start() -> io::Result<()> {
    drop(&ALL)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bpf_and_perfmon_are_required_unless_sys_admin_covers_both() {
        let m = missing_from(&[]);
        assert_eq!(m.required, [Cap::Bpf, Cap::Perfmon]);
        assert_eq!(m.optional, [Cap::NetAdmin, Cap::SysAdmin, Cap::SysPtrace]);
        assert!(missing_from(&[Cap::SysAdmin]).required.is_empty());
        let m = missing_from(&[Cap::Bpf, Cap::Perfmon, Cap::NetAdmin]);
        assert!(m.required.is_empty());
        assert_eq!(m.optional, [Cap::SysAdmin, Cap::SysPtrace]);
        assert_eq!(missing_from(&[Cap::SysAdmin]).optional, [Cap::SysPtrace], "SYS_ADMIN covers NET_ADMIN");
        assert_eq!(names(&[Cap::Bpf, Cap::SysPtrace]), "CAP_BPF, CAP_SYS_PTRACE");
    }

    #[test]
    fn a_thread_drops_its_own_capabilities_and_no_other_threads() {
        // A thread of its own: capability sets are per thread, the test runner's stay.
        let before = get().unwrap();
        let after = std::thread::spawn(|| {
            let was = held();
            drop(&[Cap::NetAdmin]).unwrap();
            (was, held(), get().unwrap())
        })
        .join()
        .unwrap();
        let (was, now, (e, p, _)) = after;
        assert!(!now.contains(&Cap::NetAdmin) && e & Cap::NetAdmin.bit() == 0 && p & Cap::NetAdmin.bit() == 0);
        assert_eq!(was.iter().filter(|c| **c != Cap::NetAdmin).count(), now.len(), "only NET_ADMIN went");
        assert_eq!(get().unwrap(), before, "this thread kept its sets");
    }
}
