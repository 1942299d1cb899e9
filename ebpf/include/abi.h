/* abi.h: every struct that crosses from the eBPF programs into userspace (the one ABI header). */
#ifndef TCPVIGIL_ABI_H
#define TCPVIGIL_ABI_H

/* Bumped whenever a struct below changes shape; userspace refuses a mismatch. */
enum tv_abi { TV_ABI_VERSION = 5 };
#define TV_MAX_SACK 4
#define TV_COMM_LEN 16
#define TV_CC_LEN 16
#define TV_MAX_FILTERS 8
#define TV_MAX_PHASE 4096 /* connections whose rounds are reported (tv_phase) */

/* Record kinds. Ring-buffer records start with struct tv_hdr; snapshots come from the iterators
 * (the look over the live set, the pass over every namespace at start) through bpf_seq_write. */
enum tv_kind {
	TV_K_SAMPLE = 1,   /* scoreboard after an ACK was processed */
	TV_K_RETRANS = 2,  /* one retransmitted skb */
	TV_K_CA_STATE = 3, /* congestion-avoidance state change */
	TV_K_RTO = 4,      /* retransmission timeout fired */
	TV_K_STATE = 5,    /* TCP state change (lifecycle); from the start pass, a socket older than
			    * the agent found in new_state (old_state == new_state) */
	TV_K_CLOSE = 6,    /* socket destroyed: final counters (body is tv_snap) */
	TV_K_SNAPSHOT = 7, /* iterator record (body is tv_snap) */
	TV_K_OWNER = 8,    /* process that first sent on the connection */
	TV_K_LOST_RTX = 9, /* a retransmission was marked lost again (exact, fentry; body tv_retrans) */
};

/* Where a sample was taken. */
enum tv_sample_src {
	TV_SRC_SACKTAG = 1, /* fexit/tcp_sacktag_write_queue: exact, paper-000 point */
	TV_SRC_PROBE = 2,   /* tp_btf/tcp_probe joined with the next ACK (post-ACK state) */
	TV_SRC_FLUSH = 3,   /* pending ACK flushed: connection went quiet, or left ESTABLISHED */
};

/* Bits of tv_snap.opts. */
enum tv_opt_bits {
	TV_OPT_SACK = 0x01,
	TV_OPT_WSCALE = 0x02,
	TV_OPT_TS = 0x04,
	TV_OPT_ECN = 0x08,
};

/* What the ACK that emptied the pipe left waiting (tv_sk.drained_class; a change is reported at
 * once): unsent data, and a window it advertises below one MSS. */
enum tv_drain_bits {
	TV_DRAIN_UNSENT = 0x01,
	TV_DRAIN_WND_CLOSED = 0x02,
};

/* Bits of tv_sample.flags. */
enum tv_sample_flags {
	TV_SF_SELECTED = 0x01, /* sample of a user-selected connection (per ACK) */
	TV_SF_DSACK = 0x02,    /* first block lies below the cumulative ACK */
	TV_SF_DRAINED = 0x04,  /* the ACK acknowledges everything sent: state it leaves, reported
				* before tcp_ack() runs (snd_wnd is the window the ACK advertises) */
	TV_SF_ROUND = 0x08,    /* the ACK starts a new round (it acknowledges what was sent when the
				* last one began): its time is the stream's send phase; only for
				* connections in tv_phase (members of a bulk group) whose srtt is at
				* least phase_min_srtt_us */
};

/* Failure counters, a per-CPU array indexed by these. */
enum tv_stat {
	TV_ST_RB_FULL = 0,     /* ring buffer had no room: record lost */
	TV_ST_STORAGE_FAIL,    /* sk_storage could not be created */
	TV_ST_RTX_MAP_FULL,    /* retransmission seq map update failed */
	TV_ST_OPT_READ_FAIL,   /* TCP options could not be read */
	TV_ST_SEQ_WRITE_FAIL,  /* iterator record could not be written */
	TV_ST_SAMPLES,         /* samples emitted */
	TV_ST_EVENTS,          /* other records handed over: ring buffer, start-pass state records,
				* closes kept in tv_missed (snapshots are not counted) */
	TV_ST_LOOKED,          /* sockets a look visited (the live set, summed over looks) */
	TV_ST_MISSED_FULL,     /* a close the ring buffer refused could not be kept for a retry */
	TV_ST_MAX,
};

/* A connection as seen on this host: local and remote end. Addresses are in
 * network byte order; IPv4 uses the first 4 bytes. Ports are host order. */
struct tv_tuple {
	__u16 family; /* AF_INET or AF_INET6 */
	__u16 lport;
	__u16 rport;
	__u16 _pad;
	__u8 laddr[16];
	__u8 raddr[16];
};

