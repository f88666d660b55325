// SPDX-License-Identifier: GPL-2.0
/* Open-coded numeric iterators (bpf_iter_num_new / _next / _destroy, kfuncs of
 * Linux 6.4: commit 6018e1f407cc, "bpf: implement numbers iterator") through
 * bpf_for and bpf_repeat loops, in a syscall program (SEC("syscall")) run from
 * user space on its own context: the verifier checks one pass of each loop body,
 * whatever the bound, so ctx->n needs no constant limit
 * (tests/conformance/test_iter_num.py). libbpf 1.1's bpf_helpers.h has no
 * bpf_for, so the loops are spelled out here. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

extern int bpf_iter_num_new(struct bpf_iter_num *it, int start, int end) __ksym;
extern int *bpf_iter_num_next(struct bpf_iter_num *it) __ksym;
extern void bpf_iter_num_destroy(struct bpf_iter_num *it) __ksym;

/* The iterator is destroyed however the loop ends (break included): the cleanup
 * attribute calls this with its address when it goes out of scope. */
static inline void iter_num_done(struct bpf_iter_num *it)
{
	bpf_iter_num_destroy(it);
}

/* for (var = start; var < end; var++), as an open-coded iterator. */
#define bpf_for(var, start, end)						\
	for (struct bpf_iter_num __num_it __attribute__((aligned(8),		\
							  cleanup(iter_num_done))),	\
	     *__num_itp = (bpf_iter_num_new(&__num_it, (start), (end)), &__num_it); \
	     ({								\
		     int *__num_cur = bpf_iter_num_next(__num_itp);		\
		     if (__num_cur)						\
			     (var) = *__num_cur;				\
		     __num_cur != NULL;						\
	     });)

/* Run the body `times` times. */
#define bpf_repeat(times)							\
	for (struct bpf_iter_num __num_it __attribute__((aligned(8),		\
							  cleanup(iter_num_done))),	\
	     *__num_itp = (bpf_iter_num_new(&__num_it, 0, (times)), &__num_it); \
	     bpf_iter_num_next(__num_itp);)

struct squares_args {
	__s32 n;	 /* in: how many numbers */
	__u32 repeats;	 /* out: runs of the bpf_repeat body */
	__u64 sum;	 /* out: 0*0 + 1*1 + ... + (n-1)*(n-1) */
};

SEC("syscall")
int sum_squares(struct squares_args *args)
{
	__s32 n = args->n;
	__u32 repeats = 0;
	__u64 sum = 0;
	int i;

	bpf_for(i, 0, n)
		sum += (__u64)i * i;
	bpf_repeat(n)
		repeats++;
	args->sum = sum;
	args->repeats = repeats;
	bpf_printk("iter_num: n=%d sum=%llu repeats=%u", n, sum, repeats);
	return repeats;
}

char LICENSE[] SEC("license") = "GPL";
