/* common.h: maps, per-socket state and helpers shared by every hook family. */
#ifndef TV_COMMON_H
#define TV_COMMON_H

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_endian.h>
#include "abi.h"

#define AF_INET 2
#define AF_INET6 10
#define IPPROTO_TCP 6
#define TCP_ESTABLISHED 1
#define TCP_SYN_SENT 2
#define TCP_SYN_RECV 3
#define TCP_LISTEN 10
#define TCP_TIME_WAIT 6
#define TCP_NEW_SYN_RECV 12
#define TCP_CA_Loss 4

/* TCP_SKB_CB()->sacked bits. Own names: 6.18 has an enum, 6.1 has #defines. */
#define TV_SACKED_ACKED 0x01
#define TV_SACKED_RETRANS 0x02
#define TV_LOST 0x04
#define TV_REPAIRED 0x10 /* left over from an earlier successful retransmission */

extern unsigned CONFIG_HZ __kconfig;

/* Per-socket state, freed with the socket. Cloned (BPF_F_CLONE, 5.4+) into the sockets a
 * listener accepts: a listener's state holds only its owner (state.h), which they inherit. */
struct tv_sk {
	__u64 last_sample_j; /* jiffies of the last sample: the bulk-interval gate */
	__u64 pending_ts;
	__u32 filter_gen;
	__u32 pending_ack;
	__u32 pending_sack[2 * TV_MAX_SACK];
	__u8 selected;     /* 1 selected, 0 not; valid while filter_gen matches */
	__u8 pending;      /* an ACK's blocks wait for the post-ACK state */
	__u8 pending_nsack;
	__u8 last_ca;
	__u8 owner_set;
	__u8 drained_sent; /* the last sample sent shows an empty pipe */
	__u8 drained_class; /* TV_DRAIN_* bits of the last drained sample sent */
	__u8 round_on;     /* round_end is set */
	__u32 round_end;   /* snd_nxt when the current round began: an ACK of it starts the next */
	__u32 lost_rtx;
	__u32 rtos;
	__u32 retrans_segs;
	__u32 tgid;
	__u32 uid;
	__u64 cgroup_id;
	char comm[TV_COMM_LEN];
	/* The live set (look.h): every hook that sees the socket bumps act; the look compares what
	 * it reads with what it last read, so a socket that moved nothing costs nothing. */
	__u32 act;
	__u32 look_una;    /* snd_una, rcv_nxt, copied_seq and state at the last look */
	__u32 look_rcv;
	__u32 look_copied;
	__u16 lport;       /* local port: the kernel clears it before the state change to CLOSE */
	__u8 look_state;
	__u8 looked;       /* the look_* fields hold a look */
	__u8 live;         /* in tv_live */
	__u8 drain_skip;   /* an ACK of tick drain_j went unchecked: it may have left the pipe empty */
	__u32 drain_j;     /* jiffies (low half) of the last ACK whose emptied pipe left data waiting */
};

struct {
	__uint(type, BPF_MAP_TYPE_SK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC | BPF_F_CLONE);
	__type(key, int);
	__type(value, struct tv_sk);
} tv_socks SEC(".maps");

/* The live set: sockets that sent, received or lost something lately (look.h). A socket joins
 * when a hook sees it and leaves when a look finds it quiet; one look visits these, not every
 * socket of every namespace. */
struct tv_live {
	__u64 moved_ns; /* when a look last saw it move (0: joined since the last look) */
};
struct {
	__uint(type, BPF_MAP_TYPE_SK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct tv_live);
} tv_live SEC(".maps");

/* State changes to CLOSE the ring buffer had no room for, by cookie: userspace takes them at its
 * next look, so no connection stays open forever in its table. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 16384);
	__type(key, __u64);
	__type(value, struct tv_state);
} tv_missed SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 8 << 20);
} tv_events SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, TV_ST_MAX);
	__type(key, __u32);
	__type(value, __u64);
} tv_stats SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct tv_config);
} tv_cfg SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, TV_MAX_FILTERS);
	__type(key, __u32);
	__type(value, struct tv_filter);
} tv_filters SEC(".maps");

/* Cookies of connections in a bulk group: their rounds are reported (the daemon keeps it). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, TV_MAX_PHASE);
	__type(key, __u64);
	__type(value, __u8);
} tv_phase SEC(".maps");

/* When each (connection, sequence) was last retransmitted. */
struct tv_rtx_key {
	__u64 cookie;
	__u32 seq;
	__u32 _pad;
};
struct tv_rtx_val {
	__u64 last_ns;
	__u32 count;
	__u32 _pad;
};
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, struct tv_rtx_key);
	__type(value, struct tv_rtx_val);
} tv_rtx SEC(".maps");

