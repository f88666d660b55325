// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* Coverage's example: one branch, two arms, each with a helper call of its
 * own and a return value of its own (so the compiler shares no code between
 * them), so both backends can see which arm a run took. An IPv4 packet takes
 * the first arm and passes, anything else the second and is dropped. */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

/* IPv4 packets are counted under key 4; any other packet deletes a random key 0-3. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 8);
	__type(key, __u32);
	__type(value, __u64);
} arms SEC(".maps");

SEC("xdp")
int branch_cover(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	__u64 one = 1;
	__u32 key;

	if ((void *)(eth + 1) > end)
		return XDP_ABORTED;
	if (eth->h_proto == bpf_htons(ETH_P_IP)) {
		key = 4;						/* arm: ipv4 */
		bpf_map_update_elem(&arms, &key, &one, BPF_ANY);	/* arm: ipv4 */
		return XDP_PASS;					/* arm: ipv4 */
	}
	key = bpf_get_prandom_u32() & 3;				/* arm: other */
	bpf_map_delete_elem(&arms, &key);				/* arm: other */
	return XDP_DROP;						/* arm: other */
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
