/* state.h: congestion-state changes, RTOs, lifecycle and process attribution. */
#ifndef TV_STATE_H
#define TV_STATE_H

#include "fill.h"
#include "sack.h"

#define SOL_TCP 6
#define TCP_BPF_SOCK_OPS_CB_FLAGS 1008

/* 5.19+: fires in tcp_set_ca_state() before the new state is stored. */
SEC("tp_btf/tcp_cong_state_set")
int BPF_PROG(tv_cong_state, struct sock *sk, const u8 ca_state)
{
	struct tcp_sock *tp = bpf_skc_to_tcp_sock(sk);
	if (!tp)
		return 0;
	struct tv_sk *st = bpf_sk_storage_get(&tv_socks, sk, 0, BPF_SK_STORAGE_GET_F_CREATE);
	__u8 old = tv_ca_state_of(tp);
	if (st) {
		st->last_ca = ca_state;
		/* Not for the Open -> Open of every accepted socket (tcp_ca_openreq_child()): an
		 * idle connection must not join the live set. */
		if (ca_state != old)
			tv_touch(sk, st);
	}
	tv_emit_ca(sk, tp, bpf_get_socket_cookie(sk), old, ca_state, bpf_ktime_get_ns());
	return 0;
}

static __always_inline void tv_emit_rto(struct sock *sk, struct tcp_sock *tp, __u64 cookie, __u32 retransmits,
					__u32 rto_jiffies)
{
	struct tv_rto *e = bpf_ringbuf_reserve(&tv_events, sizeof(*e), 0);
	if (!e) {
		tv_count(TV_ST_RB_FULL);
		return;
	}
	tv_fill_hdr(&e->h, sk, cookie, TV_K_RTO, sizeof(*e), bpf_ktime_get_ns());
	e->retransmits = retransmits;
	e->rto_us = tv_jiffies_to_us(rto_jiffies);
	e->backoff = BPF_CORE_READ(tp, inet_conn.icsk_backoff);
	e->cwnd = BPF_CORE_READ(tp, snd_cwnd);
	e->snd_una = BPF_CORE_READ(tp, snd_una);
	e->snd_nxt = BPF_CORE_READ(tp, snd_nxt);
	e->packets_out = BPF_CORE_READ(tp, packets_out);
	e->retrans_out = BPF_CORE_READ(tp, retrans_out);
	tv_submit_woken(e, true);
	tv_count(TV_ST_EVENTS);
}

/* Fallback RTO source (4.16+), attached at the cgroup-v2 root: RTO_CB runs in
 * tcp_write_timeout() for every retransmission timeout of a socket that asked for it, right after
 * the kernel counted it in TCPTimeouts (the zero-window branch never gets there): exact for sockets
 * established while the agent ran; SYN timeouts (before the flags are set) are in the MIB only.
 * RETRANS_CB reports the retransmissions that failed in this host (see retrans.h). */
SEC("sockops")
int tv_sockops(struct bpf_sock_ops *skops)
{
	struct bpf_sock *bsk = skops->sk;
	switch (skops->op) {
	case BPF_SOCK_OPS_ACTIVE_ESTABLISHED_CB:
	case BPF_SOCK_OPS_PASSIVE_ESTABLISHED_CB:
		bpf_sock_ops_cb_flags_set(skops, skops->bpf_sock_ops_cb_flags | BPF_SOCK_OPS_RTO_CB_FLAG |
							 BPF_SOCK_OPS_RETRANS_CB_FLAG);
		return 1;
	case BPF_SOCK_OPS_RTO_CB:
		break;
	case BPF_SOCK_OPS_RETRANS_CB:
		if (skops->args[2] && bsk) {
			struct tcp_sock *t = bpf_skc_to_tcp_sock(bsk);
			if (t)
				tv_on_retrans_failed(skops, bsk, t);
		}
		return 1;
	default:
		return 1;
	}
	struct tv_config *cfg = tv_config();
	if (!cfg || cfg->rto_fentry || !bsk)
		return 1;
	struct tcp_sock *tp = bpf_skc_to_tcp_sock(bsk);
	if (!tp)
		return 1;
	struct tv_sk *st = bpf_sk_storage_get(&tv_socks, bsk, 0, BPF_SK_STORAGE_GET_F_CREATE);
	if (st) {
		st->rtos++;
		tv_touch(bsk, st);
	} else {
		tv_count(TV_ST_STORAGE_FAIL);
	}
	tv_emit_rto((struct sock *)tp, tp, bpf_get_socket_cookie(skops), skops->args[0], skops->args[1]);
	return 1;
}

