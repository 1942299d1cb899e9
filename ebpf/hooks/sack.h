/* sack.h: per-ACK scoreboard samples: fexit/tcp_sacktag_write_queue, else tp_btf/tcp_probe joined. */
#ifndef TV_SACK_H
#define TV_SACK_H

#include "fill.h"

static __always_inline void tv_emit_sample(struct sock *sk, struct tcp_sock *tp, __u64 cookie, __u64 ts,
					   __u32 ack, __u32 *blk, __u8 nsack, __u8 src, __u8 flags)
{
	struct tv_sample *s = bpf_ringbuf_reserve(&tv_events, sizeof(*s), 0);
	if (!s) {
		tv_count(TV_ST_RB_FULL);
		return;
	}
	tv_fill_hdr(&s->h, sk, cookie, TV_K_SAMPLE, sizeof(*s), ts);
	tv_fill_sample(s, tp);
	s->ack_seq = ack;
#pragma unroll
	for (int i = 0; i < 2 * TV_MAX_SACK; i++)
		s->sack[i] = blk[i];
	s->nsack = nsack;
	s->src = src;
	/* A first block below the cumulative ACK is a D-SACK (RFC 2883). */
	if (nsack && (int)(blk[1] - ack) <= 0)
		flags |= TV_SF_DSACK;
	s->flags = flags;
	s->_pad = 0;
	tv_submit(s);
	tv_count(TV_ST_SAMPLES);
}

/* The tail of a record that carries no SACK blocks: from src, with these flags. */
static __always_inline void tv_no_blocks(struct tv_sample *s, __u8 src, __u8 flags)
{
	for (int i = 0; i < 2 * TV_MAX_SACK; i++)
		s->sack[i] = 0;
	s->nsack = 0;
	s->src = src;
	s->flags = flags;
	s->_pad = 0;
}

/* What an ACK of everything sent leaves waiting (TV_DRAIN_*), and the window it advertises: the
 * two facts that tell a stalled receiver (window closed, data waiting) from an idle sender
 * (nothing waiting) once the pipe is empty. The header is read only when data waits. */
static __always_inline __u8 tv_drain_class(struct tcp_sock *tp, const struct sk_buff *skb, __u32 *wnd)
{
	*wnd = tp->snd_wnd;
	if (tp->write_seq == tp->snd_nxt)
		return 0;
	unsigned char *head = BPF_CORE_READ(skb, head);
	__u16 thoff = BPF_CORE_READ(skb, transport_header);
	__be16 w;
	if (bpf_probe_read_kernel(&w, sizeof(w), head + thoff + 14)) {
		tv_count(TV_ST_OPT_READ_FAIL);
		return TV_DRAIN_UNSENT;
	}
	*wnd = (__u32)bpf_ntohs(w) << ((tv_opt_word(tp) >> 8) & 0xf);
	return *wnd < tp->mss_cache ? TV_DRAIN_UNSENT | TV_DRAIN_WND_CLOSED : TV_DRAIN_UNSENT;
}

/* The state an ACK of everything outstanding leaves behind, reported before tcp_ack() runs: once
 * per sample interval (`due`: the interval since the last record has passed), and at once whenever
 * what it leaves waiting changes (data waiting or not, window open or closed), so the last ACK
 * before a silence is always known. A connection whose every ACK empties the pipe (a bursty or
 * cwnd-limited trickle) gets no other sample, so the interval must bring one. */
static __always_inline void tv_report_drained(struct sock *sk, struct tcp_sock *tp, struct tv_sk *st,
					      const struct sk_buff *skb, struct tcp_skb_cb *cb, __u64 jnow,
					      int due)
{
	__u32 wnd;
	__u8 class = tv_drain_class(tp, skb, &wnd);
	if (st->drained_sent && st->drained_class == class && !due)
		return;
	st->drained_sent = 1;
	st->drained_class = class;
	st->last_sample_j = jnow;
	struct tv_sample *s = bpf_ringbuf_reserve(&tv_events, sizeof(*s), 0);
	if (!s) {
		tv_count(TV_ST_RB_FULL);
		return;
	}
	tv_fill_hdr(&s->h, sk, bpf_get_socket_cookie(sk), TV_K_SAMPLE, sizeof(*s), bpf_ktime_get_ns());
	tv_fill_sample(s, tp);
	__u32 ack = cb->ack_seq;
	s->bytes_acked += ack - s->snd_una;
	s->write_queue -= ack - s->snd_una;
	s->snd_una = ack;
	s->ack_seq = ack;
	s->snd_wnd = wnd;
	s->packets_out = s->lost_out = s->sacked_out = s->retrans_out = s->in_flight = 0;
	tv_no_blocks(s, TV_SRC_PROBE, TV_SF_DRAINED);
	tv_submit(s);
	tv_count(TV_ST_SAMPLES);
}

