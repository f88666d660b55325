"""Noise: what is not the code under test, defined once, with why each list exists.

Each backend sees some of the tracer's own machinery around every hit, and every
trace catches interrupts and housekeeping that happened to run. These lists say
what to leave out where; everything that filters noise imports them from here.
"""

from __future__ import annotations

__all__ = ["PROBE_HANDLERS", "TRACER_OWN_FUNCTIONS", "TRACER_SYMBOLS"]

#: Code the tracer itself runs between the traced function and the snapshot:
#: trampolines, program entry/exit, the kprobe/fprobe/tracepoint plumbing, the
#: tracer program (bpf_prog_<tag>_lbr_*) and the helper.
TRACER_SYMBOLS = (
    "bpf_trampoline_*",
    "__bpf_prog_enter*",
    "__bpf_prog_exit*",
    "__bpf_tramp_*",
    "bpf_prog_*_lbr_*",
    "bpf_get_branch_snapshot",
    "bpf_get_smp_processor_id",
    "intel_pmu_snapshot*",
    "amd_pmu_*snapshot*",
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
    "bpf_get_branch_snapshot",
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
    "__bpf_prog_enter*",
    "__bpf_prog_exit*",
    "__bpf_tramp_*",
    "bpf_trampoline_*",
    "preempt_count_add",
    "preempt_count_sub",
    "bpf_prog_start_time",
    "intel_pmu_snapshot*",
    "amd_pmu_*snapshot*",
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
    }
)