struct tv_hdr {
	__u16 kind;    /* enum tv_kind */
	__u16 size;    /* size of the whole record, header included */
	__u32 netns;   /* network-namespace inode */
	__u64 ts_ns;   /* bpf_ktime_get_ns(): CLOCK_MONOTONIC */
	__u64 cookie;  /* socket cookie: the connection's key */
	struct tv_tuple t;
};

/* The paper-000 figure-6 state, plus what the detectors need. */
struct tv_sample {
	struct tv_hdr h;
	__u32 ack_seq;     /* cumulative ACK of the ACK this sample follows */
	__u32 snd_una;
	__u32 snd_nxt;
	__u32 high_seq;
	__u32 cwnd;
	__u32 ssthresh;
	__u32 packets_out;
	__u32 lost_out;
	__u32 sacked_out;
	__u32 retrans_out;
	__u32 in_flight;   /* packets_out - lost_out - sacked_out + retrans_out */
	__u32 srtt_us;
	__u32 rto_us;
	__u32 mss;
	__u32 delivered;   /* segments delivered (tp->delivered) */
	__u32 total_retrans;
	__u32 snd_wnd;
	__u32 write_queue; /* write_seq - snd_una: bytes queued or in flight */
	__u32 rate_delivered;
	__u32 rate_interval_us;
	__u64 bytes_acked;
	__u32 sack[2 * TV_MAX_SACK]; /* start,end pairs in ACK order, host byte order */
	__u8 nsack;
	__u8 ca_state;
	__u8 src;          /* enum tv_sample_src */
	__u8 flags;        /* TV_SF_* */
	__u32 _pad;
};

struct tv_retrans {
	struct tv_hdr h;
	__u32 seq;
	__u32 end_seq;
	__u16 segs;        /* tcp_skb_pcount: what TcpRetransSegs counts */
	__u8 sacked;       /* TCP_SKB_CB()->sacked at the tracepoint */
	__u8 ca_state;
	__u32 count;       /* how many times this sequence was retransmitted, this one included */
	__u64 since_prev_ns; /* since this sequence was last retransmitted (0 on the first) */
	__u32 cwnd;
	__u32 ssthresh;
	__u32 packets_out;
	__u32 lost_out;
	__u32 sacked_out;
	__u32 retrans_out;
	__u32 snd_una;
	__u8 lost_retrans; /* 1: an earlier retransmission of this segment was lost */
	__u8 failed;       /* 1: the attempt failed in this host (sockops RETRANS_CB, err != 0): counted
			    * by TcpRetransSegs but never sent; seq/segs/scoreboard only, no skb bits */
	__u8 mtu_probing;  /* the socket's namespace's net.ipv4.tcp_mtu_probing (0 off, 1 after a black
			    * hole is suspected, 2 always): whether the kernel would shrink segments
			    * that never get through */
	__u8 _pad;
};

struct tv_ca_state {
	struct tv_hdr h;
	__u8 old_state;
	__u8 new_state;
	__u16 _pad;
	__u32 cwnd;
	__u32 ssthresh;
	__u32 high_seq;
	__u32 snd_una;
	__u32 snd_nxt;
	__u32 packets_out;
	__u32 lost_out;
	__u32 sacked_out;
	__u32 retrans_out;
	/* The RTT where the episode began: srtt, the RTT of the last packet (s)acknowledged (RACK's
	 * rack.rtt_us: at an entry into Recovery, a packet sent right after the loss, so the queue it
	 * waited in) and the windowed minimum. A policer drops at the path's RTT, a full queue after it. */
	__u32 srtt_us;
	__u32 rack_rtt_us;
	__u32 min_rtt_us;
	__u32 _pad2;
};

struct tv_rto {
	struct tv_hdr h;
	__u32 retransmits; /* icsk_retransmits before this timeout */
	__u32 rto_us;      /* icsk_rto: the timeout that expired */
	__u32 backoff;     /* icsk_backoff */
	__u32 cwnd;
	__u32 snd_una;
	__u32 snd_nxt;
	__u32 packets_out;
	__u32 retrans_out; /* retransmissions in flight, which the timeout may mark lost */
};

struct tv_state {
	struct tv_hdr h;
	__u8 old_state;
	__u8 new_state;
	__u8 _pad[6];
};

struct tv_owner {
	struct tv_hdr h;
	__u32 tgid;
	__u32 uid;
	__u64 cgroup_id;
	char comm[TV_COMM_LEN];
};

