// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* Names longer than the kernel keeps (15 bytes), calls a frozen `const volatile`
 * switches off, and the hash-map calls a bcc program makes too: what
 * tests/kernel/test_query_names.py asks traces about, in one session with bcc. */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

/* 0 unless set before load. libbpf freezes .rodata at load, so the verifier knows
 * it and removes the code it guards as unreachable (libbpf-tools' targ_pid, do_count). */
const volatile __u32 debug_level = 0;

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 64);
	__type(key, __u32);
	__type(value, __u64);
} getppid_calls SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 64);
	__type(key, __u32);
	__type(value, __u64);
} packet_lengths SEC(".maps");

SEC("tracepoint/syscalls/sys_enter_getppid")
int getppid_counter_with_long_name(void *ctx)
{
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	__u64 *seen, count, stamp;
	char comm[16];

	if (debug_level > 0) {
		bpf_get_current_comm(comm, sizeof(comm));
		bpf_printk("getppid from %s", comm);
	}
	seen = bpf_map_lookup_elem(&getppid_calls, &tgid);
	count = seen ? *seen + 1 : 1;
	bpf_map_update_elem(&getppid_calls, &tgid, &count, BPF_ANY);
	/* Inlined by the verifier on both kernels (x86-64, with a JIT). */
	stamp = bpf_jiffies64();
	/* A call on 6.1; inlined by the verifier on 6.12 (x86-64). */
	return (stamp + bpf_get_smp_processor_id()) & 0;
}

static __attribute__((noinline)) int remember_packet_length(struct xdp_md *ctx)
{
	__u32 len = ctx->data_end - ctx->data;
	__u64 *seen, count;

	seen = bpf_map_lookup_elem(&packet_lengths, &len);
	count = seen ? *seen + 1 : 1;
	bpf_map_update_elem(&packet_lengths, &len, &count, BPF_ANY);
	return 0;
}

static __attribute__((noinline)) int log_packet_when_debugging(struct xdp_md *ctx)
{
	if (debug_level > 1)
		bpf_printk("packet of %d bytes", (int)(ctx->data_end - ctx->data));
	return 0;
}

SEC("xdp")
int xdp_counts_packet_lengths(struct xdp_md *ctx)
{
	remember_packet_length(ctx);
	log_packet_when_debugging(ctx);
	return XDP_PASS;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
