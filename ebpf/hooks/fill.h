/* fill.h: copy a tcp_sock's scoreboard and snapshot fields into ABI records (CO-RE reads). */
#ifndef TV_FILL_H
#define TV_FILL_H

#include "common.h"

/* The option bits share one u16 after rcv_tsecr (stable layout since 4.18, checked against
 * tcp_info on 6.18): saw_tstamp:1 tstamp_ok:1 dsack:1 wscale_ok:1 sack_ok:3 smc_ok:1
 * snd_wscale:4 rcv_wscale:4. Read as a word: the bitfield CO-RE macros gave wrong bits here. */
static __always_inline __u16 tv_opt_word(struct tcp_sock *tp)
{
	__u16 w = 0;
	bpf_probe_read_kernel(&w, sizeof(w),
			      (void *)&tp->rx_opt + bpf_core_field_offset(struct tcp_options_received, rcv_tsecr) + 4);
	return w;
}

static __always_inline void tv_fill_sample(struct tv_sample *s, struct tcp_sock *tp)
{
	s->snd_una = tp->snd_una;
	s->snd_nxt = tp->snd_nxt;
	s->high_seq = tp->high_seq;
	s->cwnd = tp->snd_cwnd;
	s->ssthresh = tp->snd_ssthresh;
	s->packets_out = tp->packets_out;
	s->lost_out = tp->lost_out;
	s->sacked_out = tp->sacked_out;
	s->retrans_out = tp->retrans_out;
	s->in_flight = s->packets_out - s->lost_out - s->sacked_out + s->retrans_out;
	s->srtt_us = tp->srtt_us >> 3;
	s->rto_us = tv_jiffies_to_us(tp->inet_conn.icsk_rto);
	s->mss = tp->mss_cache;
	s->delivered = tp->delivered;
	s->total_retrans = tp->total_retrans;
	s->snd_wnd = tp->snd_wnd;
	s->write_queue = tp->write_seq - tp->snd_una;
	s->rate_delivered = tp->rate_delivered;
	s->rate_interval_us = tp->rate_interval_us;
	s->bytes_acked = tp->bytes_acked;
	s->ca_state = tv_ca_state_of(tp);
}

/* Read up to four SACK blocks from a SACK option at `opt` (kind 5 expected). */
static __always_inline __u8 tv_read_sack_option(const unsigned char *opt, __u32 *blk)
{
	__u8 buf[2 + 8 * TV_MAX_SACK];
	if (bpf_probe_read_kernel(buf, sizeof(buf), opt)) {
		tv_count(TV_ST_OPT_READ_FAIL);
		return 0;
	}
	if (buf[0] != 5 || buf[1] < 10)
		return 0;
	__u8 n = (buf[1] - 2) / 8;
	if (n > TV_MAX_SACK)
		n = TV_MAX_SACK;
#pragma unroll
	for (int b = 0; b < 2 * TV_MAX_SACK; b++) {
		__u32 v;
		__builtin_memcpy(&v, &buf[2 + 4 * b], 4);
		blk[b] = b < 2 * n ? bpf_ntohl(v) : 0;
	}
	return n;
}

/* Which knob holds the buffers. sk_userlocks was a 4-bit field beside sk_padding until 5.14 (a
 * whole u8 since): the probed bitfield read fits both. The autotuning ceilings are per network
 * namespace since 4.15 (net->ipv4.sysctl_tcp_rmem/wmem); before, global sysctls: 0, unknown. */
static __always_inline void tv_fill_buffer_knobs(struct tv_snap *s, struct sock *sk)
{
	s->userlocks = BPF_CORE_READ_BITFIELD_PROBED(sk, sk_userlocks) & (TV_LOCK_SNDBUF | TV_LOCK_RCVBUF);
	struct net *net = BPF_CORE_READ(sk, __sk_common.skc_net.net);
	int rmem[3] = {}, wmem[3] = {};
	if (net && bpf_core_field_exists(net->ipv4.sysctl_tcp_rmem)) {
		BPF_CORE_READ_INTO(&rmem, net, ipv4.sysctl_tcp_rmem);
		BPF_CORE_READ_INTO(&wmem, net, ipv4.sysctl_tcp_wmem);
	}
	s->rmem_max = rmem[2] > 0 ? rmem[2] : 0;
	s->wmem_max = wmem[2] > 0 ? wmem[2] : 0;
	__builtin_memset(s->_pad2, 0, sizeof(s->_pad2));
}

