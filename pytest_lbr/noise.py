"""Noise: what is not the code under test, defined once, with why each list exists.

Each backend sees some of the tracer's own machinery around every hit, and every
trace catches interrupts and housekeeping that happened to run. These lists say
what to leave out where; everything that filters noise imports them from here.
"""

from __future__ import annotations

import re

__all__ = [
    "CLOCK_READS",
    "DEFAULT_EXCLUDE",
    "EXCEPTION_HANDLERS",
    "EXIT_HOOK_FRAMES",
    "FTRACE_OWN_PARENTS",
    "IRQ_EDGE_FUNCTIONS",
    "IRQ_EDGE_PARENTS",
    "IRQ_ENTRY",
    "IRQ_EXITS",
    "PROBE_HANDLERS",
    "TRACER_OWN_FUNCTIONS",
    "TRACER_PROGRAMS",
    "TRACER_SYMBOLS",
    "TRACE_CLOCK",
    "TRAMPOLINE",
]

#: An fentry/fexit program's way in and out: the BPF trampoline (never recorded
#: itself, only named as a parent) calls `__bpf_tramp_enter`, `__bpf_prog_enter*`,
#: the program, `__bpf_prog_exit*` and `__bpf_tramp_exit`. Every list below that
#: leaves the tracer's machinery out holds these four.
PROG_ENTER, PROG_EXIT, TRAMP = "__bpf_prog_enter*", "__bpf_prog_exit*", "__bpf_tramp_*"
TRAMPOLINE = (PROG_ENTER, PROG_EXIT, TRAMP, "bpf_trampoline_*")
#: The LBR snapshot: the helper and each vendor's PMU code under it.
SNAPSHOT = ("bpf_get_branch_snapshot", "intel_pmu_snapshot*", "amd_pmu_*snapshot*")

#: The tracer's own BPF programs (bpf/lbr_tracer.bpf.c), by function name: kallsyms
#: lists each as bpf_prog_<tag>_<name>. Named one by one, so a user's program called
#: lbr_init is not taken for ours; the selftest's XDP program (bpf/lbr_selftest.bpf.c)
#: is a traced target, not the tracer's work.
TRACER_PROGRAMS = (
    "lbr_fentry",
    "lbr_fexit",
    "lbr_kprobe_multi",
    "lbr_kretprobe_multi",
    "lbr_kprobe",
    "lbr_kretprobe",
    "lbr_tracepoint",
    "lbr_uprobe",
    "lbr_uretprobe",
    "lbr_fork",
)

#: Code the tracer itself runs between the traced function and the snapshot:
#: trampolines, program entry/exit, the kprobe/fprobe/tracepoint plumbing, the
#: tracer program (bpf_prog_<tag>_lbr_*) and the helper.
TRACER_SYMBOLS = (
    *TRAMPOLINE,
    *(f"bpf_prog_*_{name}" for name in TRACER_PROGRAMS),
    # As the earlier "bpf_prog_*_lbr_*" did (LBR trimming is not testable here).
    "bpf_prog_*_lbr_selftest",
    *SNAPSHOT,
    "bpf_get_smp_processor_id",
    "migrate_disable",
    "migrate_enable",
    "__rcu_read_lock",
    "__rcu_read_unlock",
    "rcu_read_lock*",
    "kprobe_multi_link_*",
    "fprobe_*",
    "rethook_*",
    "arch_rethook_*",
    "kprobe_*",
    "kretprobe_*",
    "trace_call_bpf",
    "bpf_trace_run*",
    "__bpf_trace_*",
    "perf_trace_*",
    "bpf_prog_run*",
    "ftrace_*",
    "uprobe_*",
)


#: What the tracer itself runs through: tracing these would recurse or drown the
#: trace (the list retsnoop keeps out of its globs).
TRACER_OWN_FUNCTIONS = (
    "bpf_get_smp_processor_id",
    "bpf_get_current_pid_tgid",
    "bpf_ktime_get_ns",
    "bpf_ringbuf_*",
    "bpf_get_func_ret",
    "bpf_get_func_ip*",
    "bpf_get_attach_cookie*",
    "migrate_disable",
    "migrate_enable",
    "rcu_read_lock*",
    "rcu_read_unlock*",
    "__rcu_read_lock",
    "__rcu_read_unlock",
    *TRAMPOLINE,
    "preempt_count_add",
    "preempt_count_sub",
    "bpf_prog_start_time",
    *SNAPSHOT,
)


