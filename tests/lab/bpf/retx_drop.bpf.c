// retx_drop.bpf.c: tc egress program for the lab router: drops retransmissions of the first
// TARGET_SEGS segments that get retransmitted, so that "a retransmission is lost again".
//
// What it drops, exactly (IPv4/TCP only, per flow = saddr,daddr,sport,dport):
//  - it remembers the highest end sequence (seq + payload length) seen on the flow;
//  - a segment with payload whose end sequence is <= that highest end is a retransmission;
//  - the first TARGET_SEGS distinct starting sequence numbers seen retransmitted become targets,
//    over all flows together (iperf3's control connection meets the random loss too, and a
//    budget per flow let its one retransmission make 21 targets of 20);
//  - each retransmission of a target (same starting seq) is dropped, at most DROPS_PER_SEG times
//    per target; later retransmissions of it pass (so the connection can finish);
//  - everything else (new data, pure ACKs, SYN/FIN without payload, retransmissions of
//    non-targets) passes.
// A retransmission re-cut at a different starting sequence is a different segment to it. The
// original loss must come from elsewhere (random loss, policer, tbf): this program only drops
// retransmissions. stats[] (see STAT_*) counts what it saw and did; userspace reads it by map id.
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/in.h>
#include <linux/tcp.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#ifndef TARGET_SEGS
#define TARGET_SEGS 10
#endif
#ifndef DROPS_PER_SEG
#define DROPS_PER_SEG 1
#endif

enum {
	STAT_DATA = 0,       // data segments seen (new or retransmitted)
	STAT_RETX = 1,       // retransmissions seen
	STAT_DROPPED = 2,    // retransmissions dropped
	STAT_TARGETS = 3,    // distinct segments targeted
	STAT_PASSED_RETX = 4,// retransmissions passed
	STAT_ERRORS = 5,     // map full / update failures
	STAT_MAX = 8,
};

struct flow_key {
	__u32 saddr;
	__u32 daddr;
	__u16 sport;
	__u16 dport;
};

struct flow_state {
	__u32 high_end;
};

struct seg_key {
	struct flow_key flow;
	__u32 seq;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, struct flow_key);
	__type(value, struct flow_state);
} retx_flows SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, struct seg_key);
	__type(value, __u32);
} retx_targets SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, STAT_MAX);
	__type(key, __u32);
	__type(value, __u64);
} retx_stats SEC(".maps");

/* Targets claimed so far, by every flow through this egress. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} retx_budget SEC(".maps");

static __always_inline void count(__u32 idx)
{
	__u64 *v = bpf_map_lookup_elem(&retx_stats, &idx);
	if (v)
		__sync_fetch_and_add(v, 1);
}

SEC("tc")
int retx_drop(struct __sk_buff *skb)
{
	void *data = (void *)(long)skb->data;
	void *end = (void *)(long)skb->data_end;
	struct ethhdr *eth = data;
	if ((void *)(eth + 1) > end || eth->h_proto != bpf_htons(ETH_P_IP))
		return TC_ACT_OK;
	struct iphdr *ip = (void *)(eth + 1);
	if ((void *)(ip + 1) > end || ip->protocol != IPPROTO_TCP)
		return TC_ACT_OK;
	__u32 ihl = ip->ihl * 4;
	if (ihl < sizeof(*ip))
		return TC_ACT_OK;
	struct tcphdr *tcp = (void *)ip + ihl;
	if ((void *)(tcp + 1) > end)
		return TC_ACT_OK;
	__u32 doff = tcp->doff * 4;
	__u32 tot = bpf_ntohs(ip->tot_len);
	if (tot <= ihl + doff)
		return TC_ACT_OK; /* no payload: ACK, SYN, FIN */
	__u32 payload = tot - ihl - doff;
	__u32 seq = bpf_ntohl(tcp->seq);
	__u32 seg_end = seq + payload;

	struct flow_key fk = {
		.saddr = ip->saddr, .daddr = ip->daddr, .sport = tcp->source, .dport = tcp->dest,
	};
	count(STAT_DATA);
	struct flow_state *st = bpf_map_lookup_elem(&retx_flows, &fk);
	if (!st) {
		struct flow_state init = { .high_end = seg_end };
		if (bpf_map_update_elem(&retx_flows, &fk, &init, BPF_NOEXIST))
			count(STAT_ERRORS);
		return TC_ACT_OK;
	}
	if ((__s32)(seg_end - st->high_end) > 0) {
		st->high_end = seg_end; /* new data */
		return TC_ACT_OK;
	}
	count(STAT_RETX);
	struct seg_key sk = { .flow = fk, .seq = seq };
	__u32 *drops = bpf_map_lookup_elem(&retx_targets, &sk);
	if (drops) {
		if (*drops < DROPS_PER_SEG) {
			__sync_fetch_and_add(drops, 1);
			count(STAT_DROPPED);
			return TC_ACT_SHOT;
		}
		count(STAT_PASSED_RETX);
		return TC_ACT_OK;
	}
	__u32 zero = 0;
	__u32 *targeted = bpf_map_lookup_elem(&retx_budget, &zero);
	if (targeted && *targeted < TARGET_SEGS && DROPS_PER_SEG > 0) {
		/* Claim a slot before taking it: two CPUs resending at once both saw room for the last
		 * one, and 21 segments were targeted instead of 20. */
		if (__sync_fetch_and_add(targeted, 1) >= TARGET_SEGS) {
			__sync_fetch_and_sub(targeted, 1);
			count(STAT_PASSED_RETX);
			return TC_ACT_OK;
		}
		__u32 one = 1;
		if (bpf_map_update_elem(&retx_targets, &sk, &one, BPF_NOEXIST)) {
			__sync_fetch_and_sub(targeted, 1);
			count(STAT_ERRORS);
			return TC_ACT_OK;
		}
		count(STAT_TARGETS);
		count(STAT_DROPPED);
		return TC_ACT_SHOT;
	}
	count(STAT_PASSED_RETX);
	return TC_ACT_OK;
}

char LICENSE[] SEC("license") = "GPL";
