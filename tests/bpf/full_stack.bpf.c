// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* An XDP program with all 512 bytes of its stack in use and every register live at
 * the start of a block: exact coverage's counter there has no register to borrow and
 * no stack to spill one into, so the program must run as it was, with one line
 * saying why (tests/coverage/test_exact.py). Written in BPF assembly, as the kernel's
 * verifier selftests write such cases: C gives no say over registers. */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

SEC("xdp")
__attribute__((naked)) int full_stack(void)
{
	asm volatile(
		"r1 = 1;"
		"*(u64 *)(r10 - 512) = r1;"
		"r2 = 2; r3 = 3; r4 = 4; r5 = 5; r6 = 6; r7 = 7; r8 = 8; r9 = 9; r0 = 0;"
		"if r1 == 0 goto 1f;"
		"r0 += 1;"
		"1:"
		"r0 += r1; r0 += r2; r0 += r3; r0 += r4; r0 += r5;"
		"r0 += r6; r0 += r7; r0 += r8; r0 += r9;"
		"r1 = *(u64 *)(r10 - 512);"
		"r0 += r1;"
		"r0 = 2;" /* XDP_PASS: the sum above only keeps every register live */
		"exit;"
		::: "memory");
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
