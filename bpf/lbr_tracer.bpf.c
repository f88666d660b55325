// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * LBR tracer: one program per hook kind.  Each takes the branch snapshot
 * first, then filters by process and ships one struct lbr_hit through a ring
 * buffer.  User space (pytest_lbr/capture/hooks.py) loads one object for the
 * kprobe/tracepoint/uprobe kinds and one per fentry/fexit target (their
 * attach target is fixed at load time); all share the ring buffer, the
 * snapshot slots (.bss) and the lost counter (.data.lost) through reused map fds.
 */
#include <stdbool.h>
#include <linux/types.h>
#include <linux/bpf.h>
#include <linux/ptrace.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#if defined(__TARGET_ARCH_arm64) && !defined(__aarch64__)
/*
 * The arm64 object is cross-built against the build host's uapi headers, which
 * lack arm64's; PT_REGS_RC() needs only this layout (uapi asm/ptrace.h, stable ABI).
 */
struct user_pt_regs {
	__u64 regs[31];
	__u64 sp;
	__u64 pc;
	__u64 pstate;
};
#endif

#include "lbr_tracer.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

/* Set by user space before load; must stay the only .rodata variable. */
const volatile struct lbr_config lbr_cfg = {};

/* Records that could not be delivered (ring buffer full); its own map so user space reads it alone. */
__u64 lbr_lost SEC(".data.lost") = 0;

/*
 * 0: the hooks stay attached but record nothing.  The graph backend keeps a
 * program's fexit hook for the session and switches it off between traces
 * (loading and attaching it again would cost more than the trace).  Its own
 * map, so user space writes it alone.
 */
__u32 lbr_armed SEC(".data.armed") = 1;

/* Raw snapshots, one slot per CPU: written before anything else can branch. */
static struct lbr_entry lbr_snap[LBR_MAX_CPUS][LBR_MAX_ENTRIES];
static long lbr_snap_ret[LBR_MAX_CPUS];

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, LBR_RINGBUF_SIZE);
} lbr_events SEC(".maps");

/* scope="children": the processes followed; seeded at arming, grown by lbr_fork. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, LBR_MAX_TGIDS);
	__type(key, __u32);
	__type(value, __u8);
} lbr_tgids SEC(".maps");

/*
 * cgroup=PATH: slot 0 holds the cgroup (an fd of its directory, set at arming).
 * bpf_current_task_under_cgroup() counts its descendants too: Linux commit
 * 60d20f9195b2 ("bpf: Add bpf_current_task_under_cgroup helper") (in v4.9).
 */