/* Rounds of a bulk sender, seen on every ACK (tcp_probe runs before tcp_ack()): an ACK at or
 * beyond round_end, snd_nxt when the current round began, starts the next round. For members of a
 * bulk group (tv_phase, kept by the daemon) on a path of at least phase_min_srtt_us, that ACK's
 * time is reported at once: where in the group's RTT each stream's data leaves (ACK-clocked, a
 * stream sends as its ACKs arrive). Per ACK this is one compare; the map lookup and the record
 * happen once per round. */
static __always_inline void tv_round(struct sock *sk, struct tcp_sock *tp, struct tv_sk *st,
				     struct tcp_skb_cb *cb, struct tv_config *cfg)
{
	__u32 ack = cb->ack_seq;
	if (st->round_on && (__s32)(ack - st->round_end) < 0)
		return;
	__u8 first = !st->round_on;
	st->round_on = 1;
	st->round_end = tp->snd_nxt;
	if (first || !cfg->phase_min_srtt_us || (tp->srtt_us >> 3) < cfg->phase_min_srtt_us)
		return;
	__u64 cookie = bpf_get_socket_cookie(sk);
	if (!bpf_map_lookup_elem(&tv_phase, &cookie))
		return;
	struct tv_sample *s = bpf_ringbuf_reserve(&tv_events, sizeof(*s), 0);
	if (!s) {
		tv_count(TV_ST_RB_FULL);
		return;
	}
	tv_fill_hdr(&s->h, sk, cookie, TV_K_SAMPLE, sizeof(*s), bpf_ktime_get_ns());
	tv_fill_sample(s, tp);
	/* The state after the previous ACK, moved on by this one's cumulative ACK. */
	if ((__s32)(ack - s->snd_una) > 0) {
		s->bytes_acked += ack - s->snd_una;
		s->write_queue -= ack - s->snd_una;
		s->snd_una = ack;
	}
	s->ack_seq = ack;
	tv_no_blocks(s, TV_SRC_PROBE, TV_SF_ROUND);
	tv_submit(s);
	tv_count(TV_ST_SAMPLES);
}

/* Whether this connection gets a sample for the current ACK. */
static __always_inline int tv_sample_due(struct tv_sk *st, struct tv_config *cfg, struct tcp_sock *tp, __u64 jnow)
{
	if (st->selected)
		return 1;
	if (!cfg->bulk_interval_ns || !tv_interval_passed(st, cfg, jnow))
		return 0;
	return tp->bytes_acked >= cfg->bulk_min_bytes;
}

static __always_inline void tv_emit_ca(struct sock *sk, struct tcp_sock *tp, __u64 cookie, __u8 old, __u8 new,
				       __u64 now)
{
	struct tv_ca_state *e = bpf_ringbuf_reserve(&tv_events, sizeof(*e), 0);
	if (!e) {
		tv_count(TV_ST_RB_FULL);
		return;
	}
	tv_fill_hdr(&e->h, sk, cookie, TV_K_CA_STATE, sizeof(*e), now);
	e->old_state = old;
	e->new_state = new;
	e->_pad = 0;
	e->cwnd = tp->snd_cwnd;
	e->ssthresh = tp->snd_ssthresh;
	e->high_seq = tp->high_seq;
	e->snd_una = tp->snd_una;
	e->snd_nxt = tp->snd_nxt;
	e->packets_out = tp->packets_out;
	e->lost_out = tp->lost_out;
	e->sacked_out = tp->sacked_out;
	e->retrans_out = tp->retrans_out;
	e->srtt_us = tp->srtt_us >> 3;
	e->rack_rtt_us = tp->rack.rtt_us;
	e->min_rtt_us = tp->rtt_min.s[0].v;
	e->_pad2 = 0;
	tv_submit(e);
	tv_count(TV_ST_EVENTS);
}

/* Emit the ACK whose blocks wait for the post-ACK state when no next ACK will bring it: the
 * connection went quiet (a snapshot) or left ESTABLISHED, after which tcp_probe is not called. */