/* Scratch for records too large for the 512-byte stack. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct tv_snap);
} tv_snap_scratch SEC(".maps");

/* Force the ABI structs into BTF so the skeleton generates Rust types for them. */
struct tv_sample _tv_sample = {};
struct tv_retrans _tv_retrans = {};
struct tv_ca_state _tv_ca_state = {};
struct tv_rto _tv_rto = {};
struct tv_state _tv_state = {};
struct tv_owner _tv_owner = {};
struct tv_snap _tv_snap = {};
struct tv_filter _tv_filter = {};
struct tv_config _tv_config = {};
enum tv_abi _tv_abi = TV_ABI_VERSION;
enum tv_kind _tv_kind = TV_K_SAMPLE;
enum tv_sample_src _tv_sample_src = TV_SRC_PROBE;
enum tv_stat _tv_stat = TV_ST_RB_FULL;
enum tv_opt_bits _tv_opt_bits = TV_OPT_SACK;
enum tv_sample_flags _tv_sample_flags = TV_SF_SELECTED;
enum tv_drain_bits _tv_drain_bits = TV_DRAIN_UNSENT;
enum tv_match _tv_match = TV_M_COOKIE;
enum tv_lock_bits _tv_lock_bits = TV_LOCK_SNDBUF;

static __always_inline void tv_count(__u32 which)
{
	__u64 *v = bpf_map_lookup_elem(&tv_stats, &which);
	if (v)
		*v += 1;
}

/* When a record last woke the reader early (jiffies). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} tv_woke SEC(".maps");

/* Records are handed over without waking the reader, which reads when its detectors are next
 * due (20 to 200 ms apart): a wakeup per record cost about 10 us per ACK on a 2-vCPU VM
 * (scripts/bench-datapath.sh). Two things wake it early, once per clock tick at most: a buffer
 * filling up (an eighth of it waiting: 1 MiB of the default 8; a reader that is behind, stopped,
 * starved or blocked on a full disk, would otherwise take an interrupt for every record until
 * the buffer is full, on the CPUs the traffic runs on), and a record that is a stop's first sign
 * where nothing else shows one (`sign`: a timeout, a tail-loss probe; data sent after an idle
 * into an outage shows only by them, and the reader may not be due for 200 ms). */
static __always_inline void tv_submit_woken(void *rec, bool sign)
{
	__u64 size = bpf_ringbuf_query(&tv_events, BPF_RB_RING_SIZE);
	__u64 flags = BPF_RB_NO_WAKEUP;
	if (sign || bpf_ringbuf_query(&tv_events, BPF_RB_AVAIL_DATA) > size / 8) {
		__u32 zero = 0;
		__u64 *woke = bpf_map_lookup_elem(&tv_woke, &zero);
		__u64 j = bpf_jiffies64();
		if (woke && *woke != j) {
			*woke = j;
			flags = BPF_RB_FORCE_WAKEUP;
		}
	}
	bpf_ringbuf_submit(rec, flags);
}

static __always_inline void tv_submit(void *rec)
{
	tv_submit_woken(rec, false);
}

/* Put the socket in the live set (tv_live), once: a look visits it from then on. */
static __always_inline void tv_join(void *sk, struct tv_sk *st)
{
	if (bpf_sk_storage_get(&tv_live, sk, 0, BPF_SK_STORAGE_GET_F_CREATE))
		st->live = 1;
	else
		tv_count(TV_ST_STORAGE_FAIL);
}

/* A hook saw the socket: the next look reads it. Per ACK this is an add and a test. */
static __always_inline void tv_touch(void *sk, struct tv_sk *st)
{
	st->act++;
	if (!st->live)
		tv_join(sk, st);
}

static __always_inline struct tv_config *tv_config(void)
{
	__u32 zero = 0;
	return bpf_map_lookup_elem(&tv_cfg, &zero);
}

static __always_inline __u32 tv_jiffies_to_us(__u64 j)
{
	return (__u32)(j * (1000000 / CONFIG_HZ));
}

/* Has the bulk interval passed since this socket's last sample? Gated on jiffies, not the ns
 * clock: bpf_jiffies64() costs nothing measurable, bpf_ktime_get_ns() 35-55 ns per ACK on a VM
 * (scripts/bench-datapath.sh, floor_clock vs floor_jiffies). The interval is then kept to within
 * one tick (1-10 ms). */
static __always_inline int tv_interval_passed(struct tv_sk *st, struct tv_config *cfg, __u64 jnow)
{
	__u64 every = cfg->bulk_interval_ns / (1000000000 / CONFIG_HZ);
	return jnow - st->last_sample_j >= (every ? every : 1);
}