/* Everything tcp_info-like that only a snapshot gives: queues, chrono, options. */
struct tv_snap {
	struct tv_hdr h;
	__u8 state;
	__u8 ca_state;
	__u8 opts;         /* TV_OPT_* negotiated */
	__u8 snd_wscale;
	__u8 rcv_wscale;
	__u8 app_limited;  /* last delivery-rate sample was app-limited */
	__u8 chrono_type;  /* running chrono: 1 busy, 2 rwnd, 3 sndbuf */
	__u8 timer;        /* icsk_pending: 1 retransmit, 2 delayed ACK, 3 zero-window probe, 5 loss probe */
	char cc[TV_CC_LEN];
	__u32 cwnd;
	__u32 ssthresh;
	__u32 srtt_us;
	__u32 min_rtt_us;
	__u32 rto_us;
	__u32 mss;
	__u32 snd_wnd;
	__u32 rcv_wnd;
	__u32 packets_out;
	__u32 lost_out;
	__u32 sacked_out;
	__u32 retrans_out;
	__u32 write_queue; /* write_seq - snd_una */
	__u32 unsent;      /* write_seq - snd_nxt */
	__u32 recv_queue;  /* rcv_nxt - copied_seq */
	__u32 sndbuf;
	__u32 rcvbuf;
	__u32 delivered;
	__u32 total_retrans;
	__u32 rate_delivered;
	__u32 rate_interval_us;
	__u32 retransmits; /* icsk_retransmits: consecutive RTOs now */
	__u32 backoff;
	__u32 total_rto;   /* 6.7+, else 0 */
	__u32 total_rto_time_ms;
	__u32 snd_una;
	__u32 snd_nxt;
	__u32 lost_rtx;    /* agent's per-socket counts */
	__u32 rtos;
	__u32 retrans_segs;
	__u32 last_ack_age_us; /* since the last ACK was received (tp->rcv_tstamp) */
	__u32 probes_out;  /* icsk_probes_out: zero-window (or keepalive) probes unanswered */
	__u64 bytes_acked;
	__u64 bytes_received;
	__u64 bytes_sent;
	__u64 bytes_retrans;
	__u64 busy_us;     /* chrono: busy (sum of all three, as tcpi_busy_time) */
	__u64 rwnd_limited_us;
	__u64 sndbuf_limited_us;
	__u64 tgid_cgroup; /* cgroup id of the owner (0: unknown) */
	__u32 tgid;
	__u32 uid;
	char comm[TV_COMM_LEN];
	/* Which knob holds the buffers: the ceilings autotuning stops at in the socket's network
	 * namespace (net.ipv4.tcp_rmem / tcp_wmem maximum, 4.15+; 0 unknown), and the buffers the
	 * application fixed with setsockopt (sk_userlocks: TV_LOCK_*; autotuning is off for them). */
	__u32 rmem_max;
	__u32 wmem_max;
	__u8 userlocks;
	__u8 _pad2[7];
};

/* Bits of tv_snap.userlocks (the kernel's SOCK_SNDBUF_LOCK / SOCK_RCVBUF_LOCK). */
enum tv_lock_bits {
	TV_LOCK_SNDBUF = 0x01,
	TV_LOCK_RCVBUF = 0x02,
};

/* Which connections get per-ACK samples, written by userspace. A field is
 * compared only when its bit is set in `match`. */
enum tv_match {
	TV_M_COOKIE = 0x01,
	TV_M_LADDR = 0x02,
	TV_M_LPORT = 0x04,
	TV_M_RADDR = 0x08,
	TV_M_RPORT = 0x10,
};

struct tv_filter {
	__u32 match;
	__u16 family;
	__u16 lport;
	__u16 rport;
	__u16 _pad;
	__u32 _pad2;
	__u64 cookie;
	__u8 laddr[16];
	__u8 raddr[16];
};

struct tv_config {
	__u64 bulk_interval_ns; /* periodic sample of unselected connections (0: off) */
	__u64 bulk_min_bytes;   /* ... once they have this many bytes acked */
	__u32 filter_gen;       /* bumped when filters change: sockets re-evaluate */
	__u32 nfilters;
	__u32 select_all;       /* every connection gets per-ACK samples */
	__u32 fexit_sacktag;    /* 1: the fexit program emits samples for SACK-bearing ACKs */
	__u32 ca_from_probe;    /* 1: no cong_state_set tracepoint, compare ca_state per ACK */
	__u32 exact_lost_rtx;   /* 1: fentry/tcp_mark_skb_lost counts lost retransmissions */
	__u32 rto_fentry;       /* 1: fentry/tcp_retransmit_timer reports RTOs, not sockops */
	__u32 phase_min_srtt_us; /* rounds of tv_phase members are reported once srtt reaches this
				  * (0: none); shorter paths would cost a record per few ACKs */
	__u32 look;             /* 1: snapshots come from the look over the live set; iter/tcp runs
				 * once, at start, and reports sockets as TV_K_STATE records */
	__u32 live_quiet_ms;    /* a socket quiet this long (nothing sent, acknowledged, received or
				 * read, nothing outstanding) leaves the live set */
};

#endif