struct {
	__uint(type, BPF_MAP_TYPE_CGROUP_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} lbr_cgroup SEC(".maps");

/* Keeps struct lbr_hit in the object's BTF for the layout test. */
struct lbr_hit *lbr_hit_btf_anchor __attribute__((unused));

/*
 * Take the branch snapshot as early as the verifier allows.  The snapshot
 * needs a 768-byte buffer, more than the 512-byte BPF stack, so it goes to a
 * per-CPU slot of a global array, and finding the slot needs the CPU number
 * first (retsnoop does the same).  bpf_get_smp_processor_id() is inlined by
 * the verifier on x86-64 since "bpf: inline bpf_get_smp_processor_id()
 * helper" (in v6.10), so on 6.12 the snapshot is the first call; on 6.1 the
 * helper's call and return cost two LBR entries, which trim_tracer() drops
 * with the rest of the tracer's own records.  A per-CPU array lookup would be
 * a helper call too, so it would not be cheaper.
 */
static __always_inline __u32 snapshot(void)
{
	__u32 cpu = bpf_get_smp_processor_id() & (LBR_MAX_CPUS - 1);

	if (lbr_cfg.snapshot)
		lbr_snap_ret[cpu] = bpf_get_branch_snapshot(lbr_snap[cpu], sizeof(lbr_snap[cpu]), 0);
	return cpu;
}

/*
 * The kernel's own structs are opaque here: where their members are (and x86's
 * per-CPU preempt_count) comes in lbr_cfg, worked out by user space once per
 * process from the running kernel's BTF and /proc/kallsyms
 * (pytest_lbr/kernel/kernel_btf.py, pytest_lbr/kernel/percpu.py), and is read
 * with bpf_probe_read_kernel().  Not CO-RE: an object with any CO-RE relocation
 * makes libbpf read and parse the whole vmlinux BTF (~5 MB) at every load, even
 * of an fexit hook on a BPF program that needs none of it: 0.05 s of a 0.08 s
 * hook load in the 6.12 TCG guest, paid by every traced test of a BPF program.
 */
struct task_struct;

#if defined(__TARGET_ARCH_x86)
/*
 * x86 keeps preempt_count per CPU, under a name that moved twice: the variable
 * __preempt_count until Linux commit 64701838bf05 ("x86/percpu: Move
 * preempt_count next to current_task") (in v6.2) made it pcpu_hot.preempt_count,
 * and commit 46e8fff6d45f ("x86/preempt: Move preempt count to percpu hot
 * section") (in v6.15) made it __preempt_count again (6.1 has __preempt_count,
 * 6.12 pcpu_hot).  User space gives its address in lbr_cfg.sym_preempt_count
 * (from /proc/kallsyms, plus the member's offset in struct pcpu_hot from BTF),
 * read once per process: as typeless __ksym externs libbpf read the whole of
 * /proc/kallsyms at every load (1.0-1.3 s of a 1.5-1.8 s hook load in the 6.12
 * TCG guest), and the pcpu_hot member's offset as CO-RE made it parse the
 * vmlinux BTF at every load (above).  Typed ksyms with bpf_this_cpu_ptr() would
 * be simpler, but the verifier refuses to load any program holding one the
 * kernel's kallsyms lacks (a kernel without CONFIG_KALLSYMS_ALL lists no
 * variables), so every hook would fail to load; and libbpf resolves typed ksyms
 * against the vmlinux BTF too.
 */
#endif

/* include/linux/preempt.h: the bits that say which context runs. */
#define LBR_SOFTIRQ_OFFSET (1U << 8)
#define LBR_HARDIRQ_MASK (0xfU << 16)
#define LBR_NMI_MASK (0xfU << 20)

/* This CPU's preempt_count (0 where the kernel does not say where it is). */
static __always_inline __u32 preempt_count(__u32 cpu)
{
#if defined(__TARGET_ARCH_x86)
	__u64 base = 0;
	__u32 pc = 0;

	if (!lbr_cfg.sym_per_cpu_offset || !lbr_cfg.sym_preempt_count)
		return 0;
	/* A per-CPU variable's symbol is its offset in every CPU's per-CPU area. */
	bpf_probe_read_kernel(&base, sizeof(base), (const void *)(lbr_cfg.sym_per_cpu_offset + cpu * 8));
	bpf_probe_read_kernel(&pc, sizeof(pc), (const void *)(base + lbr_cfg.sym_preempt_count));
	return pc;
#elif defined(__TARGET_ARCH_arm64)
	/*
	 * arm64 keeps it in the task's thread_info: a u64 in a union with struct
	 * { u32 count; u32 need_resched; }, whose low 32 bits are the count.
	 */
	__u64 pc = 0;

	if (!lbr_cfg.task_preempt_count)
		return 0;
	bpf_probe_read_kernel(&pc, sizeof(pc),
			      (const void *)(bpf_get_current_task() + lbr_cfg.task_preempt_count));
	return (__u32)pc;
#else
	return 0;
#endif
}

/*
 * !in_task(): a hardirq, an NMI, or serving a softirq (NAPI, XDP, timers).  A
 * task that only disabled bottom halves (local_bh_disable) is still in task
 * context, as the kernel's in_task() says.
 */
static __always_inline bool in_interrupt(__u32 cpu)
{
	__u32 pc = preempt_count(cpu);

	return pc & (LBR_NMI_MASK | LBR_HARDIRQ_MASK | LBR_SOFTIRQ_OFFSET);
}

/* Whether the scope set at load keeps a hit of process `tgid`. */
static __always_inline bool in_scope(__u32 tgid)
{
	if (lbr_cfg.skip_tgid && tgid == lbr_cfg.skip_tgid)
		return false;
	switch (lbr_cfg.scope) {
	case LBR_SCOPE_TGID:
		return tgid == lbr_cfg.tgid;
	case LBR_SCOPE_TGIDS:
		return bpf_map_lookup_elem(&lbr_tgids, &tgid) != NULL;
	case LBR_SCOPE_CGROUP:
		return bpf_current_task_under_cgroup(&lbr_cgroup, 0) == 1;
	default:
		return true;
	}
}

static __always_inline int emit(__u32 cpu, __u32 hook, __u64 cookie, __u64 func_ip,
				bool has_ret, __s64 retval)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	bool irq = in_interrupt(cpu);
	struct lbr_hit *hit;
	long ret;

	if (!lbr_armed)
		return 0;
	/* Interrupt work is not the interrupted task's: only scopes that keep it. */
	if (irq && !lbr_cfg.keep_irq)
		return 0;
	if (!in_scope(pid_tgid >> 32))
		return 0;

