/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Records the LBR tracer (lbr_tracer.bpf.c) sends to user space
 * (pytest_lbr/capture/hooks.py).  Python reads the constants (enums) and
 * the size of struct lbr_hit from the BTF of the object it loads, and
 * mirrors struct lbr_hit with ctypes; a test checks the mirror against that BTF.
 */
#ifndef __LBR_TRACER_H
#define __LBR_TRACER_H

/*
 * Constants are enums, not #defines, so that they reach the object's BTF:
 * user space reads them from the object it loads, never from this file.
 */
enum lbr_limits {
	/* Branch records one hit carries (LBR depth of current Intel/AMD parts). */
	LBR_MAX_ENTRIES = 32,
	/* CPUs the per-CPU snapshot array covers; must be a power of two. */
	LBR_MAX_CPUS = 1024,
	/* Ring buffer size in bytes (a power of two, multiple of the page size). */
	LBR_RINGBUF_SIZE = 4 * 1024 * 1024,
	/* Processes scope="children" can follow (the tracked-tgid hash map). */
	LBR_MAX_TGIDS = 16384,
	/* Bytes of a task's command name (TASK_COMM_LEN). */
	LBR_COMM_LEN = 16,
};

/* Whose hits are kept (struct lbr_config.scope). */
enum lbr_scope_kind {
	LBR_SCOPE_ALL = 0,    /* every task, and interrupt context if keep_irq */
	LBR_SCOPE_TGID = 1,   /* the threads of process lbr_config.tgid */
	LBR_SCOPE_TGIDS = 2,  /* the processes in lbr_tgids (what they fork joins it) */
	LBR_SCOPE_CGROUP = 3, /* tasks in the cgroup of lbr_cgroup[0] and its descendants */
};

/* Every record starts with a type tag. */
enum lbr_record_type {
	LBR_RECORD_HIT = 1,
};

/* Hook kinds (struct lbr_hit.hook). */
enum lbr_hook_kind {
	LBR_HOOK_FENTRY = 1,
	LBR_HOOK_FEXIT = 2,
	LBR_HOOK_KPROBE = 3,
	LBR_HOOK_KRETPROBE = 4,
	LBR_HOOK_KPROBE_MULTI = 5,
	LBR_HOOK_TRACEPOINT = 6,
	LBR_HOOK_UPROBE = 7,
	LBR_HOOK_URETPROBE = 8,
};

/* struct lbr_hit.flags bits */
enum lbr_hit_flags {
	LBR_HIT_HAS_RETVAL = 1,
	/* The hook ran in hardirq, NMI or while serving a softirq (!in_task()). */
	LBR_HIT_IN_INTERRUPT = 2,
};

/* Same layout as uapi struct perf_branch_entry (24 bytes). */
struct lbr_entry {
	__u64 from;
	__u64 to;
	__u64 flags; /* mispred:1 predicted:1 in_tx:1 abort:1 cycles:16 type:4 ... */
};

/* Set before load (const volatile .rodata); lives at offset 0 of .rodata. */
struct lbr_config {
	__u32 tgid;     /* LBR_SCOPE_TGID: this process's threads */
	__u32 target;   /* fentry/fexit: target index reported as cookie << 32 */
	__u32 snapshot; /* 0: hits only, no bpf_get_branch_snapshot() */
	__u32 function; /* fentry/fexit: function index within a glob target */
	enum lbr_scope_kind scope;
	__u32 keep_irq; /* 0: drop hits in interrupt context (not the scope's work) */
	__u32 skip_tgid; /* never this process (a live reader's own); 0: none */
	/*
	 * Where the kernel keeps what the tracer reads of it, worked out by user space
	 * once per process (pytest_lbr/capture/hooks.py, _kernel_config()) from
	 * /proc/kallsyms and the kernel's BTF; 0: unknown (lbr_tracer.bpf.c then
	 * counts every hit as task context, or follows no fork).
	 */
	__u64 sym_preempt_count;  /* x86: this CPU's preempt_count in the per-CPU area
	                           * (__preempt_count, or pcpu_hot + offset of its member) */
	__u64 sym_per_cpu_offset; /* x86: the array __per_cpu_offset[NR_CPUS] */
	__u32 task_tgid;          /* offsetof(struct task_struct, tgid) */
	__u32 task_preempt_count; /* arm64: offsetof(struct task_struct, thread_info.preempt_count) */
};

struct lbr_hit {
	enum lbr_record_type type; /* first: every record starts with its tag */
	enum lbr_hook_kind hook;
	__u64 cookie;       /* target index << 32 | function index within a glob */
	__u64 func_ip;      /* traced function's address where the hook knows it */
	__u64 ts_ns;        /* bpf_ktime_get_ns() */
	__s64 retval;       /* exit hooks only (flags & LBR_HIT_HAS_RETVAL) */
	__u32 cpu;
	__u32 pid;          /* tgid */
	__u32 tid;
	__s32 snapshot_ret; /* bpf_get_branch_snapshot() return: bytes or -errno */
	__u32 nr_entries;
	enum lbr_hit_flags flags;
	char comm[LBR_COMM_LEN]; /* bpf_get_current_comm() at the hit */
	struct lbr_entry entries[LBR_MAX_ENTRIES];
};

#endif /* __LBR_TRACER_H */
