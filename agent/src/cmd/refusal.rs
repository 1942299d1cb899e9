//! Why the kernel most likely refused a candidate program: a missing capability, lockdown, a kernel
//! without the function or type, the verifier.
use tcpvigil::caps::{self, Cap};

/// The kernel's lockdown mode when one is active (`integrity`, `confidentiality`).
fn lockdown() -> Option<String> {
    let s = std::fs::read_to_string("/sys/kernel/security/lockdown").ok()?;
    let mode = s.split_whitespace().find(|w| w.starts_with('['))?.trim_matches(['[', ']']);
    (mode != "none").then(|| mode.to_string())
}

/// Why the kernel most likely refused the candidate `cand` with the message `why`.
pub fn likely_reason(cand: &str, why: &str) -> String {
    reason_given(cand, why, &caps::held(), lockdown().as_deref())
}

fn reason_given(cand: &str, why: &str, held: &[Cap], lockdown: Option<&str>) -> String {
    let w = why.to_lowercase();
    let missing = caps::missing_from(held);
    if w.contains("operation not permitted") || w.contains("os error 1)") {
        if cand.starts_with("sockops") && !held.contains(&Cap::NetAdmin) && !held.contains(&Cap::SysAdmin) {
            return format!("{} is missing: it is needed to {}", Cap::NetAdmin.name(), Cap::NetAdmin.why());
        }
        if !missing.required.is_empty() {
            return format!("{} missing", caps::names(&missing.required));
        }
        if let Some(mode) = lockdown {
            return format!("EPERM: kernel lockdown ({mode}) forbids it");
        }
        let what = if cand.starts_with("fentry") || cand.starts_with("fexit") { "BPF trampolines" } else { "it" };
        return format!(
            "EPERM although CAP_BPF and CAP_PERFMON are held: kernel lockdown, a security module or the hypervisor forbids {what} here"
        );
    }
    if w.contains("btf") && (w.contains("not found") || w.contains("failed to find"))
        || w.contains("no such file")
        || w.contains("no such process")
    {
        return "not in this kernel (no such function, tracepoint or BTF type: an older kernel, or one built without it)"
            .into();
    }
    if w.contains("verifier") || w.contains("permission denied") {
        return "the verifier refused it on this kernel".into();
    }
    if w.contains("invalid argument") || w.contains("not supported") {
        return "this kernel does not support it (too old for this program type or attach point)".into();
    }
    "see the kernel's message above".into()
}

#[cfg(test)]
mod tests {
    use super::*;

    const EPERM: &str = "Operation not permitted (os error 1): prog 'tv_rto_timer': BPF program load failed";

    #[test]
    fn refusals_are_explained_by_capabilities_lockdown_or_the_kernels_age() {
        let all = caps::ALL;
        let no_net = [Cap::Bpf, Cap::Perfmon, Cap::SysPtrace];
        assert!(reason_given("sockops RTO_CB (cgroup-v2 root)", EPERM, &no_net, None)
            .starts_with("CAP_NET_ADMIN is missing"));
        assert_eq!(reason_given("fentry/x", EPERM, &[Cap::NetAdmin], None), "CAP_BPF, CAP_PERFMON missing");
        assert_eq!(
            reason_given("fentry/x", EPERM, &all, Some("integrity")),
            "EPERM: kernel lockdown (integrity) forbids it"
        );
        assert!(reason_given("fexit/x", EPERM, &all, None).contains("BPF trampolines"));
        let old = "libbpf: prog 'tv_mark_lost': failed to find kernel BTF type ID of 'tcp_mark_skb_lost': -3 (No such process)";
        assert!(reason_given("fentry/tcp_mark_skb_lost", old, &all, None).starts_with("not in this kernel"));
        let verifier = "Permission denied (os error 13): verifier: invalid mem access";
        assert_eq!(reason_given("tp_btf/x", verifier, &all, None), "the verifier refused it on this kernel");
    }
}
