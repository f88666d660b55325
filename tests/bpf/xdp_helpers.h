/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* Constants shared by xdp_helpers.bpf.c and tests/test_harness.py. */
#ifndef XDP_HELPERS_H
#define XDP_HELPERS_H

/* Bytes bpf_xdp_adjust_head() strips from a passing packet. */
#define XDP_HELPERS_HDR 8
/* First packet byte that makes xdp_helpers drop the packet. */
#define XDP_HELPERS_DROP_BYTE 0xff
/* Keys of the `last` array map. */
#define LAST_CSUM 0
#define LAST_CPU 1

#endif
