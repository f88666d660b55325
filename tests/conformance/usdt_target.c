// SPDX-License-Identifier: GPL-2.0
/* A small program with a USDT probe (tests/conformance/test_usdt.py builds it with
 * gcc): `usdt_target BASE COUNT` fires lbr_demo:tick COUNT times, with the tick's
 * number and BASE + number * number, and prints the sum of the values. */
#include <stdio.h>
#include <stdlib.h>
#include <sys/sdt.h>

int main(int argc, char **argv)
{
	long base = argc > 1 ? atol(argv[1]) : 0;
	int count = argc > 2 ? atoi(argv[2]) : 1;
	long sum = 0;

	for (int i = 0; i < count; i++) {
		long value = base + (long)i * i;

		DTRACE_PROBE2(lbr_demo, tick, i, value);
		sum += value;
	}
	printf("%ld\n", sum);
	return 0;
}