static __always_inline void tv_fill_hdr(struct tv_hdr *h, struct sock *sk, __u64 cookie, __u16 kind,
					__u16 size, __u64 now)
{
	h->kind = kind;
	h->size = size;
	h->ts_ns = now;
	h->cookie = cookie;
	h->netns = BPF_CORE_READ(sk, __sk_common.skc_net.net, ns.inum);
	h->t.family = BPF_CORE_READ(sk, __sk_common.skc_family);
	h->t.lport = BPF_CORE_READ(sk, __sk_common.skc_num);
	h->t.rport = bpf_ntohs(BPF_CORE_READ(sk, __sk_common.skc_dport));
	h->t._pad = 0;
	if (h->t.family == AF_INET6) {
		BPF_CORE_READ_INTO(&h->t.laddr, sk, __sk_common.skc_v6_rcv_saddr);
		BPF_CORE_READ_INTO(&h->t.raddr, sk, __sk_common.skc_v6_daddr);
	} else {
		__builtin_memset(h->t.laddr, 0, 16);
		__builtin_memset(h->t.raddr, 0, 16);
		BPF_CORE_READ_INTO((__u32 *)h->t.laddr, sk, __sk_common.skc_rcv_saddr);
		BPF_CORE_READ_INTO((__u32 *)h->t.raddr, sk, __sk_common.skc_daddr);
	}
}

/* The local port as the socket had it: the kernel releases an ephemeral port before the state
 * change to CLOSE (inet_put_port() in tcp_set_state()), so records from then on read 0. */
static __always_inline void tv_fix_port(struct tv_hdr *h, struct tv_sk *st)
{
	if (!h->t.lport && st)
		h->t.lport = st->lport;
}

/* What a look compares with: the socket as it is now (a baseline, nothing to report). */
static __always_inline void tv_baseline(struct tv_sk *st, struct sock *sk, struct tcp_sock *tp)
{
	st->look_una = tp->snd_una;
	st->look_rcv = tp->rcv_nxt;
	st->look_copied = tp->copied_seq;
	st->look_state = BPF_CORE_READ(sk, __sk_common.skc_state);
	st->lport = BPF_CORE_READ(sk, __sk_common.skc_num);
	st->looked = 1;
}

static __always_inline __u8 tv_ca_state_of(struct tcp_sock *tp)
{
	return BPF_CORE_READ_BITFIELD_PROBED(&tp->inet_conn, icsk_ca_state);
}

static __always_inline int tv_addr_eq(const __u8 *a, const __u8 *b)
{
	__u64 a0, a1, b0, b1;
	__builtin_memcpy(&a0, a, 8);
	__builtin_memcpy(&a1, a + 8, 8);
	__builtin_memcpy(&b0, b, 8);
	__builtin_memcpy(&b1, b + 8, 8);
	return a0 == b0 && a1 == b1;
}

/* Does one filter rule match this socket's header? */
static __always_inline int tv_filter_match(struct tv_filter *f, struct tv_hdr *h)
{
	__u32 m = f->match;
	if ((m & TV_M_COOKIE) && f->cookie != h->cookie)
		return 0;
	if ((m & (TV_M_LADDR | TV_M_RADDR)) && f->family != h->t.family)
		return 0;
	if ((m & TV_M_LPORT) && f->lport != h->t.lport)
		return 0;
	if ((m & TV_M_RPORT) && f->rport != h->t.rport)
		return 0;
	if ((m & TV_M_LADDR) && !tv_addr_eq(f->laddr, h->t.laddr))
		return 0;
	if ((m & TV_M_RADDR) && !tv_addr_eq(f->raddr, h->t.raddr))
		return 0;
	return 1;
}

/* Re-evaluate whether a socket is selected, only when the rules changed. */
static __always_inline void tv_refresh_selection(struct tv_sk *st, struct tv_config *cfg, struct sock *sk,
						 __u64 cookie)
{
	if (st->filter_gen == cfg->filter_gen)
		return;
	st->filter_gen = cfg->filter_gen;
	st->selected = cfg->select_all ? 1 : 0;
	if (st->selected || cfg->nfilters == 0)
		return;
	struct tv_hdr h = {};
	tv_fill_hdr(&h, sk, cookie, 0, 0, 0);
	/* Unrolled, with a copy of the counter as the key and no early exit: the 6.1 and 6.12
	 * verifiers reject the rolled loop ("infinite loop detected"). */
	__u32 n = cfg->nfilters;
#pragma unroll
	for (__u32 i = 0; i < TV_MAX_FILTERS; i++) {
		__u32 k = i;
		if (i < n && !st->selected) {
			struct tv_filter *f = bpf_map_lookup_elem(&tv_filters, &k);
			if (f && tv_filter_match(f, &h))
				st->selected = 1;
		}
	}
}

#endif
