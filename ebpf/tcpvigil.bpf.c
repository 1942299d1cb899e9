/* tcpvigil.bpf.c: the agent's eBPF object: every hook family, sharing one set of maps. */
#include "hooks/common.h"
#include "hooks/fill.h"
#include "hooks/sack.h"
#include "hooks/retrans.h"
#include "hooks/state.h"
#include "hooks/snapshot.h"
#include "hooks/look.h"

char LICENSE[] SEC("license") = "GPL";