static __always_inline void tv_flush_pending(struct sock *sk, struct tcp_sock *tp, struct tv_sk *st, __u64 cookie)
{
	if (!st->pending)
		return;
	tv_emit_sample(sk, tp, cookie, st->pending_ts, st->pending_ack, st->pending_sack, st->pending_nsack,
		       TV_SRC_FLUSH, st->selected ? TV_SF_SELECTED : 0);
	st->pending = 0;
	st->drained_sent = 0;
}

/* The state the last ACK left, for a look: on a path shorter than a clock tick the per-ACK
 * drained-pipe check runs once per tick, so the ACK that emptied the pipe last may not have been
 * checked. Only when an ACK of the tick of the last check (drain_j) went unchecked and no ACK with
 * data in flight came after it (drain_skip): an ACK of a later tick with the pipe emptied was
 * checked. ACKs with nothing in flight since (a window update, a zero-window probe's answer)
 * empty no pipe and leave drain_skip set: the first probe's answer comes an RTO after the window
 * closed, long before a look of a quiet connection. When what waits then differs from the last
 * drained record sent, fills `s` (dated at the tick of the unchecked ACK) and returns what waits
 * (TV_DRAIN_*) | 0x80 for tv_write_drained. */
static __always_inline int tv_flush_drained(struct sock *sk, struct tcp_sock *tp, struct tv_sk *st,
					    struct tv_config *cfg, __u64 cookie, __u64 now, struct tv_sample *s)
{
	if (st->selected || !cfg->bulk_interval_ns || !st->drain_skip || tp->snd_una != tp->snd_nxt ||
	    tp->bytes_acked < cfg->bulk_min_bytes || BPF_CORE_READ(sk, __sk_common.skc_state) != TCP_ESTABLISHED)
		return 0;
	__u8 class = 0;
	if (tp->write_seq != tp->snd_nxt)
		class = tp->snd_wnd < tp->mss_cache ? TV_DRAIN_UNSENT | TV_DRAIN_WND_CLOSED : TV_DRAIN_UNSENT;
	if (st->drained_sent && st->drained_class == class)
		return 0;
	__u64 age = (__u64)tv_jiffies_to_us((__u32)bpf_jiffies64() - st->drain_j) * 1000;
	tv_fill_hdr(&s->h, sk, cookie, TV_K_SAMPLE, sizeof(*s), now > age ? now - age : now);
	tv_fix_port(&s->h, st);
	tv_fill_sample(s, tp);
	s->ack_seq = tp->snd_una;
	tv_no_blocks(s, TV_SRC_FLUSH, TV_SF_DRAINED);
	return class | 0x80;
}

/* Write what tv_flush_drained found to an iterator's output, before the socket's snapshot.
 * Returns -1 when the output refused it (a full page: the kernel shows the socket again). */
static __always_inline int tv_write_drained(struct seq_file *seq, struct sock *sk, struct tcp_sock *tp,
					    struct tv_sk *st, struct tv_config *cfg, __u64 cookie, __u64 now)
{
	struct tv_sample d;
	int flushed = tv_flush_drained(sk, tp, st, cfg, cookie, now, &d);
	if (!flushed)
		return 0;
	if (bpf_seq_write(seq, &d, sizeof(d))) {
		tv_count(TV_ST_SEQ_WRITE_FAIL);
		return -1;
	}
	st->drained_sent = 1;
	st->drained_class = flushed & 0x7f;
	st->drain_skip = 0;
	tv_count(TV_ST_SAMPLES);
	return 0;
}

/* Fallback (every kernel with tp_btf, 4.16+; SACK parsing needs 5.5+ for bpf_probe_read_kernel).
 * tcp_probe fires before tcp_ack(): the socket still holds the state after the previous ACK.
 * So the SACK blocks of ACK n are kept in sk_storage and emitted with the state read when
 * ACK n+1 arrives (or a snapshot or the end of ESTABLISHED flushes them) — post-ACK state, one
 * ACK later. */
