/* retrans.h: retransmissions, lost retransmissions and the delay between a segment's resends. */
#ifndef TV_RETRANS_H
#define TV_RETRANS_H

#include "fill.h"

/* The namespace's net.ipv4.tcp_mtu_probing: a u8 since 5.13, an int before; the probed read takes
 * the field's own size and offset. */
static __always_inline __u8 tv_mtu_probing(struct tcp_sock *tp)
{
	struct net *net = BPF_CORE_READ((struct sock *)tp, __sk_common.skc_net.net);
	if (!net)
		return 0;
	struct netns_ipv4 *n4 = &net->ipv4;
	return BPF_CORE_READ_BITFIELD_PROBED(n4, sysctl_tcp_mtu_probing);
}

static __always_inline void tv_fill_retrans(struct tv_retrans *e, struct tcp_sock *tp, __u32 seq, __u32 end_seq,
					    __u16 segs, __u8 sacked)
{
	e->seq = seq;
	e->end_seq = end_seq;
	e->segs = segs;
	e->sacked = sacked;
	e->ca_state = tv_ca_state_of(tp);
	e->cwnd = tp->snd_cwnd;
	e->ssthresh = tp->snd_ssthresh;
	e->packets_out = tp->packets_out;
	e->lost_out = tp->lost_out;
	e->sacked_out = tp->sacked_out;
	e->retrans_out = tp->retrans_out;
	e->snd_una = tp->snd_una;
	e->mtu_probing = tv_mtu_probing(tp);
	e->_pad = 0;
}

static __always_inline int tv_on_retrans(struct sock *sk, const struct sk_buff *skb)
{
	struct tcp_sock *tp = bpf_skc_to_tcp_sock(sk);
	if (!tp)
		return 0;
	struct tv_config *cfg = tv_config();
	if (!cfg)
		return 0;
	struct tv_sk *st = bpf_sk_storage_get(&tv_socks, sk, 0, BPF_SK_STORAGE_GET_F_CREATE);
	if (!st) {
		tv_count(TV_ST_STORAGE_FAIL);
		return 0;
	}
	tv_touch(sk, st);
	struct tcp_skb_cb *cb = (struct tcp_skb_cb *)&skb->cb[0];
	__u8 sacked = BPF_CORE_READ(cb, sacked);
	__u32 seq = BPF_CORE_READ(cb, seq);
	__u32 end_seq = BPF_CORE_READ(cb, end_seq);
	__u16 segs = BPF_CORE_READ(cb, tcp_gso_segs);
	if (!segs)
		segs = 1;
	__u64 cookie = bpf_get_socket_cookie(sk);
	__u64 now = bpf_ktime_get_ns();

	/* TCPCB_RETRANS (0x92) is ORed in after every successful retransmission and
	 * tcp_mark_skb_lost() clears only SACKED_RETRANS, so 0x10 marks a resend of a
	 * segment whose earlier retransmission was lost. */
	__u8 lost = (sacked & TV_REPAIRED) ? 1 : 0;
	struct tv_rtx_key k = {.cookie = cookie, .seq = seq};
	struct tv_rtx_val *v = bpf_map_lookup_elem(&tv_rtx, &k);
	__u64 since = 0;
	__u32 count = 1;
	if (v) {
		since = now - v->last_ns;
		count = v->count + 1;
		v->last_ns = now;
		v->count = count;
	} else {
		struct tv_rtx_val nv = {.last_ns = now, .count = 1};
		if (bpf_map_update_elem(&tv_rtx, &k, &nv, BPF_ANY))
			tv_count(TV_ST_RTX_MAP_FULL);
	}
	st->retrans_segs += segs;
	if (lost && !cfg->exact_lost_rtx)
		st->lost_rtx += segs;

	struct tv_retrans *e = bpf_ringbuf_reserve(&tv_events, sizeof(*e), 0);
	if (!e) {
		tv_count(TV_ST_RB_FULL);
		return 0;
	}
	tv_fill_hdr(&e->h, sk, cookie, TV_K_RETRANS, sizeof(*e), now);
	tv_fill_retrans(e, tp, seq, end_seq, segs, sacked);
	e->count = count;
	e->since_prev_ns = since;
	e->lost_retrans = lost;
	e->failed = 0;
	/* In CA Open a resend is a tail-loss probe (the kernel probes in no other state). */
	tv_submit_woken(e, e->ca_state == TCP_CA_Open);
	tv_count(TV_ST_EVENTS);
	return 0;
}