static __always_inline void tv_fill_snap(struct tv_snap *s, struct tcp_sock *tp, struct tv_sk *st)
{
	struct sock *sk = (struct sock *)tp;
	struct inet_connection_sock *icsk = &tp->inet_conn;

	s->state = BPF_CORE_READ(sk, __sk_common.skc_state);
	s->ca_state = tv_ca_state_of(tp);
	__u16 w = tv_opt_word(tp);
	__u8 opts = 0;
	if (w & 0x0070)
		opts |= TV_OPT_SACK;
	if (w & 0x0008)
		opts |= TV_OPT_WSCALE;
	if (w & 0x0002)
		opts |= TV_OPT_TS;
	if (tp->ecn_flags & 1)
		opts |= TV_OPT_ECN;
	s->opts = opts;
	s->snd_wscale = (w >> 8) & 0xf;
	s->rcv_wscale = (w >> 12) & 0xf;
	s->app_limited = BPF_CORE_READ_BITFIELD_PROBED(tp, rate_app_limited);
	__u8 ctype = BPF_CORE_READ_BITFIELD_PROBED(tp, chrono_type);
	s->chrono_type = ctype;
	/* Which timer is armed, and window probes unanswered: a probe0 timer with nothing in flight
	 * is the kernel's own word that the receiver's window is closed. */
	s->timer = BPF_CORE_READ(icsk, icsk_pending);
	s->probes_out = BPF_CORE_READ(icsk, icsk_probes_out);
	const struct tcp_congestion_ops *ops = BPF_CORE_READ(icsk, icsk_ca_ops);
	if (ops)
		bpf_probe_read_kernel_str(s->cc, sizeof(s->cc), ops->name);
	else
		s->cc[0] = 0;

	s->cwnd = tp->snd_cwnd;
	s->ssthresh = tp->snd_ssthresh;
	s->srtt_us = tp->srtt_us >> 3;
	s->min_rtt_us = BPF_CORE_READ(tp, rtt_min.s[0].v);
	s->rto_us = tv_jiffies_to_us(icsk->icsk_rto);
	s->mss = tp->mss_cache;
	s->snd_wnd = tp->snd_wnd;
	s->rcv_wnd = tp->rcv_wnd;
	s->packets_out = tp->packets_out;
	s->lost_out = tp->lost_out;
	s->sacked_out = tp->sacked_out;
	s->retrans_out = tp->retrans_out;
	s->snd_una = tp->snd_una;
	s->snd_nxt = tp->snd_nxt;
	s->write_queue = tp->write_seq - tp->snd_una;
	s->unsent = tp->write_seq - tp->snd_nxt;
	s->recv_queue = tp->rcv_nxt - tp->copied_seq;
	s->sndbuf = BPF_CORE_READ(sk, sk_sndbuf);
	s->rcvbuf = BPF_CORE_READ(sk, sk_rcvbuf);
	tv_fill_buffer_knobs(s, sk);
	s->delivered = tp->delivered;
	s->total_retrans = tp->total_retrans;
	s->rate_delivered = tp->rate_delivered;
	s->rate_interval_us = tp->rate_interval_us;
	s->retransmits = icsk->icsk_retransmits;
	s->backoff = icsk->icsk_backoff;
	/* total_rto* appeared in 6.7; older kernels report 0. */
	if (bpf_core_field_exists(tp->total_rto)) {
		s->total_rto = BPF_CORE_READ(tp, total_rto);
		s->total_rto_time_ms = BPF_CORE_READ(tp, total_rto_time);
	} else {
		s->total_rto = 0;
		s->total_rto_time_ms = 0;
	}
	s->last_ack_age_us = tv_jiffies_to_us((__u32)bpf_jiffies64() - tp->rcv_tstamp);
	s->bytes_acked = tp->bytes_acked;
	s->bytes_received = tp->bytes_received;
	s->bytes_sent = tp->bytes_sent;
	s->bytes_retrans = tp->bytes_retrans;

	/* Chrono stats as tcp_get_info_chrono_stats() reports them. */
	__u32 stat[3];
	BPF_CORE_READ_INTO(&stat, tp, chrono_stat);
	if (ctype >= 1 && ctype <= 3) {
		__u32 start = tp->chrono_start;
		__u32 now = (__u32)bpf_jiffies64();
		stat[ctype - 1] += now - start;
	}
	s->rwnd_limited_us = (__u64)tv_jiffies_to_us(stat[1]);
	s->sndbuf_limited_us = (__u64)tv_jiffies_to_us(stat[2]);
	s->busy_us = (__u64)tv_jiffies_to_us(stat[0]) + s->rwnd_limited_us + s->sndbuf_limited_us;

	if (st) {
		s->lost_rtx = st->lost_rtx;
		s->rtos = st->rtos;
		s->retrans_segs = st->retrans_segs;
		s->tgid = st->tgid;
		s->uid = st->uid;
		s->tgid_cgroup = st->cgroup_id;
		__builtin_memcpy(s->comm, st->comm, TV_COMM_LEN);
	} else {
		s->lost_rtx = 0;
		s->rtos = 0;
		s->retrans_segs = 0;
		s->tgid = 0;
		s->uid = 0;
		s->tgid_cgroup = 0;
		__builtin_memset(s->comm, 0, TV_COMM_LEN);
	}
}

#endif