SEC("tp_btf/tcp_probe")
int BPF_PROG(tv_tcp_probe, struct sock *sk, const struct sk_buff *skb)
{
	struct tv_config *cfg = tv_config();
	if (!cfg)
		return 0;
	struct tv_sk *st = bpf_sk_storage_get(&tv_socks, sk, 0, BPF_SK_STORAGE_GET_F_CREATE);
	if (!st) {
		tv_count(TV_ST_STORAGE_FAIL);
		return 0;
	}
	tv_touch(sk, st);
	/* Fast path for the common case: an unselected connection between bulk samples. */
	__u64 jnow = bpf_jiffies64();
	if (!st->selected && !st->pending && st->filter_gen == cfg->filter_gen && !cfg->ca_from_probe) {
		if (!cfg->bulk_interval_ns)
			return 0;
		if (!tv_interval_passed(st, cfg, jnow)) {
			/* A direct load (skb is a trusted BTF pointer here), not a probe read:
			 * on a long path this runs on every ACK between samples. */
			struct tcp_skb_cb *cb = (struct tcp_skb_cb *)&skb->cb[0];
			/* One drained-pipe check per clock tick once an emptied pipe left data
			 * waiting: on a path shorter than a tick (loopback, a LAN) the pipe empties
			 * on most ACKs, and checking each cost a CPU-bound transfer about 3 % of its
			 * rate. A path of a tick or longer cannot empty its pipe twice in one tick,
			 * so nothing it reports is skipped; on a shorter one the look reports the
			 * state the last ACK left (tv_flush_drained) and the stop detector looks
			 * before it trusts an ACK's report alone. Rounds are still seen per ACK. */
			int round_due = !st->round_on || (__s32)(cb->ack_seq - st->round_end) >= 0;
			int checked = st->drain_j == (__u32)jnow;
			if (checked && !round_due) {
				st->drain_skip = 1;
				return 0;
			}
			/* An ACK that empties the pipe may be the last one for a while: report the
			 * state it leaves now, or a quiet sender would look stopped. Once per sample
			 * unless what waits changes: over veth every sixth ACK drains the pipe, and a
			 * record each time was per-ACK work for the daemon. */
			struct tcp_sock *t = bpf_skc_to_tcp_sock(sk);
			if (!t)
				return 0;
			/* Nothing in flight (a receiver's data segment, a window probe's answer, or
			 * drained by an earlier ACK) or not bulk: nothing new to report. */
			if (t->snd_una == t->snd_nxt || t->bytes_acked < cfg->bulk_min_bytes)
				return 0;
			tv_round(sk, t, st, cb, cfg);
			/* An ACK with data in flight in a later tick: checked below if it empties the
			 * pipe, and the pipe is not empty if it does not. */
			st->drain_skip = checked;
			if (checked || cb->ack_seq != t->snd_nxt)
				return 0;
			tv_report_drained(sk, t, st, skb, cb, jnow, 0);
			/* Nothing waiting (the sender idle) is checked again on the next ACK: data the
			 * application writes within the tick may meet a closed window. */
			if (st->drained_class)
				st->drain_j = (__u32)jnow;
			return 0;
		}
	}
	struct tcp_sock *tp = bpf_skc_to_tcp_sock(sk);
	if (!tp)
		return 0;
	__u64 cookie = bpf_get_socket_cookie(sk);
	__u64 now = bpf_ktime_get_ns();

	if (cfg->ca_from_probe) {
		/* Before 5.19 there is no tcp_cong_state_set tracepoint. */
		__u8 ca = tv_ca_state_of(tp);
		if (ca != st->last_ca) {
			tv_emit_ca(sk, tp, cookie, st->last_ca, ca, now);
			st->last_ca = ca;
		}
	}
	tv_refresh_selection(st, cfg, sk, cookie);
	if (st->pending) {
		tv_emit_sample(sk, tp, cookie, st->pending_ts, st->pending_ack, st->pending_sack, st->pending_nsack,
			       TV_SRC_PROBE, st->selected ? TV_SF_SELECTED : 0);
		st->pending = 0;
		st->last_sample_j = jnow;
		st->drained_sent = 0;
	}
	/* An ACK that empties the pipe may be the last for a while: its state now, not at the next. */
	struct tcp_skb_cb *cb = (struct tcp_skb_cb *)&skb->cb[0];
	if (tp->snd_una != tp->snd_nxt) {
		st->drain_skip = 0;
		if (st->selected || tp->bytes_acked >= cfg->bulk_min_bytes)
			tv_round(sk, tp, st, cb, cfg);
	}
	if (!st->selected && cb->ack_seq == tp->snd_nxt && tp->snd_una != tp->snd_nxt &&
	    tp->bytes_acked >= cfg->bulk_min_bytes) {
		tv_report_drained(sk, tp, st, skb, cb, jnow, cfg->bulk_interval_ns && tv_interval_passed(st, cfg, jnow));
		return 0;
	}
	/* Nothing outstanding (a data segment to a receiver, not an ACK of ours) or not bulk yet:
	 * back to the fast path until the next interval, or every segment would come this way. */
	if (tp->snd_una == tp->snd_nxt || (!st->selected && tp->bytes_acked < cfg->bulk_min_bytes)) {
		st->last_sample_j = jnow;
		return 0;
	}
	if (!tv_sample_due(st, cfg, tp, jnow))
		return 0;

	unsigned char *head = BPF_CORE_READ(skb, head);
	__u16 thoff = BPF_CORE_READ(skb, transport_header);
	unsigned char *th = head + thoff;
	__u8 hdr[20];
	if (bpf_probe_read_kernel(hdr, sizeof(hdr), th)) {
		tv_count(TV_ST_OPT_READ_FAIL);
		return 0;
	}
	__u32 ack;
	__builtin_memcpy(&ack, &hdr[8], 4);
	st->pending_ack = bpf_ntohl(ack);
	st->pending_nsack = 0;
	__u32 optlen = (hdr[12] >> 4) * 4;
	optlen = optlen > 20 ? optlen - 20 : 0;
	/* Walk at most 40 option bytes: NOPs, timestamps and the SACK option. A fixed
	 * walk keeps the verifier's work small (kinds other than SACK are skipped by length). */
	__u8 opts[40];
	if (optlen && !bpf_probe_read_kernel(opts, sizeof(opts), th + 20)) {
		__u32 off = 0;
#pragma unroll
		for (int i = 0; i < 12; i++) {
			if (off >= optlen || off >= 38)
				break;
			__u8 kind = opts[off];
			if (kind == 0)
				break;
			if (kind == 1) {
				off++;
				continue;
			}
			if (kind == 5) {
				st->pending_nsack = tv_read_sack_option(th + 20 + off, st->pending_sack);
				break;
			}
			__u8 len = opts[off + 1];
			if (len < 2)
				break;
			off += len;
		}
	}
	if (cfg->fexit_sacktag && st->pending_nsack)
		return 0; /* fexit/tcp_sacktag_write_queue reports this ACK exactly */
	if (!st->pending_nsack) {
#pragma unroll
		for (int i = 0; i < 2 * TV_MAX_SACK; i++)
			st->pending_sack[i] = 0;
	}
	st->pending = 1;
	st->pending_ts = now;
	return 0;
}

