/* snapshot.h: iter/tcp over the opener's network namespace: the start pass (or, where the look
 * cannot load, a snapshot of every connection every period). */
#ifndef TV_SNAPSHOT_H
#define TV_SNAPSHOT_H

#include "fill.h"
#include "sack.h"
#include "state.h"

/* 5.9+ (iterator), 5.15+ (lock_sock per socket, bpf_setsockopt allowed). */
SEC("iter/tcp")
int tv_iter(struct bpf_iter__tcp *ctx)
{
	struct sock_common *skc = ctx->sk_common;
	if (!skc)
		return 0;
	struct tcp_sock *tp = bpf_skc_to_tcp_sock(skc);
	if (!tp)
		return 0; /* time-wait and request socks */
	struct sock *sk = (struct sock *)tp;
	__u8 state = BPF_CORE_READ(sk, __sk_common.skc_state);
	if (state == TCP_LISTEN)
		return 0;
	__u64 cookie = bpf_get_socket_cookie(sk);
	__u64 now = bpf_ktime_get_ns();
	struct tv_sk *st = bpf_sk_storage_get(&tv_socks, sk, 0, BPF_SK_STORAGE_GET_F_CREATE);
	if (st)
		tv_flush_pending(sk, tp, st, cookie); /* quiet since its last sampled ACK */
	else
		tv_count(TV_ST_STORAGE_FAIL);
	/* Sockets older than the agent never passed ESTABLISHED_CB: ask for the callbacks here,
	 * keeping whatever other programs asked for. TCP_BPF_SOCK_OPS_CB_FLAGS is refused by
	 * older kernels; that only costs their RTOs. */
	if (state == TCP_ESTABLISHED) {
		int want = BPF_SOCK_OPS_RTO_CB_FLAG | BPF_SOCK_OPS_RETRANS_CB_FLAG;
		int have = BPF_CORE_READ(tp, bpf_sock_ops_cb_flags);
		if ((have & want) != want) {
			int flags = have | want;
			bpf_setsockopt(tp, SOL_TCP, TCP_BPF_SOCK_OPS_CB_FLAGS, &flags, sizeof(flags));
		}
	}
	struct tv_config *cfg = tv_config();
	if (cfg && cfg->look && st) {
		/* The start pass: what the look compares with from now on; the sockets with data
		 * outstanding (a stop may be under way) and the selected ones join the live set; the
		 * others are only reported to exist, in a state record. Run again on a retry (a full
		 * page), everything here gives the same result. */
		tv_baseline(st, sk, tp);
		tv_refresh_selection(st, cfg, sk, cookie);
		if ((st->selected || tp->write_seq != tp->snd_una) && !st->live)
			tv_join(sk, st);
		if (!st->selected) {
			struct tv_state e = {};
			tv_fill_hdr(&e.h, sk, cookie, TV_K_STATE, sizeof(e), now);
			e.old_state = state;
			e.new_state = state;
			if (bpf_seq_write(ctx->meta->seq, &e, sizeof(e)))
				tv_count(TV_ST_SEQ_WRITE_FAIL);
			else
				tv_count(TV_ST_EVENTS);
			return 0;
		}
	}
	if (st && cfg && tv_write_drained(ctx->meta->seq, sk, tp, st, cfg, cookie, now))
		return 0;
	__u32 zero = 0;
	struct tv_snap *s = bpf_map_lookup_elem(&tv_snap_scratch, &zero);
	if (!s)
		return 0;
	tv_fill_hdr(&s->h, sk, cookie, TV_K_SNAPSHOT, sizeof(*s), now);
	tv_fill_snap(s, tp, st);
	s->uid = ctx->uid;
	if (bpf_seq_write(ctx->meta->seq, s, sizeof(*s)))
		tv_count(TV_ST_SEQ_WRITE_FAIL);
	return 0;
}

#endif
