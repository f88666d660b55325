"""What the kernel says about its objects, each kind of kernel interface asked in one place.

The running machine's facts, read once (`machine.py`), and each architecture's names and
numbers (`arch.py`); tracefs and its private instances (`tracefs.py`); perf events with
branch stacks (`perf.py`); which kernel functions a target names (`functions.py`); the
offsets of the kernel struct members the LBR tracer reads (`kernel_btf.py`) and x86's
preempt_count addresses (`percpu.py`); BPF helpers as this kernel has them (`helpers.py`);
the kernel log and its splats (`kmsg.py`); and a live task's process (`tasks.py`); so capture and symbolization read the same
facts the same way (see docs/architecture.md). What is known about a BPF program is in
`pytest_lbr.programs`. Tested by tests/test_machine.py, test_arm64.py, test_ftrace_parse.py,
test_fuzz_ftrace.py, test_perf_syscall.py, test_kernel_btf.py, test_percpu.py,
test_kmsg.py, test_tasks.py and, in the guests, by
tests/kernel/test_graph.py and test_helper_facts.py.
"""