#: Functions the probes we add run through (kretprobe entry and return
#: handlers): they and everything under them are the tracer's, not the test's,
#: and appear only in `Hit.raw_branches`.
PROBE_HANDLERS = frozenset(
    {
        "kprobe_ftrace_handler",
        "pre_handler_kretprobe",
        "rethook_trampoline_handler",
        "arch_rethook_trampoline_callback",
        "kretprobe_rethook_handler",
        "kretprobe_dispatcher",
        "kretprobe_trace_func",
        "trampoline_handler",
        "kretprobe_trampoline_handler",
        "__kretprobe_trampoline_handler",
        # arm64 (6.1 guest): a kprobe is a breakpoint, taken through the debug
        # exception (the entry handlers run under it), and a kretprobe returns
        # through __kretprobe_trampoline into trampoline_probe_handler.
        "do_debug_exception",
        "trampoline_probe_handler",
    }
)


#: How the function tracer shows the fexit hook the graph backend attaches to a
#: BPF program for its return value (`TRAMPOLINE`): after the program, the
#: trampoline calls `__bpf_prog_enter*`, the LBR tracer's program (whose kallsyms
#: name ends in the traced program's name, not its own: seen on 6.12),
#: `__bpf_prog_exit*` and `__bpf_tramp_exit`. These are notrace (never recorded):
#: the records they and the tracer program caused are dropped before nesting; a
#: user's own fentry/fexit program between an enter and an exit stays.
EXIT_HOOK_FRAMES = {"enter": PROG_ENTER, "exit": PROG_EXIT, "trampoline": TRAMP}


#: Functions that are noise rather than the code under test, with everything they call.
#: Interrupts and exceptions arrive whenever the timer says so; softirq and RCU work
#: runs on their way out; the tracer itself (BPF trampolines, ftrace/fgraph, rethook,
#: the ring buffer) shows up around every hit. A test that wants one of them back
#: lists it in `keep=` (marker) or removes it with the `lbr_golden_keep` ini key.
DEFAULT_EXCLUDE: tuple[str, ...] = (
    # hard and soft interrupts, exceptions, IPIs
    "asm_*",
    "sysvec_*",
    "__sysvec_*",
    "common_interrupt",
    "__common_interrupt",
    "irq_enter*",
    "irq_exit*",
    "irqentry_*",
    "handle_irq*",
    "handle_edge_irq",
    "handle_fasteoi_irq",
    "generic_handle_*",
    "exc_page_fault",
    "do_softirq*",
    "__do_softirq",
    "handle_softirqs",
    "__irq_exit_rcu",
    "invoke_softirq",
    "raise_softirq*",
    "__raise_softirq*",
    "tasklet_*",
    "flush_smp_call_function_*",
    "generic_smp_call_function_*",
    # timers and scheduler ticks that interrupt the traced code
    "hrtimer_*",
    "__hrtimer_*",
    "tick_*",
    "update_process_times",
    "scheduler_tick",
    "sched_tick",
    "run_timer_softirq",
    "run_local_timers",
    "timekeeping_*",
    "ktime_get*",
    # RCU bookkeeping (the tracer's programs run under RCU)
    "rcu_*",
    "__rcu_*",
    # the scheduler, entered at a preemption point (cond_resched, preempt_enable)
    # when the time slice happens to run out: another task runs in between
    "__schedule",
    "schedule",
    "preempt_schedule*",
    "finish_task_switch*",
    "__traceiter_sched_*",
    # the function tracer's own pid filter, which the sched_switch tracepoint runs
    # when the traced task is switched out (kernel/trace/pid_list.c, since 5.17):
    # the graph backend drops its records at capture (capture/graph/hits.py: FTRACE_OWN_PARENTS);
    # LBR snapshots can still hold it
    "trace_pid_list_is_set",
    # slab and page allocator slow paths: whether a free or an allocation takes
    # them depends on what the allocator has cached, not on the code under test
    "___slab_alloc",
    "__slab_alloc*",
    "__slab_free",
    "put_cpu_partial",
    "__put_partials",
    "__unfreeze_partials",
    "unfreeze_partials*",
    "get_partial*",
    "deactivate_slab",
    "discard_slab",
    "new_slab",
    "allocate_slab",
    "__free_slab",
    "free_slab",
    "refill_obj_stock",
    "drain_obj_stock",
    "__alloc_pages*",
    "get_page_from_freelist",
    "rmqueue*",
    "__rmqueue*",
    "free_unref_page*",
    "free_pcppages_bulk",
    "__free_pages*",
    "__free_one_page",
    # tracer machinery: BPF trampolines, ftrace/fgraph, kprobes, perf, ring buffers
    *TRAMPOLINE,
    "bpf_get_branch_snapshot",
    "bpf_get_smp_processor_id",
    "bpf_ringbuf_*",
    "bpf_perf_event_output",
    "migrate_disable",
    "migrate_enable",
    "preempt_count_*",
    "ftrace_*",
    "function_graph_*",
    "fgraph_*",
    "prepare_ftrace_return",
    "return_to_handler",
    "trace_graph_*",
    "kprobe_*",
    "rethook_*",
    "arch_rethook_*",
    "fprobe_*",
    "perf_*",
    "__perf_*",
)


