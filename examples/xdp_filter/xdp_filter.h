/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* Constants and map records shared by xdp_filter.bpf.c and its tests. */
#ifndef XDP_FILTER_H
#define XDP_FILTER_H

/* VXLAN (RFC 7348): outer Ethernet + IPv4 + UDP + 8-byte VXLAN header. */
#define VXLAN_PORT 4789
#define VXLAN_HLEN 8
#define OUTER_HLEN (14 + 20 + 8 + VXLAN_HLEN)

/* Keys of the `stats` array. */
#define STAT_PASS 0
#define STAT_DENIED 1
#define STAT_BAD_CSUM 2
#define STAT_DECAP 3
#define STAT_MAX 4

/* Value of the per-source `flows` hash map. */
struct flow_stats {
	__u64 packets;
	__u64 bytes;
};

#endif
