/* look.h: the periodic look at the sockets that moved lately (the live set), every namespace at once. */
#ifndef TV_LOOK_H
#define TV_LOOK_H

#include "fill.h"
#include "sack.h"

/* 5.9+ (iterator over a socket-storage map), 5.11+ (socket storage in tracing programs, delete
 * included), 5.12+ (socket cookie in tracing programs). Visits the sockets of tv_live only,
 * whatever their network namespace: no setns, no walk of the kernel's hash, so an idle socket
 * or an empty namespace costs nothing per look. Nothing is locked: the fields are read as they
 * are, as /proc/net/tcp reads them.
 * A socket is reported when it moved since the last look (sent, acknowledged, received or read
 * something, or changed state), while anything is outstanding (a stopped connection sends no
 * ACKs: only looks show it, and the stop detector asks for one), and always when selected.
 * One quiet for live_quiet_ms leaves the set; the next hook that sees it puts it back. */
SEC("iter/bpf_sk_storage_map")
int tv_look(struct bpf_iter__bpf_sk_storage_map *ctx)
{
	struct sock *sk = ctx->sk;
	struct tv_live *lv = ctx->value;
	if (!sk || !lv)
		return 0;
	struct tcp_sock *tp = bpf_skc_to_tcp_sock(sk);
	struct tv_sk *st = bpf_sk_storage_get(&tv_socks, sk, 0, 0);
	struct tv_config *cfg = tv_config();
	if (!tp || !st || !cfg) {
		bpf_sk_storage_delete(&tv_live, sk);
		return 0;
	}
	__u32 act = st->act;
	__u64 now = bpf_ktime_get_ns();
	__u64 cookie = bpf_get_socket_cookie(sk);
	tv_flush_pending(sk, tp, st, cookie); /* quiet since its last sampled ACK */
	tv_refresh_selection(st, cfg, sk, cookie);
	__u8 state = BPF_CORE_READ(sk, __sk_common.skc_state);
	__u32 una = tp->snd_una;
	__u32 rcv = tp->rcv_nxt;
	__u32 copied = tp->copied_seq;
	int busy = tp->write_seq != una;
	int moved = !st->looked || una != st->look_una || rcv != st->look_rcv || copied != st->look_copied ||
		    state != st->look_state;
	if (tv_write_drained(ctx->meta->seq, sk, tp, st, cfg, cookie, now))
		return 0;
	if (moved || busy || st->selected) {
		__u32 zero = 0;
		struct tv_snap *s = bpf_map_lookup_elem(&tv_snap_scratch, &zero);
		if (!s)
			return 0;
		tv_fill_hdr(&s->h, sk, cookie, TV_K_SNAPSHOT, sizeof(*s), now);
		tv_fix_port(&s->h, st);
		tv_fill_snap(s, tp, st);
		s->uid = BPF_CORE_READ(sk, sk_uid.val);
		/* A full page: the kernel shows this socket again at the next read, so nothing below
		 * may have happened yet. */
		if (bpf_seq_write(ctx->meta->seq, s, sizeof(*s))) {
			tv_count(TV_ST_SEQ_WRITE_FAIL);
			return 0;
		}
	}
	tv_count(TV_ST_LOOKED);
	st->look_una = una;
	st->look_rcv = rcv;
	st->look_copied = copied;
	st->look_state = state;
	st->looked = 1;
	if (moved || busy || !lv->moved_ns)
		lv->moved_ns = now;
	if (st->selected || now - lv->moved_ns < (__u64)cfg->live_quiet_ms * 1000000)
		return 0;
	/* Quiet: leave the set. A hook that saw the socket meanwhile (act moved) puts it back at
	 * once; one that sees it later finds live clear and does. */
	bpf_sk_storage_delete(&tv_live, sk);
	st->live = 0;
	if (*(volatile __u32 *)&st->act != act)
		tv_join(sk, st);
	return 0;
}

#endif