	hit = bpf_ringbuf_reserve(&lbr_events, sizeof(*hit), 0);
	if (!hit) {
		__sync_fetch_and_add(&lbr_lost, 1);
		return 0;
	}
	hit->type = LBR_RECORD_HIT;
	hit->hook = hook;
	hit->cookie = cookie;
	hit->func_ip = func_ip;
	hit->ts_ns = bpf_ktime_get_ns();
	hit->retval = has_ret ? retval : 0;
	hit->flags = (has_ret ? LBR_HIT_HAS_RETVAL : 0) | (irq ? LBR_HIT_IN_INTERRUPT : 0);
	bpf_get_current_comm(hit->comm, sizeof(hit->comm));
	hit->cpu = cpu;
	hit->pid = pid_tgid >> 32;
	hit->tid = (__u32)pid_tgid;
	hit->nr_entries = 0;
	hit->snapshot_ret = 0;
	if (lbr_cfg.snapshot) {
		ret = lbr_snap_ret[cpu];
		hit->snapshot_ret = ret;
		if (ret > 0)
			hit->nr_entries = ret / sizeof(struct lbr_entry);
		__builtin_memcpy(hit->entries, lbr_snap[cpu], sizeof(hit->entries));
	} else {
		__builtin_memset(hit->entries, 0, sizeof(hit->entries));
	}
	bpf_ringbuf_submit(hit, 0);
	return 0;
}

static __always_inline __u64 fixed_cookie(void)
{
	return (__u64)lbr_cfg.target << 32 | lbr_cfg.function;
}

/* fentry/fexit on a kernel function or a BPF program's main function. */
SEC("fentry")
int lbr_fentry(__u64 *ctx)
{
	__u32 cpu = snapshot();

	return emit(cpu, LBR_HOOK_FENTRY, fixed_cookie(), bpf_get_func_ip(ctx), false, 0);
}

SEC("fexit")
int lbr_fexit(__u64 *ctx)
{
	__u32 cpu = snapshot();
	__u64 ret = 0;

	/* Linux commit f92c1e183604 ("bpf: Add get_func_[arg|ret|arg_cnt] helpers") (in v5.17) */
	bpf_get_func_ret(ctx, &ret);
	return emit(cpu, LBR_HOOK_FEXIT, fixed_cookie(), bpf_get_func_ip(ctx), true, (__s64)ret);
}

/* One link for many kernel functions; the cookie names the function. */
SEC("kprobe.multi")
int lbr_kprobe_multi(struct pt_regs *ctx)
{
	__u32 cpu = snapshot();

	return emit(cpu, LBR_HOOK_KPROBE_MULTI, bpf_get_attach_cookie(ctx), bpf_get_func_ip(ctx),
		    false, 0);
}

SEC("kretprobe.multi")
int lbr_kretprobe_multi(struct pt_regs *ctx)
{
	__u32 cpu = snapshot();

	return emit(cpu, LBR_HOOK_KPROBE_MULTI, bpf_get_attach_cookie(ctx), bpf_get_func_ip(ctx),
		    true, (__s64)PT_REGS_RC(ctx));
}

SEC("kprobe")
int lbr_kprobe(struct pt_regs *ctx)
{
	__u32 cpu = snapshot();

	return emit(cpu, LBR_HOOK_KPROBE, bpf_get_attach_cookie(ctx), bpf_get_func_ip(ctx), false, 0);
}

SEC("kretprobe")
int lbr_kretprobe(struct pt_regs *ctx)
{
	__u32 cpu = snapshot();

	return emit(cpu, LBR_HOOK_KRETPROBE, bpf_get_attach_cookie(ctx), bpf_get_func_ip(ctx), true,
		    (__s64)PT_REGS_RC(ctx));
}

SEC("tracepoint")
int lbr_tracepoint(void *ctx)
{
	__u32 cpu = snapshot();

	return emit(cpu, LBR_HOOK_TRACEPOINT, bpf_get_attach_cookie(ctx), 0, false, 0);
}

SEC("uprobe")
int lbr_uprobe(struct pt_regs *ctx)
{
	__u32 cpu = snapshot();

	return emit(cpu, LBR_HOOK_UPROBE, bpf_get_attach_cookie(ctx), 0, false, 0);
}

SEC("uretprobe")
int lbr_uretprobe(struct pt_regs *ctx)
{
	__u32 cpu = snapshot();

	return emit(cpu, LBR_HOOK_URETPROBE, bpf_get_attach_cookie(ctx), 0, true,
		    (__s64)PT_REGS_RC(ctx));
}

/*
 * scope="children": a process forked by a followed one is followed too (a new
 * thread has its parent's tgid, already followed).  tp_btf programs (BTF-typed
 * raw tracepoints) are in Linux since v5.5; both guests' kernels have them.
 */
SEC("tp_btf/sched_process_fork")
int BPF_PROG(lbr_fork, struct task_struct *parent, struct task_struct *child)
{
	__u32 ptgid = 0, ctgid = 0;
	__u8 one = 1;

	if (!lbr_cfg.task_tgid)
		return 0;
	bpf_probe_read_kernel(&ptgid, sizeof(ptgid), (const char *)parent + lbr_cfg.task_tgid);
	bpf_probe_read_kernel(&ctgid, sizeof(ctgid), (const char *)child + lbr_cfg.task_tgid);
	if (ptgid != ctgid && bpf_map_lookup_elem(&lbr_tgids, &ptgid))
		bpf_map_update_elem(&lbr_tgids, &ctgid, &one, BPF_NOEXIST);
	return 0;
}