/* Preferred (5.5+ where fexit loads): the exact point paper 000 patched. At exit, sacked_out,
 * lost_out/retrans_out of newly SACKed segments and snd_una are updated; packets_out, RACK
 * marking, cwnd and CA state are not yet (tcp_ack() does them after). */
SEC("fexit/tcp_sacktag_write_queue")
int BPF_PROG(tv_sacktag_exit, struct sock *sk, const struct sk_buff *ack_skb, u32 prior_snd_una,
	     struct tcp_sacktag_state *state, int ret)
{
	struct tv_config *cfg = tv_config();
	if (!cfg)
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
	__u64 cookie = bpf_get_socket_cookie(sk);
	__u64 now = bpf_ktime_get_ns();
	__u64 jnow = bpf_jiffies64();
	tv_refresh_selection(st, cfg, sk, cookie);
	if (!tv_sample_due(st, cfg, tp, jnow))
		return 0;
	struct tcp_skb_cb *cb = (struct tcp_skb_cb *)&ack_skb->cb[0];
	__u8 off = BPF_CORE_READ(cb, sacked); /* offset of the SACK option from the TCP header */
	__u32 ack = BPF_CORE_READ(cb, ack_seq);
	unsigned char *head = BPF_CORE_READ(ack_skb, head);
	__u16 thoff = BPF_CORE_READ(ack_skb, transport_header);
	__u32 blk[2 * TV_MAX_SACK] = {};
	__u8 n = off ? tv_read_sack_option(head + thoff + off, blk) : 0;
	tv_emit_sample(sk, tp, cookie, now, ack, blk, n, TV_SRC_SACKTAG, st->selected ? TV_SF_SELECTED : 0);
	st->last_sample_j = jnow;
	st->drained_sent = 0;
	return 0;
}

#endif
