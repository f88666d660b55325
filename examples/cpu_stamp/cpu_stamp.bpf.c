// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* Spread packets over per-CPU counters: the program calls
 * bpf_get_smp_processor_id() for every packet. On 6.1 that is a call into
 * the kernel; since 6.10 the x86-64 verifier inlines it (a per-CPU load), so
 * the call is gone from the trace. */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

/* Packets seen per CPU (a hash: only CPUs that saw packets have an entry). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, __u32);
	__type(value, __u64);
} per_cpu SEC(".maps");

SEC("xdp")
int cpu_stamp(struct xdp_md *ctx)
{
	__u32 cpu = bpf_get_smp_processor_id();
	__u64 one = 1, *n;

	n = bpf_map_lookup_elem(&per_cpu, &cpu);
	if (n)
		__sync_fetch_and_add(n, 1);
	else
		bpf_map_update_elem(&per_cpu, &cpu, &one, BPF_NOEXIST);
	return XDP_PASS;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