/* Does this tcp_retransmit_timer() run count as a timeout (LINUX_MIB_TCPTIMEOUTS)? The kernel
 * returns first for a Fast Open SYN-ACK (fastopen_rsk) and an empty queue, and does not count the
 * zero-window branch: with snd_wnd 0 on a live socket past the handshake its retransmission is a
 * window probe ("Receiver dastardly shrinks window"), which enters Loss without a timeout. Counting
 * that branch made 4 RTOs where TCPTimeouts said 3 (6.1 and 6.18 tcp_timer.c have the same tests). */
/* Before the flags moved into sock_common (skc_flags, 6.x), struct sock had sk_flags. */
struct sock___sk_flags {
	unsigned long sk_flags;
} __attribute__((preserve_access_index));

static __always_inline int tv_rto_counts(struct sock *sk, struct tcp_sock *tp)
{
	if (!tp->packets_out || BPF_CORE_READ(tp, fastopen_rsk))
		return 0;
	__u8 state = BPF_CORE_READ(sk, __sk_common.skc_state);
	__u64 flags;
	if (bpf_core_field_exists(sk->__sk_common.skc_flags))
		flags = BPF_CORE_READ(sk, __sk_common.skc_flags);
	else
		flags = BPF_CORE_READ((struct sock___sk_flags *)sk, sk_flags);
	int dead = (flags >> bpf_core_enum_value(enum sock_flags, SOCK_DEAD)) & 1;
	int handshake = state == TCP_SYN_SENT || state == TCP_SYN_RECV;
	return !(BPF_CORE_READ(tp, snd_wnd) == 0 && !dead && !handshake);
}

/* Preferred RTO source where fentry loads: the timer handler itself, counted as the kernel does. */
SEC("fentry/tcp_retransmit_timer")
int BPF_PROG(tv_rto_timer, struct sock *sk)
{
	struct tcp_sock *tp = bpf_skc_to_tcp_sock(sk);
	if (!tp || !tv_rto_counts(sk, tp))
		return 0;
	struct tv_sk *st = bpf_sk_storage_get(&tv_socks, sk, 0, BPF_SK_STORAGE_GET_F_CREATE);
	if (st) {
		st->rtos++;
		tv_touch(sk, st);
	} else {
		tv_count(TV_ST_STORAGE_FAIL);
	}
	tv_emit_rto(sk, tp, bpf_get_socket_cookie(sk), tp->inet_conn.icsk_retransmits, tp->inet_conn.icsk_rto);
	return 0;
}

/* Process attribution, once per socket, with no hook on the send path (a tcp_sendmsg hook ran on
 * every send: 606,012 runs, 70 ms of BPF time in 8 s of one iperf3 stream, scripts/bench-progs.sh).
 * connect() and listen() change the state in the caller's context: the owner is read there. An
 * accepted socket inherits its listener's state (BPF_F_CLONE), hence its owner. The owner record
 * is sent when the connection is established, so the table knows the connection by then.
 * Bound: a socket handed to another process (SCM_RIGHTS, fork) keeps the process that connected or
 * listened; sockets that predate the daemon have no owner, nor have the connections accepted
 * later by a listener that predates it (snapshots still carry the uid). */
static __always_inline void tv_take_owner(struct sock *sk)
{
	struct tv_sk *st = bpf_sk_storage_get(&tv_socks, sk, 0, BPF_SK_STORAGE_GET_F_CREATE);
	if (!st) {
		tv_count(TV_ST_STORAGE_FAIL);
		return;
	}
	st->owner_set = 1;
	st->tgid = bpf_get_current_pid_tgid() >> 32;
	st->uid = (__u32)bpf_get_current_uid_gid();
	st->cgroup_id = bpf_get_current_cgroup_id();
	bpf_get_current_comm(st->comm, sizeof(st->comm));
}

