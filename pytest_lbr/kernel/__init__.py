"""The kernel-facing layer: each kind of kernel interface asked in one place.

BPF programs and BTF (`programs`), tracefs and its private instances
(`tracefs`), perf events with branch stacks (`perf`), which kernel
functions a target names (`functions`), and the kernel log (`kmsg`), so capture
and symbolization read the same facts the same way (see docs/architecture.md).
"""
