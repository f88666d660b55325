/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* Constants and map records shared by tc_classifier.bpf.c and its tests. */
#ifndef TC_CLASSIFIER_H
#define TC_CLASSIFIER_H

/* Value of the `classes` map (key: TCP/UDP destination port, host order). */
struct port_class {
	__u32 classid;	/* tc class, e.g. 0x10010 for 1:10 */
	__u8 dscp;	/* DSCP to mark the packet with (0-63) */
	__u8 pad[3];
};

#endif
