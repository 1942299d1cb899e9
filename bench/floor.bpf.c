/* floor.bpf.c: the measuring floor for scripts/bench-datapath.sh: what an empty tp_btf/tcp_probe
 * program costs, and what each step of tcpvigil's fast path costs alone (storage lookup, clock,
 * jiffies) and together. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

struct {
	__uint(type, BPF_MAP_TYPE_SK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, __u64);
} floor_sk SEC(".maps");

SEC("tp_btf/tcp_probe")
int BPF_PROG(floor_empty, struct sock *sk, const struct sk_buff *skb)
{
	return 0;
}

SEC("tp_btf/tcp_probe")
int BPF_PROG(floor_storage, struct sock *sk, const struct sk_buff *skb)
{
	__u64 *v = bpf_sk_storage_get(&floor_sk, sk, 0, BPF_SK_STORAGE_GET_F_CREATE);
	if (v)
		*v = bpf_ktime_get_ns();
	return 0;
}

__u64 floor_sink;

SEC("tp_btf/tcp_probe")
int BPF_PROG(floor_lookup, struct sock *sk, const struct sk_buff *skb)
{
	__u64 *v = bpf_sk_storage_get(&floor_sk, sk, 0, BPF_SK_STORAGE_GET_F_CREATE);
	if (v)
		*v += 1;
	return 0;
}

SEC("tp_btf/tcp_probe")
int BPF_PROG(floor_clock, struct sock *sk, const struct sk_buff *skb)
{
	floor_sink = bpf_ktime_get_ns();
	return 0;
}

SEC("tp_btf/tcp_probe")
int BPF_PROG(floor_jiffies, struct sock *sk, const struct sk_buff *skb)
{
	floor_sink = bpf_jiffies64();
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