static __always_inline void tv_emit_owner(struct sock *sk, __u64 cookie)
{
	struct tv_sk *st = bpf_sk_storage_get(&tv_socks, sk, 0, 0);
	if (!st || !st->owner_set)
		return;
	struct tv_owner *e = bpf_ringbuf_reserve(&tv_events, sizeof(*e), 0);
	if (!e) {
		tv_count(TV_ST_RB_FULL);
		return;
	}
	tv_fill_hdr(&e->h, sk, cookie, TV_K_OWNER, sizeof(*e), bpf_ktime_get_ns());
	e->tgid = st->tgid;
	e->uid = st->uid;
	e->cgroup_id = st->cgroup_id;
	__builtin_memcpy(e->comm, st->comm, TV_COMM_LEN);
	tv_submit(e);
	tv_count(TV_ST_EVENTS);
}

/* Lifecycle: every TCP state change (4.16+), and the owner at connect()/listen(). */
SEC("tp_btf/inet_sock_set_state")
int BPF_PROG(tv_set_state, const struct sock *csk, const int old, const int new)
{
	struct sock *sk = (struct sock *)csk;
	if (BPF_CORE_READ(sk, sk_protocol) != IPPROTO_TCP)
		return 0;
	if (new == TCP_SYN_SENT || new == TCP_LISTEN) {
		tv_take_owner(sk);
		return 0;
	}
	/* Only transitions that matter to a connection table: established and closed. */
	if (new != TCP_ESTABLISHED && new != 7 /* TCP_CLOSE */ && old != TCP_ESTABLISHED)
		return 0;
	__u64 cookie = bpf_get_socket_cookie(sk);
	struct tcp_sock *tp = bpf_skc_to_tcp_sock(sk);
	/* Every connection has its state from here on (older ones from the start pass): what the
	 * look compares with, and the local port the records after CLOSE need. */
	struct tv_sk *st = bpf_sk_storage_get(&tv_socks, sk, 0, new == TCP_ESTABLISHED ? BPF_SK_STORAGE_GET_F_CREATE : 0);
	if (new == TCP_ESTABLISHED && st && tp)
		tv_baseline(st, sk, tp);
	if (old == TCP_ESTABLISHED && st && tp)
		tv_flush_pending(sk, tp, st, cookie); /* tcp_probe sees no ACK after this */
	struct tv_state *e = bpf_ringbuf_reserve(&tv_events, sizeof(*e), 0);
	if (!e) {
		if (new == 7 /* TCP_CLOSE */) {
			/* Kept for userspace to take at its next look: a close lost would leave the
			 * connection open in the daemon's table for good. */
			struct tv_state m = {};
			tv_fill_hdr(&m.h, sk, cookie, TV_K_STATE, sizeof(m), bpf_ktime_get_ns());
			tv_fix_port(&m.h, st);
			m.old_state = old;
			m.new_state = new;
			if (!bpf_map_update_elem(&tv_missed, &cookie, &m, BPF_ANY)) {
				tv_count(TV_ST_EVENTS);
				return 0;
			}
			tv_count(TV_ST_MISSED_FULL);
		}
		tv_count(TV_ST_RB_FULL);
		return 0;
	}
	tv_fill_hdr(&e->h, sk, cookie, TV_K_STATE, sizeof(*e), bpf_ktime_get_ns());
	tv_fix_port(&e->h, st);
	e->old_state = old;
	e->new_state = new;
	__builtin_memset(e->_pad, 0, sizeof(e->_pad));
	tv_submit(e);
	tv_count(TV_ST_EVENTS);
	if (new == TCP_ESTABLISHED)
		tv_emit_owner(sk, cookie);
	return 0;
}

/* End of a connection, counters still intact (4.15+). */
SEC("tp_btf/tcp_destroy_sock")
int BPF_PROG(tv_destroy, struct sock *sk)
{
	struct tcp_sock *tp = bpf_skc_to_tcp_sock(sk);
	if (!tp || (!tp->bytes_acked && !tp->bytes_received))
		return 0;
	struct tv_snap *s = bpf_ringbuf_reserve(&tv_events, sizeof(*s), 0);
	if (!s) {
		tv_count(TV_ST_RB_FULL);
		return 0;
	}
	struct tv_sk *st = bpf_sk_storage_get(&tv_socks, sk, 0, 0);
	tv_fill_hdr(&s->h, sk, bpf_get_socket_cookie(sk), TV_K_CLOSE, sizeof(*s), bpf_ktime_get_ns());
	tv_fix_port(&s->h, st);
	tv_fill_snap(s, tp, st);
	tv_submit(s);
	tv_count(TV_ST_EVENTS);
	return 0;
}

#endif