/* sockops RETRANS_CB runs where TcpRetransSegs counts, for every attempt that got that far; the
 * tracepoint reports the ones sent, so this reports the others (err != 0: refused in this host),
 * and the two together equal the kernel's counter. */
static __always_inline void tv_on_retrans_failed(struct bpf_sock_ops *skops, struct bpf_sock *bsk,
						 struct tcp_sock *tp)
{
	struct tv_sk *st = bpf_sk_storage_get(&tv_socks, bsk, 0, BPF_SK_STORAGE_GET_F_CREATE);
	if (!st) {
		tv_count(TV_ST_STORAGE_FAIL);
		return;
	}
	tv_touch(bsk, st);
	__u16 segs = skops->args[1] ? skops->args[1] : 1;
	st->retrans_segs += segs;
	struct tv_retrans *e = bpf_ringbuf_reserve(&tv_events, sizeof(*e), 0);
	if (!e) {
		tv_count(TV_ST_RB_FULL);
		return;
	}
	tv_fill_hdr(&e->h, (struct sock *)tp, bpf_get_socket_cookie(skops), TV_K_RETRANS, sizeof(*e),
		    bpf_ktime_get_ns());
	tv_fill_retrans(e, tp, skops->args[0], skops->args[0], segs, 0);
	e->count = 0;
	e->since_prev_ns = 0;
	e->lost_retrans = 0;
	e->failed = 1;
	tv_submit(e);
	tv_count(TV_ST_EVENTS);
}

/* Up to 6.16 the tracepoint fires only after a successful retransmission. */
SEC("tp_btf/tcp_retransmit_skb")
int BPF_PROG(tv_retrans_v1, struct sock *sk, const struct sk_buff *skb)
{
	return tv_on_retrans(sk, skb);
}

/* 6.17+ fires on every attempt and passes err: only err == 0 was sent. */
SEC("tp_btf/tcp_retransmit_skb")
int BPF_PROG(tv_retrans_v2, struct sock *sk, const struct sk_buff *skb, int err)
{
	if (err)
		return 0;
	return tv_on_retrans(sk, skb);
}

/* Preferred (5.10+, every loss detector goes through it): a segment already LOST and
 * SACKED_RETRANS that is marked lost again is exactly what TcpExtTCPLostRetransmit counts. */
SEC("fentry/tcp_mark_skb_lost")
int BPF_PROG(tv_mark_lost, struct sock *sk, struct sk_buff *skb)
{
	struct tcp_skb_cb *cb = (struct tcp_skb_cb *)&skb->cb[0];
	__u8 sacked = BPF_CORE_READ(cb, sacked);
	if ((sacked & TV_SACKED_ACKED) || (sacked & (TV_LOST | TV_SACKED_RETRANS)) != (TV_LOST | TV_SACKED_RETRANS))
		return 0;
	struct tcp_sock *tp = bpf_skc_to_tcp_sock(sk);
	if (!tp)
		return 0;
	struct tv_sk *st = bpf_sk_storage_get(&tv_socks, sk, 0, BPF_SK_STORAGE_GET_F_CREATE);
	if (!st) {
		tv_count(TV_ST_STORAGE_FAIL);
		return 0;
	}
	tv_touch(sk, st);
	__u16 segs = BPF_CORE_READ(cb, tcp_gso_segs);
	if (!segs)
		segs = 1;
	st->lost_rtx += segs;
	__u64 cookie = bpf_get_socket_cookie(sk);
	__u64 now = bpf_ktime_get_ns();
	__u32 seq = BPF_CORE_READ(cb, seq);
	struct tv_rtx_key k = {.cookie = cookie, .seq = seq};
	struct tv_rtx_val *v = bpf_map_lookup_elem(&tv_rtx, &k);

	struct tv_retrans *e = bpf_ringbuf_reserve(&tv_events, sizeof(*e), 0);
	if (!e) {
		tv_count(TV_ST_RB_FULL);
		return 0;
	}
	tv_fill_hdr(&e->h, sk, cookie, TV_K_LOST_RTX, sizeof(*e), now);
	tv_fill_retrans(e, tp, seq, BPF_CORE_READ(cb, end_seq), segs, sacked);
	e->count = v ? v->count : 0;
	e->since_prev_ns = v ? now - v->last_ns : 0; /* how long the lost retransmission was out */
	e->lost_retrans = 1;
	e->failed = 0;
	tv_submit(e);
	tv_count(TV_ST_EVENTS);
	return 0;
}

#endif
