/* snapshot.h: iter/tcp: one tv_snap per connection of the opener's network namespace. */
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
