// SPDX-License-Identifier: Apache-2.0
/* A tiny program for uprobe/uretprobe tests: lbr_add(a, b) returns a + b. */
#include <stdio.h>
#include <stdlib.h>

__attribute__((noinline)) int lbr_add(int a, int b)
{
	/* Keep the call from being folded away. */
	__asm__ volatile("" ::: "memory");
	return a + b;
}

int main(int argc, char **argv)
{
	int a = argc > 1 ? atoi(argv[1]) : 1;
	int b = argc > 2 ? atoi(argv[2]) : 2;

	printf("%d\n", lbr_add(a, b));
	return 0;
}