# -- the function tracer's (graph backend) own records ------------------------------

#: What trace_clock "mono" reads: its clocksource's read function, when traceable
#: (read_hpet under TCG), is recorded with every record, nested anywhere; such
#: records are ftrace's own, and can outnumber the traced code's.
TRACE_CLOCK = "ktime_get_mono_fast_ns"

#: The read function of each clocksource the kernel may pick (names in
#: /sys/devices/system/clocksource/*/current_clocksource): put in the instance's
#: set_ftrace_notrace before the tracer starts. Any other is learnt from the
#: first trace's records (`capture.graph.backend`: the children of `TRACE_CLOCK`).
CLOCK_READS = {
    "hpet": "read_hpet",
    "acpi_pm": "acpi_pm_read",
    "tsc": "read_tsc",
    "tsc-early": "read_tsc",
    "kvm-clock": "kvm_clock_get_cycles",
    # arm64's generic timer (drivers/clocksource/arm_arch_timer.c): in the arm64
    # 6.1 guest its reads were most of a first trace's records.
    "arch_sys_counter": "arch_counter_read",
}

#: The function tracer's own pid filter (kernel/trace/pid_list.c, since v5.17), which
#: the sched_switch tracepoint runs through an indirect call when a traced thread
#: is switched out, because the backend sets set_ftrace_pid. kernel/trace is built
#: without -pg, so only its callees are recorded ("_raw_spin_lock_irqsave
#: <-trace_pid_list_is_set", 6.1 and 6.12 guests): ftrace's work, as clock reads are.
FTRACE_OWN_PARENTS = frozenset({"trace_pid_list_is_set"})

#: Interrupt entry and exit code that runs before the hardirq bit is set in
#: preempt_count or after it is cleared: ftrace does not flag these records as
#: irq, yet they are not the thread's work. Seen in the 6.1 and 6.12 guests:
#: "irq_enter_rcu <-sysvec_apic_timer_interrupt", "handle_softirqs <-__irq_exit_rcu",
#: "idle_cpu <-__irq_exit_rcu", "exit_to_user_mode_prepare <-irqentry_exit_to_user_mode".
#: Kept, they nested into whatever the thread was doing: a timer interrupt in the
#: middle of a BPF program run cut it into two hits, the second taking in the
#: BPF_PROG_TEST_RUN machinery (6.1), or hid one of the program's calls under the
#: interrupt in the golden trace (6.12). The softirq entry a thread takes itself
#: (local_bh_enable -> do_softirq) is the same: arm64 runs it on the irq stack,
#: "____do_softirq <-call_on_irq_stack" (arch/arm64/kernel/irq.c; arm64 6.1 guest),
#: and a softirq pending in a traced connect put that edge in a golden trace.
#: A record is such code when its parent matches `IRQ_EDGE_PARENTS` or its function
#: is one of `IRQ_EDGE_FUNCTIONS`.
IRQ_EDGE_PARENTS = re.compile(
    r"^(?:asm_|sysvec_|__sysvec_|common_interrupt$|__common_interrupt$|spurious_interrupt"
    r"|irqentry_|__irq_exit_rcu$|irq_exit_rcu$|irq_enter_rcu$|call_on_irq_stack$)"
)
#: A hardirq's way in and out, as the function tracer records them: what opens and
#: closes an interrupt that came in on interrupt-context work (`capture.graph.hits`).
IRQ_ENTRY = "irq_enter_rcu"
IRQ_EXITS = frozenset({"irq_exit_rcu", "__irq_exit_rcu"})
IRQ_EDGE_FUNCTIONS = frozenset(
    {
        IRQ_ENTRY,
        *IRQ_EXITS,
        "handle_softirqs",
        "do_softirq",
        "do_softirq_own_stack",
        "____do_softirq",
        "__do_softirq",
    }
)

#: Exception handlers entered by the CPU, not called: x86-64's idtentry C handlers
#: (arch/x86/include/asm/idtentry.h: exc_page_fault, exc_int3, ...; noinstr, so a
#: page fault in bpf_get_stack's user-stack walk shows only as the parent of
#: do_user_addr_fault, 6.12 guest) and arm64's (arch/arm64/kernel/entry-common.c).
EXCEPTION_HANDLERS = re.compile(r"^(?:exc_|el1h_64_sync_handler$|el0t_64_sync_handler$)")
